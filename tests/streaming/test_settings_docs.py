"""Docstrings give the real defaults: every ``Args:`` entry of a reader (and of the floor classes
it builds) says ``Default <value>`` with the value its signature or settings table gives.

The convention, in every entry of a keyword with a default: ``Default 256.``, ``Default 0.5``,
``Default ``"spread"``.``, ``Default ``False``.``, ``Default ``None``: <what that means>``. The
value after ``Default`` is a Python literal (numbers bare or in double backticks, strings, bools
and ``None`` in double backticks) and must equal the default the code uses. For a keyword that is
a row of the reader's settings table (:class:`~feedline.streaming.settings.ReaderSettings` rows,
or the floor's :data:`~feedline.streaming.settings.FLOOR_ROWS`), that is the row's default, and
the signature must default to it too, or to ``None`` standing for it (a keyword that has an old
spelling, e.g. ``TokenDataset``'s ``byte_budget_gb``). A default changed in the table but not in
the docstring fails here.
"""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Callable
from typing import Any

import pytest

from feedline.episodes.base import EpisodeDatasetBase
from feedline.episodes.mapstyle import EpisodeDataset
from feedline.episodes.settings import OTHER_SETTINGS, StreamingSettings
from feedline.episodes.stream.dataset import StreamingEpisodeDataset
from feedline.streaming.budget import ByteBudget
from feedline.streaming.pipeline import UnitPipeline
from feedline.streaming.schedule.pool import EpisodePool
from feedline.streaming.settings import FLOOR_ROWS, Setting
from feedline.text.dataset import TokenDataset
from feedline.text.settings import TextSettings

_BASE_ROWS = tuple(row for row in OTHER_SETTINGS if row.target == "dataset")

#: What is checked: (name, the callable whose signature counts, whose docstring documents it,
#: the settings rows it exposes by keyword).
CASES: list[tuple[str, Callable[..., Any], Any, tuple[Setting, ...]]] = [
    ("StreamingEpisodeDataset", StreamingEpisodeDataset, StreamingEpisodeDataset,
     StreamingSettings.rows() + _BASE_ROWS),
    # the map-style reader passes everything to the shared base; users read its own docstring
    ("EpisodeDataset", EpisodeDatasetBase, EpisodeDataset, _BASE_ROWS),
    ("TokenDataset", TokenDataset, TokenDataset, TextSettings.rows()),
    ("EpisodePool", EpisodePool, EpisodePool, tuple(FLOOR_ROWS.values())),
    ("UnitPipeline", UnitPipeline, UnitPipeline, tuple(FLOOR_ROWS.values())),
    ("ByteBudget.for_worker", ByteBudget.for_worker, ByteBudget.for_worker,
     tuple(FLOOR_ROWS.values())),
]

_LITERALS = (type(None), bool, int, float, str)
_NUMBER = r"[-+]?(?:\d+(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?"  # a sentence's full stop is no decimal point
_STATED = re.compile(rf"\bDefault:?\s+(?:``(?P<quoted>.+?)``|(?P<bare>{_NUMBER}))")


def args_entries(doc: str) -> dict[str, str]:
    """The ``Args:`` block of ``doc``, keyword -> its entry on one line (``rank, world_size:``
    gives both keywords the same entry; ``**options`` is ``options``)."""
    lines = doc.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "Args:")
    outer = len(lines[start]) - len(lines[start].lstrip())
    entries: dict[str, list[str]] = {}
    names: list[str] = []
    indent = None
    for line in lines[start + 1:]:
        if line.strip() and len(line) - len(line.lstrip()) <= outer:
            break  # the block ends at the next section or paragraph
        here = len(line) - len(line.lstrip())
        head = re.match(r"\s*(\*{0,2}\w+(?:,\s*\*{0,2}\w+)*):(?:\s|$)", line)
        if head and (indent is None or here == indent):
            indent = here
            names = [name.strip().lstrip("*") for name in head.group(1).split(",")]
            for name in names:
                entries[name] = [line[head.end():]]
        elif names:
            for name in names:
                entries[name].append(line)
    return {name: " ".join(" ".join(parts).split()) for name, parts in entries.items()}


def stated_default(entry: str) -> tuple[bool, Any]:
    """``(True, value)`` for the first ``Default <literal>`` of ``entry``, ``(False, None)`` if
    it states none."""
    match = _STATED.search(entry)
    if match is None:
        return False, None
    text = match.group("quoted") if match.group("quoted") is not None else match.group("bare")
    try:
        return True, ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return True, text  # a default that is not a literal (``Default ``2 x pool``...``)


