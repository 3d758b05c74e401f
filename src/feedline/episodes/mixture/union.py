"""The mixture's sample schema: the union of its sources' keys, and the stats over all of them.

Why: datasets recorded on different robots name, size and choose their features differently.
LeRobot's ``MultiLeRobotDataset`` keeps only the keys every dataset shares; a mixture here keeps
the union, so that a source without a wrist camera still trains the policy on its other inputs:

* keys are renamed per source first (``feature_map``);
* a key a source lacks comes as zeros of the mixture's shape, with ``<key>_is_pad`` all true;
  the sources that have it carry the same mask, all false, so every sample has the same keys;
* a vector narrower than the widest one under its key is zero-padded at the end;
* two image shapes under one key are refused (resize the videos, or map one to another key);
* every sample carries ``dataset_index``, its source's position (as ``MultiLeRobotDataset``).

:func:`aggregate_stats` weights each source's stats by its anchors per epoch, as LeRobot's
``aggregate_stats`` weights by frame counts: the normalisation a policy learns matches what the
mixture feeds it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from feedline.episodes.errors import MixtureError
from feedline.episodes.windows import PAD_SUFFIX

__all__ = ["SourceSchema", "UnionSchema", "aggregate_stats"]

#: Columns every LeRobot v3 dataset has; never padded or flagged.
_DEFAULT_KEYS = ("timestamp", "frame_index", "episode_index", "index", "task_index")


@dataclass(frozen=True)
class SourceSchema:
    """What the union needs of one source.

    Args:
        name: how errors name the source (its root).
        features: the source's ``info.json`` features, keys already renamed.
        feature_map: the source's renames (its key -> the mixture's).
    """

    name: str
    features: Mapping[str, Mapping[str, Any]]
    feature_map: Mapping[str, str]


def _is_video(ft: Mapping[str, Any]) -> bool:
    return ft.get("dtype") in ("video", "image")


class UnionSchema:
    """The union of the sources' features, and how each source's samples are brought to it.

    Args:
        sources: every source's :class:`SourceSchema`, in ``dataset_index`` order.
        window_keys: the keys ``delta_timestamps`` gives windows, with their lengths.
        return_uint8: images as ``uint8`` (else ``float32``), as the reader returns them.
    """

    def __init__(
        self, sources: Sequence[SourceSchema], window_keys: Mapping[str, int],
        return_uint8: bool = False,
    ) -> None:
        self.sources = list(sources)
        self.window_keys = dict(window_keys)
        self.return_uint8 = return_uint8
        features: dict[str, dict[str, Any]] = {}
        owner: dict[str, int] = {}
        for s, src in enumerate(self.sources):
            for key, ft in src.features.items():
                if key not in features:
                    features[key] = {**ft, "shape": list(ft.get("shape") or [1])}
                    owner[key] = s
                    continue
                self._merge(features[key], ft, key, self.sources[owner[key]], src)
        self.features = features
        self.present = [frozenset(src.features) for src in self.sources]
        everywhere = frozenset.intersection(*self.present)
        #: Keys some source lacks: each sample carries ``<key>_is_pad`` for them.
        self.flagged = tuple(k for k in features if k not in everywhere and k not in _DEFAULT_KEYS)

    @staticmethod
    def _merge(
        into: dict[str, Any], ft: Mapping[str, Any], key: str, first: SourceSchema,
        other: SourceSchema,
    ) -> None:
        shape, theirs = list(into["shape"]), list(ft.get("shape") or [1])
        if _is_video(into) != _is_video(ft):
            raise MixtureError(
                f"{key!r} is {'a camera' if _is_video(into) else 'a vector'} in {first.name} but "
                f"{'a camera' if _is_video(ft) else 'a vector'} in {other.name}; rename one with "
                "feature_map"
            )
        if _is_video(into):
            if shape != theirs:
                raise MixtureError(
                    f"{key!r} is {shape} in {first.name} but {theirs} in {other.name}; images "
                    "under one key must have one shape: re-encode one source at the other's "
                    "size, or give it another key with feature_map"
                )
            return
        if len(shape) != 1 or len(theirs) != 1:
            if shape != theirs:
                raise MixtureError(
                    f"{key!r} has shape {shape} in {first.name} but {theirs} in {other.name}; "
                    "only 1-D vectors are zero-padded to the widest: rename one with feature_map"
                )
            return
        if theirs[0] > shape[0]:
            into["shape"] = theirs
            if ft.get("names") is not None:
                into["names"] = ft.get("names")

    # ---- samples ------------------------------------------------------------------------------

    def adapt(self, sample: dict[str, Any], source: int) -> dict[str, Any]:
        """``sample`` of ``source`` (its own keys) in the mixture's schema."""
        import torch

        src = self.sources[source]
        out: dict[str, Any] = {}
        for key, value in sample.items():
            if key.endswith(PAD_SUFFIX):
                base = key[: -len(PAD_SUFFIX)]
                out[src.feature_map.get(base, base) + PAD_SUFFIX] = value
            else:
                out[src.feature_map.get(key, key)] = value
        present = self.present[source]
        for key, ft in self.features.items():
            width = ft["shape"][0] if not _is_video(ft) and len(ft["shape"]) == 1 else None
            if key in present:
                value = out.get(key)
                if width is not None and isinstance(value, torch.Tensor) and value.ndim >= 1 and (
                    value.shape[-1] < width and key not in _DEFAULT_KEYS
                ):
                    pad = [0] * (2 * value.ndim)
                    pad[1] = width - value.shape[-1]  # last dimension, at the end
                    out[key] = torch.nn.functional.pad(value, pad)
                if key in self.flagged and key + PAD_SUFFIX not in out:
                    out[key + PAD_SUFFIX] = self._mask(key, False)
                continue
            out[key] = self._zeros(key, ft)
            out[key + PAD_SUFFIX] = self._mask(key, True)
        if "task" not in out and any("task_index" in p for p in self.present):
            out["task"] = ""
        out["dataset_index"] = torch.tensor(source, dtype=torch.int64)
        return out

    def _mask(self, key: str, value: bool) -> Any:
        """``<key>_is_pad``: one flag per window slot, or one for a key without a window."""
        import torch

        window = self.window_keys.get(key)
        return torch.full((window,) if window else (), value, dtype=torch.bool)

    def _zeros(self, key: str, ft: Mapping[str, Any]) -> Any:
        import torch

        window = self.window_keys.get(key)
        if _is_video(ft):
            h, w, c = (int(x) for x in ft["shape"])
            shape: tuple[int, ...] = (c, h, w)
            dtype = torch.uint8 if self.return_uint8 else torch.float32
        else:
            shape = tuple(int(x) for x in ft["shape"])
            dtype = torch.float64 if ft.get("dtype") == "float64" else torch.float32
            if ft.get("dtype", "").startswith(("int", "uint", "bool")):
                dtype = torch.int64
        return torch.zeros((window, *shape) if window else shape, dtype=dtype)


