"""The spawn pool: results, progress through the queue, errors, and workers that die with the parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from feedline.run.errors import WorkerDiedError
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


@pytest.mark.parametrize("ordered", [True, False])
def test_a_worker_that_exits_ends_the_run_naming_the_item_and_status(ordered: bool) -> None:
    """``os._exit(3)`` in a worker: multiprocessing.Pool replaced the worker and waited forever
    for item 2; now the run stops within seconds, naming the item and the exit status."""
    started = time.monotonic()
    with pytest.raises(WorkerDiedError, match=r"^the item 2: worker process \d+ died \(exit status 3\)") as info:
        list(pool_map(helpers.exit_on_two, range(8), processes=2, ordered=ordered, describe=helpers.describe_item))
    assert time.monotonic() - started < 20
    assert info.value.exitcode == 3 and "\n" not in str(info.value)


def test_kill_9_of_a_worker_ends_the_run_and_cleans_up_its_item(tmp_path: Path) -> None:
    """A worker killed with SIGKILL mid-item: the error names the item and the signal, the
    cleanup hook runs for it (once the worker is gone), and no worker is left running."""
    victim = str(tmp_path / "victim")
    items = [str(tmp_path / f"ok{i}") for i in range(3)] + [victim] + [str(tmp_path / f"ok{i}") for i in range(3, 6)]
    done: list[str] = []
    caught: list[WorkerDiedError] = []

    def run() -> None:
        try:
            for result in pool_map(helpers.write_pid_or_wait, items, processes=2, describe=str,
                                  cleanup=helpers.record_cleanup):
                done.append(result)
        except WorkerDiedError as exc:
            caught.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 60
    while not (Path(victim).exists() and Path(victim).read_text()):
        assert time.monotonic() < deadline, "the victim never started"
        time.sleep(0.05)
    pid = int(Path(victim).read_text())
    killed = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    thread.join(30)
    assert not thread.is_alive(), "the run hung after a worker was killed"
    assert time.monotonic() - killed < 10
    assert len(caught) == 1
    assert str(caught[0]).startswith(f"{victim}: worker process {pid} died (killed by signal 9 (SIGKILL))")
    assert Path(victim + ".cleaned").exists()
    assert not _alive(pid)


def test_the_cleanup_hook_runs_for_items_terminated_in_flight(tmp_path: Path) -> None:
    """An error in one item stops the run; the item another worker was still on is terminated
    and cleaned up after, so no temp files of it are left behind."""
    victim = str(tmp_path / "victim")
    items = [victim, str(tmp_path / "bad")]
    with pytest.raises(ValueError, match="bad failed"):
        list(pool_map(helpers.fail_once_victim_runs, items, processes=2, cleanup=helpers.record_cleanup))
    assert Path(victim + ".cleaned").exists()
