"""``feedline mix``: a documents/s progress bar while it runs, per-filter counts at the end.

The oracle for the counts evaluates each filter's condition in plain Python on the attribute
rows the real taggers wrote, independently of feedline's JSONPath engine.
"""

from __future__ import annotations

import fcntl
import gzip
import json
import os
import pty
import re
import select
import struct
import subprocess
import termios
from pathlib import Path

from feedline.curate.mixconfig import parse_config
from feedline.curate.mixer import run_mix
from feedline.curate.processor import run_tag
from feedline.curate.runtime import TagJob
from tests.cli import feedline_argv
from tests.curate.helpers import make_corpus, run_feedline, write_jsonl

LENGTH = "q__char_length_v1__length"
WORDS = "q__whitespace_tokenizer_v1__length"
PII = "q__pii_regex_v2__doc"
#: (kind, JSONPath, the same condition in Python on the attributes)
FILTERS = [
    ("include", f"$.attributes[?(@.{LENGTH}[0][2] >= 120)]", lambda a: a[LENGTH][0][2] >= 120),
    ("include", f"$.attributes[?(@.{WORDS}[0][2] < 20)]", lambda a: a[WORDS][0][2] < 20),
    ("exclude", f"$.attributes[?(@.{PII}[0][2] > 0)]", lambda a: a[PII][0][2] > 0),
    ("exclude", f"$.attributes[?(@.{LENGTH}[0][2] > 450)]", lambda a: a[LENGTH][0][2] > 450),
    ("exclude", f"$.attributes[?(@.{WORDS}[0][2] > 100)]", lambda a: a[WORDS][0][2] > 100),
]
MIN_TEXT_LENGTH = 100


def tagged_corpus(root: Path, files: int = 4, docs: int = 250) -> list[dict]:
    make_corpus(root, files=files, docs=docs, seed=3)
    run_tag([f"{root}/documents/*.jsonl.gz"],
            TagJob(("char_length_v1", "pii_regex_v2", "whitespace_tokenizer_v1"), experiment="q"))
    rows = []
    for path in sorted((root / "attributes" / "q").glob("*.jsonl.gz")):
        documents = root / "documents" / path.name
        for doc, attr in zip(gzip.decompress(documents.read_bytes()).splitlines(),
                             gzip.decompress(path.read_bytes()).splitlines(), strict=True):
            rows.append({**json.loads(doc), "attributes": json.loads(attr)["attributes"]})
    return rows


def mix_config(root: Path) -> dict:
    return {"streams": [{
        "name": "cc",
        "documents": [f"{root}/documents/*.jsonl.gz"],
        "attributes": ["q"],
        "filter": {"include": [f for k, f, _ in FILTERS if k == "include"],
                   "exclude": [f for k, f, _ in FILTERS if k == "exclude"]},
        "output": {"path": f"{root}/mixed", "min_text_length": MIN_TEXT_LENGTH},
    }]}


def test_per_filter_counts_equal_each_expression_evaluated_alone(tmp_path):
    rows = tagged_corpus(tmp_path)
    config = tmp_path / "mix.json"
    config.write_text(json.dumps(mix_config(tmp_path)))
    summary_file = tmp_path / "report" / "run.json"
    proc = run_feedline("mix", str(config), "--summary", str(summary_file))

    expected = []
    for kind, expression, test in FILTERS:
        matched = sum(1 for r in rows if test(r["attributes"]))
        expected.append({"kind": kind, "expression": expression, "matched": matched,
                         "removed": len(rows) - matched if kind == "include" else matched})
    passes = [any(t(r["attributes"]) for k, _, t in FILTERS if k == "include")
              and not any(t(r["attributes"]) for k, _, t in FILTERS if k == "exclude") for r in rows]
    short = sum(1 for r, ok in zip(rows, passes, strict=True) if ok and len(r["text"]) < MIN_TEXT_LENGTH)
    kept = sum(passes) - short
    assert 0 < kept < len(rows) and short > 0 and all(0 < e["removed"] < len(rows) for e in expected), expected

    (stream,) = json.loads(summary_file.read_text())["streams"]
    assert stream["filters"] == expected
    assert (stream["documents"], stream["kept"], stream["removed"]) == (len(rows), kept, len(rows) - kept)
    assert stream["removed_by_filters"] == len(rows) - sum(passes)
    assert stream["removed_by_min_text_length"] == short
    beside = json.loads((tmp_path / "mixed" / ".feedline-mix" / "cc.json").read_text())
    assert beside == stream
    out = proc.stdout
    assert f"cc: kept {kept:,} of {len(rows):,} documents" in out
    assert (f"cc:   removed {len(rows) - sum(passes):,} by the filters, {short:,} by output.min_text_length "
            f"{MIN_TEXT_LENGTH}") in out
    for e in expected:
        assert f"cc:   {e['kind']} {e['expression']}: removed {e['removed']:,} (matched {e['matched']:,})" in out
    mixed = sum(len(gzip.decompress(p.read_bytes()).splitlines()) for p in (tmp_path / "mixed").glob("cc-*"))
    assert mixed == kept


def run_in_pty(args: list[str], timeout: float = 120) -> tuple[int, str]:
    """Run the command with stderr on a pseudo-terminal, as a user at a terminal sees it."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))  # 40 rows, 160 columns
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=follower, stdin=subprocess.DEVNULL)
    os.close(follower)
    chunks = []
    while True:
        ready, _, _ = select.select([leader], [], [], timeout)
        if not ready:
            proc.kill()
            raise AssertionError("no output from the command in time")
        try:
            data = os.read(leader, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    return proc.wait(timeout=timeout), b"".join(chunks).decode(errors="replace")


def test_progress_bar_on_a_terminal_shows_documents_per_second(tmp_path):
    make_corpus(tmp_path, files=3, docs=2000, seed=1)
    write_attrs = {"streams": [{"name": "all", "documents": [f"{tmp_path}/documents/*.jsonl.gz"],
                                "filter": {"exclude": ["$.metadata[?(@.url == 'none')]"]},
                                "output": {"path": f"{tmp_path}/mixed"}}]}
    config = tmp_path / "mix.json"
    config.write_text(json.dumps(write_attrs))
    code, screen = run_in_pty([*feedline_argv("mix", str(config))])
    assert code == 0, screen
    frames = [f for f in re.split(r"[\r\n]", screen) if f.startswith("mix:")]
    assert frames and re.search(r"doc/s", frames[-1]), screen
    assert re.search(r"mix: 6\.00kdoc .*1/1 streams", frames[-1]), frames[-1]


def test_parallel_streams_report_progress_through_the_queue(tmp_path, capsys):
    for name in ("a", "b", "c"):
        write_jsonl(tmp_path / name / "documents" / "x.jsonl", [{"id": f"{name}{i}", "text": "t" * (i % 7)}
                                                                 for i in range(1500)])
    streams = parse_config({"streams": [
        {"name": name, "documents": [str(tmp_path / name / "documents" / "*.jsonl")],
         "filter": {"exclude": ["$[?(@.text == 'tt')]"]}, "output": {"path": str(tmp_path / "out")}}
        for name in ("a", "b", "c")
    ]})
    report = run_mix(streams, processes=2, show_progress=True)
    assert [s.documents for s in report.streams] == [1500] * 3
    bar = capsys.readouterr().err
    final = [f for f in re.split(r"[\r\n]", bar) if f.startswith("mix:")][-1]
    assert re.search(r"mix: 4\.50kdoc .*doc/s.*3/3 streams", final), final
