"""Commands of the episodes part. ``feedline build-sidecar``: index every MP4 of a dataset revision ahead of training.

Training builds the sidecar it needs on first open (and never writes to the dataset); this
command builds the full-dataset archive explicitly, optionally publishing it where every reader
of that revision finds it: ``meta/mp4-sidecars/`` of an object-store / bucket root, or for a
Hub dataset repo the dedicated branch ``lerobot-sidecars`` (the dataset's own branch or tag
stays untouched; the file is keyed by the dataset commit, so a tag and its commit share one
index).
Publishing a subset is refused: readers trust a published sidecar for every video.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path
from typing import Any

from feedline.episodes.errors import SidecarError
from feedline.episodes.video.sidecar import (
    DEFAULT_WORKERS,
    HUB_SIDECAR_BRANCH,
    PUBLISHED_PATH,
    Sidecar,
    current_objects,
    hub_sidecar_path,
    write_sidecar,
)
from feedline.errors import FeedlineError
from feedline.io import HubStore, Store, StoreError, open_store
from feedline.io.hubpush import ensure_branch, upload_bytes
from feedline.run.progress import Progress, human_bytes

log = logging.getLogger(__name__)


def register(subparsers: Any) -> None:
    """Add the episodes commands (``build-sidecar``) to the ``feedline`` command."""
    parser = subparsers.add_parser(
        "build-sidecar",
        help="index every MP4 of a LeRobot v3 dataset (optionally publish the index)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--repo-id", help="Hub dataset repo OWNER/NAME")
    source.add_argument("--data-root", help="dataset root: folder, s3://, http(s)://, hf://...")
    parser.add_argument("--revision", help="revision (Hub branch/tag/commit); keys the index")
    parser.add_argument("--output", required=True, help="local path of the .npz archive to write")
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS, help="parallel MP4 parses")
    parser.add_argument("--push", action="store_true", help="publish the archive (full dataset only)")
    parser.add_argument(
        "--video",
        action="append",
        default=None,
        metavar="PATH",
        help="index only this video (repeatable; a subset, never publishable)",
    )
    parser.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="option for the store (e.g. endpoint_url=..., anon=true)",
    )
    parser.set_defaults(func=cmd_build_sidecar)


def _storage_options(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SidecarError(f"--storage-option {item!r}: expected KEY=VALUE")
        lowered = value.lower()
        out[key] = True if lowered == "true" else False if lowered == "false" else value
    return out


def _root_url(args: argparse.Namespace) -> str:
    if args.repo_id:
        if args.repo_id.count("/") != 1:
            raise SidecarError(f"--repo-id {args.repo_id!r}: expected OWNER/NAME")
        return f"hf://datasets/{args.repo_id}" + (f"@{args.revision}" if args.revision else "")
    return str(args.data_root)


def dataset_videos(store: Store) -> list[str]:
    """Every video the dataset's metadata references (all episodes, all cameras)."""
    from feedline.episodes.format import load_meta

    return sorted(load_meta(store).episodes.video_files())


def cmd_build_sidecar(args: argparse.Namespace) -> int:
    root_url = _root_url(args)
    store = open_store(root_url, **_storage_options(args.storage_option))
    subset = bool(args.video)
    if args.push and subset:
        raise SidecarError(
            "--push refuses a sidecar built for a subset (--video): readers trust a published "
            "sidecar for every video; rebuild without --video to publish"
        )
    try:
        videos = sorted(set(args.video)) if subset else dataset_videos(store)
    except Exception as exc:  # the Hub client raises its own types (offline, DNS, HTTP)
        if not args.repo_id or (isinstance(exc, FeedlineError) and not isinstance(exc, StoreError)):
            raise
        detail = f"{type(exc).__name__}: {exc}".splitlines()[0]
        raise SidecarError(
            f"cannot read the Hub dataset {args.repo_id}: {detail} (is the Hub reachable and "
            "HF_HUB_OFFLINE unset? private repos need HF_TOKEN)"
        ) from exc
    if not videos:
        raise SidecarError(f"{store.url()}: the dataset references no video")
    started = time.monotonic()
    current = current_objects(store, videos)
    with Progress("indexing videos", total=len(videos), unit="video") as progress:
        sidecar = write_sidecar(
            Path(args.output),
            store,
            current,
            revision=args.revision,
            complete=not subset,
            workers=args.workers,
            progress=lambda path: progress.update(1),
        )
    elapsed = time.monotonic() - started
    video_bytes = sum(info.size for info in current.values())
    samples = sum(e.samples for e in sidecar.entries.values())
    print(
        f"wrote {args.output}: {len(videos)} videos, {samples} samples, "
        f"{human_bytes(Path(args.output).stat().st_size)}, indexed {human_bytes(video_bytes)} of video "
        f"in {elapsed:.2f} s; content id {sidecar.content_id[:16]}"
    )
    if args.push:
        where = publish(store, sidecar)
        print(f"published to {where}")
    sidecar.close()
    return 0


def publish(store: Store, sidecar: Sidecar) -> str:
    """Upload a complete sidecar: Hub branch for dataset repos, ``meta/mp4-sidecars/`` otherwise."""
    if not sidecar.complete:
        raise SidecarError(f"{sidecar.path}: not a full-dataset sidecar; refusing to publish it")
    if isinstance(store, HubStore):
        return _publish_hub(store, sidecar)
    data = sidecar.path.read_bytes()
    try:
        store.write_bytes(PUBLISHED_PATH, data)
    except StoreError as exc:
        raise SidecarError(f"cannot publish the sidecar to {store.url(PUBLISHED_PATH)}: {exc}") from exc
    return store.url(PUBLISHED_PATH)


def _publish_hub(store: HubStore, sidecar: Sidecar) -> str:
    """Commit the sidecar to the ``lerobot-sidecars`` branch (created from the dataset's commit
    when missing), at the path of the commit it was built for; the dataset's branch is untouched."""
    where = f"hf://datasets/{store.repo_id}@{HUB_SIDECAR_BRANCH}"
    try:
        commit = store.commit
        ensure_branch(store, HUB_SIDECAR_BRANCH)
        upload_bytes(store, hub_sidecar_path(commit), sidecar.path.read_bytes(),
                     f"MP4 sidecar (schema 3) for {commit}", revision=HUB_SIDECAR_BRANCH)
    except StoreError as exc:
        raise SidecarError(f"cannot publish the sidecar to the Hub: {exc}") from exc
    return f"{where}/{hub_sidecar_path(commit)}"
