"""``feedline train``'s command line: feedline's ``--dataset.streaming_*`` flags apart from lerobot-train's.

LeRobot 0.6.1 knows ``--dataset.streaming`` but none of the settings of feedline's episode reader.
:func:`split_args` takes those out of the command line (both ``--flag=value`` and ``--flag value``),
checks their values, and hands every other argument to lerobot-train unchanged, where an unknown
flag is LeRobot's parser's error. Each setting is spelled as in :data:`~feedline.episodes.settings.CLI_FLAGS`
(the keyword -> flag table the reader's errors are rendered with), so an error names the flag the
user typed. Nothing here imports LeRobot or torch: the flags are checked before the slow imports.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from feedline.episodes.errors import TrainError
from feedline.episodes.settings import CLI_FLAGS

__all__ = ["SETTINGS", "Setting", "TrainArgs", "settings_help", "split_args", "train_message"]

_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no")
_NULL = ("null", "none")


def parse_bool(text: str) -> bool:
    """``true``/``false`` (also 1/0, yes/no), as LeRobot's parser reads booleans."""
    lowered = text.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError("expected true or false")


def _optional(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse_optional(text: str) -> Any:
        return None if text.lower() in _NULL else parse(text)

    return parse_optional


def _json_object(text: str) -> dict[str, Any]:
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError("expected a JSON object such as '{\"endpoint_url\": \"http://...\"}'")
    return value


@dataclass(frozen=True)
class Setting:
    """One feedline flag of ``feedline train``.

    Args:
        keyword: where the value goes: a :class:`~feedline.episodes.stream.dataset.StreamingEpisodeDataset`
            keyword, a storage option (``target="storage"``) or the bridge itself (``target="train"``).
        parse: turns the command-line text into the value (raises ``ValueError`` when it cannot).
        target: ``"dataset"``, ``"storage"`` or ``"train"``.
        help: one line for ``--help``.
        fallback_flag: the flag when ``CLI_FLAGS`` has no row for ``keyword``.
    """

    keyword: str
    parse: Callable[[str], Any]
    target: str = "dataset"
    help: str = ""
    fallback_flag: str | None = None

    @property
    def flag(self) -> str:
        """The flag a user types (``CLI_FLAGS``'s spelling when it has one)."""
        if self.target == "dataset" and self.keyword in CLI_FLAGS:
            return CLI_FLAGS[self.keyword]
        assert self.fallback_flag is not None
        return self.fallback_flag


#: Every flag ``feedline train`` adds to lerobot-train, with the reader's production defaults.
SETTINGS: tuple[Setting, ...] = (
    Setting("episode_pool_size", int, help="whole episodes mixed at once per rank (1/N per worker)"),
    Setting("sampling_strategy", str, help="remaining | round_robin"),
    Setting("prefetch_episodes", int, help="episodes fetched ahead per worker pool"),
    Setting("byte_budget_gb", float, help="most GiB of fetched payload per rank (1/N per worker)"),
    Setting("decode_threads", int, help="sample-assembly and decode threads per worker"),
    Setting("decoded_queue_size", int, help="decoded samples held ahead per worker, in order"),
    Setting("decoded_cache_gb", _optional(float),
            help="most GiB of decoded frames per rank (1/N per worker); each resident frame decoded once",
            fallback_flag="--dataset.streaming_decoded_cache_gb"),
    Setting("decoder_cache_size", _optional(int),
            help="open video decoders per rank, 1/N per worker (LRU); default: 2 x pool x cameras",
            fallback_flag="--dataset.video_decoder_cache_size"),
    Setting("sidecar_lock_timeout_s", float,
            help="seconds to wait for another process building the same MP4 sidecar"),
    Setting("max_num_shards", _optional(int),
            help="episodes fetched in parallel per worker; default: --num_workers (at least 1)"),
    Setting("max_connections", _optional(int), target="storage",
            help="most native HTTP connections per rank (http(s) roots)",
            fallback_flag="--dataset.streaming_native_http_connections"),
    Setting("subranges", _optional(int), target="storage",
            help="concurrent sub-ranges per native HTTP range read",
            fallback_flag="--dataset.streaming_native_http_subranges"),
    Setting("storage_options", _optional(_json_object), target="train",
            help="JSON object of store options (s3: endpoint_url, anon, key/secret ...); "
                 "credentials also come from the environment",
            fallback_flag="--dataset.storage_options"),
    Setting("allow_order_change", parse_bool, target="train",
            help="resume a checkpoint taken with other order settings at the next epoch boundary",
            fallback_flag="--dataset.streaming_allow_order_change"),
    Setting("sample_log", _optional(str), target="train",
            help="append each batch's sample ids (JSON lines, one per batch and rank) to this file",
            fallback_flag="--dataset.streaming_sample_log"),
)

_BY_FLAG: dict[str, Setting] = {s.flag: s for s in SETTINGS}

#: Flags LeRobot reads that feedline train needs before LeRobot is imported (the source check).
_PEEKED = ("--dataset.streaming", "--dataset.root", "--dataset.repo_id", "--dataset.repo_type",
           "--dataset.revision", "--config_path", "--resume")


@dataclass
class TrainArgs:
    """A ``feedline train`` command line, split.

    Args:
        settings: the feedline flags given, by keyword (absent flags are not listed).
        lerobot_args: every other argument, in order, for lerobot-train.
        peeked: the values of a few lerobot-train flags (``--dataset.root`` ...) as typed.
    """

    settings: dict[str, Any] = field(default_factory=dict)
    lerobot_args: list[str] = field(default_factory=list)
    peeked: dict[str, str] = field(default_factory=dict)

    @property
    def streaming(self) -> bool | None:
        """``--dataset.streaming`` as given (``None`` when absent)."""
        text = self.peeked.get("--dataset.streaming")
        return None if text is None else parse_bool(text)


def _is_feedline_flag(name: str) -> bool:
    return name in _BY_FLAG or name.startswith("--dataset.streaming_")


def split_args(argv: Sequence[str]) -> TrainArgs:
    """Split ``argv`` into feedline's settings and lerobot-train's arguments (see the module doc).

    Raises :class:`TrainError` (one line, naming the flag) for an unknown ``--dataset.streaming_*``
    flag, a flag without a value, or a value that does not parse.
    """
    out = TrainArgs()
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        name, sep, value = arg.partition("=")
        takes_next = not sep and i + 1 < len(args) and not args[i + 1].startswith("--")
        if _is_feedline_flag(name):
            if name not in _BY_FLAG:
                known = ", ".join(sorted(_BY_FLAG))
                raise TrainError(f"unknown flag {name}; feedline train knows {known}")
            if not sep:
                if not takes_next:
                    raise TrainError(f"{name} needs a value ({name}=VALUE)")
                value = args[i + 1]
                i += 1
            setting = _BY_FLAG[name]
            try:
                out.settings[setting.keyword] = setting.parse(value)
            except (ValueError, json.JSONDecodeError) as exc:
                raise TrainError(f"{name}={value!r}: {exc}") from None
        else:
            if name in _PEEKED:
                out.peeked[name] = value if sep else (args[i + 1] if takes_next else "true")
            out.lerobot_args.append(arg)
        i += 1
    if out.settings and out.streaming is False:
        given = ", ".join(s.flag for s in SETTINGS if s.keyword in out.settings)
        raise TrainError(f"{given} only apply with --dataset.streaming=true")
    return out


def dataset_kwargs(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The :class:`StreamingEpisodeDataset` keywords among ``settings`` (storage options apart)."""
    targets = {s.keyword: s.target for s in SETTINGS}
    return {k: v for k, v in settings.items() if targets.get(k) == "dataset" and v is not None}


def storage_kwargs(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The store options: ``--dataset.storage_options`` plus the native-HTTP settings."""
    options = dict(settings.get("storage_options") or {})
    for s in SETTINGS:
        if s.target == "storage" and settings.get(s.keyword) is not None:
            options[s.keyword] = settings[s.keyword]
    return options


#: Words of the reader's resume errors that have no row in ``CLI_FLAGS`` -> what a command line says.
_RESUME_WORDS = {
    "allow_order_change=True": "--dataset.streaming_allow_order_change=true",
    "pool_settings": "pool settings (--dataset.streaming_episode_pool_size, --dataset.streaming_byte_budget_gb)",
    "strategy (": "--dataset.streaming_sampling_strategy (",
}


def train_message(error: BaseException | str) -> str:
    """An episodes error as ``feedline train`` shows it: every setting named by its flag."""
    from feedline.episodes.settings import cli_message

    message = cli_message(error)
    for word, flag in _RESUME_WORDS.items():
        message = message.replace(word, flag)
    return message


def reader_defaults() -> dict[str, Any]:
    """The reader's defaults by keyword, read from its signature (the one place they live)."""
    import inspect

    from feedline.episodes.base import EpisodeDatasetBase
    from feedline.episodes.stream.dataset import StreamingEpisodeDataset

    out: dict[str, Any] = {}
    for cls in (EpisodeDatasetBase, StreamingEpisodeDataset):
        for name, param in inspect.signature(cls.__init__).parameters.items():
            if param.default is not inspect.Parameter.empty:
                out[name] = param.default
    out.pop("decoder_cache_size")  # the map-style default; streaming derives it from the pool
    out.pop("max_num_shards")  # feedline train, like lerobot-train, sets it from --num_workers
    return out


def settings_help() -> str:
    """The feedline flags with their defaults, for ``feedline train --help``."""
    defaults = reader_defaults()
    width = max(len(s.flag) for s in SETTINGS)
    lines = []
    for s in SETTINGS:
        default = defaults.get(s.keyword) if s.target == "dataset" else None
        shown = "" if default is None else f" [default: {str(default).lower() if isinstance(default, bool) else default}]"
        lines.append(f"  {s.flag:<{width}}  {s.help}{shown}")
    return "\n".join(lines)
