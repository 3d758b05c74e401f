"""Taggers used by the processor tests, loaded with --tagger-modules in subprocesses and workers.

``test_slow_v1`` sleeps per document so a run can be killed mid-way. ``test_flaky_v1`` raises
RetryableFailure the first FEEDLINE_TEST_FLAKY_TIMES times it sees each file's first document
(counted in files under FEEDLINE_TEST_STATE). ``test_broken_v1`` raises a plain error on ids
containing "bad"; ``test_chatty_v1`` raises one whose message spans several lines, as library
errors often do. ``test_dies_v1`` ends its worker process (``os._exit`` or a pid to ``kill -9``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from feedline.curate.errors import RetryableFailure
from feedline.curate.model import DocResult
from feedline.curate.registry import add_tagger
from feedline.curate.taggers.base import BaseTagger, whole


@add_tagger("test_slow_v1")
class Slow(BaseTagger):
    """Sleeps, then reports the text length."""

    def predict(self, doc):
        time.sleep(float(os.environ.get("FEEDLINE_TEST_SLEEP", "0.02")))
        return DocResult(doc, [whole(doc, "length", len(doc.text))])


@add_tagger("test_flaky_v1")
class Flaky(BaseTagger):
    """Fails with RetryableFailure a set number of times per file."""

    def predict(self, doc):
        if doc.id.endswith("-0"):
            state = Path(os.environ["FEEDLINE_TEST_STATE"]) / doc.id
            seen = int(state.read_text()) if state.exists() else 0
            state.write_text(str(seen + 1))
            if seen < int(os.environ.get("FEEDLINE_TEST_FLAKY_TIMES", "1")):
                raise RetryableFailure(f"transient failure {seen + 1} on {doc.id}")
        return DocResult(doc, [whole(doc, "ok", 1)])


@add_tagger("test_broken_v1")
class Broken(BaseTagger):
    """Raises a plain error on ids containing 'bad'."""

    def predict(self, doc):
        if "bad" in doc.id:
            raise self.error(doc)
        return DocResult(doc, [whole(doc, "ok", 1)])

    def error(self, doc):
        return ValueError(f"cannot tag {doc.id}")


@add_tagger("test_chatty_v1")
class Chatty(Broken):
    """Raises an error with a multi-line message on ids containing 'bad'."""

    def error(self, doc):
        return RuntimeError(f"cannot tag {doc.id}\n  detail: the model said no\n  hint: see above")


@add_tagger("test_dies_v1")
class Dies(BaseTagger):
    """Ends its worker process on the document FEEDLINE_TEST_VICTIM (an id), once another file of
    the run has its ``.done`` marker: ``os._exit(3)`` with FEEDLINE_TEST_DEATH=exit; with =kill
    it writes its pid to FEEDLINE_TEST_PID and sleeps, for the test to ``kill -9`` it. Without
    FEEDLINE_TEST_VICTIM it only reports the text length, so a rerun is the same job."""

    workdir: str | None = None

    def begin_file(self, source, workdir):
        self.workdir = workdir

    def predict(self, doc):
        if doc.id == os.environ.get("FEEDLINE_TEST_VICTIM"):
            deadline = time.monotonic() + 60
            while self.workdir and not list(Path(self.workdir).glob("*.done")) and time.monotonic() < deadline:
                time.sleep(0.05)
            if os.environ.get("FEEDLINE_TEST_DEATH") == "exit":
                os._exit(3)
            Path(os.environ["FEEDLINE_TEST_PID"]).write_text(str(os.getpid()))
            time.sleep(120)
        return DocResult(doc, [whole(doc, "length", len(doc.text))])
