"""``feedline download``: verified resumable shard downloads, optionally deduplicated."""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

from feedline.acquire.download import DEFAULT_CHECKPOINT_BYTES
from feedline.acquire.errors import DownloadError
from feedline.dedup.cli import add_similarity_arguments, similarity_values
from feedline.validate import check_int

_HEX64 = re.compile(r"[0-9a-fA-F]{64}")


def read_url_args(items: list[str]) -> list[str]:
    """URLs (or globs) from the command line; an argument without ``://`` is a list file (one a
    line). Every URL is checked here, before any listing or transfer: a malformed one is one
    line naming it (and its list file and line), not a failure halfway through the run."""
    from feedline.io.errors import UrlError
    from feedline.io.urls import check_url, url_name

    urls: list[str] = []
    for item in items:
        if "://" in item:
            try:
                check_url(item)
            except UrlError as exc:
                raise DownloadError(str(exc)) from None
            urls.append(item)
            continue
        for number, line in _list_file_lines(item, url_name(item)):
            if "://" not in line:
                raise DownloadError(f"{url_name(item)}: line {number}: {_shown(line)} is not a URL (scheme://...)")
            try:
                check_url(line)
            except UrlError as exc:
                raise DownloadError(f"{url_name(item)}: line {number}: {exc}") from None
            urls.append(line)
    if not urls:
        raise DownloadError("no URLs given (the list files are empty)")
    return urls


def _list_file_lines(item: str, name: str) -> list[tuple[int, str]]:
    """The URL lines of list file ``item`` (numbered; comments and blank lines left out)."""
    path = Path(item)
    if not item.strip():
        raise DownloadError(f"{name}: empty argument, not a URL nor a list file of URLs")
    if path.is_dir():
        raise DownloadError(f"{name}: a folder, not a URL (scheme://...) nor a list file of URLs")
    if not path.is_file():
        raise DownloadError(f"{name}: neither a URL (scheme://...) nor a list file of URLs")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DownloadError(f"{name}: cannot read the list file ({exc.strerror or exc})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DownloadError(
            f"{name}: not a text file of URLs (byte {exc.start} is not UTF-8); "
            "list one URL per line, UTF-8"
        ) from None
    if "\x00" in text:
        raise DownloadError(f"{name}: not a text file of URLs (it holds NUL bytes)")
    lines = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line and not line.startswith("#"):
            lines.append((number, line))
    return lines


def _shown(line: str, limit: int = 80) -> str:
    """A list file's line in a message: quoted, and cut short when long."""
    return repr(line if len(line) <= limit else line[:limit] + "...")


def read_expected_sha256(path: str) -> dict[str, str]:
    """``sha256sum``-style lines (``<hex>  <url or file name>``) keyed by URL and file name."""
    expected: dict[str, str] = {}
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise DownloadError(f"{path}: cannot read the expected hashes ({exc.strerror})") from None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 1)
        if len(parts) != 2 or not _HEX64.fullmatch(parts[0]):
            raise DownloadError(
                f"{path}: line {number}: expected '<sha256 hex>  <url or file name>'"
            )
        name = parts[1].lstrip("*")
        expected[name] = parts[0].lower()
        expected.setdefault(name.rstrip("/").rpartition("/")[2], parts[0].lower())
    return expected


def expand_urls(
    patterns: list[str], include: list[str], exclude: list[str]
) -> tuple[list[str], dict[str, int]]:
    """Globs and folder URLs (``s3://b/p/*.zst``, ``hf://datasets/O/N/en/*.json.gz``,
    ``s3://b/p/``) as the files they list, filtered by ``include``/``exclude``; URLs without glob
    characters as given. Returns the URLs and the sizes the listings told."""
    from feedline.io.globs import expand_matches

    matches = expand_matches(patterns, error=DownloadError, include=include, exclude=exclude)
    urls = [m.path for m in matches]
    return urls, {m.path: m.size for m in matches if m.size is not None}


