"""History/future windows: ``delta_timestamps`` → delta indices → query indices and pad masks.

Pure functions, shared by the map-style and the streaming reader so both resolve windows the
same way LeRobot's map-style dataset does (``feature_utils.check_delta_timestamps`` /
``get_delta_indices`` and ``dataset_reader._get_query_indices`` in LeRobot 0.6.1):

* every delta must be a multiple of ``1/fps`` within ``tolerance_s``; its index is ``round(d*fps)``;
* the query index is ``clamp(i + d, ep_from, ep_to - 1)``, so a padded slot repeats the edge
  frame/row of the episode rather than holding zeros;
* ``<key>_is_pad`` is true where ``i + d`` falls outside ``[ep_from, ep_to)``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np

from feedline.episodes.errors import DeltaTimestampsError

PAD_SUFFIX = "_is_pad"


def check_delta_timestamps(
    delta_timestamps: Mapping[str, Iterable[float]],
    fps: float,
    tolerance_s: float,
    features: Iterable[str] | None = None,
) -> None:
    """Refuse deltas that are not whole frames (within ``tolerance_s``) or keys that are not features."""
    if features is not None:
        known = set(features)
        unknown = sorted(k for k in delta_timestamps if k not in known)
        if unknown:
            raise DeltaTimestampsError(
                f"delta_timestamps names unknown feature(s) {unknown}; the dataset has {sorted(known)}"
            )
    for key, deltas in delta_timestamps.items():
        values = list(deltas)
        if not values:
            raise DeltaTimestampsError(
                f"delta_timestamps[{key!r}] is empty; give at least one offset in seconds"
            )
        for d in values:
            if not isinstance(d, int | float | np.integer | np.floating) or not math.isfinite(
                float(d)
            ):
                raise DeltaTimestampsError(
                    f"delta_timestamps[{key!r}] holds {d!r}, not a number of seconds"
                )
        off = [d for d in values if abs(float(d) - round(float(d) * fps) / fps) > tolerance_s]
        if off:
            raise DeltaTimestampsError(
                f"delta_timestamps[{key!r}] = {off[:5]} are not multiples of 1/fps = {1 / fps:.6g} s "
                f"within tolerance_s={tolerance_s}"
            )


def delta_indices(
    delta_timestamps: Mapping[str, Iterable[float]],
    fps: float,
    tolerance_s: float = 1e-4,
    features: Iterable[str] | None = None,
) -> dict[str, np.ndarray]:
    """Checked ``{key: int64 array of frame offsets}`` in the order given."""
    check_delta_timestamps(delta_timestamps, fps, tolerance_s, features)
    return {
        key: np.array([round(float(d) * fps) for d in deltas], dtype=np.int64)
        for key, deltas in delta_timestamps.items()
    }


def query_window(
    anchor: int | np.ndarray, deltas: np.ndarray, ep_from: int | np.ndarray, ep_to: int | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Clamped query indices and the pad mask for one key.

    ``anchor``/``ep_from``/``ep_to`` may be scalars or arrays of N anchors (each with its own
    episode bounds, ``ep_to`` exclusive); the result then has shape ``[N, len(deltas)]``.
    """
    if isinstance(anchor, int | np.integer) and isinstance(ep_from, int | np.integer) and isinstance(
        ep_to, int | np.integer
    ):  # one anchor (every sample's path): the same result with a few scalar operations
        if not ep_from <= anchor < ep_to:
            raise ValueError("anchor index outside its episode's [ep_from, ep_to) range")
        wanted = np.asarray(deltas, dtype=np.int64) + int(anchor)
        is_pad = (wanted < ep_from) | (wanted >= ep_to)
        return np.minimum(np.maximum(wanted, int(ep_from)), int(ep_to) - 1), is_pad
    anchor_arr = np.asarray(anchor, dtype=np.int64)[..., None]
    lo = np.asarray(ep_from, dtype=np.int64)[..., None]
    hi = np.asarray(ep_to, dtype=np.int64)[..., None]
    if np.any(anchor_arr < lo) or np.any(anchor_arr >= hi):
        raise ValueError("anchor index outside its episode's [ep_from, ep_to) range")
    wanted = anchor_arr + np.asarray(deltas, dtype=np.int64)
    is_pad = (wanted < lo) | (wanted >= hi)
    return np.clip(wanted, lo, hi - 1), is_pad


def query_windows(
    anchor: int, deltas_by_key: Mapping[str, np.ndarray], ep_from: int, ep_to: int
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Per key: ``(query indices, {"<key>_is_pad": mask})`` for one anchor, as LeRobot returns them."""
    indices: dict[str, np.ndarray] = {}
    padding: dict[str, np.ndarray] = {}
    for key, deltas in deltas_by_key.items():
        indices[key], padding[key + PAD_SUFFIX] = query_window(anchor, deltas, ep_from, ep_to)
    return indices, padding
