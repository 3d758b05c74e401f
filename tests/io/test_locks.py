"""atomic_write and process_lock, including a real kill -9 mid-write."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from feedline.io import LockTimeout, atomic_write, feedline_home, process_lock


def test_atomic_write_replaces(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    target.write_text("old")
    with atomic_write(target, "w") as handle:
        handle.write("new")
        assert target.read_text() == "old", "the target must not change before the writer is done"
    assert target.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]


def test_atomic_write_keeps_old_file_on_error(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_write(target, "w") as handle:
        handle.write("partial")
        raise RuntimeError("writer failed")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]


WRITER = textwrap.dedent(
    """
    import sys
    from feedline.io import atomic_write
    target, size = sys.argv[1], int(sys.argv[2])
    block = bytes([int(sys.argv[3])]) * 65536
    with atomic_write(target) as f:
        print("writing", flush=True)
        for _ in range(size // 65536):
            f.write(block)
            f.flush()
    print("done", flush=True)
    """
)


@pytest.mark.parametrize("trial", range(6))
def test_kill_9_during_atomic_write_leaves_old_or_new(tmp_path: Path, trial: int) -> None:
    target = tmp_path / "big.bin"
    old = bytes([1]) * 65536 * 8
    target.write_bytes(old)
    size = 65536 * 1500  # ~98 MB of writes, so the kill lands mid-write
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(target), str(size), "2"], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "writing"
    time.sleep(0.01 + 0.03 * trial)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    data = target.read_bytes()
    assert data == old or data == bytes([2]) * size


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
