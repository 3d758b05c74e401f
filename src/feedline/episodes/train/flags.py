"""``feedline train``'s command line: feedline's ``--dataset.streaming_*`` flags apart from lerobot-train's.

LeRobot 0.6.1 knows ``--dataset.streaming`` but none of the settings of feedline's episode reader.
:func:`split_args` takes those out of the command line (both ``--flag=value`` and ``--flag value``),
checks their values, and hands every other argument to lerobot-train unchanged, where an unknown
flag is LeRobot's parser's error. The flags, their types, help and defaults are the rows of the
settings table (:data:`~feedline.episodes.settings.SETTINGS_TABLE`), the same table the
reader's errors are rendered with, so an error names the flag the user typed. Nothing here imports LeRobot or torch: the flags are checked before the slow imports.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from feedline.episodes.errors import TrainError
from feedline.episodes.settings import DEFAULTS, SETTINGS_TABLE, Setting, StreamingSettings

__all__ = ["SETTINGS", "TrainArgs", "setting_parser", "settings_help", "split_args",
           "train_message"]

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


_PARSERS: dict[type, Callable[[str], Any]] = {
    int: int, float: float, str: str, bool: parse_bool, dict: _json_object,
}


def setting_parser(setting: Setting) -> Callable[[str], Any]:
    """How ``setting``'s flag text becomes its value (raises ``ValueError`` when it cannot)."""
    parse = _PARSERS[setting.kind]
    return _optional(parse) if setting.optional or setting.null_flag else parse


#: Every flag ``feedline train`` adds to lerobot-train: the settings table's rows whose flag
#: is not lerobot-train's own.
SETTINGS: tuple[Setting, ...] = tuple(row for row in SETTINGS_TABLE if not row.lerobot_flag)

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
                out.settings[setting.keyword] = setting_parser(setting)(value)
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


_POOL_FLAGS = ", ".join(
    row.flag for row in StreamingSettings.rows()
    if row.order_key is not None and row.order_key in DEFAULTS.pool_settings
)

#: Words of the reader's resume errors that have no row in ``CLI_FLAGS`` -> what a command line says.
_RESUME_WORDS = {
    "allow_order_change=True": "--dataset.streaming_allow_order_change=true",
    "pool_settings": f"pool settings ({_POOL_FLAGS})",
    "strategy (": "--dataset.streaming_sampling_strategy (",
}


def train_message(error: BaseException | str) -> str:
    """An episodes error as ``feedline train`` shows it: every setting named by its flag."""
    from feedline.episodes.settings import cli_message

    message = cli_message(error)
    for word, flag in _RESUME_WORDS.items():
        message = message.replace(word, flag)
    return message


#: Defaults ``feedline train`` sets itself (the bridge, as lerobot-train does).
_TRAIN_DEFAULTS = {"max_num_shards": "--num_workers (at least 1)"}


def settings_help() -> str:
    """The feedline flags with their units and defaults, for ``feedline train --help``."""
    width = max(len(s.flag) for s in SETTINGS)
    lines = []
    for s in SETTINGS:
        default = _TRAIN_DEFAULTS.get(s.keyword, s.shown or s.default)
        if isinstance(default, bool):
            default = str(default).lower()
        shown = "" if default is None else f" [default: {str(default).replace('`', '')}]"
        lines.append(f"  {s.flag:<{width}}  {s.help} ({s.unit}){shown}")
    return "\n".join(lines)
