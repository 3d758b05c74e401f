"""The Ray driver loop on a real local Ray: results, marker skip, cancel on failure."""

from __future__ import annotations

import time

import pytest

from feedline.run.progress import Progress

ray = pytest.importorskip("ray")

from feedline.run.ray_driver import ray_map, ray_session  # noqa: E402


def _double(x: int) -> int:
    return 2 * x


def _fail_or_sleep(x: int) -> int:
    if x == 0:
        raise ValueError("task 0 is bad")
    time.sleep(30)
    return x


@pytest.fixture(scope="module")
def session():
    with ray_session(num_cpus=2) as r:
        yield r


def test_results_skip_and_progress(session) -> None:
    progress = Progress("t", total=5, enabled=False)
    got = dict(ray_map(session, _double, [(i,) for i in range(5)], skip={1, 3}, progress=progress))
    assert got == {0: 0, 2: 4, 4: 8}
    assert progress.done == 5 and progress.received == 3


def test_on_error_result_is_yielded(session) -> None:
    got = dict(ray_map(session, _fail_or_sleep, [(0,)], on_error=lambda i, exc: f"failed: {exc}"))
    assert "task 0 is bad" in got[0]


def test_a_failure_cancels_the_pending_tasks(session) -> None:
    started = time.monotonic()
    with pytest.raises(Exception, match="task 0 is bad"):
        for _ in ray_map(session, _fail_or_sleep, [(i,) for i in range(4)]):
            pass
    assert time.monotonic() - started < 25  # did not wait for the sleeping tasks
