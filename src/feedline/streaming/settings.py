"""The floor's settings: every knob the scheduler itself reads, declared once, with its unit.

Why here: the episode reader and the token reader run on the same plan, pools, byte budget,
pipeline and resume, so the knobs those read (pool size, strategy, prefetch, byte budget, fetch
and assembly threads, queue, seed, order change, outage, replication, evening out) are one row each in
:data:`FLOOR_ROWS`: one unit (the byte budget is GiB in both readers), one validation, one
checkpoint key. A reader declares its settings as a frozen dataclass on
:class:`ReaderSettings`, one field per row: a floor row through :func:`floor_field` (the reader
may spell the keyword its users know, e.g. LeRobot's ``max_num_shards`` for ``fetch_threads``,
and give its own default), its own rows through :func:`reader_field`. The floor reads a
reader's values by concept (:meth:`ReaderSettings.value`), never by the reader's spelling.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from feedline.streaming.errors import StreamingError
from feedline.validate import check_int

__all__ = [
    "DEFAULT_SEED",
    "FLOOR_ROWS",
    "NONE_SEED",
    "ReaderSettings",
    "Setting",
    "floor_default",
    "floor_field",
    "gib_bytes",
    "reader_field",
    "resolve_seed",
]

DEFAULT_SEED = 1000  # lerobot-train's default --seed: the same run config gives the same order
NONE_SEED = 42  # seed=None must still agree on every rank/worker with no communication; 42 is
# the seed LeRobot's StreamingLeRobotDataset uses when none is given


def gib_bytes(gib: float) -> int:
    """A ``*_gb`` setting (GiB) in bytes: the one place the unit is converted."""
    return int(gib * 2**30)


def resolve_seed(seed: Any) -> int:
    """``None`` -> :data:`NONE_SEED`; otherwise a non-negative int."""
    if seed is None:
        return NONE_SEED
    if isinstance(seed, bool) or not hasattr(seed, "__index__") or int(seed) < 0:
        raise StreamingError(f"seed must be a non-negative integer or None, got {seed!r}")
    return int(seed)


def _strategy(value: Any) -> str:
    from feedline.streaming.schedule.strategies import get_strategy  # numpy: only when checked

    get_strategy(value, setting="sampling_strategy")
    return value


def _even_mode(value: Any) -> str:
    from feedline.streaming.schedule.even import check_even_mode  # numpy: only when checked

    return check_even_mode(value)


@dataclass(frozen=True)
class Setting:
    """One row of a settings table.

    Args:
        keyword: the Python name: a reader's keyword, a storage option (``target="storage"``)
            or ``feedline train``'s own (``target="train"``).
        default: the production default (``None``: unset, or derived as ``shown`` says).
        unit: what one unit of it is, and whether it is per rank or per worker.
        flag: the command-line flag (``""``: none).
        help: one line for ``--help`` and the docs.
        kind: the value's type: ``int``, ``float``, ``str``, ``bool`` or ``dict`` (JSON).
        minimum: the smallest accepted value (numbers). Default ``None``: no bound.
        above: the value must be greater than ``minimum``, not equal. Default ``False``.
        optional: ``None`` is accepted (``--flag=null``). Default ``False``.
        target: where the value goes: ``"dataset"``, ``"storage"`` or ``"train"``. Default
            ``"dataset"``.
        lerobot_flag: the flag is lerobot-train's own, which feedline reads from LeRobot's
            config rather than parsing it. Default ``False``.
        shown: the default as the docs say it, when a value alone does not. Default ``None``.
        python: the Python spelling in the docs, when it is not ``keyword``. Default ``None``.
        null_flag: the flag also takes ``null``: the default (``feedline train``'s, when it has
            one). Default ``False``; always so when ``optional``.
        order_key: the key under which the value enters a checkpoint's order settings (changing
            it changes the anchor order). Default ``None``: it does not.
        check: validates and normalises a value (else by ``kind`` and ``minimum``). Default
            ``None``.
        concept: the floor row this row spells (a key of :data:`FLOOR_ROWS`). Default ``None``:
            the reader's own row.
    """

    keyword: str
    default: Any
    unit: str
    flag: str
    help: str
    kind: type
    minimum: float | None = None
    above: bool = False
    optional: bool = False
    target: str = "dataset"
    lerobot_flag: bool = False
    shown: str | None = None
    python: str | None = None
    null_flag: bool = False
    order_key: str | None = None
    check: Callable[[Any], Any] | None = None
    concept: str | None = None

    def validate(self, value: Any) -> Any:
        """``value`` checked and normalised, or a one-line ``StreamingError`` naming the keyword."""
        if self.check is not None:
            return self.check(value)
        if value is None and self.optional:
            return None
        if self.kind is int:
            return check_int(self.keyword, value, minimum=self.minimum, error=StreamingError)
        if self.kind is float:
            bound = self.minimum
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise StreamingError(f"{self.keyword} must be a number, got {value!r}")
            if bound is not None and not (value > bound if self.above else value >= bound):
                raise StreamingError(
                    f"{self.keyword} must be {'>' if self.above else '>='} {bound:g}, got {value!r}"
                )
            return float(value)
        if self.kind is bool:
            return bool(value)
        return value


def _floor(keyword: str, default: Any, unit: str, help: str, kind: type, **spec: Any) -> Setting:
    return Setting(keyword, default, unit, "", help, kind, concept=keyword, **spec)


#: The floor's rows, by concept. Defaults are the episode reader's; units say "units" where a
#: reader names its own (episodes, chunks), and each reader may give its own default.
FLOOR_ROWS: dict[str, Setting] = {row.keyword: row for row in (
    _floor("pool_size", 256, "units per rank, /N per worker",
           "most whole units a worker mixes", int, minimum=1, order_key="pool_size"),
    _floor("sampling_strategy", "spread", "name",
           "the pool's strategy (`spread`, `remaining` or `round_robin`)", str,
           order_key="strategy", check=_strategy),
    _floor("prefetch", 8, "units per worker", "units fetched ahead of what the pool needs", int,
           minimum=0),
    _floor("byte_budget_gb", 8.0, "GiB per rank, /N per worker",
           "most fetched payload held", float, minimum=0, above=True, order_key="byte_budget"),
    _floor("fetch_threads", 16, "units per worker", "units fetched in parallel", int, minimum=1),
    _floor("assemble_threads", 2, "threads per worker", "sample-assembly threads", int,
           minimum=0),
    _floor("queue_size", 8, "samples per worker", "samples assembled ahead, in schedule order",
           int, minimum=1),
    _floor("seed", DEFAULT_SEED, "seed", "with the epoch, the order of units and anchors", int,
           optional=True, order_key="seed", check=resolve_seed),
    _floor("allow_order_change", False, "flag",
           "resume under other order settings at the nearest epoch boundary", bool),
    _floor("outage_s", 60.0, "seconds",
           "how long the store may fail while reads are retried; past it the epoch stops",
           float, minimum=0, above=True),
    _floor("replication", 1, "ranks", "consecutive ranks that read the same samples", int,
           minimum=1),
    _floor("even_batches", "pad", "mode",
           "every rank yields the same number of batches: each worker repeats a few of its own "
           "anchors (`pad`), drops its last ones (`drop`), or neither (`none`)", str,
           check=_even_mode),
)}


def floor_default(concept: str) -> Any:
    """The floor's default of ``concept`` (what the pool, budget and pipeline default to)."""
    return FLOOR_ROWS[concept].default


