"""``feedline tag`` (flags or ``--config``), ``feedline mix`` and ``feedline list-taggers``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from feedline.curate.errors import CurateError
from feedline.validate import check_int

#: ``feedline tag``'s settings when neither a flag nor the config gives them.
TAG_DEFAULTS: dict[str, Any] = {
    "experiment": None, "destination": None, "processes": 1, "metadata": None, "retries": 0,
    "skip_on_failure": False, "executor": "local", "ray_address": None, "tagger_modules": None,
    "ignore_done": False, "dryrun": False, "tagger_option": None,
}


def tag_settings(args: argparse.Namespace) -> dict[str, Any]:
    """Flags over ``--config`` over defaults; documents and taggers must come from one of them."""
    from feedline.curate.tagconfig import SETTINGS, merge, read_tag_config

    flags = {name: getattr(args, name, None) for name in SETTINGS}
    settings = dict(TAG_DEFAULTS)
    if args.config:
        config = read_tag_config(args.config)
        for warning in config.warnings:
            print(f"feedline: warning: {warning}", file=sys.stderr)
        settings.update(merge(config, flags))
    else:
        settings.update({k: v for k, v in flags.items() if v is not None})
    where = f" (give --{{}} or `{{}}` in {args.config})" if args.config else " (give --{})"
    for name in ("documents", "taggers"):
        if not settings.get(name):
            raise CurateError(f"no {name} to tag" + where.format(name, name))
    if settings["executor"] not in ("local", "ray"):
        raise CurateError(f"unknown executor {settings['executor']!r}: use local or ray")
    return settings


def cmd_tag(args: argparse.Namespace) -> int:
    from feedline.curate.processor import run_tag
    from feedline.curate.runtime import TagJob, parse_tagger_option

    s = tag_settings(args)
    check_int("--processes", s["processes"], minimum=1, error=CurateError)
    check_int("--retries", s["retries"], minimum=0, error=CurateError)
    job = TagJob(
        taggers=tuple(s["taggers"]),
        experiment=s["experiment"],
        destination=s["destination"],
        tagger_modules=tuple(s["tagger_modules"] or ()),
        tagger_options=tuple(parse_tagger_option(o) for o in s["tagger_option"] or ()),
    )
    if s["dryrun"]:
        return _dry_run(s, job)
    report = run_tag(
        s["documents"],
        job,
        metadata=s["metadata"],
        processes=s["processes"],
        retries=s["retries"],
        skip_on_failure=s["skip_on_failure"],
        executor=s["executor"],
        ray_address=s["ray_address"],
        ignore_done=s["ignore_done"],
    )
    print(report.summary())
    return 3 if report.failed else 0


def _dry_run(settings: dict[str, Any], job: Any) -> int:
    """Dolma's ``dryrun``: show what would run (settings, files, outputs), change nothing."""
    from feedline.curate import files
    from feedline.curate.processor import check_job, default_metadata_dir
    from feedline.curate.runtime import plan_outputs

    check_job(job)
    sources = files.expand(settings["documents"])
    for name in ("taggers", "experiment", "destination", "processes", "retries", "skip_on_failure",
                 "executor", "ignore_done", "tagger_option"):
        print(f"{name}: {settings[name]}")
    print(f"metadata: {settings['metadata'] or default_metadata_dir(sources, job)}")
    for src in sources:
        print(f"{src} -> {', '.join(plan_outputs(src, job))}")
    print(f"dry run: {len(sources)} files would be tagged; nothing was written")
    return 0


def cmd_mix(args: argparse.Namespace) -> int:
    from feedline.curate.mixconfig import load_mix
    from feedline.curate.mixer import run_mix

    if args.processes is not None:
        check_int("--processes", args.processes, minimum=1, error=CurateError)
    config, processes = load_mix(args.config)
    # --processes wins over the config's `processes`, which wins over 1
    report = run_mix(config, processes=args.processes or processes or 1)
    if args.summary:
        from feedline.curate import files

        summary = {"config": args.config, **report.to_json()}
        files.write_small(args.summary, json.dumps(summary, indent=2).encode() + b"\n")
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
        options = f" (options: {', '.join(cls.options)})" if cls.options else ""
        print(f"{name:<{width}}  {doc[0] if doc else ''}{options}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "tag",
        help="run taggers over documents/ and write line-aligned attributes/ files (resumable)",
        description="Run taggers over document files; write attributes/<experiment>/ files next to "
        "documents/ (or under --destination). Finished files are recorded in --metadata and skipped "
        "on a rerun.",
    )
    # Every default is None so a flag left out does not override --config (see TAG_DEFAULTS).
    p.add_argument("--config", "-c", metavar="FILE", help="Dolma-style tag config (YAML or JSON); flags override it")
    p.add_argument("--documents", nargs="+", metavar="GLOB", help="document files (globs, ** allowed)")
    p.add_argument("--taggers", nargs="+", metavar="NAME", help="tagger names (feedline list-taggers)")
    p.add_argument("--experiment", help="experiment name (default: each tagger is its own experiment)")
    p.add_argument("--destination", help="attributes root (default: the documents/ segment becomes attributes/)")
    p.add_argument("--processes", type=int, help="worker processes (default 1: in this process)")
    p.add_argument("--metadata", metavar="DIR", help="where .done markers go (default: <attributes root>/.feedline-tag/<experiment>)")
    p.add_argument("--retries", type=int, help="extra attempts for a file after a retryable failure (default 0)")
    p.add_argument("--skip-on-failure", action="store_true", default=None, help="skip a failing file (reported at the end) instead of aborting")
    p.add_argument("--executor", choices=("local", "ray"), help="where tasks run (default local)")
    p.add_argument("--ray-address", help="Ray cluster address for --executor ray (default: RAY_ADDRESS or a local instance)")
    p.add_argument("--tagger-modules", nargs="+", metavar="MODULE", help="modules or .py paths registering more taggers")
    p.add_argument("--tagger-option", action="append", metavar="TAGGER.OPTION=VALUE",
                   help="an option for one tagger, e.g. ft_lang_id_en_doc_v2.model=lid.176.bin (repeatable)")
    p.add_argument("--ignore-done", action="store_true", default=None, help="redo files even when their .done marker exists")
    p.add_argument("--dryrun", action="store_true", default=None, help="print the settings and the files that would be tagged, then stop")
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
    p.add_argument("--summary", metavar="FILE",
                   help="also write the run's summary (per stream and per filter counts) to FILE as JSON; "
                   "each stream's is always written to <output.path>/.feedline-mix/<name>.json")
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
