"""``feedline tag --config tag.yaml``: Dolma's tag config (``dolma -c tag.yaml tag``) read as flags.

Each key is decided once, in :data:`KEYS`: it maps to a ``feedline tag`` flag, is accepted with a
warning (harmless where feedline behaves the same anyway), or is an error saying feedline does
not support it. Flags given on the command line override the file; a key nobody knows is an
error naming the file and the key, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml

from feedline.curate.errors import CurateError

log = logging.getLogger("feedline.curate")

#: Settings a config resolves to, named as ``feedline tag``'s argparse destinations.
SETTINGS = ("documents", "taggers", "experiment", "destination", "processes", "metadata", "retries",
            "skip_on_failure", "executor", "ray_address", "tagger_modules", "ignore_done", "dryrun",
            "tagger_option")

_ENV = re.compile(r"\$\{oc\.env:([A-Za-z_][A-Za-z0-9_]*)(?:,([^}]*))?\}")


@dataclass
class TagConfig:
    """What a config file sets (only the keys it has) and the warnings it gave."""

    path: str
    values: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def _strings(path: str, key: str, value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise CurateError(f"{path}: `{key}` must be a string or a list of strings, not {value!r}")


def _string(path: str, key: str, value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise CurateError(f"{path}: `{key}` must be a string, not {value!r}")


def _bool(path: str, key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise CurateError(f"{path}: `{key}` must be true or false, not {value!r}")


def _int(path: str, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise CurateError(f"{path}: `{key}` must be an integer, not {value!r}")
    return value


def _destination(cfg: TagConfig, key: str, value: Any) -> None:
    if value is None:
        return
    roots = _strings(cfg.path, key, value)
    if len(roots) != 1:
        raise CurateError(
            f"{cfg.path}: `destination` has {len(roots)} entries; feedline does not support one "
            "destination per documents glob: give one attributes root"
        )
    cfg.values["destination"] = roots[0]
    if isinstance(value, list):
        # Dolma's list form writes <destination>/<path below the glob>; feedline always writes
        # <destination>/<experiment>/<path below documents/>, so the same config lands elsewhere.
        cfg.warnings.append(
            f"{cfg.path}: `destination` is an attributes root in feedline: files go to "
            f"{roots[0].rstrip('/')}/<experiment>/<path below documents/>"
        )


def _work_dir(cfg: TagConfig, key: str, value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, dict) or set(value) - {"input", "output"}:
        raise CurateError(f"{cfg.path}: `work_dir` must be a mapping with `input` and/or `output`")
    if value.get("output") is not None:
        # Dolma keeps its .done markers in work_dir.output: feedline's --metadata is that folder
        cfg.values["metadata"] = _string(cfg.path, "work_dir.output", value["output"])
    if value.get("input") is not None:
        cfg.warnings.append(f"{cfg.path}: `work_dir.input` is not used: feedline reads documents in place")


def _debug(cfg: TagConfig, key: str, value: Any) -> None:
    # Dolma's debug runs files one after another in the main process: feedline's processes=1,
    # whatever `processes` says (applied after every other key)
    _bool(cfg.path, key, value)


def _profile(cfg: TagConfig, key: str, value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, dict):
        raise CurateError(f"{cfg.path}: `profile` must be a mapping")
    if value.get("enable"):
        raise CurateError(
            f"{cfg.path}: `profile` is not supported by feedline (run `python -m cProfile -m feedline tag ...`)"
        )
    cfg.warnings.append(f"{cfg.path}: `profile` is ignored (not enabled; feedline has no profiler option)")


def _tagger_options(cfg: TagConfig, key: str, value: Any) -> None:
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        raise CurateError(f"{cfg.path}: `tagger_options` must map tagger names to {{option: value}} mappings")
    cfg.values["tagger_option"] = [f"{tagger}.{option}={setting}" for tagger, options in value.items()
                                   for option, setting in options.items()]


def _to(setting: str, convert: Callable[[str, str, Any], Any]) -> Callable[[TagConfig, str, Any], None]:
    def apply(cfg: TagConfig, key: str, value: Any) -> None:
        cfg.values[setting] = convert(cfg.path, key, value)

    return apply


#: Every key a tag config may have -> what it does. Dolma's ``TaggerConfig`` keys first, then the
#: ``create_and_run_tagger`` arguments Dolma's CLI does not expose, then feedline's own.
KEYS: dict[str, Callable[[TagConfig, str, Any], None]] = {
    "documents": _to("documents", _strings),
    "taggers": _to("taggers", _strings),
    "experiment": _to("experiment", _string),
    "destination": _destination,
    "processes": _to("processes", _int),
    "ignore_existing": _to("ignore_done", _bool),
    "tagger_modules": _to("tagger_modules", _strings),
    "work_dir": _work_dir,
    "debug": _debug,
    "dryrun": _to("dryrun", _bool),
    "profile": _profile,
    "skip_on_failure": _to("skip_on_failure", _bool),
    "retries_on_error": _to("retries", _int),
    # feedline's own keys, spelled as its flags
    "metadata": _to("metadata", _string),
    "retries": _to("retries", _int),
    "executor": _to("executor", _string),
    "ray_address": _to("ray_address", _string),
    "tagger_options": _tagger_options,
}


def _interpolate(value: Any) -> Any:
    """``${oc.env:VAR}`` / ``${oc.env:VAR,default}``, the OmegaConf resolver Dolma configs use."""
    if isinstance(value, str):
        def env(match: re.Match[str]) -> str:
            found = os.environ.get(match.group(1), match.group(2))
            if found is None:
                raise CurateError(f"environment variable {match.group(1)} is not set")
            return found

        return _ENV.sub(env, value)
    if isinstance(value, list):
        return [_interpolate(v) for v in value]
    if isinstance(value, dict):
        return {k: _interpolate(v) for k, v in value.items()}
    return value


def read_tag_config(path: str) -> TagConfig:
    """Parse a YAML or JSON tag config into flag values; errors name the file and the key."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        raise CurateError(f"{path}: no such tag config") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CurateError(f"{path}: cannot be read ({exc})") from None
    try:
        raw = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    except (yaml.YAMLError, ValueError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CurateError(f"{path}: not valid {'JSON' if path.endswith('.json') else 'YAML'} ({first})") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise CurateError(f"{path}: a tag config is a mapping of keys (documents, taggers, ...)")
    config = TagConfig(path)
    for key, value in raw.items():
        apply = KEYS.get(str(key))
        if apply is None:
            raise CurateError(f"{path}: unknown key {key!r} (known: {', '.join(KEYS)})")
        try:
            apply(config, str(key), _interpolate(value))
        except CurateError as exc:
            message = str(exc)
            raise CurateError(message if message.startswith(path) else f"{path}: {message}") from None
    if raw.get("debug") is True:
        config.values["processes"] = 1
    return config


def merge(config: TagConfig, flags: dict[str, Any]) -> dict[str, Any]:
    """Flags given on the command line (not ``None``) win over the file's values."""
    merged = dict(config.values)
    for name, value in flags.items():
        if value is not None:
            merged[name] = value
    return merged
