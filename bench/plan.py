"""Benchmark the episode scheduler: plan + one epoch of pool draws at 1M episodes / 100M frames.

Measures, each in a fresh subprocess (so peak RSS belongs to that phase alone):

* ``permutation`` - the baseline: one global uniform permutation of every frame (numpy).
* ``plan`` - :func:`plan_shards_arrays` for 1 rank x 0 workers and for 8 ranks x 4 workers.
* ``draws-<strategy>`` - the plan plus one full epoch of anchors from one pool of 32 resident
  episodes (all 100M draws in one process, taken in numpy chunks as the pipeline would).
* ``restripe`` - elastic resume: a checkpoint of 8 ranks x 4 workers x batch 32 taken halfway
  through the epoch (``spread``, pool 256) resumed at 6 ranks x 2 workers: replaying the old
  pools up to what they delivered and removing it (``remainder_after``), then planning the
  anchors still due over the new ranks (``stage_plan``).
* ``mixture`` - the same episodes as three sources (``weight=3``, ``repeat=0.5``, ``choose`` a
  third): the units of one epoch (``MixtureUnits.epoch``), their plan over 8 x 4, and the
  stratified plan that deals each source on its own.
* ``quality-<order>`` - shuffle quality on the first ``--quality-anchors`` anchors, MosaicML
  Streaming's way: entropy (bits) of |difference| between neighbouring sample ids and between
  neighbouring episode ids (their sum is Streaming's score); plus how often neighbours share an
  episode and the mean distinct episodes per batch of 256.

Run: ``.venv/bin/python bench/plan.py`` (``--episodes 100000`` for a quick run).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

BATCH = 256


def lengths_for(episodes: int, mean: int, seed: int = 0) -> np.ndarray:
    """Episode lengths uniform in [mean/5, 9*mean/5]: mean ``mean`` frames."""
    rng = np.random.default_rng(seed)
    return rng.integers(mean // 5, 9 * mean // 5 + 1, episodes).astype(np.int64)


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _anchors(strategy: str, lengths: np.ndarray, limit: int | None):
    from feedline.streaming.schedule.plan import plan_shards_arrays
    from feedline.streaming.schedule.pool import EpisodePool

    plan = plan_shards_arrays(lengths, world_size=1, num_workers=0, seed=1000, epoch=0)
    order = plan.parts[0][0]
    pool = EpisodePool(order, lengths[order], strategy=strategy, pool_size=32, seed=1000)
    remaining = pool.total_anchors if limit is None else limit
    while remaining > 0:
        eps, frames = pool.take(min(remaining, 1 << 20))
        if eps.size == 0:
            return
        remaining -= eps.size
        yield eps, frames


def entropy_of_gaps(ids: np.ndarray) -> float:
    gaps = np.abs(np.diff(ids))
    freq = np.bincount(gaps)
    p = freq[freq > 0] / gaps.size
    return float(-(p * np.log2(p)).sum())


def phase(name: str, episodes: int, mean: int, quality_anchors: int) -> dict[str, float]:
    lengths = lengths_for(episodes, mean)
    total = int(lengths.sum())
    base_rss = _rss_mb()
    t0 = time.perf_counter()
    out: dict[str, float] = {}
    if name == "permutation":
        perm = np.random.default_rng(1000).permutation(total)
        out["checksum"] = float(perm[:10].sum())
    elif name == "plan":
        from feedline.streaming.schedule.plan import plan_shards_arrays

        t = time.perf_counter()
        plan_shards_arrays(lengths, world_size=1, num_workers=0, seed=1000, epoch=0)
        out["plan_1x0_s"] = time.perf_counter() - t
        t = time.perf_counter()
        report = plan_shards_arrays(lengths, world_size=8, num_workers=4, seed=1000,
                                    epoch=0).report
        out["plan_8x4_s"] = time.perf_counter() - t
        out["rank_spread_frames"] = report.rank_spread
        out["rank_imbalance"] = report.rank_imbalance
        out["worker_spread_frames"] = report.worker_spread
    elif name == "restripe":
        from feedline.streaming.schedule.elastic import (
            PoolMaker,
            Stage,
            remainder_after,
            stage_plan,
        )

        by_episode = dict(enumerate(lengths.tolist()))
        make_pool = PoolMaker("spread", 256, 1000, by_episode)
        batches = total // (8 * 32) // 2  # every rank halfway through its epoch
        t = time.perf_counter()
        due = remainder_after(by_episode, [Stage(8, 4, 32, False, batches)], seed=1000, epoch=0,
                              make_pool=make_pool)
        out["replay_s"] = time.perf_counter() - t
        t = time.perf_counter()
        report = stage_plan(due, world_size=6, num_workers=2, seed=1000, epoch=0).report
        out["replan_s"] = time.perf_counter() - t
        out["due_anchors"] = due.total
        out["partial_episodes"] = len(due.frames)
        out["rank_imbalance"] = report.rank_imbalance
    elif name == "mixture":
        from feedline.streaming.schedule.mixture import MixtureUnits, Quota, source_counts
        from feedline.streaming.schedule.plan import plan_shards_arrays

        thirds = np.array_split(lengths, 3)  # three sources of a third of the episodes each
        sources = [dict(enumerate(part.tolist())) for part in thirds]
        quotas = [Quota(weight=3), Quota(repeat=0.5), Quota(choose=int(thirds[2].sum()) // 3)]
        t = time.perf_counter()
        counts = source_counts([int(p.sum()) for p in thirds], quotas)
        units = MixtureUnits(sources, counts, seed=1000)
        due = units.epoch(1)
        out["units_s"] = time.perf_counter() - t
        t = time.perf_counter()
        report = plan_shards_arrays(due.lengths, world_size=8, num_workers=4, seed=1000,
                                    epoch=1).report
        out["plan_8x4_s"] = time.perf_counter() - t
        t = time.perf_counter()
        plan_shards_arrays(due.lengths, world_size=8, num_workers=4, seed=1000, epoch=1,
                           groups=units.sources_of)
        out["plan_8x4_stratified_s"] = time.perf_counter() - t
        out["units"] = len(due.lengths)
        out["anchors"] = due.total
        out["rank_imbalance"] = report.rank_imbalance
    elif name.startswith("draws-"):
        n = 0
        for eps, _ in _anchors(name.removeprefix("draws-"), lengths, None):
            n += eps.size
        assert n == total, (n, total)
        out["anchors"] = n
    elif name.startswith("quality-"):
        order = name.removeprefix("quality-")
        starts = np.cumsum(lengths) - lengths
        if order == "permutation":
            sample = np.random.default_rng(1000).permutation(total)[:quality_anchors]
            eps = np.searchsorted(starts, sample, side="right") - 1
        else:
            parts = list(_anchors(order, lengths, quality_anchors))
            eps = np.concatenate([p[0] for p in parts])
            sample = starts[eps] + np.concatenate([p[1] for p in parts])
        out["sample_entropy"] = entropy_of_gaps(sample)
        out["episode_entropy"] = entropy_of_gaps(eps)
        out["mosaic_score"] = out["sample_entropy"] + out["episode_entropy"]
        out["same_episode_neighbours"] = float(np.mean(eps[1:] == eps[:-1]))
        usable = eps[: eps.size // BATCH * BATCH].reshape(-1, BATCH)
        srt = np.sort(usable, axis=1)
        out["distinct_per_batch"] = float(np.mean(1 + (np.diff(srt, axis=1) != 0).sum(axis=1)))
    else:
        raise SystemExit(f"unknown phase {name}")
    out["seconds"] = time.perf_counter() - t0
    out["peak_rss_mb"] = _rss_mb() - base_rss
    out["frames"] = total
    return out


def run_phase(name: str, args: argparse.Namespace) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--phase", name, "--episodes", str(args.episodes),
           "--mean-frames", str(args.mean_frames), "--quality-anchors", str(args.quality_anchors)]
    res = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=1_000_000)
    ap.add_argument("--mean-frames", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quality-anchors", type=int, default=20_000_000)
    ap.add_argument("--phase", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.phase:
        print(json.dumps(phase(args.phase, args.episodes, args.mean_frames,
                               args.quality_anchors)))
        return 0

    def median_of(name: str) -> dict[str, float]:
        runs = [run_phase(name, args) for _ in range(args.repeats)]
        return {k: statistics.median(r[k] for r in runs) for k in runs[0]}

    perm = median_of("permutation")
    print(f"{args.episodes} episodes, {int(perm['frames'])} frames; medians of "
          f"{args.repeats} runs; peak RSS above the interpreter + numpy + inputs")
    print(f"{'phase':<28}{'seconds':>10}{'x perm':>9}{'peak MB':>10}{'x perm':>9}")

    def row(label: str, r: dict[str, float]) -> None:
        print(f"{label:<28}{r['seconds']:>10.2f}{r['seconds'] / perm['seconds']:>9.2f}"
              f"{r['peak_rss_mb']:>10.0f}{r['peak_rss_mb'] / max(perm['peak_rss_mb'], 1):>9.2f}")

    row("global permutation (base)", perm)
    plan = median_of("plan")
    row("plan (1x0 and 8x4)", plan)
    print(f"  plan 1 rank x 0 workers {plan['plan_1x0_s']:.2f} s; 8 ranks x 4 workers "
          f"{plan['plan_8x4_s']:.2f} s; rank spread {plan['rank_spread_frames']:.0f} frames "
          f"({plan['rank_imbalance']:.5%}); worker spread {plan['worker_spread_frames']:.0f}")
    for strategy in ("remaining", "round_robin"):
        r = median_of(f"draws-{strategy}")
        row(f"plan + epoch, {strategy}", r)
        print(f"  {r['anchors'] / r['seconds'] / 1e6:.1f} M anchors/s")
    r = median_of("restripe")
    row("restripe 8x4x32 -> 6x2", r)
    print(f"  replay of the consumed half {r['replay_s']:.2f} s; plan of the "
          f"{r['due_anchors']:.0f} due anchors ({r['partial_episodes']:.0f} partly consumed "
          f"episodes) over 6 x 2 {r['replan_s']:.2f} s; rank imbalance {r['rank_imbalance']:.5%}")
    r = median_of("mixture")
    row("mixture of 3: units + plans", r)
    print(f"  units of an epoch {r['units_s']:.2f} s ({r['units']:.0f} units, "
          f"{r['anchors']:.0f} anchors); plan 8 x 4 {r['plan_8x4_s']:.2f} s, stratified "
          f"{r['plan_8x4_stratified_s']:.2f} s; rank imbalance {r['rank_imbalance']:.5%}")
    print(f"\nshuffle quality on the first {args.quality_anchors} anchors (one run each)")
    print(f"{'order':<22}{'sample H':>10}{'episode H':>11}{'score':>8}{'x perm':>8}"
          f"{'same-ep nbr':>13}{'eps/batch':>11}")
    base = None
    for order in ("permutation", "remaining", "round_robin"):
        q = run_phase(f"quality-{order}", args)
        base = base or q["mosaic_score"]
        print(f"{order:<22}{q['sample_entropy']:>10.2f}{q['episode_entropy']:>11.2f}"
              f"{q['mosaic_score']:>8.2f}{q['mosaic_score'] / base:>8.3f}"
              f"{q['same_episode_neighbours']:>13.4f}{q['distinct_per_batch']:>11.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