def floor_field(concept: str, default: Any = ..., **spec: Any) -> Any:
    """A reader's field for the floor row ``concept``: the row's unit words, validation and
    checkpoint key, with the reader's default and any of ``spec`` (flag, help, unit, shown...)."""
    row = FLOOR_ROWS[concept]
    value = row.default if default is ... else default
    return field(default=value, metadata={"setting": {"concept": concept, **spec}})


def reader_field(default: Any, **spec: Any) -> Any:
    """A field for a row of the reader's own (``spec``: the :class:`Setting` arguments)."""
    return field(default=default, metadata={"setting": spec})


@dataclass(frozen=True)
class ReaderSettings:
    """A reader's settings, validated once: subclass it with :func:`floor_field` and
    :func:`reader_field` fields (every floor concept must have one)."""

    _by_concept: ClassVar[dict[str, str]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._by_concept = {}

    def __post_init__(self) -> None:
        for row in self.rows():  # the one validation of every setting, in table order
            object.__setattr__(self, row.keyword, row.validate(getattr(self, row.keyword)))

    @classmethod
    def rows(cls) -> tuple[Setting, ...]:
        """This reader's rows, in field order; a floor row keeps its unit, kind, bounds and
        checkpoint key, under the reader's keyword."""
        out = []
        for f in fields(cls):
            spec = dict(f.metadata["setting"])
            concept = spec.get("concept")
            if concept is not None:
                base = FLOOR_ROWS[concept]
                merged = {k: getattr(base, k) for k in (
                    "unit", "flag", "help", "kind", "minimum", "above", "optional", "order_key",
                    "check", "concept")}
                merged.update(spec)
                out.append(Setting(keyword=f.name, default=f.default, **merged))
            else:
                out.append(Setting(keyword=f.name, default=f.default, **spec))
        return tuple(out)

    @classmethod
    def keyword(cls, concept: str) -> str:
        """This reader's keyword for the floor row ``concept``."""
        if not cls._by_concept:
            cls._by_concept.update(
                {row.concept: row.keyword for row in cls.rows() if row.concept is not None})
        return cls._by_concept[concept]

    def value(self, concept: str) -> Any:
        """The value of the floor row ``concept``, however this reader spells it."""
        return getattr(self, self.keyword(concept))

    @property
    def byte_budget_bytes(self) -> int:
        """The byte budget in bytes: the budget of one rank, shared by its workers."""
        return gib_bytes(self.value("byte_budget_gb"))

    def order_settings(self) -> dict[str, Any]:
        """The settings that fix the anchor order, as a checkpoint stores them: ``seed``,
        ``strategy`` and the pool's (:attr:`pool_settings`)."""
        return {"seed": self.value("seed"), "strategy": self.value("sampling_strategy"),
                "pool_settings": self.pool_settings}

    @property
    def pool_settings(self) -> dict[str, Any]:
        """Every pool knob that changes the anchor order, as a checkpoint stores it (bytes)."""
        return {
            row.order_key: self._converted(row) for row in self.rows()
            if row.order_key is not None and row.order_key not in ("seed", "strategy")
        }

    def _converted(self, row: Setting) -> Any:
        value = getattr(self, row.keyword)
        return gib_bytes(value) if row.unit.startswith("GiB") else value