def same(stated: Any, real: Any) -> bool:
    """Numbers compare by value (``Default 8`` for 8.0); the rest by type and value."""
    numbers = (int, float)
    if isinstance(real, numbers) and not isinstance(real, bool):
        return isinstance(stated, numbers) and not isinstance(stated, bool) and stated == real
    return type(stated) is type(real) and stated == real


def real_defaults(signature_of: Callable[..., Any], rows: tuple[Setting, ...]) -> dict[str, Any]:
    """Keyword -> the default the code uses: the settings row's for a keyword that is a row (the
    signature must agree, or say ``None`` for it), else the signature's literal default."""
    by_keyword = {row.keyword: row for row in rows}
    out: dict[str, Any] = {}
    for name, p in inspect.signature(signature_of).parameters.items():
        if p.default is inspect.Parameter.empty or not isinstance(p.default, _LITERALS):
            continue
        row = by_keyword.get(name)
        if row is None:
            out[name] = p.default
            continue
        stands_for_row = p.default is None and row.default is not None and not row.optional
        assert stands_for_row or same(p.default, row.default), (
            f"{name}: the signature defaults to {p.default!r}, its settings row to {row.default!r}")
        out[name] = row.default
    return out


@pytest.mark.parametrize(("name", "signature_of", "documented_on", "rows"), CASES,
                         ids=[case[0] for case in CASES])
def test_every_args_entry_gives_the_real_default(
    name: str, signature_of: Callable[..., Any], documented_on: Any, rows: tuple[Setting, ...]
) -> None:
    entries = args_entries(inspect.getdoc(documented_on) or "")
    wrong = []
    for keyword, real in real_defaults(signature_of, rows).items():
        entry = entries.get(keyword)
        if entry is None:
            wrong.append(f"{keyword}: no Args: entry")
            continue
        found, stated = stated_default(entry)
        if not found:
            wrong.append(f"{keyword}: says no 'Default ...' (the code's is {real!r})")
        elif not same(stated, real):
            wrong.append(f"{keyword}: says Default {stated!r}, the code's is {real!r}")
    assert not wrong, f"{name}'s docstring:\n" + "\n".join(wrong)


def test_the_cases_cover_every_settings_row_a_reader_takes_by_keyword() -> None:
    """A reader's settings row whose keyword is in its signature is checked above (the
    streaming reader's ``decoder_cache_size`` travels in ``**source_options``, as map-style's)."""
    for settings, reader in ((StreamingSettings, StreamingEpisodeDataset), (TextSettings, TokenDataset)):
        taken = set(real_defaults(reader, settings.rows()))
        rows = {row.keyword for row in settings.rows()} - {"decoder_cache_size"}
        assert rows <= taken, f"{reader.__name__}: rows not in its signature: {sorted(rows - taken)}"


def test_the_parser_reads_the_convention() -> None:
    doc = '''One line.

    Args:
        pool_size: units mixed at once. Larger mixes more.
            Default 256.
        sampling_strategy: the pool's strategy. Default
            ``"spread"``.
        rank, world_size: where this process is. Default ``None``: from the environment.
        budget: in GiB. Default 0.5 (the old 512 MiB).
        tolerance_s: seconds. Default ``1e-4`` (LeRobot's).
        labels: shifted. Default ``False``.
        **options: the rest.

    Returns:
        Default 7 is not an argument.
    '''
    entries = args_entries(inspect.cleandoc(doc))
    assert set(entries) == {"pool_size", "sampling_strategy", "rank", "world_size", "budget",
                            "tolerance_s", "labels", "options"}
    assert stated_default(entries["pool_size"]) == (True, 256)
    assert stated_default(entries["sampling_strategy"]) == (True, "spread")
    assert stated_default(entries["world_size"]) == (True, None)
    assert stated_default(entries["budget"]) == (True, 0.5)
    assert stated_default(entries["tolerance_s"]) == (True, 1e-4)
    assert stated_default(entries["labels"]) == (True, False)
    assert stated_default(entries["options"]) == (False, None)
    assert same(256.0, 256) and same(8, 8.0) and not same(1, True) and not same(0, False)
    assert not same("remaining", "spread") and not same(None, 0)
