"""The one crash harness: kill a ``feedline`` command with ``kill -9`` at a ready point, then
compare trees.

Every kill-9-then-rerun suite (download, tag, dedup) asks the same three things: did the kill
land mid-run (the ready point was reached and the command had not finished), is every file left
in place complete (partial ones exist only as hidden temp files, and a rerun removes those), and
does the rerun end with exactly the tree an uninterrupted run makes. A real process, a real
SIGKILL: nothing here is simulated.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.cli import start_feedline

#: The temp name of an atomic install (``feedline.io.atomic.temp_path``): ``.<name>.<8 hex>.tmp``.
TEMP_NAME = re.compile(r"\..+\.[0-9a-f]{8}\.tmp")


@dataclass
class Killed:
    """How a killed run ended: its exit status, what it printed, and how long it ran."""

    returncode: int
    stdout: bytes
    stderr: bytes
    seconds: float


def kill_when(
    *args: str,
    ready: Callable[[], bool],
    timeout: float = 90.0,
    poll_s: float = 0.005,
    env: dict[str, str] | None = None,
    allow_exit: bool = False,
) -> Killed:
    """Start ``feedline ARGS``, SIGKILL it as soon as ``ready()`` is true, and wait for it.

    Fails the test when the command ends before the ready point (the kill would prove nothing),
    unless ``allow_exit`` (a kill point drawn at random may lie past the end: the caller then
    checks the finished run instead), or when the point is not reached within ``timeout`` seconds.
    """
    proc = start_feedline(*args, env=env)
    started = time.monotonic()
    try:
        while not ready():
            if proc.poll() is not None:
                if allow_exit:
                    break
                out, err = proc.communicate()
                raise AssertionError(
                    f"feedline {' '.join(args)} ended (exit {proc.returncode}) before the kill point:\n"
                    f"{err.decode(errors='replace')}"
                )
            if time.monotonic() - started > timeout:
                raise AssertionError(f"feedline {' '.join(args)}: kill point not reached in {timeout:.0f} s")
            time.sleep(poll_s)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
    return Killed(proc.returncode, out or b"", err or b"", time.monotonic() - started)


def tree(root: Path, *, hidden: bool = False) -> dict[str, bytes]:
    """Every file under ``root`` -> its bytes; files under hidden names (markers, work dirs,
    temps) only with ``hidden``."""
    out: dict[str, bytes] = {}
    if not root.exists():
        return out
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and (hidden or not any(part.startswith(".") for part in rel.split("/"))):
            out[rel] = path.read_bytes()
    return out


def temp_files(root: Path) -> list[str]:
    """The atomic-install temps under ``root``: what a killed writer may leave, nothing else may."""
    if not root.exists():
        return []
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if TEMP_NAME.fullmatch(p.name))


def assert_complete_subset(partial: dict[str, bytes], full: dict[str, bytes]) -> None:
    """Every file a killed run left in place is one the full run makes, byte for byte."""
    extra = sorted(set(partial) - set(full))
    assert not extra, f"files a complete run does not make: {extra}"
    wrong = sorted(name for name, data in partial.items() if full[name] != data)
    assert not wrong, f"files left incomplete or different in place: {wrong}"


def assert_same_tree(got: Path, expected: Path, *, hidden: bool = False) -> None:
    """``got`` holds exactly ``expected``'s files with the same bytes, and no temp files."""
    a, b = tree(got, hidden=hidden), tree(expected, hidden=hidden)
    assert sorted(a) == sorted(b), f"files differ: only in {got}: {sorted(set(a) - set(b))}, " \
                                   f"only in {expected}: {sorted(set(b) - set(a))}"
    assert [n for n in a if a[n] != b[n]] == []
    assert temp_files(got) == [], f"temp files left: {temp_files(got)}"

