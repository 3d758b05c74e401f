"""A padded worker's stream: its own anchors, then the few it repeats to even out the epoch.

Why two pipelines and not one: a pipeline keeps an episode's payload until the last anchor
that needs it, so repeats appended to one stream would pin every repeated episode from its first
use to the epoch's end, past the byte budget. The repeats get a pipeline of their own, started
when the first has served everything and released its payloads
(:mod:`~feedline.streaming.schedule.even` says which anchors repeat and why).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import fields, replace
from typing import Any

from feedline.streaming.pipeline import UnitPipeline

__all__ = ["PipelineChain"]


def _summed(first: Any, then: Any) -> Any:
    """One counter from two of the same kind: counts add, ``peak_*`` take the larger."""
    values = {}
    for f in fields(first):
        a, b = getattr(first, f.name), getattr(then, f.name)
        values[f.name] = max(a, b) if f.name.startswith("peak") else a + b
    return replace(first, **values)


class PipelineChain:
    """Iterates ``first``, then the pipeline ``then()`` builds; :attr:`counters` add up over
    both, so the worker board sees one stream.

    Args:
        first: the worker's own anchors (``None``: a resume left none of them to serve).
        then: builds the repeats' pipeline, called once ``first`` has served everything.
    """

    def __init__(self, first: UnitPipeline | None, then: Callable[[], UnitPipeline]) -> None:
        self._first = first
        self._then = then
        self._second: UnitPipeline | None = None
        self._closed = False

    @property
    def counters(self) -> tuple[Any, ...]:
        if self._second is None:
            return self._first.counters if self._first is not None else ()
        if self._first is None:
            return self._second.counters
        return tuple(_summed(a, b) for a, b in zip(self._first.counters, self._second.counters,
                                                   strict=True))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if self._first is not None:
            yield from self._first  # closes itself at its end, releasing its payloads
        if self._closed:
            return
        self._second = self._then()
        yield from self._second

    def close(self) -> None:
        self._closed = True
        for pipeline in (self._first, self._second):
            if pipeline is not None:
                pipeline.close()
