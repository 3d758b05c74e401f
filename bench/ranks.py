"""Several ranks at once over one nginx, for ``bench/streaming.py --ranks N``.

Each rank is its own spawned process with its own DataLoader workers, as ``torchrun`` starts
them (no process group: the ranks share only the server and the machine's cores), reading one
epoch of the streaming reader with the default ``even_batches="pad"``. What a rank reports: its
samples, batches, seconds and the anchors it repeated to give every rank the same batches.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from typing import Any


def _rank(url: str, rank: int, world: int, workers: int, batch_size: int,
          deltas: dict[str, list[float]], queue: Any) -> None:
    from torch.utils.data import DataLoader

    from feedline.episodes.stream.dataset import StreamingEpisodeDataset

    ds = StreamingEpisodeDataset(root=url, delta_timestamps=deltas, return_uint8=True, rank=rank,
                                 world_size=world)
    loader = DataLoader(ds, batch_size=batch_size, num_workers=workers, prefetch_factor=4)
    evened = ds.evened_anchors(workers)  # epoch 0's, before the loop moves on to epoch 1
    began = time.perf_counter()
    samples = batches = 0
    for batch in ds.track(loader):
        samples += len(batch["index"])
        batches += 1
    seconds = time.perf_counter() - began
    queue.put({"rank": rank, "samples": samples, "batches": batches, "seconds": seconds,
               "rate": samples / seconds, "evened": evened})


def run_ranks(url: str, world: int, workers: int, batch_size: int,
              deltas: dict[str, list[float]]) -> list[dict[str, Any]]:
    """One epoch on each of ``world`` ranks at once; every rank's figures, by rank."""
    context = mp.get_context("spawn")
    queue = context.Queue()
    procs = [context.Process(target=_rank, args=(url, r, world, workers, batch_size, deltas, queue))
             for r in range(world)]
    for proc in procs:
        proc.start()
    results = [queue.get(timeout=3600) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
    return sorted(results, key=lambda r: r["rank"])


def ranks_row(name: str, shape: str, alone: dict[str, Any], ranks: list[dict[str, Any]]) -> str:
    """The Markdown row: one rank alone against each of N ranks, and what evening out cost."""
    rates = [r["rate"] for r in ranks]
    planned = sum(r["evened"]["planned"] for r in ranks)
    repeated = sum(r["evened"]["repeated"] for r in ranks)
    batches = sorted({r["batches"] for r in ranks})
    return (f"| {name}: {shape} | {alone['rate']:.0f} | {min(rates):.0f}-{max(rates):.0f} "
            f"(x{min(rates) / alone['rate']:.2f}-x{max(rates) / alone['rate']:.2f}) | "
            f"{sum(rates):.0f} (x{sum(rates) / alone['rate']:.2f}) | "
            f"{'/'.join(map(str, batches))} | {repeated} of {planned} ({repeated / planned:.2%}) |")
