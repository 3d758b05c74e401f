"""``feedline plan ROOT``: will these settings keep the GPU fed, within memory, with diverse batches?

Predicts per rank and worker, from the sidecar index, the metadata and the settings, and from
this machine's costs (a few GOPs decoded, and two short real runs on 2 and 8 episodes per
worker; it prints the bytes they read, and ``--no-calibration`` skips the runs):
payload, decoded-frame and PSS peaks; bytes per epoch and fetched per needed; time to first
batch; samples/s bounds from decode and, with ``--link``, from fetch; batch diversity for the
chosen strategy and for an ideal shuffle. The reader's settings take the flags of
``feedline train`` (``--dataset.streaming_episode_pool_size=64``...). ``--measure S`` runs the
real reader for S seconds and prints predicted and measured side by side; ``--report DIR`` and
``--trace FILE`` also write ``DIR/report.html`` and a Perfetto trace of that run (10 s unless
``--measure`` says otherwise).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from feedline.episodes.errors import ForecastError, StreamingError
from feedline.episodes.settings import SETTINGS_TABLE, cli_message

_SKIPPED = ("allow_order_change", "sample_log", "report")  # feedline train's own
DEFAULT_REPORT_SECONDS = 10.0


def _settings_rows() -> list[Any]:
    return [row for row in SETTINGS_TABLE if row.keyword not in _SKIPPED]


def register(subparsers: Any) -> None:
    """Add ``feedline plan`` to the ``feedline`` command."""
    from feedline.episodes.train.flags import setting_parser

    parser = subparsers.add_parser(
        "plan", help="predict a streaming run's memory, speed and batch diversity (and measure it)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("root", nargs="?", help="dataset root (folder, http(s)://, s3://, hf://) "
                        "or a Hub repo id OWNER/NAME; omit with --dataset.mixture")
    parser.add_argument("--revision", help="Hub revision of a repo id")
    parser.add_argument("--episodes", type=int, nargs="+", metavar="N", help="only these episodes")
    parser.add_argument("--delta-timestamps", type=json.loads, default=None, metavar="JSON",
                        help='the policy\'s windows, e.g. \'{"observation.images.top": [-0.1, 0]}\'')
    parser.add_argument("--tolerance-s", type=float, default=1e-4, help="as lerobot-train's")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers per rank")
    parser.add_argument("--batch-size", type=int, default=8, help="samples per batch")
    parser.add_argument("--world-size", type=int, default=1, help="ranks")
    parser.add_argument("--drop-last", action="store_true", help="the DataLoader drops short batches")
    parser.add_argument("--link", help="the store's link per rank: BANDWIDTH,LATENCY (100MB/s,20ms)")
    parser.add_argument("--cores", type=int, help="CPUs per rank (default: this machine's)")
    parser.add_argument("--measure", type=float, metavar="SECONDS",
                        help="also run the reader this long and print measured beside predicted")
    parser.add_argument("--report", metavar="DIR", help="write DIR/report.html of a measured run")
    parser.add_argument("--trace", metavar="FILE", help="write a Perfetto (Chrome JSON) trace of it")
    parser.add_argument("--no-calibration", action="store_true",
                        help="skip the two short real runs on a few episodes (docs/plan.md) and "
                        "read only a few GOPs; samples/s, first batch and PSS then come from a "
                        "one-thread decode sample (on the bench's sets: samples/s 2-3x too high, "
                        "PSS 1.3-1.5x too low)")
    parser.add_argument("--json", action="store_true", help="print the prediction as JSON")
    for row in _settings_rows():
        parser.add_argument(row.flag, dest=f"setting_{row.keyword}", type=setting_parser(row),
                            default=None, metavar=row.kind.__name__.upper(),
                            help=f"{row.help} ({row.unit})")
    parser.set_defaults(func=cmd_plan)


def _dataset(args: argparse.Namespace) -> Any:
    from feedline.episodes.doctor.cli import root_url
    from feedline.episodes.stream.dataset import StreamingEpisodeDataset

    given = {k[len("setting_"):]: v for k, v in vars(args).items()
             if k.startswith("setting_") and v is not None}
    storage = dict(given.pop("storage_options", None) or {})
    for row in _settings_rows():
        if row.target == "storage" and row.keyword in given:
            storage[row.keyword] = given.pop(row.keyword)
    mixture = given.pop("mixture", None)
    common = dict(delta_timestamps=args.delta_timestamps, tolerance_s=args.tolerance_s,
                  return_uint8=True, storage_options=storage or None, rank=0,
                  world_size=args.world_size, **given)
    if mixture:
        if args.root:
            raise ForecastError("give ROOT or --dataset.mixture, not both")
        from feedline.episodes.mixture.sources import load_mixture

        return StreamingEpisodeDataset(sources=load_mixture(mixture), **common)
    if not args.root:
        raise ForecastError("feedline plan needs ROOT (or --dataset.mixture=FILE.yaml)")
    return StreamingEpisodeDataset(root=root_url(args.root, args.revision),
                                   episodes=args.episodes, **common)


def cmd_plan(args: argparse.Namespace) -> int:
    from feedline.episodes.forecast.costs import parse_link
    from feedline.episodes.forecast.model import predict, render

    link = parse_link(args.link) if args.link else None
    if args.measure is not None and args.measure <= 0:
        raise ForecastError(f"--measure {args.measure:g}: give a number of seconds above 0")
    try:
        dataset = _dataset(args)
        plan = predict(dataset, world_size=args.world_size, num_workers=args.workers,
                       batch_size=args.batch_size, drop_last=args.drop_last, link=link,
                       cores=args.cores, pipeline=not args.no_calibration)
    except StreamingError as exc:
        raise type(exc)(cli_message(exc)) from None
    seconds = args.measure
    if seconds is None and (args.report or args.trace):
        seconds = DEFAULT_REPORT_SECONDS
    measured = rows = None
    recorder = None
    if seconds is not None:
        import tempfile

        from feedline.episodes.forecast.compare import compare
        from feedline.episodes.forecast.measure import measure

        folder = args.report or tempfile.mkdtemp(prefix="feedline-plan-")
        recorder = measure(dataset, folder, seconds=seconds, num_workers=args.workers,
                           batch_size=args.batch_size, drop_last=args.drop_last)
        measured = recorder.measured()
        rows = compare(plan, measured)
    if args.json:
        json.dump({**plan, "measured_run": measured, "comparison": rows}, sys.stdout, indent=1,
                  default=str)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render(plan))
        if rows is not None:
            sys.stdout.write(render_comparison(rows, measured))
    if recorder is not None and (args.report or args.trace):
        doctor = _doctor(dataset)
        if args.report:
            path = recorder.write_report(prediction=plan, doctor=doctor)
            print(f"wrote {path}", file=sys.stderr)
        if args.trace:
            from feedline.episodes.forecast.trace import write_trace

            print(f"wrote {write_trace(recorder, args.trace)}", file=sys.stderr)
    return 0


def _doctor(dataset: Any) -> list[Any]:
    """The doctor's report of every root the dataset reads (metadata and indexes only)."""
    from feedline.episodes.doctor.runner import run_doctor

    reports = []
    for source in dataset.feed.sources:
        reader = source.reader
        reports.append(run_doctor(reader.store_url, storage_options=reader.storage_options,
                                  progress=False))
    return reports


def render_comparison(rows: list[dict[str, Any]], measured: dict[str, Any]) -> str:
    from feedline.episodes.forecast.compare import shown

    lines = [f"measured: {measured['samples']} samples in {measured['seconds']:.1f} s "
             f"(batch wait p50 {measured['wait_p50_ms']:.1f} ms, p95 {measured['wait_p95_ms']:.1f} ms)",
             f"{'':32} {'predicted':>12} {'measured':>12} {'measured/predicted':>19}"]
    for row in rows:
        ratio = row["measured_per_predicted"]
        lines.append(f"{row['what']:32} {shown(row['predicted'], row['unit']):>12} "
                     f"{shown(row['measured'], row['unit']):>12} "
                     f"{'-' if ratio is None else f'x{ratio:.2f}':>19}")
    return "\n".join(lines) + "\n"
