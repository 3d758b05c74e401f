"""``feedline train``: lerobot-train's flags and loop, with feedline's streaming reader.

    feedline train --dataset.repo_id=OWNER/NAME --dataset.root=URL --dataset.streaming=true \\
        --policy.type=act --output_dir=OUT [--dataset.streaming_* ...] [every lerobot-train flag]

Every lerobot-train flag passes through unchanged (an unknown one is an error);
``--dataset.streaming=false`` runs lerobot-train exactly as LeRobot does. Needs LeRobot
(``pip install 'feedline[lerobot]'``, Python >= 3.12). The root is checked first, so an
unreachable or missing dataset is one line within seconds.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from pathlib import Path
from typing import Any

from feedline.episodes.errors import TrainError

INSTALL_HINT = "feedline train needs LeRobot: pip install 'feedline[lerobot]' (Python >= 3.12)"


def register(subparsers: Any) -> None:
    """Add ``feedline train``; its arguments are lerobot-train's, parsed by LeRobot."""
    parser = subparsers.add_parser(
        "train",
        help="train a LeRobot policy with lerobot-train's loop, streaming through feedline",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        prefix_chars="+",  # every --flag is lerobot-train's or feedline's, not argparse's
        add_help=False,
    )
    parser.add_argument("args", nargs="*", help="lerobot-train flags and --dataset.streaming_* flags")
    parser.set_defaults(func=cmd_train)


def _resumed_dataset(config_path: str | None) -> dict[str, Any]:
    """The ``dataset`` section of the train config a resume names (``{}`` when unreadable:
    LeRobot's parser then reports it)."""
    if not config_path:
        return {}
    try:
        return dict(json.loads(Path(config_path).read_text(encoding="utf-8")).get("dataset") or {})
    except (OSError, ValueError, AttributeError):
        return {}


def _resumed_mixture(config_path: str | None) -> str | None:
    """The mixture file a resumed run trains on (its checkpoint's data order records it)."""
    if not config_path:
        return None
    from feedline.episodes.train.order import load_data_order

    try:
        order = load_data_order(Path(config_path).parent.parent)
    except Exception:  # the run itself reports an unreadable checkpoint, in one line
        return None
    return None if order is None else order.settings.get("mixture")


def _check_source(args: Any) -> None:
    from feedline.episodes.train.flags import parse_bool, storage_kwargs
    from feedline.episodes.train.source import check_source, source_url

    peeked = args.peeked
    resumed = _resumed_dataset(peeked.get("--config_path"))

    def value(flag: str, key: str) -> Any:
        return peeked[flag] if flag in peeked else resumed.get(key)

    streaming = value("--dataset.streaming", "streaming")
    try:
        if not (parse_bool(streaming) if isinstance(streaming, str) else bool(streaming)):
            return
    except ValueError:
        return  # LeRobot's parser names a bad --dataset.streaming value
    mixture = args.settings.get("mixture") or _resumed_mixture(peeked.get("--config_path"))
    if mixture:  # the sources, each checked as a single root is
        from feedline.episodes.errors import MixtureError
        from feedline.episodes.mixture.sources import load_mixture

        try:
            sources = load_mixture(mixture).sources
        except MixtureError as exc:
            raise TrainError(f"--dataset.mixture: {exc}") from None
        for i, source in enumerate(sources):
            found = source_url(source.repo_id, source.root, "dataset", source.revision)
            if found is None:
                continue
            try:
                check_source(found, {**storage_kwargs(args.settings), **source.storage_options})
            except TrainError as exc:
                reason = str(exc).replace("; check --dataset.root or --dataset.repo_id", "")
                raise TrainError(
                    f"--dataset.mixture={mixture}: source {i} cannot be opened: {reason}"
                ) from None
        return
    url = source_url(
        value("--dataset.repo_id", "repo_id"), value("--dataset.root", "root"),
        value("--dataset.repo_type", "repo_type") or "dataset", value("--dataset.revision", "revision"),
    )
    if url is not None:
        check_source(url, storage_kwargs(args.settings))


def cmd_train(ns: argparse.Namespace) -> int:
    started = time.perf_counter()
    from feedline.episodes.errors import EpisodesError, StreamingError
    from feedline.episodes.train.flags import settings_help, split_args, train_message

    argv = list(ns.args)
    if "--help" in argv or "-h" in argv:
        print(__doc__)
        print("feedline's flags (lerobot-train --help lists the rest):")
        print(settings_help())
        return 0
    if importlib.util.find_spec("lerobot") is None:
        raise TrainError(INSTALL_HINT)
    args = split_args(argv)
    try:
        _check_source(args)
        from feedline.episodes.train.bridge import run

        return run(args, started)
    except TrainError:
        raise
    except (EpisodesError, StreamingError) as exc:  # the reader names keywords; flags here
        raise TrainError(train_message(exc)) from exc