def aggregate_stats(
    stats: Sequence[Mapping[str, Mapping[str, np.ndarray]] | None], weights: Sequence[float],
    widths: Mapping[str, int] | None = None,
) -> dict[str, dict[str, np.ndarray]]:
    """Stats of the mixture, per key over the sources that have it, weighted by ``weights``.

    ``mean`` and the quantiles are weighted means, ``std`` comes from the pooled variance
    (within plus between sources), ``min``/``max`` are the extremes and ``count`` the sum. A
    vector narrower than ``widths[key]`` counts zeros in its padded dimensions, as the samples
    carry them. A source without stats (``None``) or with zero weight adds nothing.
    """
    widths = dict(widths or {})
    keys: list[str] = []
    for per in stats:
        for key in per or {}:
            if key not in keys:
                keys.append(key)
    out: dict[str, dict[str, np.ndarray]] = {}
    for key in keys:
        parts = [
            (float(w), {n: np.asarray(v, dtype=np.float64) for n, v in per[key].items()})
            for per, w in zip(stats, weights, strict=True)
            if per and key in per and w > 0
        ]
        if not parts:
            continue
        width = widths.get(key)
        if width is not None:
            parts = [(w, _padded(p, width)) for w, p in parts]
        total = sum(w for w, _ in parts)
        names = set.intersection(*(set(p) for _, p in parts))
        agg: dict[str, np.ndarray] = {}
        if "mean" in names:
            mean = sum(w * p["mean"] for w, p in parts) / total
            agg["mean"] = mean
            if "std" in names:
                var = sum(w * (p["std"] ** 2 + (p["mean"] - mean) ** 2) for w, p in parts) / total
                agg["std"] = np.sqrt(var)
        if "min" in names:
            agg["min"] = np.minimum.reduce([p["min"] for _, p in parts])
        if "max" in names:
            agg["max"] = np.maximum.reduce([p["max"] for _, p in parts])
        if "count" in names:
            agg["count"] = sum(p["count"] for _, p in parts)
        for name in sorted(n for n in names if n.startswith("q")):
            agg[name] = sum(w * p[name] for w, p in parts) / total
        out[key] = agg
    return out


def _padded(stats: Mapping[str, np.ndarray], width: int) -> dict[str, np.ndarray]:
    out = {}
    for name, value in stats.items():
        if name != "count" and value.ndim == 1 and value.shape[0] < width:
            value = np.concatenate([value, np.zeros(width - value.shape[0])])
        out[name] = value
    return out
