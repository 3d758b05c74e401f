"""atomic_write / AtomicFile: all-or-nothing installs, real kill -9 mid-write, permissions under
threads, stale temps, and URL targets (staged, then one PUT)."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from feedline.io import AtomicFile, atomic_write, open_object
from feedline.io.atomic import remove_stale_temps, temp_path


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
    with atomic_write(target, durable=sys.argv[4] == "durable") as f:
        print("writing", flush=True)
        for _ in range(size // 65536):
            f.write(block)
            f.flush()
    print("done", flush=True)
    """
)


@pytest.mark.parametrize("durable", ["durable", "not-durable"])
@pytest.mark.parametrize("trial", range(6))
def test_kill_9_during_atomic_write_leaves_old_or_new(tmp_path: Path, trial: int, durable: str) -> None:
    target = tmp_path / "big.bin"
    old = bytes([1]) * 65536 * 8
    target.write_bytes(old)
    size = 65536 * 1500  # ~98 MB of writes, so the kill lands mid-write
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(target), str(size), "2", durable], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "writing"
    time.sleep(0.01 + 0.03 * trial)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    data = target.read_bytes()
    assert data == old or data == bytes([2]) * size
    # what the killed writer left is only ever its temp, which the next writer may clear
    leftovers = [p for p in tmp_path.iterdir() if p.name != "big.bin"]
    assert all(p.name.startswith(".big.bin.") and p.name.endswith(".tmp") for p in leftovers)
    assert remove_stale_temps(target) == len(leftovers)
    assert [p.name for p in tmp_path.iterdir()] == ["big.bin"]


def test_permissions_match_open_under_threads(tmp_path: Path) -> None:
    """Files get ``0o666 & ~umask`` like open(), and no thread ever sees another umask.

    Reading the umask means setting it (process-wide): a writer doing that per call let files
    created meanwhile by other threads come out world-writable, and two such readers racing could
    leave umask 0 behind for good.
    """
    previous = os.umask(0o027)
    try:
        start = threading.Barrier(8)
        errors: list[BaseException] = []

        def atomic_writer(n: int) -> None:
            start.wait()
            for i in range(300):
                with atomic_write(tmp_path / f"a{n}-{i}") as handle:
                    handle.write(b"x")

        def plain_writer(n: int) -> None:
            start.wait()
            for i in range(600):
                with open(tmp_path / f"p{n}-{i}", "wb") as handle:
                    handle.write(b"x")

        def guard(fn, n: int) -> None:
            try:
                fn(n)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=guard, args=(atomic_writer if n % 2 else plain_writer, n)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert os.umask(0o027) == 0o027, "the process umask must be left as it was"
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
        assert len(modes) == 4 * 300 + 4 * 600
        assert set(modes.values()) == {0o640}, {m: n for n, m in modes.items()}
    finally:
        os.umask(previous)


def test_atomic_file_commit_abort_and_text_mode(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "out.json"
    output = AtomicFile(target, "w", encoding="utf-8")
    output.handle.write("é")
    assert not target.exists()
    output.commit()
    output.commit()  # idempotent
    assert target.read_text(encoding="utf-8") == "é"
    again = AtomicFile(target)
    again.handle.write(b"other")
    again.abort()
    assert target.read_text(encoding="utf-8") == "é"
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.json"]
    with pytest.raises(ValueError, match="write mode"):
        AtomicFile(target, "ab")


def test_failed_install_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "taken"
    target.mkdir()
    (target / "inside").write_text("x")  # os.replace cannot put a file over a non-empty folder
    with pytest.raises(OSError), atomic_write(target) as handle:
        handle.write(b"data")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


def test_remove_stale_temps_touches_only_its_target(tmp_path: Path) -> None:
    mine = temp_path(tmp_path / "a.jsonl")
    other = temp_path(tmp_path / "a.jsonl.gz")  # ".a.jsonl.gz.<hex>.tmp" also starts with ".a.jsonl"
    older = tmp_path / ".a.jsonl.k2_x9q.tmp"  # mkstemp's naming, from older versions
    for path in (mine, other, older, tmp_path / "a.jsonl", tmp_path / ".a.jsonl.tmp"):
        path.write_bytes(b"")
    assert remove_stale_temps(tmp_path / "a.jsonl") == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([other.name, "a.jsonl", ".a.jsonl.tmp"])
    assert remove_stale_temps(tmp_path / "missing" / "x") == 0
    assert remove_stale_temps("s3://bucket/x") == 0


def test_url_target_is_staged_and_uploaded_once(tmp_path: Path) -> None:
    url = "memory://feedline-atomic-test/dir/obj.bin"
    with atomic_write(url) as handle:
        handle.write(b"payload")
        store, name = open_object(url)
        assert not store.exists(name), "nothing is uploaded before the block ends"
    assert store.read_bytes(name) == b"payload"
    with pytest.raises(RuntimeError), atomic_write(url) as handle:
        handle.write(b"half")
        raise RuntimeError("writer failed")
    assert store.read_bytes(name) == b"payload"
