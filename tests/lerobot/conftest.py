"""What the LeRobot tests share: a dataset served by nginx, lerobot-train's small ACT flags, a runner.

Every module here starts with ``pytest.importorskip("lerobot")``: the Python 3.11 suite (``make
test``) skips them, ``make test-lerobot`` (Python 3.12, ``feedline[lerobot]``) runs them. This file
imports no LeRobot.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from feedline.episodes.synth.writer import SyntheticDataset, write_synthetic_dataset

#: Six episodes, two AV1 cameras; small file sizes make LeRobot's rollover write several video and
#: data files (the layout LeRobot's own streaming reader cannot read).
TRAIN_LAYOUT = dict(
    episodes=6,
    frames_per_episode=[20, 25, 18, 30, 22, 16],
    cameras=2,
    fps=10,
    video_files_size_in_mb=0.05,
    data_files_size_in_mb=0.02,
)

#: The issue's small ACT configuration: about a third of a second per step on a CPU.
ACT_FLAGS = (
    "--policy.type=act", "--policy.device=cpu", "--policy.push_to_hub=false",
    "--policy.pretrained_backbone_weights=null", "--policy.dim_model=64", "--policy.n_heads=2",
    "--policy.dim_feedforward=128", "--policy.n_encoder_layers=1", "--policy.n_decoder_layers=1",
    "--policy.chunk_size=8", "--policy.n_action_steps=8", "--batch_size=8", "--log_freq=5",
    "--wandb.enable=false",
)

BIN = Path(sys.executable).parent


@dataclass
class Served:
    """A dataset on disk and its nginx URL."""

    synth: SyntheticDataset
    url: str

    @property
    def root(self) -> Path:
        return Path(self.synth.root)


@pytest.fixture(scope="session")
def lerobot_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment every run gets: LeRobot's caches in a scratch folder, no Hub access."""
    home = tmp_path_factory.mktemp("lerobot-home")
    env = dict(os.environ)
    env.update(HF_LEROBOT_HOME=str(home), HF_HOME=str(home / "hf"), HF_HUB_OFFLINE="1",
               HF_DATASETS_OFFLINE="1", WANDB_MODE="disabled", TQDM_DISABLE="1")
    return env


@pytest.fixture(scope="session")
def served_dataset(nginx_server, tmp_path_factory: pytest.TempPathFactory) -> Served:
    root = Path(nginx_server.root) / "train-ds"
    synth = write_synthetic_dataset(root, **TRAIN_LAYOUT)
    return Served(synth, f"{nginx_server.url}/train-ds")


@dataclass
class Run:
    """One finished command: its exit code, output and seconds taken."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def error_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def run_command(argv: Sequence[str], env: dict[str, str], timeout_s: float = 600) -> Run:
    started = time.monotonic()
    proc = subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=timeout_s)
    return Run(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - started)


def feedline_train(args: Sequence[str], env: dict[str, str], timeout_s: float = 600) -> Run:
    """``feedline train ARGS`` as a user runs it."""
    return run_command([str(BIN / "feedline"), "train", *args], env, timeout_s)


def sample_log(path: Path) -> list[dict]:
    """The batches a run logged with ``--dataset.streaming_sample_log``."""
    return [json.loads(line) for line in path.read_text().splitlines()]


def fresh(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    return path
