"""Predicted against measured: the rows ``feedline plan --measure`` prints and the report shows,
each with the measured/predicted ratio (docs/plan.md says how close they come)."""

from __future__ import annotations

from typing import Any

__all__ = ["compare", "shown"]


#: (label, predicted key path, measured key, unit) of the side-by-side table.
_ROWS = (
    ("samples/s", ("samples_per_s", "predicted"), "samples_per_s", "rate"),
    ("first batch", ("first_batch_s",), "first_batch_s", "s"),
    ("peak payload per worker", ("workers", "peak_payload_bytes"), "peak_payload_bytes", "bytes"),
    ("peak decoded frames per worker", ("workers", "peak_decoded_bytes"), "peak_decoded_bytes", "bytes"),
    ("peak PSS per worker", ("workers", "peak_pss_bytes"), "peak_pss_bytes", "bytes"),
    ("bytes fetched per sample", ("bytes_per_sample",), "bytes_per_sample", "bytes"),
    ("decoded per delivered frame", ("workers", "decoded_per_delivered"), "decoded_per_delivered", "x"),
    ("episodes per batch", ("diversity", "batch_episodes_mean"), "batch_episodes_mean", "x"),
    ("episodes per 10 batches", ("diversity", "window_episodes_mean"), "window_episodes_mean", "x"),
)


def _predicted(rank: dict[str, Any], path: tuple[str, ...]) -> float | None:
    if path[0] == "workers":
        return max((w[path[1]] for w in rank["workers"]), default=None)
    if path[0] == "bytes_per_sample":
        return rank["bytes_fetched"] / max(1, rank["samples"])
    if path[0] == "diversity":
        return rank["diversity"]["actual"][path[1]]
    value: Any = rank
    for key in path:
        value = value[key]
    return value


def compare(prediction: dict[str, Any], measured: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows of predicted against measured (rank 0), with the measured/predicted ratio."""
    rank = prediction["ranks"][0]
    rows = []
    for label, path, key, unit in _ROWS:
        p = _predicted(rank, path)
        m = measured["diversity"].get(key) if key in measured["diversity"] else measured.get(key)
        ratio = m / p if isinstance(p, int | float) and isinstance(m, int | float) and p else None
        rows.append({"what": label, "unit": unit, "predicted": p, "measured": m,
                     "measured_per_predicted": None if ratio is None else round(ratio, 3)})
    return rows


def shown(value: Any, unit: str) -> str:
    """A compared value as a person reads it (bytes in binary units, seconds, rates)."""
    from feedline.run.progress import human_bytes

    if value is None:
        return "-"
    if unit == "bytes":
        return human_bytes(value)
    if unit == "s":
        return f"{value:.2f} s"
    if unit == "rate":
        return f"{value:.0f}"
    return f"{value:.2f}"
