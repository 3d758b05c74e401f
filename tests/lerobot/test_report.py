"""``feedline train --dataset.streaming_report=DIR`` writes the run's report.html when it ends."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("lerobot")
pytest.importorskip("matplotlib")

from tests.lerobot.conftest import ACT_FLAGS, Served, feedline_train, fresh  # noqa: E402


def test_train_writes_the_run_report(
    served_dataset: Served, lerobot_env: dict[str, str], tmp_path: Path
) -> None:
    report = tmp_path / "report"
    run = feedline_train(
        [f"--dataset.repo_id=local/{served_dataset.root.name}", f"--dataset.root={served_dataset.url}",
         "--dataset.streaming=true", *ACT_FLAGS, f"--output_dir={fresh(tmp_path / 'out')}",
         "--steps=6", "--num_workers=1", "--save_freq=6", f"--dataset.streaming_report={report}"],
        lerobot_env)
    assert run.returncode == 0, run.stderr[-3000:]
    page = (report / "report.html").read_text()
    for plot in ("wait-histogram", "wait-over-time", "diversity", "bytes", "stages"):
        assert f'id="{plot}"' in page
    assert "The doctor's findings" in page and "episode_pool_size" in page
    assert list((report / "events").glob("events-*.json"))
