"""``feedline train`` where LeRobot is not installed: one line saying how to install it."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from feedline.cli import main


@pytest.mark.skipif(importlib.util.find_spec("lerobot") is not None, reason="LeRobot is installed here")
def test_without_lerobot_says_how_to_install(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--dataset.repo_id=o/n", "--dataset.streaming=true"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == "feedline: error: feedline train needs LeRobot: pip install 'feedline[lerobot]' (Python >= 3.12)"


def test_help_lists_feedlines_flags() -> None:
    feedline = Path(sys.executable).parent / "feedline"
    out = subprocess.run([str(feedline), "train", "--help"], capture_output=True, text=True, check=True).stdout
    assert "--dataset.streaming_byte_budget_gb" in out and "lerobot-train --help" in out
