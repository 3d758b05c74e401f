"""``feedline doctor`` on datasets written by LeRobot's own writer: no errors, no warnings (AV1,
LeRobot's default, and H.264 with its ``ctts`` and edit list)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("lerobot")

from feedline.episodes.doctor import run_doctor  # noqa: E402
from tests.lerobot.test_oracle import LENGTHS, _write_with_lerobot  # noqa: E402


@pytest.mark.parametrize("vcodec", [None, "h264"], ids=["av1", "h264"])
def test_lerobot_written_datasets_are_sound(tmp_path: Path, vcodec: str | None) -> None:
    root = tmp_path / "ds"
    _write_with_lerobot(root, vcodec)
    report = run_doctor(str(root), progress=False)
    problems = [f for f in report.findings if f.severity != "info"]
    assert problems == [], problems
    assert report.exit_code == 0
    assert report.dataset["frames"] == sum(LENGTHS)
    tolerance = [f for f in report.findings if f.check == "tolerance"]
    assert len(tolerance) == 1 and "(the default)" in tolerance[0].problem
