"""A mix config: Dolma's ``mix`` schema read, checked and compiled once, before any file is read.

The keys are Dolma's (``streams[]``: ``name``, ``documents``, ``attributes``,
``filter.include/exclude``, ``span_replacement[]``, ``output{path, max_size_in_bytes,
discard_fields, min_text_length, compression}``; at the top ``processes`` and ``work_dir``). Why
a module of its own: every mistake in a config (an unknown key, a bad expression, a setting out
of range) is an error naming the key before the mixer opens a file, and every JSONPath is
compiled here once per run, not per document.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import yaml

from feedline.curate.errors import CurateError
from feedline.curate.jsonpath import JsonPath
from feedline.validate import check_int

log = logging.getLogger("feedline.curate")

DEFAULT_SHARD_BYTES = 1 << 30  # a shard closes at 1 GiB compressed unless output.max_size_in_bytes says
_STREAM_KEYS = {"name", "documents", "attributes", "filter", "span_replacement", "output", "compression"}
#: Top-level keys of Dolma's mixer config; ``work_dir`` is accepted with a warning that it is unused.
_TOP_KEYS = {"streams", "processes", "work_dir"}
_FILTER_KEYS = {"include", "exclude", "syntax"}
_OUTPUT_KEYS = {"path", "max_size_in_bytes", "discard_fields", "min_text_length", "compression"}


@dataclass(frozen=True)
class SpanReplacement:
    """Replace spans at ``span`` (a JSONPath to [[start, end, score]...]) whose score passes."""

    span: JsonPath
    replacement: str
    min_score: float | None = None
    max_score: float | None = None

    def passes(self, score: float) -> bool:
        if self.min_score is not None and score < self.min_score:
            return False
        return not (self.max_score is not None and score > self.max_score)


@dataclass(frozen=True)
class StreamConfig:
    """One stream of a mix config, checked, with its expressions compiled."""

    name: str
    documents: list[str]
    attributes: list[str]
    include: list[JsonPath]
    exclude: list[JsonPath]
    span_replacement: list[SpanReplacement]
    output_path: str
    max_size_in_bytes: int
    discard_fields: list[str]
    min_text_length: int
    compression: str

def load_config(path: str) -> list[StreamConfig]:
    """Parse and validate a mixer config; every JSONPath is compiled here, once."""
    return parse_config(_read_config(path), path)


def load_mix(path: str) -> tuple[list[StreamConfig], int | None]:
    """The streams and the config's ``processes`` (``None`` when unset)."""
    raw = _read_config(path)
    return parse_config(raw, path), config_processes(raw, path)


