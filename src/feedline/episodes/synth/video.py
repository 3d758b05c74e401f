"""Encode, concatenate and measure episode videos the way LeRobot 0.6.x's recorder does.

``encode_episode`` writes one temporary MP4 per episode with PyAV (no faststart: moov at the
end), ``stream_copy_concat`` appends it to a camera's current file with the ffconcat demuxer and a
stream-copy remux with faststart (``concatenate_video_files``), and ``video_duration_s`` is
``get_video_duration_in_s``, which sets the next episode's ``from_timestamp``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import av
import numpy as np

from feedline.episodes.synth.identity import SynthError


def encoder_settings(
    vcodec: str, gop: int | None, bframes: int, crf: int | None, preset: str | int | None
) -> dict:
    """Encoder settings with LeRobot's defaults: SVT-AV1 GOP 2 crf 30 preset 12, or libx264."""
    if vcodec in ("libsvtav1", "av1"):
        if bframes:
            raise SynthError(
                "bframes applies to H.264 only; SVT-AV1 has no container-level reordering"
            )
        return {
            "codec": "libsvtav1",
            "g": 2 if gop is None else gop,
            "crf": 30 if crf is None else crf,
            "preset": 12 if preset is None else preset,
        }
    if vcodec in ("h264", "libx264"):
        return {
            "codec": "libx264",
            "g": 2 if gop is None else gop,
            "crf": 23 if crf is None else crf,
            "preset": "veryfast" if preset is None else preset,
            "bf": bframes,
        }
    raise SynthError(f"unknown vcodec {vcodec!r}: use 'libsvtav1' (default) or 'h264'")


def encode_episode(path: Path, frames: np.ndarray, fps: int, enc: dict) -> None:
    """Encode uint8 ``[T, H, W, 3]`` frames to an MP4 as LeRobot's recorder does (no faststart)."""
    options = {"g": str(enc["g"]), "crf": str(enc["crf"]), "preset": str(enc["preset"])}
    if enc["codec"] == "libx264":
        options["bf"] = str(enc["bf"])
        options["x264-params"] = "b-adapt=0"  # keep every B-frame slot: real reordering
    with av.open(str(path), "w") as container:
        stream = container.add_stream(enc["codec"], rate=fps)
        stream.width, stream.height, stream.pix_fmt = frames.shape[2], frames.shape[1], "yuv420p"
        stream.options = options
        for image in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def stream_copy_concat(inputs: Sequence[Path], output: Path) -> None:
    """ffconcat + stream-copy remux with faststart, like ``concatenate_video_files``."""
    listing = output.with_suffix(".ffconcat")
    lines = ["ffconcat version 1.0"] + [f"file '{Path(p).resolve()}'" for p in inputs]
    listing.write_text("\n".join(lines) + "\n")
    try:
        with (
            av.open(str(listing), "r", format="concat", options={"safe": "0"}) as source,
            av.open(str(output), "w", format="mp4", options={"movflags": "faststart"}) as sink,
        ):
            mapping = {}
            for stream in source.streams.video:
                mapping[stream.index] = sink.add_stream_from_template(template=stream, opaque=True)
                mapping[stream.index].time_base = stream.time_base
            for packet in source.demux():
                if packet.stream.index not in mapping or packet.dts is None:
                    continue
                packet.stream = mapping[packet.stream.index]
                sink.mux(packet)
    finally:
        listing.unlink(missing_ok=True)


def video_duration_s(path: Path) -> float:
    """``stream.duration * time_base``, LeRobot's ``get_video_duration_in_s``."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        if stream.duration is not None:
            return float(stream.duration * stream.time_base)
        return float(container.duration / av.time_base)
