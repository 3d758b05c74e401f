"""What ``feedline plan`` measures or reads before it predicts: the link, the dataset's bytes and
keyframes (from the sidecar index and Parquet footers: no payload), and this machine's costs
(decoding a sample of GOPs, which reads a few payload bytes and says how many; starting a worker).
"""

from __future__ import annotations

import gc
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from feedline.episodes.errors import ForecastError
from feedline.episodes.parquet import EpisodeRows, candidate_row_groups
from feedline.episodes.stream.decoded import DecodedFrames
from feedline.episodes.stream.payload import EpisodeSpans, fetch_episode

__all__ = [
    "DecodeCost",
    "Link",
    "PREFETCH_FACTOR",
    "UnitFacts",
    "measure_decode",
    "measure_decoder_bytes",
    "measure_worker_start",
    "parse_link",
    "pss_of",
    "sample_units",
    "training_loader",
    "unit_facts",
]

PREFETCH_FACTOR = 4  # lerobot-train's DataLoader prefetch_factor; batches held ahead per worker

_BANDWIDTH = re.compile(r"^\s*([0-9.]+)\s*([kmgt]?)(i?)(b|bit|bps|b/s|bit/s)?\s*(/s)?\s*$", re.I)
_LATENCY = re.compile(r"^\s*([0-9.]+)\s*(us|µs|ms|s)\s*$", re.I)
_SCALE = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_BINARY = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


@dataclass(frozen=True)
class Link:
    """A network link between a rank and the store.

    Args:
        bandwidth: bytes per second the rank can read.
        latency_s: seconds before one range request's first byte.
    """

    bandwidth: float
    latency_s: float

    def describe(self) -> str:
        return f"{self.bandwidth / 1e6:.3g} MB/s, {1e3 * self.latency_s:.3g} ms"


def parse_link(text: str) -> Link:
    """``BANDWIDTH,LATENCY``: ``100MB/s,20ms``, ``1Gbit/s,5ms``, ``50MiB/s,0.1s``."""
    bandwidth, sep, latency = text.partition(",")
    b = _BANDWIDTH.match(bandwidth)
    lat = _LATENCY.match(latency)
    if not sep or b is None or lat is None or not b.group(4):
        raise ForecastError(
            f"--link {text!r}: expected BANDWIDTH,LATENCY such as 100MB/s,20ms or 1Gbit/s,5ms"
        )
    number, prefix, binary, unit = float(b.group(1)), b.group(2).lower(), b.group(3), b.group(4)
    scale = (_BINARY if binary else _SCALE)[prefix]
    bits = unit.lower() in ("bit", "bps", "bit/s") or unit == "b"  # lowercase b: bits
    rate = number * scale / (8 if bits else 1)
    value, unit_s = float(lat.group(1)), lat.group(2).lower()
    seconds = value * {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0}[unit_s]
    if rate <= 0:
        raise ForecastError(f"--link {text!r}: the bandwidth must be above 0")
    return Link(rate, seconds)


# ---- the dataset's facts, from the index only ------------------------------------------------


@dataclass
class UnitFacts:
    """What the index says of each unit (no payload read).

    Args:
        fetched: payload bytes one fetch reads (mini-MP4s and Parquet row groups).
        needed: bytes its own frames and rows take (the samples in its span, its rows' share).
        requests: range requests one fetch sends, one after another.
        keyframes: per (unit, camera), the frame indices of its keyframes.
    """

    fetched: dict[int, int]
    needed: dict[int, int]
    requests: dict[int, int]
    keyframes: dict[tuple[int, str], np.ndarray]


def _locate(dataset: Any, unit: int) -> tuple[Any, int]:
    units = dataset.feed.units
    if hasattr(units, "locate"):
        source, episode, _ = units.locate(unit)
        return dataset.feed.sources[source], episode
    return dataset.feed.sources[0], int(unit)


