"""The spawn pool: results, progress through the queue, errors, and workers that die with the parent."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from feedline.run.pool import pool_map
from tests.run import helpers


@pytest.mark.parametrize("processes", [1, 2])
def test_results_and_progress(processes: int) -> None:
    seen: list[int] = []
    results = list(pool_map(helpers.square, range(6), processes=processes, progress=seen.append, ordered=True))
    assert results == [i * i for i in range(6)]
    assert sum(seen) == sum(range(6))


def test_unordered_gives_every_result() -> None:
    assert sorted(pool_map(helpers.square, range(5), processes=2)) == [0, 1, 4, 9, 16]


def test_an_error_reaches_the_caller() -> None:
    with pytest.raises(ValueError, match="item 3 is bad"):
        list(pool_map(helpers.fail_on_three, range(6), processes=2, ordered=True))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead too
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split()[2] == "Z")


def test_workers_exit_when_the_parent_is_killed(tmp_path: Path) -> None:
    """kill -9 of the parent: its spawned workers notice within a second and exit."""
    marks = [str(tmp_path / f"w{i}") for i in range(2)]
    script = textwrap.dedent(f"""
        from feedline.run.pool import pool_map
        from tests.run import helpers
        list(pool_map(helpers.write_pid_then_sleep, {marks!r}, processes=2))
    """)
    root = Path(__file__).resolve().parents[2]
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=root,
                              env={**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"})
    try:
        deadline = time.monotonic() + 60
        while not all(Path(m).exists() and Path(m).read_text() for m in marks):
            assert time.monotonic() < deadline, "workers never started"
            time.sleep(0.1)
        pids = [int(Path(m).read_text()) for m in marks]
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in pids):
            assert time.monotonic() < deadline, "a worker outlived its killed parent"
            time.sleep(0.1)
    finally:
        parent.kill()


def test_every_count_arrives_when_the_run_ends() -> None:
    """The last counts a worker sends just before it finishes reach the parent (terminating the
    workers at the end lost them about one run in ten)."""
    for _ in range(5):
        seen: list[int] = []
        list(pool_map(helpers.square, range(1, 9), processes=2, progress=seen.append))
        assert sum(seen) == sum(range(1, 9))
