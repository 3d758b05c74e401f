"""The streaming reader's settings table: every setting once, with its default, unit, flag and help.

Why one table: a setting used to be declared in the reader's constructor, in the command line's
flags, in the flag-to-keyword table and as a module constant, and its GiB turned into bytes in
several places; a default or a flag could change in one of them and not the others. Here each
setting is one :class:`Setting` row: the reader's own knobs are the fields of the frozen
:class:`StreamingSettings` (validated once, bytes computed once), the rest (options the store or
the map-style base takes, ``feedline train``'s own flags) are :data:`OTHER_SETTINGS`. The
constructor's keywords, ``feedline train``'s flags, the checkpoint's order settings and the
settings table of ``docs/episodes.md`` (:func:`settings_markdown`) all come from here.

Errors name a setting the way the caller spelled it. In Python that is the keyword the
constructor takes (``byte_budget_gb``), so every message is built from the keyword. A command
line that exposes the same setting as a flag (``feedline train
--dataset.streaming_byte_budget_gb``, lerobot-train's spelling) shows the same error through
:func:`cli_message`, which swaps each keyword for its flag (:data:`CLI_FLAGS`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from feedline.streaming.settings import (
    DEFAULT_SEED,
    NONE_SEED,
    ReaderSettings,
    Setting,
    floor_field,
    gib_bytes,
    reader_field,
    resolve_seed,
)

__all__ = [
    "CLI_FLAGS",
    "DEFAULTS",
    "DEFAULT_SEED",
    "NONE_SEED",
    "OTHER_SETTINGS",
    "SETTINGS_TABLE",
    "Setting",
    "StreamingSettings",
    "cli_message",
    "gib_bytes",
    "resolve_seed",
    "setting",
    "settings_markdown",
]


_POOL_FLAG = "--dataset.streaming_"


@dataclass(frozen=True)
class StreamingSettings(ReaderSettings):
    """The streaming reader's own settings, validated once (see the module docstring).

    Every field is one keyword of :class:`~feedline.episodes.stream.dataset.StreamingEpisodeDataset`,
    documented there; each field's metadata holds its row of the table (:meth:`rows`). Per-rank
    limits are split per worker by :class:`~feedline.streaming.schedule.slot.WorkerSlot`.

    Args:
        episode_pool_size: most whole episodes mixed per rank.
        sampling_strategy: the pool's strategy name.
        prefetch_episodes: episodes fetched ahead per worker.
        byte_budget_gb: most GiB of fetched payload per rank.
        decode_threads: sample-assembly and decode threads per worker.
        decoded_queue_size: decoded samples held ahead per worker.
        decoded_cache_gb: most GiB of decoded frames per rank.
        decoder_cache_size: most open decoders per rank (``None``: 2 x pool x cameras).
        max_num_shards: episodes fetched in parallel per worker.
        seed: the order seed; ``None`` is :data:`NONE_SEED` (stored resolved).
        allow_order_change: resume under other order settings at an epoch boundary.
        outage_s: how long the store may fail (refused, reset, 5xx, 429) before the epoch stops.
        replication: consecutive ranks that read identical samples (one data-parallel group).
        even_batches: how every rank comes to the same number of batches (pad, drop, none).
    """

    episode_pool_size: int = floor_field(
        "pool_size", 256, unit="episodes per rank, /N per worker",
        flag=_POOL_FLAG + "episode_pool_size", help="most whole episodes a worker mixes")
    sampling_strategy: str = floor_field(
        "sampling_strategy", "spread", flag=_POOL_FLAG + "sampling_strategy",
        help="`spread`: each resident episode plays forward from a random frame, its frames "
             "evenly spaced over one shared stay (batches mix as many episodes as a global "
             "shuffle; each frame decoded once); `remaining`: draw weighted by remaining frames; "
             "`round_robin`: each round shuffle the resident episodes and take one shuffled "
             "frame of each (episodes admitted mid-round join the next)")
    prefetch_episodes: int = floor_field(
        "prefetch", 8, unit="episodes per worker", flag=_POOL_FLAG + "prefetch_episodes",
        help="episodes prefetched per worker pool")
    byte_budget_gb: float = floor_field(
        "byte_budget_gb", 8.0, flag=_POOL_FLAG + "byte_budget_gb",
        help="most fetched payload (mini-MP4s + Parquet rows) held")
    decode_threads: int = floor_field(
        "assemble_threads", 2, minimum=1, flag=_POOL_FLAG + "decode_threads",
        help="sample-assembly and decode threads")
    decoded_queue_size: int = floor_field(
        "queue_size", 8, flag=_POOL_FLAG + "decoded_queue_size",
        help="decoded samples buffered ahead, in schedule order")
    decoded_cache_gb: float = reader_field(
        4.0, kind=float, minimum=0, unit="GiB per rank, /N per worker",
        flag=_POOL_FLAG + "decoded_cache_gb", null_flag=True,
        help="most decoded frames held; within it each resident frame is decoded once")
    decoder_cache_size: int | None = reader_field(
        None, kind=int, minimum=0, optional=True, unit="decoders per rank, /N per worker",
        flag="--dataset.video_decoder_cache_size", shown="2 × pool × cameras",
        help="open video decoders (LRU): two per resident episode and camera (one decoding "
             "forward, one filling the frames before where its first sample started)")
    max_num_shards: int = floor_field(
        "fetch_threads", 16, unit="episodes per worker", flag="--dataset.max_num_shards",
        null_flag=True,
        shown="16 (`feedline train`: `--num_workers`, at least 1)",
        help="episodes fetched in parallel")
    seed: int | None = floor_field(
        "seed", DEFAULT_SEED, flag="--seed", lerobot_flag=True,
        shown=f"{DEFAULT_SEED} (`None` / `--seed=null`: {NONE_SEED})",
        help="with the epoch, the order of episodes and anchors")
    allow_order_change: bool = floor_field(
        "allow_order_change", False, flag=_POOL_FLAG + "allow_order_change", target="train")
    outage_s: float = floor_field(
        "outage_s", 60.0, flag=_POOL_FLAG + "outage_s",
        help="how long the store may be unreachable or failing (refused or reset connections, "
             "timeouts, 5xx, 429, S3 SlowDown) while reads are retried with backoff; past it "
             "the epoch stops with an error naming the store")
    replication: int = floor_field(
        "replication", 1, flag=_POOL_FLAG + "replication",
        help="consecutive ranks that read the same samples (tensor or context parallelism); "
             "ownership and coverage count the world size / N data-parallel groups")
    even_batches: str = floor_field(
        "even_batches", "pad", flag=_POOL_FLAG + "even_batches",
        help="every rank yields the same number of batches per epoch, so a DDP loop never "
             "waits alone: each DataLoader worker repeats a few of its own anchors (`pad`), "
             "drops its last ones (`drop`), or neither (`none`)")

    @property
    def decoded_cache_bytes(self) -> int:
        """``decoded_cache_gb`` in bytes: the decoded-frame limit of one rank."""
        return gib_bytes(self.decoded_cache_gb)


#: The production defaults, as one value (``DEFAULTS.byte_budget_gb``).
DEFAULTS = StreamingSettings()

#: Rows that are not the reader's own knobs: a keyword of the map-style base, store options and
#: ``feedline train``'s own flags.
OTHER_SETTINGS: tuple[Setting, ...] = (
    Setting("sidecar_lock_timeout_s", 1800.0, "seconds",
            _POOL_FLAG + "sidecar_lock_timeout_s",
            "to wait for another process's sidecar build", float, minimum=0),
    Setting("max_connections", None, "connections per rank",
            _POOL_FLAG + "native_http_connections", "most native HTTP connections (http(s) roots)",
            int, minimum=1, optional=True, target="storage", shown="unset (16)",
            python='storage_options={"max_connections": N}'),
    Setting("subranges", None, "sub-ranges per read", _POOL_FLAG + "native_http_subranges",
            "concurrent sub-ranges per native HTTP range read", int, minimum=1, optional=True,
            target="storage", shown="1", python='storage_options={"subranges": N}'),
    Setting("storage_options", None, "JSON object", "--dataset.storage_options",
            "store options (s3fs: `endpoint_url`, `anon`, `key`/`secret`; Hub: `token`); "
            "credentials also come from the environment", dict, optional=True, target="train",
            shown="`{}`"),
    Setting("mixture", None, "path", "--dataset.mixture",
            "a YAML file of sources (root or repo_id, weight/repeat/choose, episodes, "
            "feature_map) plus epoch_size and batching: train on their mixture; "
            "--dataset.repo_id then only names the run",
            str, optional=True, target="train", shown="unset", python="sources=[...]"),
    Setting("sample_log", None, "path", _POOL_FLAG + "sample_log",
            "append each batch's sample ids (JSON lines, one per batch and rank) to this file",
            str, optional=True, target="train", shown="unset", python="(`feedline train` only)"),
    Setting("report", None, "folder", _POOL_FLAG + "report",
            "write report.html of the run into this folder: batch waits, diversity against an "
            "ideal shuffle, bytes resident and in flight, each batch's wait by stage, the "
            "settings and the doctor's findings (needs `feedline[report]`)",
            str, optional=True, target="train", shown="unset",
            python="(`feedline train`; Python: `RunRecorder`)"),
)

#: The whole table: the reader's own settings, then the others.
SETTINGS_TABLE: tuple[Setting, ...] = StreamingSettings.rows() + OTHER_SETTINGS



def setting(keyword: str) -> Setting:
    """The table's row of ``keyword`` (a ``KeyError`` naming it if there is none)."""
    for row in SETTINGS_TABLE:
        if row.keyword == keyword:
            return row
    raise KeyError(keyword)


