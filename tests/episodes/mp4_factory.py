"""Small real MP4s encoded with PyAV, shaped like the files LeRobot writes (and a few worse ones).

* AV1 via libsvtav1 with GOP 2 (LeRobot's default: no reordering, trivial edit list);
* H.264 via libx264 with B-frames and GOP 30: real reordering, a ``ctts`` box and an edit list
  whose ``media_time`` is the encoder delay;
* moov at the front (``movflags=faststart``) or at the end;
* several episodes concatenated by stream copy into one file, each starting on a keyframe,
  the way LeRobot's ``concatenate_video_files`` builds its camera files.

Frames are 64×48 with a moving pattern and noise, so neighbouring frames differ after lossy
compression and a wrong frame can never pass a pixel-exact comparison.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np

WIDTH, HEIGHT = 64, 48

os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1 prints its whole config per encode otherwise


def make_frames(count: int, *, seed: int = 0, width: int = WIDTH, height: int = HEIGHT) -> list[np.ndarray]:
    """``count`` RGB frames: a gradient that moves with the frame index, a bright bar, and noise."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width]
    frames = []
    for i in range(count):
        base = (xx * 3 + yy * 2 + i * 11 + seed * 37) % 256
        img = np.stack([base, (base + 85) % 256, (255 - base)], axis=-1).astype(np.int16)
        bar = (i * 5) % width
        img[:, bar : bar + 6, :] = 240
        img += rng.integers(-12, 13, size=img.shape, dtype=np.int16)
        frames.append(np.clip(img, 0, 255).astype(np.uint8))
    return frames


