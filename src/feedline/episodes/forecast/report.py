"""``report.html``: one self-contained page of a recorded run (no network when it opens).

It holds the plots of :mod:`.plots` as inline PNGs, a summary of the batch waits and of where
they went, the prediction beside the measurement when ``feedline plan`` made one, the settings,
and the doctor's findings. A few lines of inline script record each plot's box on the page
(``data-box``), which the report's own test reads to check every plot on a screenshot.
"""

from __future__ import annotations

import base64
import html
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from feedline.episodes.errors import ReportError
from feedline.episodes.forecast.plots import PLOTS, diversity, pyplot
from feedline.episodes.forecast.timeline import STAGES, Timeline, timeline
from feedline.io.atomic import atomic_write
from feedline.streaming.schedule.diversity import expected_share

__all__ = ["ideal_curve", "write_report"]

_STYLE = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;background:#fff}
h1{font-size:22px}h2{font-size:17px;margin-top:28px}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}
figure{margin:12px 0}figcaption{font-weight:600;margin-bottom:4px}
img.plot{display:block;max-width:100%;border:1px solid #eee}
.error{color:#b00020}.warning{color:#a05a00}
"""

_SCRIPT = """
window.addEventListener('load',function(){document.querySelectorAll('img.plot').forEach(function(i){
var r=i.getBoundingClientRect();i.setAttribute('data-box',[r.left+scrollX,r.top+scrollY,r.width,r.height].map(Math.round).join(','));
i.setAttribute('data-rendered',i.complete&&i.naturalWidth>0?'1':'0');});
document.body.setAttribute('data-ready','1');});
"""


def ideal_curve(dataset: Any) -> dict[str, Any]:
    """What an ideal shuffle of the rank's episodes gives: mean episodes per batch and the share
    of episodes seen along the epoch (exact expectation)."""
    units = dataset.rank_units()
    lengths = dataset.feed.epoch_lengths(dataset.epoch)
    sizes = [int(lengths[int(u)]) for u in units]
    total = sum(sizes)
    marks = np.linspace(0, total, 41)[1:]
    batch = dataset.batch_size or 1
    mean = float(dataset.ideal_diversity(batch).batch_episodes_mean) if sizes else 0.0
    return {"episodes": len(sizes), "samples": total, "batch_mean": mean,
            "share": [expected_share(sizes, int(m)) for m in marks] if sizes else [],
            "share_at": (marks / max(1, total)).tolist()}


def _table(rows: list[list[Any]], head: list[str] | None = None, classes: list[str] | None = None) -> str:
    out = ["<table>"]
    if head:
        out.append("<tr>" + "".join(f"<th>{html.escape(str(h))}</th>" for h in head) + "</tr>")
    for i, row in enumerate(rows):
        cls = f' class="{classes[i]}"' if classes and classes[i] else ""
        out.append(f"<tr{cls}>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>")
    out.append("</table>")
    return "".join(out)


def _summary(run: Timeline) -> str:
    waits = 1e3 * run.waits
    totals = run.stage_totals()
    waited = sum(totals[s] for s in STAGES if s != "consumer")
    shares = ", ".join(f"{s} {100 * totals[s] / waited:.0f} %" for s in STAGES if s != "consumer") \
        if waited > 0 else "no wait"
    rows = [
        ["batches", len(run.batches)], ["samples", sum(b["size"] for b in run.batches)],
        ["batch wait p50 / p95 / p99", " / ".join(f"{np.percentile(waits, q):.1f} ms" for q in (50, 95, 99))],
        ["total wait", f"{waited:.2f} s ({shares})"],
        ["the loop's own time between batches", f"{totals['consumer']:.2f} s"],
    ]
    return _table(rows)


def _comparison(prediction: dict[str, Any], measured: dict[str, Any] | None) -> str:
    from feedline.episodes.forecast.compare import compare, shown

    if measured is None:
        return ""
    rows = [[r["what"], shown(r["predicted"], r["unit"]), shown(r["measured"], r["unit"]),
             "-" if r["measured_per_predicted"] is None else f"x{r['measured_per_predicted']:.2f}"]
            for r in compare(prediction, measured)]
    return "<h2>Predicted and measured</h2>" + _table(rows, ["", "predicted", "measured", "measured / predicted"])


def _doctor(reports: list[Any]) -> str:
    if not reports:
        return "<h2>The doctor's findings</h2><p>not run</p>"
    out = ["<h2>The doctor's findings</h2>"]
    for report in reports:
        summary = report.summary()
        out.append(f"<p>{html.escape(report.root)}: {summary['errors']} error(s), "
                   f"{summary['warnings']} warning(s), {summary['info']} info</p>")
        rows = [[f.severity, f.check, f.file or "", "" if f.episode is None else f.episode,
                 f.problem, f.fix] for f in report.findings]
        if rows:
            out.append(_table(rows, ["severity", "check", "file", "episode", "problem", "fix"],
                              [f.severity for f in report.findings]))
    return "".join(out)


def write_report(
    recorder: Any, path: str | os.PathLike[str], *, prediction: dict[str, Any] | None = None,
    doctor: Any = None, measured: dict[str, Any] | None = None,
) -> Path:
    """Write the page of ``recorder``'s run to ``path`` (atomically) and return its path."""
    pyplot()  # a missing extra fails before any work
    run = timeline(recorder)
    if not run.batches:
        raise ReportError(f"{path}: the run recorded no batch, so there is nothing to report")
    dataset = recorder.dataset
    ideal = ideal_curve(dataset)
    figures = []
    for plot_id, draw in PLOTS:
        title, png = draw(run, prediction, ideal) if draw is diversity else draw(run, prediction)
        data = base64.b64encode(png).decode("ascii")
        figures.append(f'<figure><figcaption>{html.escape(title)}</figcaption>'
                       f'<img class="plot" id="{plot_id}" alt="{html.escape(title)}" '
                       f'src="data:image/png;base64,{data}"></figure>')
    if measured is None and prediction is not None:
        measured = recorder.measured()
    settings = [[k, v] for k, v in asdict(dataset.settings).items()]
    if prediction is not None:
        settings += [[k, v] for k, v in prediction["topology"].items()]
    reports = doctor if isinstance(doctor, list) else ([] if doctor is None else [doctor])
    body = "".join([
        f"<h1>feedline run report: {html.escape(str(getattr(dataset, 'root_url', '') or 'mixture'))}</h1>",
        "<h2>Batch waits</h2>", _summary(run), *figures,
        _comparison(prediction, measured) if prediction is not None else "",
        "<h2>Settings</h2>", _table(settings, ["setting", "value"]),
        _doctor(reports),
    ])
    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>feedline run report</title>"
            f"<style>{_STYLE}</style><script>{_SCRIPT}</script></head><body>{body}</body></html>")
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(target) as handle:
        handle.write(page.encode("utf-8"))
    return target
