"""The one way tests run the ``feedline`` command: a real process, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any


def feedline_argv(*args: str) -> list[str]:
    """``python -m feedline ARGS`` with this interpreter (the venv the tests run in)."""
    return [sys.executable, "-m", "feedline", *args]


def _env(env: dict[str, str] | None) -> dict[str, str]:
    return {**os.environ, **(env or {})}


def run_feedline(
    *args: str,
    env: dict[str, str] | None = None,
    check: bool = False,
    timeout: float = 300,
    text: bool = True,
    **kwargs: Any,
) -> subprocess.CompletedProcess:
    """Run the command to its end; ``check=True`` fails the test with its stderr on a non-zero exit."""
    proc = subprocess.run(
        feedline_argv(*args), capture_output=True, text=text, env=_env(env), timeout=timeout, **kwargs
    )
    if check:
        assert proc.returncode == 0, (
            f"feedline {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


def start_feedline(*args: str, env: dict[str, str] | None = None, **kwargs: Any) -> subprocess.Popen:
    """Start the command without waiting (for ``kill -9`` tests); stdout and stderr are piped."""
    return subprocess.Popen(
        feedline_argv(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(env), **kwargs
    )
