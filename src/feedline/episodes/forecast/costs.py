"""What ``feedline plan`` measures or reads before it predicts: the link, the dataset's bytes and
keyframes (from the sidecar index and Parquet footers: no payload), and this machine's costs
(decoding a sample of GOPs, which reads a few payload bytes and says how many; starting a worker).
"""

from __future__ import annotations

import gc
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from feedline.episodes.errors import ForecastError
from feedline.episodes.stream.decoded import DecodedFrames
from feedline.episodes.stream.payload import EpisodeSpans, fetch_episode

__all__ = [
    "DecodeCost",
    "Link",
    "PREFETCH_FACTOR",
    "UnitFacts",
    "measure_decode",
    "measure_decoder_bytes",
    "locate_units",
    "measure_worker_start",
    "parse_link",
    "pss_of",
    "sample_units",
    "training_loader",
    "unit_bytes",
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
    """What the index says of each unit (no payload read), as arrays parallel to ``units``.

    Args:
        units: the units, ascending and distinct.
        fetched: payload bytes one fetch reads (mini-MP4s and Parquet row groups).
        needed: bytes its own frames and rows take (the samples in its span, its rows' share).
        requests: range requests one fetch sends, one after another.
        keyframes: per (unit, camera), the frame indices of its keyframes (made when asked).
    """

    units: np.ndarray
    fetched: np.ndarray
    needed: np.ndarray
    requests: np.ndarray
    keyframes: Mapping[tuple[int, str], np.ndarray]

    def rows(self, units: np.ndarray | Sequence[int]) -> np.ndarray:
        """The rows of ``units`` in the arrays (each must be one of :attr:`units`)."""
        wanted = np.asarray(units, dtype=np.int64)
        rows = np.searchsorted(self.units, wanted)
        if rows.size and (rows.max() >= self.units.size or np.any(self.units[rows] != wanted)):
            raise KeyError("units without facts")
        return rows


class _Keyframes(Mapping[tuple[int, str], np.ndarray]):
    """Per (unit, camera) the keyframes of its presented samples, cut from the camera's file
    when asked: the decode replay asks for the few units of its first anchors, not all."""

    def __init__(self, units: np.ndarray) -> None:
        self.units = units
        self.syncs: list[np.ndarray] = []
        self.spans: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def add(self, key: str, rows: np.ndarray, sync: np.ndarray, lo: np.ndarray,
            hi: np.ndarray) -> None:
        if key not in self.spans:
            n = self.units.size
            self.spans[key] = (np.full(n, -1, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64))
        files, first, last = self.spans[key]
        files[rows], first[rows], last[rows] = len(self.syncs), lo, hi
        self.syncs.append(sync)

    def __getitem__(self, item: tuple[int, str]) -> np.ndarray:
        unit, key = item
        span = self.spans.get(key)
        row = int(np.searchsorted(self.units, int(unit)))
        if span is None or row >= self.units.size or int(self.units[row]) != int(unit) or (
            span[0][row] < 0
        ):
            raise KeyError(item)
        sync = self.syncs[int(span[0][row])]
        return np.flatnonzero(sync[int(span[1][row]) : int(span[2][row])]).astype(np.int64)

    def __iter__(self) -> Iterator[tuple[int, str]]:
        for key, (files, _, _) in self.spans.items():
            for row in np.flatnonzero(files >= 0).tolist():
                yield int(self.units[row]), key

    def __len__(self) -> int:
        return sum(int((files >= 0).sum()) for files, _, _ in self.spans.values())


def locate_units(dataset: Any, units: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each unit's source and episode index (a vectorised ``MixtureUnits.locate``)."""
    units = np.asarray(units, dtype=np.int64)
    mixed = dataset.feed.units
    if hasattr(mixed, "locate"):
        rest = units % mixed.span
        source = np.searchsorted(mixed.offsets, rest, side="right") - 1
        return source, rest - mixed.offsets[source]
    return np.zeros(units.size, np.int64), units


def _by_source(dataset: Any, units: np.ndarray) -> Iterator[tuple[Any, np.ndarray, np.ndarray]]:
    """``(source, rows of units, their episode-table positions)`` per source the units use."""
    source_of, episode_of = locate_units(dataset, units)
    for s in np.unique(source_of).tolist():
        rows = np.flatnonzero(source_of == s)
        source = dataset.feed.sources[s]
        yield source, rows, source.reader.episode_table.positions(episode_of[rows])


def unit_bytes(dataset: Any, units: np.ndarray) -> np.ndarray:
    """Each unit's payload bytes (the reader's ``episode_bytes``), from the sources' arrays."""
    units = np.asarray(units, dtype=np.int64)
    out = np.zeros(units.size, np.int64)
    for source, rows, positions in _by_source(dataset, units):
        out[rows] = source.spans.nbytes[positions]
    return out


def unit_facts(dataset: Any, units: np.ndarray | Sequence[int]) -> UnitFacts:
    """:class:`UnitFacts` of ``units``, from the sidecar's sample tables and the Parquet footers:
    array operations per source, camera and file, none per unit (the fetch plans themselves
    are not made: a unit's bytes are the sizes the open computed, one plan per camera)."""
    units = np.unique(np.asarray(units, dtype=np.int64))
    n = units.size
    fetched, needed, requests = (np.zeros(n, np.int64) for _ in range(3))
    keyframes = _Keyframes(units)
    for source, rows, positions in _by_source(dataset, units):
        reader = source.reader
        table = reader.episode_table
        fetched[rows] = source.spans.nbytes[positions]
        requests[rows] = 1 + len(table.video_path)
        needed[rows] = _parquet_needed(source, positions)
        frames = reader.frame_reader()
        tol = reader.tolerance_s
        lengths = np.asarray(table.length, np.int64)[positions]
        for key, paths in table.video_path.items():
            codes = paths.codes[positions]
            t0 = np.asarray(table.from_timestamp[key], np.float64)[positions]
            for code in np.unique(codes).tolist():
                at = np.flatnonzero(codes == code)
                t = frames.table(paths.files[code])
                order = np.argsort(t.pts, kind="stable")
                pts = np.asarray(t.pts)[order]
                size = np.asarray(t.size, np.int64)[order]
                lo = np.searchsorted(pts, t0[at] - tol, side="left")
                hi = np.searchsorted(pts, t0[at] + (lengths[at] - 1) / reader.fps + tol,
                                     side="right")
                hi = np.maximum(hi, lo)
                total = np.zeros(size.size + 1, np.int64)
                np.cumsum(size, out=total[1:])
                needed[rows[at]] += total[hi] - total[lo]
                keyframes.add(key, rows[at], np.asarray(t.sync)[order], lo, hi)
    return UnitFacts(units, fetched, needed, requests, keyframes)


def _parquet_needed(source: Any, positions: np.ndarray) -> np.ndarray:
    """The compressed bytes of each episode's own rows: each row group it touches, pro rata
    (per data file, the groups of all its episodes at once)."""
    table = source.reader.episode_table
    layout = source.parquet
    out = np.zeros(positions.size, np.int64)
    codes = table.data_path.codes[positions]
    for code in np.unique(codes).tolist():
        at = np.flatnonzero(codes == code)
        pos = positions[at]
        index = layout.indexes[table.data_path.files[code]]
        frm = np.asarray(table.dataset_from_index, np.int64)[pos]
        to = np.asarray(table.dataset_to_index, np.int64)[pos]
        if layout.ptr is not None and layout.groups is not None:
            start = layout.ptr[pos]
            counts = layout.ptr[pos + 1] - start
            owner = np.repeat(np.arange(at.size), counts)
            within = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
            groups = layout.groups[start[owner] + within]
        else:
            ptr, groups = index.candidates(np.asarray(table.episode_index)[pos], frm, to)
            owner = np.repeat(np.arange(at.size), np.diff(ptr))
        share = np.minimum(1.0, (to - frm)[owner] / np.maximum(1, index.num_rows[groups]))
        # summed in group order, as the per-episode sum did, then truncated
        part = np.bincount(owner, weights=index.nbytes[groups] * share, minlength=at.size)
        out[at] = part.astype(np.int64)
    return out


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
    keys = np.fromiter(lengths.keys(), np.int64, len(lengths))
    units = keys[np.argsort(np.fromiter(lengths.values(), np.int64, len(lengths)), kind="stable")]
    middle = len(units) // 2
    picked = units[max(0, middle - count // 2): middle - count // 2 + count]
    return (picked if picked.size else units[:count]).tolist()


def _locate(dataset: Any, unit: int) -> tuple[Any, int]:
    source, episode = locate_units(dataset, np.asarray([unit], np.int64))
    return dataset.feed.sources[int(source[0])], int(episode[0])


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
