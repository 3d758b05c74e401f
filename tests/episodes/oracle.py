"""The correctness oracle: decode a whole MP4 with PyAV, every frame, in presentation order.

Anything feedline decodes through the sidecar + mini-MP4 path must equal this pixel for pixel,
at bit-identical ``frame.time`` values.
"""

from __future__ import annotations

import io
from pathlib import Path

import av
import numpy as np


def decode_all(source: str | Path | bytes) -> list[tuple[float, np.ndarray]]:
    """``[(frame.time, rgb24 array HxWx3), ...]`` for every frame PyAV outputs."""
    handle = io.BytesIO(source) if isinstance(source, bytes) else str(source)
    out = []
    with av.open(handle) as container:
        stream = container.streams.video[0]
        for frame in container.decode(stream):
            out.append((frame.time, frame.to_ndarray(format="rgb24")))
    return out


def frame_times(source: str | Path | bytes) -> list[float]:
    return [t for t, _ in decode_all(source)]