def _read_config(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as handle:
            raw = yaml.safe_load(handle) if path.endswith((".yaml", ".yml")) else json.load(handle)
    except FileNotFoundError:
        raise CurateError(f"{path}: no such mixer config") from None
    except (yaml.YAMLError, ValueError) as exc:
        raise CurateError(f"{path}: not valid YAML/JSON ({exc})") from None
    return raw


def config_processes(raw: Any, where: str = "mixer config") -> int | None:
    """The config's ``processes`` (Dolma's key), or ``None`` when it does not set one."""
    value = raw.get("processes") if isinstance(raw, dict) else None
    if value is None:
        return None
    return check_int(f"{where}: processes", value, minimum=1, error=CurateError)


def parse_config(raw: Any, where: str = "mixer config") -> list[StreamConfig]:
    if not isinstance(raw, dict) or not isinstance(raw.get("streams"), list) or not raw["streams"]:
        raise CurateError(f"{where}: needs a non-empty `streams` list")
    unknown = set(raw) - _TOP_KEYS
    if unknown:
        raise CurateError(
            f"{where}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, sorted(unknown)))} "
            f"(known: {', '.join(sorted(_TOP_KEYS))})"
        )
    work_dir = raw.get("work_dir")
    if work_dir is not None:
        # Dolma stages inputs and outputs in work_dir; feedline reads in place and writes each
        # shard atomically, so it has no use for one. Accepted (Dolma configs carry it) and said.
        if not isinstance(work_dir, dict) or set(work_dir) - {"input", "output"}:
            raise CurateError(f"{where}: `work_dir` must be a mapping with `input` and/or `output`")
        log.warning(
            "%s: work_dir is not used: feedline reads documents in place and writes each shard "
            "atomically to output.path",
            where,
        )
    config_processes(raw, where)
    streams = []
    for i, stream in enumerate(raw["streams"]):
        at = f"{where}: streams[{i}]"
        if not isinstance(stream, dict):
            raise CurateError(f"{at}: must be a mapping")
        unknown = set(stream) - _STREAM_KEYS
        if unknown:
            raise CurateError(f"{at}: unknown keys {sorted(unknown)}")
        for section, known in (("filter", _FILTER_KEYS), ("output", _OUTPUT_KEYS)):
            value = stream.get(section)
            if isinstance(value, dict) and set(value) - known:
                raise CurateError(f"{at}: unknown keys in `{section}`: {sorted(set(value) - known)}")
        for key in ("name", "documents", "output"):
            if key not in stream:
                raise CurateError(f"{at}: missing `{key}`")
        output = stream["output"]
        if not isinstance(output, dict) or "path" not in output:
            raise CurateError(f"{at}: `output` needs a `path`")
        filt = stream.get("filter") or {}
        if filt.get("syntax", "jsonpath") != "jsonpath":
            raise CurateError(f"{at}: filter syntax {filt['syntax']!r} is not supported (use jsonpath)")
        compression = output.get("compression") or _output_compression(stream.get("compression"))
        if compression in ("gzip", "gz"):
            compression = "gz"
        elif compression in ("zst", "zstd"):
            compression = "zst"
        elif compression in ("none", ""):
            compression = ""
        else:
            raise CurateError(f"{at}: unknown output compression {compression!r} (gz, zst or none)")
        streams.append(
            StreamConfig(
                name=str(stream["name"]),
                documents=_as_list(stream["documents"]),
                attributes=_as_list(stream.get("attributes") or []),
                include=[_compile(e, at) for e in _as_list(filt.get("include") or [])],
                exclude=[_compile(e, at) for e in _as_list(filt.get("exclude") or [])],
                span_replacement=[_replacement(r, at) for r in stream.get("span_replacement") or []],
                output_path=str(output["path"]).rstrip("/"),
                max_size_in_bytes=_int_setting(output, "max_size_in_bytes", DEFAULT_SHARD_BYTES, 1, at),
                discard_fields=_as_list(output.get("discard_fields") or []),
                min_text_length=_int_setting(output, "min_text_length", 0, 0, at),
                compression=compression,
            )
        )
    return streams


def _int_setting(output: dict[str, Any], key: str, default: int, minimum: int, at: str) -> int:
    """``output.<key>`` as an integer (JSON's ``1e9`` included); missing or null gives ``default``."""
    value = output.get(key)
    if value is None:
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return check_int(f"{at}: output.{key}", value, minimum=minimum, error=CurateError)


def _output_compression(value: Any) -> str:
    if isinstance(value, dict):
        return str(value.get("output") or "gz")
    return "gz"


def _as_list(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else [str(v) for v in value]


def _compile(expression: str, at: str) -> JsonPath:
    try:
        return JsonPath(expression)
    except CurateError as exc:
        raise CurateError(f"{at}: {exc}") from None


def _replacement(raw: Any, at: str) -> SpanReplacement:
    if not isinstance(raw, dict) or "span" not in raw:
        raise CurateError(f"{at}: span_replacement entries need `span`")
    if "min_score" not in raw and "max_score" not in raw:
        raise CurateError(f"{at}: span_replacement {raw['span']!r} needs min_score or max_score")
    return SpanReplacement(
        span=_compile(raw["span"], at),
        replacement=str(raw.get("replacement", "")),
        min_score=float(raw["min_score"]) if "min_score" in raw else None,
        max_score=float(raw["max_score"]) if "max_score" in raw else None,
    )
