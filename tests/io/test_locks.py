"""process_lock across real processes, and feedline_home."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from feedline.io import LockTimeout, feedline_home, process_lock


def test_process_lock_timeout_names_lock_and_holder(tmp_path: Path) -> None:
    lock = tmp_path / "build.lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys,time\nfrom feedline.io import process_lock\n"
            "with process_lock(sys.argv[1], 5):\n    print('held', flush=True); time.sleep(30)\n",
            str(lock),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(LockTimeout) as info, process_lock(lock, timeout_s=0.3):
            pass
        assert str(lock) in str(info.value) and f"pid {holder.pid}" in str(info.value)
    finally:
        holder.kill()
        holder.wait()
    with process_lock(lock, timeout_s=5):  # released by the OS when its holder died
        pass


def test_feedline_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FEEDLINE_HOME", str(tmp_path / "h"))
    assert feedline_home() == tmp_path / "h"
    monkeypatch.delenv("FEEDLINE_HOME")
    assert feedline_home() == Path("~/.cache/feedline").expanduser()


def _bump_under_removable_lock(folder: str, times: int) -> None:
    from feedline.io.locks import process_lock

    counter = Path(folder) / "counter"
    for _ in range(times):
        with process_lock(Path(folder) / ".c.lock", -1, remove=True):
            value = int(counter.read_text() or "0")
            counter.write_text(str(value + 1))


def test_removable_lock_still_excludes_across_processes(tmp_path: Path) -> None:
    """Removing the lock file on release must not let a waiter and a newcomer both hold it."""
    import multiprocessing

    (tmp_path / "counter").write_text("0")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_bump_under_removable_lock, args=(str(tmp_path), 60)) for _ in range(4)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
        assert proc.exitcode == 0
    assert (tmp_path / "counter").read_text() == "240"
    assert not (tmp_path / ".c.lock").exists()
