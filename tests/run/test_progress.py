"""The one progress reporter: its figures, its log lines without a terminal, its thread safety."""

from __future__ import annotations

import logging
import threading

import pytest

from feedline.run.progress import LOGGER_NAME, Progress, clock, human_bytes


def test_status_names_done_total_rate_eta_and_side_counts() -> None:
    p = Progress("download", total=4 << 30, unit="B", initial=1 << 30, counters={"files": 3}, enabled=False)
    p.update(512 << 20, files=1)
    text = p.status(now=p.started + 1.0)
    assert text.startswith("1.5 GiB of 4.0 GiB (38%), 512.0 MiB/s, ETA 0:00:05")
    assert text.endswith("; 1/3 files")


def test_unknown_total_says_so_far_and_grows_with_add_total() -> None:
    p = Progress("mix", unit="doc", enabled=False)
    p.update(10)
    assert "10 doc so far" in p.status()
    p.add_total(40)
    assert "10 doc of 40 doc (25%)" in p.status()


def test_adjust_counts_done_but_not_the_rate() -> None:
    p = Progress("x", total=100, enabled=False)
    p.adjust(50)
    p.update(10)
    assert p.done == 60 and p.received == 10


def test_logs_every_interval_and_a_summary_only_for_a_long_run(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER_NAME)
    quiet = Progress("short", total=5, enabled=False, log_every_s=3600)
    quiet.update(5)
    quiet.close()
    assert caplog.records == []
    p = Progress("long", total=5, enabled=False, log_every_s=0.0)
    p.update(2, documents=7)
    p.close()
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0].startswith("long: 2 item of 5 item (40%)") and "7 documents" in messages[0]
    assert messages[-1].startswith("long: 2 item in ")


def test_bar_on_request_and_closed(capsys: pytest.CaptureFixture[str]) -> None:
    with Progress("bar", total=3, unit="file", counters={"documents": None}, enabled=True) as p:
        p.update(1, documents=4)
        p.count(documents=1)
    err = capsys.readouterr().err
    assert "bar" in err and "5 documents" in err


def test_scaled_bar_shows_prefixed_counts(capsys: pytest.CaptureFixture[str]) -> None:
    with Progress("mix", unit="doc", counters={"streams": 2}, scale=True, enabled=True) as p:
        p.update(4500)
        p.count(streams=2)
    final = capsys.readouterr().err.replace("\r", "\n").strip().splitlines()[-1]
    assert final.startswith("mix: 4.50kdoc ") and "doc/s" in final and final.endswith("2/2 streams]")


def test_updates_from_threads_add_up() -> None:
    p = Progress("t", enabled=False, log_every_s=3600)
    threads = [threading.Thread(target=lambda: [p.update(1, docs=2) for _ in range(1000)]) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert p.done == 4000 and p.counts["docs"] == 8000


def test_units() -> None:
    assert human_bytes(512) == "512 B" and human_bytes(1536) == "1.5 KiB"
    assert human_bytes(12800, 3) == "12.500 KiB" and human_bytes(5 * 2**30, 3) == "5.000 GiB"
    assert clock(3723) == "1:02:03"
