"""report.html and the trace of a recorded run: every plot drawn, checked on a screenshot taken by
headless Chromium; the trace is Chrome/Perfetto trace-event JSON."""

from __future__ import annotations

import html.parser
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
from torch.utils.data import DataLoader

from feedline.episodes.errors import ReportError
from feedline.episodes.forecast.measure import RunRecorder
from feedline.episodes.forecast.model import predict
from feedline.episodes.forecast.plots import PLOTS
from feedline.episodes.forecast.trace import write_trace

from .conftest import open_reader

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
WIDTH, HEIGHT = 1200, 4200


@pytest.fixture(scope="module")
def recorded(plan_dataset, tmp_path_factory):
    reader = open_reader(plan_dataset.root, episode_pool_size=4)
    folder = tmp_path_factory.mktemp("report")
    recorder = RunRecorder(reader, folder)
    loader = DataLoader(reader, batch_size=8, num_workers=2)
    batches = sum(1 for _ in recorder.track(loader))
    assert batches > 10
    plan = predict(reader, num_workers=2, batch_size=8)
    return recorder, plan


class _Boxes(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.plots: dict[str, dict[str, str]] = {}

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img" and "plot" in (attrs.get("class") or ""):
            self.plots[attrs["id"]] = attrs


def _chromium(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--force-device-scale-factor=1", f"--window-size={WIDTH},{HEIGHT}",
         "--virtual-time-budget=5000", *args],
        capture_output=True, text=True, timeout=120,
    )


@pytest.mark.skipif(CHROMIUM is None, reason="headless chromium is not installed (make servers installs it)")
def test_every_plot_renders_on_a_screenshot(recorded, tmp_path) -> None:
    import matplotlib.image

    recorder, plan = recorded
    page = recorder.write_report(tmp_path / "report.html", prediction=plan)
    text = page.read_text()
    assert "http://" not in text and "https://" not in text  # nothing to fetch when it opens
    dom = _chromium("--dump-dom", page.as_uri())
    parser = _Boxes()
    parser.feed(dom.stdout)
    assert set(parser.plots) == {plot_id for plot_id, _ in PLOTS}, dom.stderr[-2000:]
    shot = tmp_path / "shot.png"
    _chromium(f"--screenshot={shot}", page.as_uri())
    image = matplotlib.image.imread(str(shot))[..., :3]
    assert image.shape[:2] == (HEIGHT, WIDTH)
    assert (image < 0.9).mean() > 0.02, "the page is blank"
    for plot_id, attrs in parser.plots.items():
        assert attrs.get("data-rendered") == "1", f"{plot_id} did not load"
        x, y, w, h = (int(v) for v in attrs["data-box"].split(","))
        assert w > 200 and h > 100 and y + h <= HEIGHT, (plot_id, attrs["data-box"])
        region = image[y : y + h, x : x + w]
        ink = (region < 0.85).any(axis=2).mean()
        colours = np.unique((region * 16).astype(np.int64).reshape(-1, 3), axis=0).shape[0]
        assert ink > 0.01 and colours > 8, f"{plot_id} looks empty: ink {ink:.3f}, {colours} colours"


def test_report_holds_settings_prediction_and_findings(recorded, tmp_path) -> None:
    from feedline.episodes.doctor.runner import run_doctor

    recorder, plan = recorded
    doctor = run_doctor(recorder.dataset.root_url, progress=False)
    text = recorder.write_report(tmp_path / "r.html", prediction=plan, doctor=doctor).read_text()
    for words in ("Predicted and measured", "episode_pool_size", "The doctor's findings",
                  "keyframes", "measured / predicted"):
        assert words in text, words


def test_a_missing_extra_is_one_line(recorded, tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ReportError, match=r"pip install 'feedline\[report\]'") as info:
        recorded[0].write_report(tmp_path / "none.html")
    assert "\n" not in str(info.value) and not (tmp_path / "none.html").exists()


def test_trace_is_trace_event_json(recorded, tmp_path) -> None:
    recorder, _ = recorded
    trace = json.loads(write_trace(recorder, tmp_path / "trace.json").read_text())
    events = trace["traceEvents"]
    names = {e["name"] for e in events if e["ph"] == "X"}
    assert {"fetch", "decode", "take", "worker_batch", "assemble", "batch wait"} <= names
    assert all(e["dur"] >= 0 and e["ts"] >= -1e6 for e in events if e["ph"] == "X")
    workers = {e["args"]["name"] for e in events if e["ph"] == "M"}
    assert {"training loop", "DataLoader worker 0", "DataLoader worker 1"} <= workers
    assert any(e["ph"] == "C" and e["name"] == "bytes" for e in events)