#: Keywords of the DataLoader's that resume errors name, and the flags lerobot-train gives them.
_LOADER_FLAGS = {"num_workers": "--num_workers", "batch_size": "--batch_size"}

#: Python keyword -> the flag a ``feedline train`` command line uses for it (lerobot-train's):
#: every reader keyword of the table, plus the DataLoader's.
CLI_FLAGS: dict[str, str] = {
    **{row.keyword: row.flag for row in SETTINGS_TABLE if row.target == "dataset"},
    **_LOADER_FLAGS,
}

# A keyword counts only as a whole name: not inside a longer identifier, a flag or a dotted path.
_KEYWORD = re.compile(
    r"(?<![\w.-])(" + "|".join(sorted(CLI_FLAGS, key=len, reverse=True)) + r")(?!\w)"
)


def cli_message(error: BaseException | str) -> str:
    """``error``'s message with every setting keyword replaced by its command-line flag."""
    return _KEYWORD.sub(lambda match: CLI_FLAGS[match.group(1)], str(error))


def _shown(row: Setting) -> str:
    if row.shown is not None:
        return row.shown
    value = row.default
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f"`{value}`"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def settings_markdown() -> str:
    """The settings table of ``docs/episodes.md`` (a test keeps the two equal)."""
    lines = ["| keyword | flag | default | unit | meaning |", "|---|---|---|---|---|"]
    for row in SETTINGS_TABLE:
        python = row.python if row.python is not None else f"`{row.keyword}`"
        python = python if python.startswith("(") else (
            python if python.startswith("`") else f"`{python}`")
        lines.append(f"| {python} | `{row.flag}` | {_shown(row)} | {row.unit} | {row.help} |")
    return "\n".join(lines)