def encode(
    path: str | Path,
    frames: Sequence[np.ndarray],
    *,
    codec: str = "av1",
    fps: int = 10,
    gop: int | None = None,
    bframes: int = 2,
    faststart: bool = False,
    open_gop: bool = False,
    muxer_options: dict[str, str] | None = None,
) -> Path:
    """Encode ``frames`` into one MP4; ``codec`` is ``"av1"`` (libsvtav1) or ``"h264"`` (libx264).

    ``muxer_options`` go to FFmpeg's mp4 muxer (e.g. ``{"movflags": "negative_cts_offsets"}``,
    ``{"use_editlist": "0"}``).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    options = {"movflags": "faststart"} if faststart else {}
    for key, value in (muxer_options or {}).items():
        options[key] = f"{options[key]}+{value}" if key in options else value
    height, width = frames[0].shape[:2]
    with av.open(str(path), "w", format="mp4", options=options) as out:
        if codec == "av1":
            stream = out.add_stream("libsvtav1", rate=fps)
            stream.options = {"g": str(gop or 2), "crf": "30", "preset": "12"}
        elif codec == "h264":
            stream = out.add_stream("libx264", rate=fps)
            params = f"keyint={gop or 30}:min-keyint={gop or 30}:scenecut=0:bframes={bframes}:b-adapt=0"
            if open_gop:
                params += ":open-gop=1"
            stream.options = {"x264-params": params, "preset": "veryfast", "crf": "23"}
        else:
            raise ValueError(f"unknown codec {codec!r}")
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.codec_context.time_base = Fraction(1, fps)
        for i, img in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(img, format="rgb24")
            frame.pts = i
            frame.time_base = Fraction(1, fps)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def concatenate(path: str | Path, parts: Sequence[str | Path], *, faststart: bool = True) -> Path:
    """Stream-copy ``parts`` back to back into ``path`` (what ffmpeg's concat demuxer does).

    Each part's packets are shifted so that its first presented frame follows the previous
    part's last one; the muxer then writes one edit list for the whole file.
    """
    path = Path(path)
    options = {"movflags": "faststart"} if faststart else {}
    with av.open(str(path), "w", format="mp4", options=options) as out:
        out_stream = None
        next_start = 0
        for part in parts:
            with av.open(str(part)) as src:
                in_stream = src.streams.video[0]
                if out_stream is None:
                    out_stream = out.add_stream_from_template(in_stream, opaque=True)
                packets = [p for p in src.demux(in_stream) if p.size]
                first_pts = min(p.pts for p in packets)
                end = max(p.pts + p.duration for p in packets)
                for packet in packets:
                    shift = next_start - first_pts
                    packet.pts += shift
                    packet.dts += shift
                    packet.stream = out_stream
                    out.mux(packet)
                next_start += end - first_pts
    return path


def episode_file(
    path: str | Path,
    lengths: Sequence[int],
    *,
    codec: str = "av1",
    fps: int = 10,
    gop: int | None = None,
    bframes: int = 2,
    faststart: bool = True,
    seed: int = 0,
) -> Path:
    """One camera file holding ``len(lengths)`` episodes (each starts on a keyframe)."""
    path = Path(path)
    if len(lengths) == 1:
        frames = make_frames(lengths[0], seed=seed)
        return encode(path, frames, codec=codec, fps=fps, gop=gop, bframes=bframes, faststart=faststart)
    parts = []
    for i, length in enumerate(lengths):
        part = path.with_name(f".{path.stem}.ep{i}.mp4")
        encode(part, make_frames(length, seed=seed + i), codec=codec, fps=fps, gop=gop, bframes=bframes)
        parts.append(part)
    concatenate(path, parts, faststart=faststart)
    for part in parts:
        part.unlink()
    return path


# --------------------------------------------------------------------------------------------
# Rewriting boxes of a real file (for the bad-input tests)
# --------------------------------------------------------------------------------------------


def find_box(data: bytes, box_path: Sequence[str]) -> tuple[list[int], int, int]:
    """``(ancestor starts, start, end)`` of the first box at ``box_path`` (e.g. moov/trak/edts/elst)."""
    start, end, ancestors = 0, len(data), []
    for depth, name in enumerate(box_path):
        pos = start
        while pos < end:
            size, kind = struct.unpack_from(">I4s", data, pos)
            if kind.decode("latin-1") == name:
                if depth < len(box_path) - 1:
                    ancestors.append(pos)
                    start, end = pos + 8, pos + size
                else:
                    return ancestors, pos, pos + size
                break
            pos += size
        else:
            raise KeyError(f"no box {'/'.join(box_path[: depth + 1])}")
    raise KeyError("/".join(box_path))


def replace_box(data: bytes, box_path: Sequence[str], new_box: bytes) -> bytes:
    """Replace a box and fix its ancestors' sizes. Only valid when moov follows mdat."""
    ancestors, start, end = find_box(data, box_path)
    delta = len(new_box) - (end - start)
    out = bytearray(data[:start] + new_box + data[end:])
    for pos in ancestors:
        (size,) = struct.unpack_from(">I", out, pos)
        struct.pack_into(">I", out, pos, size + delta)
    return bytes(out)


def elst_box(entries: Sequence[tuple[int, int, int, int]], version: int = 0) -> bytes:
    """An ``elst`` box from ``(segment_duration, media_time, rate_integer, rate_fraction)``."""
    fmt = ">QqhH" if version == 1 else ">IihH"
    body = struct.pack(">B3xI", version, len(entries))
    body += b"".join(struct.pack(fmt, *entry) for entry in entries)
    return struct.pack(">I4s", 8 + len(body), b"elst") + body


def read_elst(data: bytes) -> list[tuple[int, int, int, int]]:
    _, start, end = find_box(data, ["moov", "trak", "edts", "elst"])
    version, count = struct.unpack_from(">B3xI", data, start + 8)
    fmt = ">QqhH" if version == 1 else ">IihH"
    size = struct.calcsize(fmt)
    return [struct.unpack_from(fmt, data, start + 16 + i * size) for i in range(count)]


# --------------------------------------------------------------------------------------------
# The shared test corpus
# --------------------------------------------------------------------------------------------

#: name -> (episode lengths, encode kwargs). Tiny: 64x48, a few dozen frames each.
CORPUS: dict[str, tuple[list[int], dict[str, Any]]] = {
    "av1_multi.mp4": ([12, 9, 7], {"codec": "av1", "faststart": True}),
    "av1_single_end.mp4": ([15], {"codec": "av1", "faststart": False}),
    "h264_multi.mp4": ([35, 12], {"codec": "h264", "bframes": 2, "faststart": True}),
    "h264_single_end.mp4": ([40], {"codec": "h264", "bframes": 2, "faststart": False}),
}
#: Harder single-episode H.264 files (edit-list and GOP shapes LeRobot does not write itself).
EXTRA: dict[str, dict[str, Any]] = {
    "h264_opengop.mp4": {"codec": "h264", "gop": 20, "open_gop": True},
    "h264_bf3_negcts.mp4": {
        "codec": "h264",
        "bframes": 3,
        "muxer_options": {"movflags": "negative_cts_offsets"},
    },
    "h264_noelst.mp4": {"codec": "h264", "muxer_options": {"use_editlist": "0"}},
}


def build_corpus(root: str | Path, *, extra: bool = False) -> dict[str, Path]:
    """Write the corpus below ``root`` (``videos/<name>``) and return ``{relative path: file}``."""
    root = Path(root)
    out = {}
    for i, (name, (lengths, kwargs)) in enumerate(CORPUS.items()):
        out[f"videos/{name}"] = episode_file(root / "videos" / name, lengths, seed=10 * i, **kwargs)
    if extra:
        for i, (name, kwargs) in enumerate(EXTRA.items()):
            frames = make_frames(45, seed=100 + i)
            out[f"videos/{name}"] = encode(root / "videos" / name, frames, **kwargs)
    return out
