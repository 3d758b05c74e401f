"""``feedline doctor ROOT``: is this LeRobot v3 dataset sound? Findings, bytes read, exit code.

Reads metadata, Parquet footers, the ``index`` and ``timestamp`` columns (of a sample of
episodes per data file and of every episode the footers' row-group statistics do not clear;
of all with ``--full``) and the MP4 indexes (``moov`` boxes) only, never a video sample, and prints every finding with what to do, then how
many bytes it read. The exit code is the number of errors (at most 255), so CI can gate on it;
``--json`` prints the whole report for machines instead (schema in docs/doctor.md).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from feedline.episodes.cli import _storage_options
from feedline.episodes.doctor.findings import Report
from feedline.episodes.doctor.reads import KINDS
from feedline.episodes.doctor.runner import DEFAULT_WORKERS, run_doctor
from feedline.run.progress import human_bytes

#: Findings printed per check in text output (``--all``: every one).
SHOWN_PER_CHECK = 20
#: A Hub dataset repo id (``OWNER/NAME``), told apart from a folder by not existing as one.
_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")

_KIND_LABELS = {
    "metadata": "metadata",
    "parquet_footers": "Parquet footers",
    "parquet_columns": "Parquet index+timestamp columns",
    "mp4_index": "MP4 indexes",
}


def register(subparsers: Any) -> None:
    """Add ``feedline doctor`` to the ``feedline`` command."""
    parser = subparsers.add_parser(
        "doctor",
        help="check a LeRobot v3 dataset (metadata, Parquet footers, MP4 indexes; no video payload)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("root", help="dataset root: folder, http(s)://, s3://, hf:// URL or a Hub repo id OWNER/NAME")
    parser.add_argument("--revision", help="Hub revision (branch, tag or commit) of a repo id")
    parser.add_argument("--episodes", type=int, nargs="+", metavar="N", help="only these episodes")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--full", action="store_true",
        help="read the index and timestamp values of every episode (default: footer statistics for "
        "all, values for a sample per data file and for every episode the statistics do not clear)",
    )
    parser.add_argument(
        "--all", action="store_true",
        help=f"print every finding (default: the first {SHOWN_PER_CHECK} of each check and how many more; "
        "--json always holds all)",
    )
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS, help="videos indexed in parallel")
    parser.add_argument(
        "--storage-option", action="append", default=[], metavar="KEY=VALUE",
        help="option for the store (e.g. endpoint_url=..., anon=true)",
    )
    parser.set_defaults(func=cmd_doctor)


def root_url(root: str, revision: str | None = None) -> str:
    """``root`` as a URL: a Hub repo id ``OWNER/NAME`` that is not a local folder becomes
    ``hf://datasets/OWNER/NAME[@revision]``; anything else is taken as given."""
    if "://" not in root and not Path(root).exists() and _REPO_ID.fullmatch(root):
        return f"hf://datasets/{root}" + (f"@{revision}" if revision else "")
    return root


def cmd_doctor(args: argparse.Namespace) -> int:
    report = run_doctor(
        root_url(args.root, args.revision),
        episodes=args.episodes,
        storage_options=_storage_options(args.storage_option),
        workers=args.workers,
        full=args.full,
    )
    if args.json:
        json.dump(report.to_json(), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render(report, None if args.all else SHOWN_PER_CHECK))
    return report.exit_code


def shown(text: str) -> str:
    """``text`` safe for a terminal: control characters (an escape sequence in a file or key
    name could rewrite the screen) are printed as Python escapes, as ``--json`` does."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def render(report: Report, per_check: int | None = SHOWN_PER_CHECK) -> str:
    """The report for a terminal: what was examined, each finding with its fix, bytes read.

    At most ``per_check`` findings of each check are printed, then how many more there are
    (``None``: all), so a dataset with a million bad rows prints a screen, not a million lines."""
    facts = report.dataset
    lines = [
        f"feedline doctor {shown(report.root)}: {facts['episodes']} episodes, {facts['frames']} frames, "
        f"{facts['cameras']} camera(s), {facts['data_files']} data file(s), {facts['videos']} video(s)",
    ]
    sampled = report.checked.get("data_values", True)
    if sampled is not True:
        lines.append(f"note    {sampled}")
    printed: Counter[str] = Counter()
    for f in report.findings:
        printed[f.check] += 1
        if per_check is not None and printed[f.check] > per_check:
            continue
        where = " ".join(part for part in (shown(f.file or ""), "" if f.episode is None else f"episode {f.episode}") if part)
        lines.append(f"{f.severity:<7} [{f.check}] {where + ': ' if where else ''}{shown(f.problem)}")
        if f.fix:
            lines.append(f"        fix: {shown(f.fix)}")
    for check, count in printed.items():
        if per_check is not None and count > per_check:
            lines.append(f"...     [{check}] {count - per_check:,} more finding(s) of this check not shown "
                         f"({count:,} in all); --all prints every one, --json holds them")
    read = report.bytes_read
    payload = facts["data_bytes"] + facts["video_bytes"]
    share = f" ({100 * read['total'] / payload:.2f} % of the {human_bytes(payload)} of data and video)" if payload else ""
    parts = ", ".join(f"{_KIND_LABELS[k]} {human_bytes(read.get(k, 0))}" for k in KINDS)
    lines.append(f"read {human_bytes(read['total'])}{share} in {report.requests} requests: {parts}")
    summary = report.summary()
    lines.append(
        f"{summary['errors']} error(s), {summary['warnings']} warning(s), {summary['info']} info; "
        f"exit code {report.exit_code}"
    )
    return "\n".join(lines) + "\n"
