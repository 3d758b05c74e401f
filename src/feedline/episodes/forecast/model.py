"""``feedline plan``'s predictions: per rank and worker, memory, bytes, first batch, samples/s
bounds and batch diversity, from the simulated schedule (:mod:`.simulate`) and the measured
costs (:mod:`.costs`, :mod:`.calibrate`). The arithmetic is spelled out in docs/plan.md;
:func:`predict` returns a JSON-ready dict (``format: feedline-plan``) that :func:`render` prints
and the report draws.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

import numpy as np

from feedline.episodes.errors import ForecastError
from feedline.episodes.forecast.calibrate import PipelineCost, measure_pipeline
from feedline.episodes.forecast.costs import (
    PREFETCH_FACTOR,
    DecodeCost,
    Link,
    measure_decode,
    measure_worker_start,
    unit_facts,
)
from feedline.episodes.forecast.simulate import batch_diversity, decoded_peak, frontier, worker_runs
from feedline.run.progress import human_bytes
from feedline.streaming.schedule.diversity import expected_share, ideal_diversity
from feedline.streaming.schedule.slot import WorkerSlot

__all__ = ["PLAN_VERSION", "predict", "render"]

PLAN_VERSION = 1
#: An open decoder's memory in RGB frames of its camera (about 3 MiB at 480x640: docs/episodes.md).
DECODER_FRAMES = 3.4


def _windows(dataset: Any) -> dict[str, np.ndarray]:
    deltas = dataset.delta_indices or {}
    return {key: np.asarray(deltas.get(key, [0]), dtype=np.int64) for key in dataset.video_keys}


def _frame_bytes(dataset: Any) -> dict[str, int]:
    out = {}
    for key in dataset.video_keys:
        shape = dataset.features[key]["shape"]
        dims = [int(d) for d in shape if int(d) > 0]
        out[key] = int(np.prod(dims[:3])) if dims else 0
    return out


def _cores(cores: int | None) -> int:
    if cores is not None:
        return max(1, int(cores))
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def predict(
    dataset: Any, *, world_size: int = 1, num_workers: int = 2, batch_size: int = 8,
    drop_last: bool = False, link: Link | None = None, cores: int | None = None,
    decode: DecodeCost | None = None, max_ranks: int = 8,
    pipeline: PipelineCost | None | bool = True,
) -> dict[str, Any]:
    """Everything ``feedline plan`` predicts for ``dataset`` under a topology (module docstring).

    ``dataset``: a :class:`~feedline.episodes.stream.dataset.StreamingEpisodeDataset` (its
    settings, sizes, plan and pools are used; nothing is fetched but the decode sample and the
    calibration runs' few episodes);
    ``link``: the store's link per rank (``None``: fetch is not modelled, as for a local
    folder); ``cores``: CPUs per rank (default: this machine's); ``decode``: a measured
    :class:`DecodeCost` (default: measured now); ``max_ranks``: ranks simulated (the first ones);
    ``pipeline``: the calibration runs (:mod:`.calibrate`; ``True``: run them now, ``False``:
    none, and samples/s, first batch and PSS come from the decode sample alone).
    """
    if batch_size < 1 or num_workers < 0 or world_size < 1:
        raise ForecastError("--batch-size and --world-size must be >= 1, --workers >= 0")
    settings = dataset.settings
    slot = WorkerSlot(num_workers=num_workers)
    cores = _cores(cores)
    decode = decode or measure_decode(dataset, batch_size=batch_size, shared=num_workers > 0)
    start_s, base_pss = measure_worker_start(num_workers)
    if pipeline is True:
        pipeline = measure_pipeline(dataset, num_workers=num_workers, batch_size=batch_size)
    calibrated = pipeline if isinstance(pipeline, PipelineCost) else None
    world = world_size // settings.replication
    ranks = list(range(min(world, max_ranks)))
    runs = worker_runs(dataset, world_size=world_size, num_workers=num_workers,
                       batch_size=batch_size, ranks=ranks)
    lengths = _FullLengths(dataset.feed)  # a unit's frames: its whole episode (windows cut there)
    facts = unit_facts(dataset, np.concatenate([r.admission for r in runs] or [np.zeros(0, np.int64)]))
    windows, frame_bytes = _windows(dataset), _frame_bytes(dataset)
    decoded_limit = slot.share(settings.decoded_cache_bytes, minimum=0)
    queue_bytes = (settings.decoded_queue_size + batch_size
                   + (PREFETCH_FACTOR * batch_size / 2 if num_workers else 0)) * decode.sample_bytes
    out_ranks = []
    curves: dict[str, Any] = {}
    for rank in ranks:
        mine = [r for r in runs if r.rank == rank]
        workers = []
        for run in mine:
            times, reserved = frontier(run)
            memory = decoded_peak(run, lengths, windows, facts.keyframes, frame_bytes,
                                  decoded_limit)
            # the reader closes the least recently used decoders past its share
            memory["peak_decoders"] = min(memory["peak_decoders"],
                                          slot.share(dataset.decoders_per_rank))
            payload = int(reserved.max()) if reserved.size else 0
            if calibrated is not None:  # a running worker's floor and its decoders, measured
                pss = payload + memory["peak_bytes"] + calibrated.extra_bytes_at(memory["peak_decoders"])
            else:
                decoder_bytes = memory["peak_decoders"] * DECODER_FRAMES * max(frame_bytes.values(), default=0)
                pss = base_pss + payload + memory["peak_bytes"] + decoder_bytes + queue_bytes
            workers.append({
                "worker": run.worker, "episodes": int(run.admission.size), "samples": run.anchors,
                "bytes_fetched": int(facts.fetched[facts.rows(run.admission)].sum()),
                "peak_payload_bytes": payload, "payload_budget_bytes": run.budget,
                "peak_decoded_bytes": int(memory["peak_bytes"]),
                "decoded_limit_bytes": decoded_limit,
                "decoded_per_delivered": round(memory["decoded_per_delivered"], 3),
                "peak_decoders": memory["peak_decoders"],
                "peak_pss_bytes": int(pss),
            })
            if rank == 0:
                curves.setdefault("reserved", []).append(
                    {"worker": run.worker, "anchor": times.tolist(), "bytes": reserved.tolist()})
                curves.setdefault("decoded", []).append(
                    {"worker": run.worker, "anchor": [a for a, _ in memory["trace"]],
                     "bytes": [b for _, b in memory["trace"]]})
        out_ranks.append(_rank(dataset, rank, mine, workers, facts, decode, link, cores,
                               settings, batch_size, drop_last, num_workers, start_s, curves,
                               calibrated))
    return {
        "format": "feedline-plan", "version": PLAN_VERSION, "root": _root(dataset),
        "topology": {"world_size": world_size, "num_workers": num_workers,
                     "batch_size": batch_size, "drop_last": drop_last, "cores": cores,
                     "ranks_simulated": len(ranks)},
        "link": None if link is None else asdict(link),
        "settings": {k: v for k, v in asdict(settings).items()},
        "measured": {"decode": asdict(decode), "worker_start_s": start_s,
                     "worker_base_pss_bytes": base_pss,
                     "pipeline": None if calibrated is None else calibrated.as_dict()},
        "ranks": out_ranks, "curves": curves,
    }


def _root(dataset: Any) -> str:
    mixture = getattr(dataset, "mixture", None)
    if mixture is not None:
        return "mixture of " + ", ".join(s.name for s in mixture.sources)
    return str(dataset.root_url)


def _rank(
    dataset: Any, rank: int, runs: list[Any], workers: list[dict[str, Any]], facts: Any,
    decode: DecodeCost, link: Link | None, cores: int, settings: Any, batch_size: int,
    drop_last: bool, num_workers: int, start_s: float, curves: dict[str, Any],
    calibrated: PipelineCost | None = None,
) -> dict[str, Any]:
    units = np.concatenate([r.admission for r in runs] or [np.zeros(0, np.int64)])
    rows = facts.rows(units)
    samples = sum(r.anchors for r in runs)
    fetched = int(facts.fetched[rows].sum())
    needed = int(facts.needed[rows].sum())
    parts = max(1, len(runs))
    # decode: each episode's first sample costs a keyframe start; then one frame per camera
    premium = decode.first_sample_s - decode.per_sample_s
    per_sample = decode.per_sample_s + premium * len(units) / max(1, samples)
    cpu = per_sample + decode.collate_s
    threads = parts * settings.decode_threads
    bounds = {"cpu": cores / cpu, "decode threads": threads / per_sample,
              "worker thread": parts / decode.collate_s if decode.collate_s > 0 else float("inf")}
    # the episodes a worker holds at once (all fetched as soon as the budget lets it)
    resident = float(np.mean([min(r.admission.size, r.max_episodes) for r in runs])) if runs else 1.0
    if calibrated is not None:  # the real pipeline's CPU per sample at this working set
        big = calibrated.runs[-1]
        cpu = calibrated.cpu_at(resident) + premium * (len(units) / max(1, samples)
                                                      - big.episodes_per_sample)
        grow = cpu / big.cpu_s
        bounds = {"cpu": big.busy * cores / cpu,
                  "decode threads": threads / (big.threads_s * grow) if big.threads_s else float("inf"),
                  "worker thread": parts / (big.serial_s * grow) if big.serial_s else float("inf"),
                  "training process": 1 / (big.loop_s * grow) if big.loop_s else float("inf")}
    decode_bound = min(bounds.values())
    limit = min(bounds, key=lambda k: bounds[k])
    fetch_bound = None
    first_fetch = 0.0
    if link is not None and len(units):
        mean_bytes = fetched / len(units)
        mean_requests = int(facts.requests[rows].sum()) / len(units)
        concurrency = parts * settings.max_num_shards
        per_episode = mean_requests * link.latency_s + mean_bytes * concurrency / link.bandwidth
        episodes_per_s = min(link.bandwidth / mean_bytes, concurrency / per_episode)
        fetch_bound = episodes_per_s * samples / len(units)
        first = runs[0]
        need = np.isin(first.admission, first.episodes[:batch_size])
        upto = 1 + int(np.flatnonzero(need)[-1])
        upto = min(upto, first.max_episodes)
        ahead = sum(int(r.nbytes[:upto].sum()) for r in runs)  # every worker fetches at once
        rounds = -(-upto // settings.max_num_shards)
        first_requests = int(facts.requests[facts.rows(first.admission[:1])][0])
        first_fetch = rounds * (first_requests * link.latency_s) + ahead / link.bandwidth
    first = runs[0] if runs else None
    first_batch = start_s + first_fetch
    distinct = len(set(first.episodes[:batch_size].tolist())) if first is not None else 0
    if calibrated is not None and first is not None:  # the larger run's, and the rest's CPU
        first_batch = calibrated.first_batch_at(
            resident, min(float(distinct), resident), decode.fetch_s, decode.first_sample_s,
            cores / parts) + first_fetch
    elif first is not None:
        work = distinct * decode.first_sample_s + (min(batch_size, first.anchors) - distinct) * decode.per_sample_s
        first_batch += work / max(1.0, min(settings.decode_threads, cores / parts)) + decode.collate_s * batch_size
    keys = dataset.feed.episode_keys
    unit_keys = np.asarray(keys(units), dtype=np.int64)
    episodes = int(np.unique(unit_keys).size)
    actual, distinct_per_batch, share = batch_diversity(runs, batch_size, drop_last, keys, episodes)
    # an ideal shuffle of the same episodes: copies of one episode are that one episode, in
    # the order the units first name them
    ideal_lengths = _episode_lengths(units, unit_keys, dataset.feed.epoch_lengths(0))
    ideal = ideal_diversity(ideal_lengths, batch_size, drop_last=drop_last)
    bound = decode_bound if fetch_bound is None else min(decode_bound, fetch_bound)
    if rank == 0:
        marks = np.linspace(0, samples, 41)[1:]
        curves["diversity"] = {
            "batch_distinct": distinct_per_batch.tolist(), "touched_share": share.tolist(),
            "ideal_batch_mean": ideal.batch_episodes_mean,
            "ideal_share": [expected_share(ideal_lengths, int(m)) for m in marks],
            "ideal_share_at": (marks / max(1, samples)).tolist(),
        }
        curves["samples_per_s"] = bound
        curves["workers_active"] = parts
    return {
        "rank": rank, "episodes": episodes, "samples": samples,
        "bytes_fetched": fetched, "bytes_needed": needed,
        "fetched_per_needed": round(fetched / needed, 3) if needed else None,
        "first_batch_s": round(first_batch, 3),
        "samples_per_s": {"decode_bound": round(decode_bound, 1),
                          "fetch_bound": None if fetch_bound is None else round(fetch_bound, 1),
                          "predicted": round(bound, 1),
                          "limited_by": "decode" if fetch_bound is None or decode_bound <= fetch_bound else "fetch",
                          "decode_limited_by": limit,
                          "cpu_per_sample_s": cpu, "resident_per_worker": resident},
        "epoch_s": round(samples / bound, 1) if bound else None,
        "diversity": {"actual": actual.as_dict(), "ideal": ideal.as_dict()},
        "workers": workers,
    }


def _episode_lengths(units: np.ndarray, keys: np.ndarray, due: Mapping[int, int]) -> list[int]:
    """Each episode's due frames summed over its units, episodes in order of first mention."""
    if not units.size:
        return []
    known = np.fromiter(due.keys(), np.int64, len(due))
    sizes = np.fromiter(due.values(), np.int64, len(due))
    order = np.argsort(known)
    frames = sizes[order][np.searchsorted(known[order], units)]
    distinct, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    sums = np.zeros(distinct.size, np.int64)
    np.add.at(sums, inverse.reshape(-1), frames)
    return sums[np.argsort(first, kind="stable")].tolist()


def render(plan: dict[str, Any]) -> str:
    """The prediction for a terminal."""
    top = plan["topology"]
    decode = plan["measured"]["decode"]
    link = plan["link"]
    lines = [
        f"feedline plan {plan['root']}: {top['world_size']} rank(s) x {top['num_workers']} "
        f"worker(s), batch {top['batch_size']}, {top['cores']} core(s) per rank, link "
        + ("not modelled (give --link BANDWIDTH,LATENCY)" if link is None else
           f"{link['bandwidth'] / 1e6:.3g} MB/s, {1e3 * link['latency_s']:.3g} ms"),
        f"measured here: {1e3 * decode['per_sample_s']:.2f} ms per sample decoded and assembled "
        f"({1e3 * decode['first_sample_s']:.1f} ms for an episode's first), "
        f"{1e3 * decode['collate_s']:.3f} ms collate per sample, on {decode['samples']} samples "
        f"of {len(decode['episodes'])} episode(s), reading {human_bytes(decode['bytes_read'])} of "
        f"payload; a worker starts in {plan['measured']['worker_start_s']:.2f} s at "
        f"{human_bytes(plan['measured']['worker_base_pss_bytes'])} PSS",
    ]
    calibration = plan["measured"].get("pipeline")
    if calibration:
        runs = calibration["runs"]
        lines.append(
            "calibrated on real runs of " + " and ".join(str(r["per_worker"]) for r in runs)
            + " episodes per worker: CPU per sample "
            + ", ".join(f"{1e3 * r['cpu_s']:.2f} ms" for r in runs)
            + "; first batch " + ", ".join(f"{r['first_batch_s']:.2f} s" for r in runs)
            + f"; a worker holds {human_bytes(calibration['worker_floor_bytes'])} beyond its "
            f"frames and payload, plus {human_bytes(calibration['per_decoder_bytes'])} per open "
            f"decoder ({calibration['seconds']:.1f} s, reading "
            f"{human_bytes(calibration['bytes_read'])} of payload)")
    for r in plan["ranks"]:
        rate = r["samples_per_s"]
        fetch = "-" if rate["fetch_bound"] is None else f"{rate['fetch_bound']:.0f}"
        ratio = "-" if r["fetched_per_needed"] is None else f"{r['fetched_per_needed']:.2f}"
        lines.append(
            f"rank {r['rank']}: {r['episodes']} episodes, {r['samples']} samples; "
            f"{human_bytes(r['bytes_fetched'])} fetched per epoch (x{ratio} the bytes its frames "
            f"need); first batch {r['first_batch_s']:.2f} s; samples/s: decode bound "
            f"{rate['decode_bound']:.0f} ({rate.get('decode_limited_by', 'cpu')}), fetch bound "
            f"{fetch} -> {rate['predicted']:.0f} ({rate['limited_by']}), epoch {r['epoch_s']} s")
        a, i = r["diversity"]["actual"], r["diversity"]["ideal"]
        lines.append(
            f"  diversity (this strategy / ideal shuffle): episodes per batch "
            f"{a['batch_episodes_mean']:.2f} / {i['batch_episodes_mean']:.2f} (p5 "
            f"{a['batch_episodes_p5']:.0f} / {i['batch_episodes_p5']:.0f}), per 10 batches "
            f"{a['window_episodes_mean']:.1f} / {i['window_episodes_mean']:.1f}, share touched by "
            f"10 % of the epoch {a['early_episode_share']:.2f} / {i['early_episode_share']:.2f}")
        for w in r["workers"]:
            lines.append(
                f"  worker {w['worker']}: {w['episodes']} episodes, {w['samples']} samples; "
                f"payload peak {human_bytes(w['peak_payload_bytes'])} of "
                f"{human_bytes(w['payload_budget_bytes'])}; decoded frames peak "
                f"{human_bytes(w['peak_decoded_bytes'])} of {human_bytes(w['decoded_limit_bytes'])}"
                f" (x{w['decoded_per_delivered']:.2f} decoded per delivered), "
                f"{w['peak_decoders']} decoders; peak PSS {human_bytes(w['peak_pss_bytes'])}")
    if plan["topology"]["ranks_simulated"] < plan["topology"]["world_size"]:
        lines.append(f"(the first {plan['topology']['ranks_simulated']} ranks simulated)")
    return "\n".join(lines) + "\n"


class _FullLengths(Mapping[int, int]):
    """A unit's whole episode length (a mixture's window may hold only part of it)."""

    def __init__(self, feed: Any) -> None:
        self.feed = feed

    def __getitem__(self, unit: int) -> int:
        return self.feed.unit_frames(int(unit))

    def __iter__(self) -> Any:
        return iter(self.feed.epoch_lengths(0))

    def __len__(self) -> int:
        return len(self.feed.epoch_lengths(0))