def cmd_download(args: argparse.Namespace) -> int:
    from feedline.acquire.manifest import read_manifest
    from feedline.acquire.runner import RunConfig, run, summary_line

    dedup = None
    if args.dedup:
        from feedline.dedup.engine import DedupConfig

        dedup = DedupConfig.from_flags(**similarity_values(args))
    elif args.bands is not None or args.rows is not None:
        raise DownloadError("--bands/--rows only apply with --dedup")
    check_int("--workers", args.workers, minimum=1, error=DownloadError)
    if args.checkpoint_mb <= 0:
        raise DownloadError(f"--checkpoint-mb must be positive, got {args.checkpoint_mb}")
    started = time.monotonic()
    urls, sizes = expand_urls(read_url_args(args.urls), args.include or [], args.exclude or [])
    config = RunConfig(
        urls=urls,
        sizes=sizes,
        out_dir=Path(args.out),
        manifest_path=Path(args.manifest) if args.manifest else None,
        dedup=dedup,
        workers=args.workers,
        expected_sha256=read_expected_sha256(args.expected_sha256) if args.expected_sha256 else {},
        skip_bad_lines=args.skip_bad_lines,
        checkpoint_bytes=max(1 << 20, int(args.checkpoint_mb * (1 << 20))),
        fsync=not args.no_fsync,
    )
    manifest = run(config)
    print(manifest, file=sys.stdout, flush=True)
    # stdout stays the manifest path alone (scripts capture it); the summary is for people.
    print(summary_line(read_manifest(manifest), time.monotonic() - started), file=sys.stderr)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "download",
        help="download corpus shards with verified resume; count, dedup, write a manifest",
        description=(
            "Download shards (http(s)://, s3://, hf://, ...) into --out, resuming any earlier "
            "partial download from its re-verified prefix. s3:// and hf:// URLs may be globs "
            "(s3://bucket/prefix/*.zst, hf://datasets/OWNER/NAME/en/*.json.gz) or folders "
            "(ending in /), filtered by --include/--exclude. JSONL shards (.jsonl, .jsonl.gz, "
            ".jsonl.zst, .json.gz) are counted, and with --dedup exact and near duplicates are "
            "removed (kept documents go to dedup/<shard stem>.jsonl.zst next to the manifest, the "
            "names feedline dedup gives them). The manifest is written last; its path goes to "
            "stdout, a summary line to stderr."
        ),
    )
    parser.add_argument(
        "urls",
        nargs="+",
        metavar="URL_OR_LISTFILE",
        help="shard URL or glob, or a file listing one per line",
    )
    parser.add_argument(
        "--include",
        action="append",
        metavar="PATTERN",
        help="keep only listed files whose path below the glob's fixed part matches (fnmatch: "
        "* also spans /; a pattern ending in / means that folder); repeatable",
    )
    parser.add_argument(
        "--exclude",
        action="append",
        metavar="PATTERN",
        help="leave out listed files matching (same form; wins over --include); repeatable",
    )
    parser.add_argument("--out", required=True, help="folder for the shards")
    parser.add_argument("--manifest", help="manifest path (default: OUT/manifest.json)")
    parser.add_argument(
        "--workers", type=int, default=4, help="shards downloaded at once (default 4)"
    )
    parser.add_argument(
        "--expected-sha256",
        metavar="FILE",
        help="sha256sum-style file: '<hex>  <url or file name>' per line",
    )
    parser.add_argument(
        "--skip-bad-lines",
        action="store_true",
        help="skip and count malformed JSON lines instead of failing",
    )
    parser.add_argument(
        "--checkpoint-mb",
        type=float,
        default=DEFAULT_CHECKPOINT_BYTES / (1 << 20),
        help="fsync + checkpoint every this many MiB (default %(default)g)",
    )
    parser.add_argument(
        "--no-fsync",
        action="store_true",
        help="do not wait for the disk before checkpoints (resume stays verified; an OS crash "
        "may cost the progress)",
    )
    group = parser.add_argument_group("dedup")
    group.add_argument("--dedup", action="store_true", help="drop exact and near duplicates")
    add_similarity_arguments(group)
    parser.set_defaults(func=cmd_download)
