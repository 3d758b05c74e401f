"""attempt_task: retries what may pass, reports the rest as a result naming the file, never raises."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from feedline.run import task as task_module
from feedline.run.task import TaskResult, attempt_task


class Flaky(Exception):
    pass


class Known(Exception):
    pass


@pytest.fixture(autouse=True)
def _no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(task_module, "pause_before_retry", lambda attempt: None)


def _failing(times: int, error: Exception):
    calls = []

    def work() -> dict:
        calls.append(1)
        if len(calls) <= times:
            raise error
        return {"documents": 7}

    return work, calls


def test_a_retryable_failure_is_retried_until_it_passes() -> None:
    work, calls = _failing(2, Flaky("s3 said 503"))
    result = attempt_task("a.jsonl", work, 2, retryable=Flaky, known=Known)
    assert (result.ok, result.attempts, result.documents, len(calls)) == (True, 3, 7, 3)


def test_retries_run_out_into_a_result_that_names_the_attempts() -> None:
    work, calls = _failing(5, Flaky("s3 said 503"))
    result = attempt_task("a.jsonl", work, 1, retryable=Flaky, known=Known)
    assert not result.ok and len(calls) == 2
    assert result.describe() == "a.jsonl: s3 said 503 (after 2 attempts)"


def test_known_errors_are_not_retried_and_bugs_carry_their_type() -> None:
    work, calls = _failing(1, Known("a.jsonl: line 3 is not JSON"))
    known = attempt_task("a.jsonl", work, 3, retryable=Flaky, known=Known)
    assert (known.ok, len(calls), known.describe()) == (False, 1, "a.jsonl: line 3 is not JSON")
    bug, _ = _failing(1, KeyError("text"))
    assert attempt_task("b.jsonl", bug, 3, retryable=Flaky, known=Known).error == "KeyError: 'text'"


def test_results_carry_a_parts_own_fields() -> None:
    @dataclass
    class Shard(TaskResult):
        name: str = ""

    result = attempt_task("a.jsonl", lambda: {"documents": 1}, 0, retryable=Flaky, known=Known,
                          result=Shard, name="a.ds")
    assert isinstance(result, Shard) and (result.name, result.documents) == ("a.ds", 1)
