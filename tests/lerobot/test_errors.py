"""``feedline train``'s errors: an unreachable root, a missing dataset, a bad flag — one line each.

The root is checked before LeRobot is imported, so an unreachable or missing dataset fails without
the ~55 s a bare client waits; those tests bound the time loosely (a hang guard, not a speed test).
A flag error is LeRobot's parser's, so it comes after LeRobot's import, whose cold time varies.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("lerobot")

from tests.lerobot.conftest import ACT_FLAGS, Served, feedline_train  # noqa: E402

#: A TEST-NET-1 address (RFC 5737): never routed, so a connection hangs or fails, never answers.
UNROUTABLE = "192.0.2.1"


#: Far below the ~55 s an unbounded connect takes, far above a cold start on a loaded machine.
HANG_GUARD_S = 40


def _assert_one_line(run, *words: str) -> None:
    assert run.returncode != 0
    # INFO log lines may come before it (feedline logs at INFO); the error itself is one line
    assert "Traceback" not in run.stderr, run.stderr
    errors = [line for line in run.error_lines if "error" in line.lower()]
    assert len(errors) == 1 and errors[0] == run.error_lines[-1], run.stderr
    line = errors[0]
    assert line.startswith("feedline: error:"), line
    for word in words:
        assert word in line, line


def _assert_one_line_fast(run, *words: str) -> None:
    _assert_one_line(run, *words)
    assert run.seconds < HANG_GUARD_S, f"took {run.seconds:.1f} s"


def _args(root: str, tmp_path: Path, *extra: str) -> list[str]:
    return ["--dataset.repo_id=local/ds", f"--dataset.root={root}", "--dataset.streaming=true",
            *ACT_FLAGS, f"--output_dir={tmp_path / 'out'}", "--steps=2", *extra]


def test_unreachable_http_root(lerobot_env: dict[str, str], tmp_path: Path) -> None:
    run = feedline_train(_args(f"http://{UNROUTABLE}:81/ds", tmp_path), lerobot_env)
    _assert_one_line_fast(run, UNROUTABLE, "meta/info.json")


def test_unreachable_s3_endpoint(lerobot_env: dict[str, str], tmp_path: Path) -> None:
    env = dict(lerobot_env, AWS_ENDPOINT_URL=f"http://{UNROUTABLE}:9000", AWS_ACCESS_KEY_ID="x",
               AWS_SECRET_ACCESS_KEY="x", AWS_DEFAULT_REGION="us-east-1")
    run = feedline_train(_args("s3://feedline-absent/ds", tmp_path), env)
    _assert_one_line_fast(run, "s3://feedline-absent/ds")


def test_missing_dataset(served_dataset: Served, lerobot_env: dict[str, str], tmp_path: Path) -> None:
    missing = served_dataset.url.rsplit("/", 1)[0] + "/no-such-dataset"
    run = feedline_train(_args(missing, tmp_path), lerobot_env)
    _assert_one_line_fast(run, "no LeRobot dataset", "--dataset.root")


def test_unknown_lerobot_flag(served_dataset: Served, lerobot_env: dict[str, str], tmp_path: Path) -> None:
    run = feedline_train(_args(served_dataset.url, tmp_path, "--policy.no_such_flag=3"), lerobot_env)
    _assert_one_line(run, "no_such_flag")


def test_unknown_feedline_flag(served_dataset: Served, lerobot_env: dict[str, str], tmp_path: Path) -> None:
    run = feedline_train(_args(served_dataset.url, tmp_path, "--dataset.streaming_pool=3"), lerobot_env)
    _assert_one_line(run, "--dataset.streaming_pool", "--dataset.streaming_episode_pool_size")