def unit_facts(dataset: Any, units: Iterator[int] | list[int]) -> UnitFacts:
    """:class:`UnitFacts` of ``units``, from the sidecar's sample tables and the Parquet footers."""
    out = UnitFacts({}, {}, {}, {})
    presented: dict[tuple[int, str], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for unit in units:
        source, episode = _locate(dataset, int(unit))
        reader = source.reader
        table = reader.episode_table
        spans: EpisodeSpans = source.spans_of(episode)
        i = spans.position
        length = int(table.length[i])
        needed = _parquet_needed(source, i)
        requests = 1
        frames = reader.frame_reader()
        for key, plans in spans.video.items():
            requests += len(plans)
            path = table.video_path[key][i]
            cache_key = (id(source), path)
            if cache_key not in presented:
                t = frames.table(path)
                order = np.argsort(t.pts, kind="stable")
                presented[cache_key] = (t.pts[order], np.asarray(t.size)[order],
                                        np.asarray(t.sync)[order])
            pts, size, sync = presented[cache_key]
            t0 = float(table.from_timestamp[key][i])
            tol = reader.tolerance_s
            lo = int(np.searchsorted(pts, t0 - tol, side="left"))
            hi = int(np.searchsorted(pts, t0 + (length - 1) / reader.fps + tol, side="right"))
            needed += int(size[lo:hi].sum())
            out.keyframes[(int(unit), key)] = np.flatnonzero(sync[lo:hi]).astype(np.int64)
        out.fetched[int(unit)] = int(spans.nbytes)
        out.needed[int(unit)] = needed
        out.requests[int(unit)] = requests
    return out


def _parquet_needed(source: Any, position: int) -> int:
    """The compressed bytes of an episode's own rows: each row group it touches, pro rata."""
    table = source.reader.episode_table
    index = source.parquet.indexes[table.data_path[position]]
    want = EpisodeRows(int(table.episode_index[position]), int(table.dataset_from_index[position]),
                       int(table.dataset_to_index[position]))
    total = 0
    groups = source.parquet.groups_of(position)
    for g in groups if groups is not None else candidate_row_groups(index, want):
        rows = int(index.num_rows[g])
        total += int(index.nbytes[g]) * min(1.0, (want.to_index - want.from_index) / max(1, rows))
    return int(total)


# ---- this machine's costs ----------------------------------------------------------------------


@dataclass
class DecodeCost:
    """Decoding and assembling samples on this machine, one thread.

    Args:
        per_sample_s: mean wall seconds per sample after an episode's first (each frame decoded once).
        first_sample_s: wall seconds of an episode's first sample (from its keyframe).
        collate_s: seconds to collate one sample into a batch and move it to shared memory, as a
            worker does (median of 5 batches; ``shared=False``: in process, no move).
        sample_bytes: bytes of one assembled sample.
        samples: samples measured.
        bytes_read: payload bytes read to measure (``feedline plan`` reads payload only here and
            in its calibration runs).
        episodes: the units measured.
        fetch_s: wall seconds of one fetch (median): the Parquet rows and the cut mini-MP4s.
    """

    per_sample_s: float
    first_sample_s: float
    collate_s: float
    sample_bytes: int
    samples: int
    bytes_read: int
    episodes: list[int]
    fetch_s: float = 0.0


def sample_units(dataset: Any, count: int) -> list[int]:
    """``count`` units of median length (a mixture's units, whatever their source)."""
    lengths = dataset.feed.epoch_lengths(0)
    units = sorted(lengths, key=lambda u: lengths[u])
    middle = len(units) // 2
    picked = units[max(0, middle - count // 2): middle - count // 2 + count]
    return picked or units[:count]


def _cut_payload(dataset: Any, unit: int, frames: int, decoded: DecodedFrames) -> tuple[Any, Any, int]:
    """``unit``'s payload fetched as a mini-MP4 cut to its first ``frames`` frames (a few GOPs),
    its source, and how many of its samples that cut can assemble."""
    source, episode = _locate(dataset, unit)
    reader = source.reader
    spans: EpisodeSpans = source.spans_of(episode)
    table = reader.episode_table
    i = spans.position
    n = min(int(table.length[i]), frames)
    video = {}
    for key, paths in table.video_path.items():
        t0 = float(table.from_timestamp[key][i])
        video[key] = tuple(reader.frame_reader().span_plans(
            paths[i], t0, t0 + (n - 1) / reader.fps, reader.tolerance_s))
    payload = fetch_episode(reader.store, reader.frame_reader(), table,
                            replace(spans, video=video), source.parquet_footers,
                            decoded=decoded, tolerance_s=reader.tolerance_s)
    future = max([0] + [int(np.max(v)) for k, v in (reader.delta_indices or {}).items()
                        if k in table.video_path])
    return payload, source, max(1, n - future)


def measure_decode(
    dataset: Any, *, episodes: int = 3, frames: int = 48, batch_size: int = 8,
    shared: bool = True,
) -> DecodeCost:
    """Decode the first ``frames`` frames of ``episodes`` units through the reader's own fetch
    and assemble (a mini-MP4 cut to those frames: a few GOPs), timing each sample."""
    import torch
    from torch.utils.data import default_collate

    per: list[float] = []
    first: list[float] = []
    fetch: list[float] = []
    samples: list[dict[str, Any]] = []
    read = 0
    units = sample_units(dataset, episodes)
    for unit in units:
        started = time.perf_counter()
        payload, source, count = _cut_payload(dataset, unit, frames, DecodedFrames(2**34, 64))
        fetch.append(time.perf_counter() - started)
        read += payload.fetched_bytes
        try:
            for frame in range(count):
                started = time.perf_counter()
                sample = payload.sample(source.decode_spec, frame)
                (first if frame == 0 else per).append(time.perf_counter() - started)
                if len(samples) < batch_size:
                    samples.append(sample)
        finally:
            payload.close()
    if not samples:
        raise ForecastError("no sample could be decoded to measure the decode speed")
    batch = (samples * batch_size)[:batch_size]
    default_collate(batch)  # warm up
    rounds = []
    for _ in range(5):  # a worker's collate writes into new shared memory the loop then maps
        started = time.perf_counter()
        collated = default_collate(batch)
        if shared:
            for value in collated.values():
                if isinstance(value, torch.Tensor):
                    value.share_memory_()
        rounds.append(time.perf_counter() - started)
    collate_s = float(np.median(rounds)) / batch_size
    sample_bytes = _nbytes(samples[0])
    # the mean, not the median: a decoder goes on past the frame asked for (DECODE_AHEAD), so
    # most samples find their frames decoded and one in several pays for a run of decodes
    per_sample = float(np.mean(per)) if per else float(np.median(first))
    return DecodeCost(per_sample, float(np.median(first)), collate_s, int(sample_bytes),
                      len(per) + len(first), int(read), [int(u) for u in units],
                      float(np.median(fetch)))


def _nbytes(sample: Mapping[str, Any]) -> int:
    return int(sum(v.nbytes for v in sample.values() if hasattr(v, "nbytes")))


class _DecoderProbe:
    """An IterableDataset whose one worker opens decoders on cut payloads (a fresh process, as
    a DataLoader worker is) and reports the PSS each adds beyond the frames it kept."""

    def __init__(self, dataset: Any, units: list[int], frames: int) -> None:
        self.dataset, self.units, self.frames = dataset, units, frames

    def __iter__(self) -> Iterator[dict[str, float]]:
        decoded = DecodedFrames(2**34, 4096)
        payloads = [_cut_payload(self.dataset, u, self.frames, decoded) for u in self.units]
        half = len(payloads) // 2
        try:
            samples = [payload.sample(source.decode_spec, 0) for payload, source, _ in payloads[:half]]
            gc.collect()  # the first half pays the codecs' one-time setup; the second is timed
            before, opened = pss_of(), decoded.open_decoders
            held = decoded.counters.decoded_bytes
            samples += [payload.sample(source.decode_spec, 0) for payload, source, _ in payloads[half:]]
            gc.collect()
            grown = (pss_of() - before - (decoded.counters.decoded_bytes - held)
                     - sum(map(_nbytes, samples[half:])))
            opened = decoded.open_decoders - opened
            yield {"per_decoder": max(0, grown) / opened if before and opened else 0.0}
        finally:
            for payload, _, _ in payloads:
                payload.close()


def measure_decoder_bytes(dataset: Any, *, episodes: int = 16, frames: int = 12) -> int:
    """PSS one open decoder adds in a fresh DataLoader worker (its codec context, reference
    frames and buffer pools, beyond the frames the reader keeps): over the decoders opened on
    the second half of ``episodes`` payloads cut to ``frames`` frames, once the first half has
    paid the codecs' one-time setup; 0 where ``/proc`` does not say."""
    from torch.utils.data import DataLoader, IterableDataset

    probe = type("DecoderProbe", (_DecoderProbe, IterableDataset), {})(
        dataset, sample_units(dataset, episodes), frames)
    items = list(DataLoader(probe, batch_size=None, num_workers=1))
    return int(items[0]["per_decoder"]) if items else 0


def training_loader(dataset: Any, *, batch_size: int, num_workers: int,
                    drop_last: bool = False) -> Any:
    """A DataLoader of ``dataset`` like lerobot-train's (``prefetch_factor=4`` with workers), as
    the calibration runs and ``--measure`` read it."""
    from torch.utils.data import DataLoader

    extra = {"prefetch_factor": PREFETCH_FACTOR} if num_workers else {}
    return DataLoader(dataset, batch_size=batch_size, num_workers=num_workers,
                      drop_last=drop_last, **extra)


class _Probe:
    """A trivial IterableDataset whose workers report their PSS and start time."""

    def __iter__(self) -> Iterator[dict[str, float]]:
        gc.collect()  # touch the inherited heap as a worker's garbage collector will
        yield {"t": time.monotonic(), "pss": float(pss_of())}


def pss_of(pid: int | str = "self") -> int:
    """Proportional set size of a process (0 where ``/proc`` does not say)."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    return 0


def measure_worker_start(num_workers: int) -> tuple[float, int]:
    """Seconds to a first item from ``num_workers`` fresh DataLoader workers of this process,
    and the PSS of one such worker (its share of what it inherits): the floor of a worker."""
    from torch.utils.data import DataLoader, IterableDataset

    probe = type("Probe", (_Probe, IterableDataset), {})()
    if num_workers == 0:
        return 0.0, 0
    loader = DataLoader(probe, batch_size=None, num_workers=num_workers)
    started = time.monotonic()
    items = list(loader)
    first = min(item["t"] for item in items) - started
    return max(0.0, first), int(max(item["pss"] for item in items))


def bytes_of(mapping: Mapping[int, int], units: Any) -> int:
    return int(sum(mapping[int(u)] for u in units))
