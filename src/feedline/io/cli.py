"""``feedline stat`` and ``feedline cat``: look at any object the I/O layer can reach."""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import asdict

import orjson

from feedline.io.errors import StoreError
from feedline.io.open import open_object
from feedline.io.redact import redact_text
from feedline.io.store import Store

CHUNK = 8 << 20


def parse_inclusive_range(text: str) -> tuple[int, int | None]:
    """``START-END`` inclusive as in HTTP and curl (``END`` optional) → half-open (start, end)."""
    match = re.fullmatch(r"(\d+)-(\d*)", text.strip())
    if not match:
        raise StoreError(f"--range {text!r}: expected START-END (inclusive bytes, e.g. 0-1023)")
    start = int(match.group(1))
    if not match.group(2):
        return start, None
    last = int(match.group(2))
    if last < start:
        raise StoreError(f"--range {text!r}: END is before START")
    return start, last + 1


def _http_options(args: argparse.Namespace) -> dict[str, float]:
    """``--timeout-s`` / ``--min-bytes-per-s`` as storage options (HTTP only)."""
    options = {}
    if args.timeout_s is not None:
        options["timeout_s"] = args.timeout_s
    if args.min_bytes_per_s is not None:
        options["min_bytes_per_s"] = args.min_bytes_per_s
    if options and not args.url.lower().startswith(("http://", "https://")):
        raise StoreError("--timeout-s and --min-bytes-per-s apply to http(s):// URLs only")
    return options


def _open(args: argparse.Namespace) -> tuple[Store, str]:
    store, name = open_object(args.url, **_http_options(args))
    if args.outage_s is not None:
        store.set_outage_s(args.outage_s)
    return store, name


def cmd_stat(args: argparse.Namespace) -> int:
    store, name = _open(args)
    info = store.stat(name)
    out = asdict(info)
    out["path"] = redact_text(info.path)  # the name as given: its query may hold a token
    out["url"] = store.url(name)
    sys.stdout.buffer.write(orjson.dumps(out, option=orjson.OPT_INDENT_2) + b"\n")
    return 0


def cmd_cat(args: argparse.Namespace) -> int:
    store, name = _open(args)
    size = store.stat(name).size
    start, end = (0, None) if args.range is None else parse_inclusive_range(args.range)
    end = size if end is None else end
    if end > size:
        raise StoreError(f"{store.url(name)}: range end {end - 1} past the last byte {size - 1}")
    out = sys.stdout.buffer
    for offset in range(start, end, CHUNK):
        out.write(store.read_range(name, offset, min(offset + CHUNK, end)))
    out.flush()
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("stat", help="size, ETag and fingerprint of an object, as JSON")
    p.add_argument("url", help="local path, file://, http(s)://, s3://, memory:// or hf:// URL")
    _add_http_options(p)
    p.set_defaults(func=cmd_stat)
    p = subparsers.add_parser("cat", help="write an object's bytes (or a range) to stdout")
    p.add_argument("url")
    p.add_argument("--range", metavar="START-END", help="inclusive byte range, as in HTTP and curl")
    _add_http_options(p)
    p.set_defaults(func=cmd_cat)


def _add_http_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--timeout-s", type=float, help="HTTP: limit on each socket read (default 30)")
    p.add_argument(
        "--min-bytes-per-s",
        type=float,
        help="HTTP: slowest average a transfer may keep after its first --timeout-s (default 4096)",
    )
    p.add_argument(
        "--outage-s",
        type=float,
        help="how long a failing store (refused, reset, 5xx, 429, too slow) is retried (default 60)",
    )
