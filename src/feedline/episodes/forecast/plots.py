"""The report's plots, drawn with matplotlib (the ``feedline[report]`` extra) into PNG bytes.

Why matplotlib: it draws offline into plain PNGs that the page inlines (no JavaScript library, no
CDN, nothing fetched when the page opens), it is on every scientific Python machine already, and
its Agg backend needs no display. Each function takes a
:class:`~feedline.episodes.forecast.timeline.Timeline` (and the prediction, when there is one) and
returns ``(title, png bytes)``.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from feedline.episodes.errors import ReportError
from feedline.episodes.forecast.timeline import STAGES, Timeline

__all__ = ["PLOTS", "pyplot"]

_COLOURS = {"fetch": "#d95f02", "decode": "#1b9e77", "assemble": "#7570b3", "consumer": "#bbbbbb"}


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend, or a one-line error naming the extra."""
    try:
        import matplotlib
    except ImportError:
        raise ReportError(
            "the report's plots need matplotlib: pip install 'feedline[report]'"
        ) from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _png(fig: Any) -> bytes:
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=90, bbox_inches="tight")
    pyplot().close(fig)
    return out.getvalue()


def _figure(width: float = 7.0, height: float = 3.0, cols: int = 1) -> tuple[Any, Any]:
    return pyplot().subplots(1, cols, figsize=(width, height))


def wait_histogram(run: Timeline, prediction: dict[str, Any] | None) -> tuple[str, bytes]:
    fig, ax = _figure()
    waits = 1e3 * run.waits
    ax.hist(waits, bins=min(60, max(10, waits.size // 4)), color="#1b9e77")
    for q, style in ((50, ":"), (95, "--"), (99, "-")):
        value = float(np.percentile(waits, q))
        ax.axvline(value, color="black", linestyle=style, label=f"p{q} {value:.1f} ms")
    ax.set_xlabel("batch wait (ms)")
    ax.set_ylabel("batches")
    ax.legend()
    return "Batch wait", _png(fig)


def wait_over_time(run: Timeline, prediction: dict[str, Any] | None) -> tuple[str, bytes]:
    fig, ax = _figure()
    at = np.asarray([b["at"] for b in run.batches])
    ax.plot(at, 1e3 * run.waits, ".", markersize=3, color="#1b9e77", label="each batch")
    if at.size >= 10:
        kernel = np.ones(10) / 10
        ax.plot(at[9:], 1e3 * np.convolve(run.waits, kernel, "valid"), color="black",
                label="mean of 10")
    ax.set_xlabel("seconds since the loader started")
    ax.set_ylabel("batch wait (ms)")
    ax.legend()
    return "Batch wait over time", _png(fig)


def diversity(run: Timeline, prediction: dict[str, Any] | None, ideal: dict[str, Any]) -> tuple[str, bytes]:
    fig, (left, right) = _figure(11, 3.2, cols=2)
    distinct = np.asarray([b["episodes"] for b in run.batches], dtype=np.float64)
    left.plot(distinct, ".", markersize=3, color="#1b9e77", label="measured, each batch")
    predicted = (prediction or {}).get("curves", {}).get("diversity")
    if predicted:
        left.plot(predicted["batch_distinct"][: distinct.size], color="#d95f02", linewidth=1,
                  label="predicted (this strategy)")
    left.axhline(ideal["batch_mean"], color="black", linestyle="--", label="ideal shuffle, mean")
    left.set_xlabel("batch")
    left.set_ylabel("distinct episodes per batch")
    left.legend(fontsize=8)
    touched: set[int] = set()
    share = []
    samples = 0
    fraction = []
    for b in run.batches:
        touched.update(b["ids"])
        samples += b["size"]
        share.append(len(touched) / max(1, ideal["episodes"]))
        fraction.append(samples / max(1, ideal["samples"]))
    right.plot(fraction, share, color="#1b9e77", label="measured")
    right.plot(ideal["share_at"], ideal["share"], color="black", linestyle="--", label="ideal shuffle")
    right.set_xlabel("share of the epoch served")
    right.set_ylabel("share of the rank's episodes seen")
    right.set_xlim(0, max(fraction[-1] if fraction else 1, 0.05))
    right.set_ylim(0, 1.05)
    right.legend(fontsize=8)
    return "Diversity over the epoch, against an ideal shuffle", _png(fig)


def bytes_over_time(run: Timeline, prediction: dict[str, Any] | None) -> tuple[str, bytes]:
    fig, ax = _figure()
    for pid, values in sorted(run.counters.items()):
        if not values:
            continue
        arr = np.asarray(values)
        label = f"worker {run.workers.get(pid)}"
        ax.plot(arr[:, 0], arr[:, 1] / 2**20, label=f"{label}: reserved")
        ax.plot(arr[:, 0], (arr[:, 1] - arr[:, 2]) / 2**20, linestyle=":", label=f"{label}: in flight")
    if prediction:
        peak = max(w["peak_payload_bytes"] for w in prediction["ranks"][0]["workers"])
        ax.axhline(peak / 2**20, color="black", linestyle="--", label="predicted peak per worker")
    ax.set_xlabel("seconds since the loader started")
    ax.set_ylabel("MiB")
    ax.legend(fontsize=8)
    return "Bytes resident and in flight", _png(fig)


def stages(run: Timeline, prediction: dict[str, Any] | None) -> tuple[str, bytes]:
    fig, (left, right) = _figure(11, 3.2, cols=2)
    x = np.arange(len(run.batches))
    bottom = np.zeros(x.size)
    for stage in STAGES:
        values = 1e3 * np.asarray([b[stage] for b in run.batches])
        left.bar(x, values, bottom=bottom, width=1.0, color=_COLOURS[stage], label=stage)
        bottom += values
    left.set_xlabel("batch")
    left.set_ylabel("ms")
    left.legend(fontsize=8)
    totals = run.stage_totals()
    right.barh(list(STAGES), [totals[s] for s in STAGES], color=[_COLOURS[s] for s in STAGES])
    right.set_xlabel("seconds over the run")
    return "Where each batch's wait went (and the loop's own time)", _png(fig)


#: The report's plots, in page order: (id, function).
PLOTS = (
    ("wait-histogram", wait_histogram),
    ("wait-over-time", wait_over_time),
    ("diversity", diversity),
    ("bytes", bytes_over_time),
    ("stages", stages),
)
