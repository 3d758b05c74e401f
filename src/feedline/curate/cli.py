"""``feedline tag``, ``feedline mix`` and ``feedline list-taggers``."""

from __future__ import annotations

import argparse
import sys

from feedline.curate.errors import CurateError
from feedline.validate import check_int


def cmd_tag(args: argparse.Namespace) -> int:
    from feedline.curate.processor import run_tag
    from feedline.curate.runtime import TagJob

    check_int("--processes", args.processes, minimum=1, error=CurateError)
    check_int("--retries", args.retries, minimum=0, error=CurateError)
    job = TagJob(
        taggers=tuple(args.taggers),
        experiment=args.experiment,
        destination=args.destination,
        tagger_modules=tuple(args.tagger_modules or ()),
    )
    report = run_tag(
        args.documents,
        job,
        metadata=args.metadata,
        processes=args.processes,
        retries=args.retries,
        skip_on_failure=args.skip_on_failure,
        executor=args.executor,
        ray_address=args.ray_address,
        ignore_done=args.ignore_done,
    )
    print(report.summary())
    return 3 if report.failed else 0


def cmd_mix(args: argparse.Namespace) -> int:
    from feedline.curate.mixer import load_mix, run_mix

    if args.processes is not None:
        check_int("--processes", args.processes, minimum=1, error=CurateError)
    config, processes = load_mix(args.config)
    # --processes wins over the config's `processes`, which wins over 1
    report = run_mix(config, processes=args.processes or processes or 1)
    for line in report.lines():
        print(line)
    for stream in report.streams:
        for warning in stream.warnings:
            print(f"feedline: warning: {warning}", file=sys.stderr)
    return 0


def cmd_list_taggers(args: argparse.Namespace) -> int:
    from feedline.curate.registry import import_tagger_modules, list_taggers

    import_tagger_modules(args.tagger_modules)
    taggers = list_taggers()
    width = max(len(name) for name in taggers)
    for name, cls in taggers.items():
        doc = (cls.__doc__ or "").strip().splitlines()
        print(f"{name:<{width}}  {doc[0] if doc else ''}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "tag",
        help="run taggers over documents/ and write line-aligned attributes/ files (resumable)",
        description="Run taggers over document files; write attributes/<experiment>/ files next to "
        "documents/ (or under --destination). Finished files are recorded in --metadata and skipped "
        "on a rerun.",
    )
    p.add_argument("--documents", nargs="+", required=True, metavar="GLOB", help="document files (globs, ** allowed)")
    p.add_argument("--taggers", nargs="+", required=True, metavar="NAME", help="tagger names (feedline list-taggers)")
    p.add_argument("--experiment", help="experiment name (default: each tagger is its own experiment)")
    p.add_argument("--destination", help="attributes root (default: the documents/ segment becomes attributes/)")
    p.add_argument("--processes", type=int, default=1, help="worker processes (default 1: in this process)")
    p.add_argument("--metadata", metavar="DIR", help="where .done markers go (default: <attributes root>/.feedline-tag/<experiment>)")
    p.add_argument("--retries", type=int, default=0, help="extra attempts for a file after a retryable failure")
    p.add_argument("--skip-on-failure", action="store_true", help="skip a failing file (reported at the end) instead of aborting")
    p.add_argument("--executor", choices=("local", "ray"), default="local")
    p.add_argument("--ray-address", help="Ray cluster address for --executor ray (default: RAY_ADDRESS or a local instance)")
    p.add_argument("--tagger-modules", nargs="+", metavar="MODULE", help="modules or .py paths registering more taggers")
    p.add_argument("--ignore-done", action="store_true", help="redo files even when their .done marker exists")
    p.set_defaults(func=cmd_tag)

    p = subparsers.add_parser(
        "mix",
        help="filter documents by their attributes (Dolma mix config) into size-capped shards",
    )
    p.add_argument("config", help="YAML or JSON mixer config (Dolma's `streams` schema)")
    p.add_argument(
        "--processes",
        type=int,
        default=None,
        help="streams mixed in parallel (default: the config's `processes`, else 1)",
    )
    p.set_defaults(func=cmd_mix)

    p = subparsers.add_parser("list-taggers", help="every registered tagger and what it measures")
    p.add_argument("--tagger-modules", nargs="+", metavar="MODULE", help="modules or .py paths registering more taggers")
    p.set_defaults(func=cmd_list_taggers)


def main(argv: list[str] | None = None) -> int:
    """Run only the curation commands (``python -m feedline.curate.cli``)."""
    from feedline.errors import FeedlineError

    parser = argparse.ArgumentParser(prog="feedline")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except FeedlineError as exc:
        print(f"feedline: error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
