from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from feedline.curate.errors import AlignmentError, CurateError
from feedline.curate.jsonpath import JsonPath
from feedline.curate.mixconfig import load_config, parse_config
from feedline.curate.mixer import replace_spans, run_mix
from feedline.curate.processor import run_tag
from feedline.curate.runtime import TagJob

from .helpers import cut, make_corpus, read_jsonl, run_feedline, write_jsonl, write_multiframe_zst

SAMPLE = Path(__file__).with_name("data") / "dolma_sample"


def stream(root: Path, **overrides) -> dict:
    config = {
        "name": "mix",
        "documents": [str(root / "documents" / "*.jsonl*")],
        "attributes": ["e"],
        "output": {"path": str(root / "out"), "max_size_in_bytes": 1 << 30},
    }
    config.update(overrides)
    return {"streams": [config]}


def mixed_rows(root: Path, name: str = "mix") -> list[dict]:
    rows = []
    for shard in sorted((root / "out").glob(f"{name}-*")):
        rows.extend(read_jsonl(shard))
    return rows


# ---- property: kept documents are exactly what the expressions say ------------------------------

values = st.one_of(st.none(), st.just("empty"), st.sampled_from([0, 1, 2, 3]),
                   st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0]))
literals = st.sampled_from(["0", "1", "1.0", "1.5", "2", "2.0", "-1", "3"])
ops = st.sampled_from(["<", "<=", ">", ">=", "==", "!="])


def attr(value):
    if value is None:
        return {}
    if value == "empty":
        return {"e__t__a": []}
    return {"e__t__a": [[0, 1, value]]}


def expected_keep(a, b, inc, exc) -> bool:
    """Independent evaluation: Python comparisons on the raw values, missing -> no match."""
    import operator

    table = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq,
             "!=": operator.ne}
    (inc_op, inc_lit), (exc_op, exc_lit) = inc, exc
    included = a not in (None, "empty") and table[inc_op](a, float(inc_lit))
    excluded = b not in (None, "empty") and table[exc_op](b, float(exc_lit))
    return included and not excluded


@settings(max_examples=40, deadline=None)
@given(
    rows=st.lists(st.tuples(values, values), min_size=1, max_size=25),
    inc=st.tuples(ops, literals),
    exc=st.tuples(ops, literals),
)
def test_kept_documents_are_exactly_those_the_filters_select(rows, inc, exc):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        docs = [{"id": f"d{i}", "text": f"text {i}"} for i in range(len(rows))]
        write_jsonl(root / "documents" / "a.jsonl", docs)
        write_jsonl(root / "attributes" / "e" / "a.jsonl",
                    [{"id": d["id"], "attributes": {**attr(a), **{k.replace("__a", "__b"): v for k, v in attr(b).items()}}}
                     for d, (a, b) in zip(docs, rows, strict=True)])
        config = stream(root, filter={
            "include": [f"$.attributes[?(@.e__t__a[0][2] {inc[0]} {inc[1]})]"],
            "exclude": [f"$.attributes[?(@.e__t__b && @.e__t__b[0] && @.e__t__b[0][2] {exc[0]} {exc[1]})]"],
        })
        report = run_mix(parse_config(config))
        kept = [r["id"] for r in mixed_rows(root)]
        assert kept == [d["id"] for d, (a, b) in zip(docs, rows, strict=True) if expected_keep(a, b, inc, exc)]
        # per-filter counts: each expression evaluated on its own, by the same independent oracle
        included = [expected_keep(a, None, inc, ("==", "0")) for a, _ in rows]
        excluded = [not expected_keep(1, b, (">=", "0"), exc) for _, b in rows]
        (summary,) = report.streams
        assert [(f.kind, f.matched, f.removed) for f in summary.filters] == [
            ("include", sum(included), len(rows) - sum(included)), ("exclude", sum(excluded), sum(excluded))]
        assert summary.documents == len(rows) and summary.kept == len(kept)
        assert summary.removed_by_filters == len(rows) - len(kept)
        written = json.loads((root / "out" / ".feedline-mix" / "mix.json").read_text())
        assert written == summary.to_json()
        assert [f["removed"] for f in written["filters"]] == [len(rows) - sum(included), sum(excluded)]


@pytest.mark.parametrize(
    ("score", "rule", "dropped"),
    [(1, ">= 1.0", True), (1.0, ">= 1", True), (1, "== 1.0", True), (2, "> 1.5", True), (1, "> 1.0", False),
     (0.99999, ">= 1", False), (3, "< 3.0", False), (3, "<= 3.0", True)],
)
def test_integer_and_float_compare_by_value(tmp_path, score, rule, dropped):
    write_jsonl(tmp_path / "documents" / "a.jsonl", [{"id": "1", "text": "x"}])
    write_jsonl(tmp_path / "attributes" / "e" / "a.jsonl", [{"id": "1", "attributes": {"dup": [[0, 1, score]]}}])
    run_mix(parse_config(stream(tmp_path, filter={"exclude": [f"$.attributes[?(@.dup[0][2] {rule})]"]})))
    assert (mixed_rows(tmp_path) == []) is dropped


# ---- alignment ----------------------------------------------------------------------------------

def test_short_attribute_file_is_an_error_naming_both_files(tmp_path):
    write_jsonl(tmp_path / "documents" / "a.jsonl.gz", [{"id": str(i), "text": "t"} for i in range(5)])
    write_jsonl(tmp_path / "attributes" / "e" / "a.jsonl.gz", [{"id": str(i), "attributes": {}} for i in range(3)])
    with pytest.raises(AlignmentError) as err:
        run_mix(parse_config(stream(tmp_path)))
    message = str(err.value)
    assert "attributes/e/a.jsonl.gz ends at line 3" in message and "documents/a.jsonl.gz" in message
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


def test_misaligned_ids_and_long_attribute_file(tmp_path):
    write_jsonl(tmp_path / "documents" / "a.jsonl", [{"id": "1", "text": "t"}, {"id": "2", "text": "t"}])
    write_jsonl(tmp_path / "attributes" / "e" / "a.jsonl", [{"id": "1", "attributes": {}}, {"id": "3", "attributes": {}}])
    with pytest.raises(AlignmentError, match=r"attributes/e/a\.jsonl line 2 has id '3' but .*documents/a\.jsonl line 2 has id '2'"):
        run_mix(parse_config(stream(tmp_path)))
    write_jsonl(tmp_path / "attributes" / "e" / "a.jsonl", [{"id": str(i), "attributes": {}} for i in (1, 2, 3)])
    with pytest.raises(AlignmentError, match="has more rows than"):
        run_mix(parse_config(stream(tmp_path)))
    (tmp_path / "attributes" / "e" / "a.jsonl").unlink()
    with pytest.raises(CurateError, match="attribute file missing"):
        run_mix(parse_config(stream(tmp_path)))


@pytest.mark.parametrize("damaged", ["documents", "attributes"])
def test_truncated_multi_frame_zst_fails_mix_and_writes_no_shard(tmp_path, damaged):
    """A multi-frame .jsonl.zst cut at 70% once mixed as a shorter valid file with exit 0."""
    docs = [{"id": str(i), "text": f"document number {i} " * 20} for i in range(600)]
    attrs = [{"id": str(i), "attributes": {"e__t__a": [[0, 1, 1.0]]}} for i in range(600)]
    doc_path = write_multiframe_zst(tmp_path / "documents" / "z.jsonl.zst", docs, frames=6)
    attr_path = write_multiframe_zst(tmp_path / "attributes" / "e" / "z.jsonl.zst", attrs, frames=6)
    broken = doc_path if damaged == "documents" else attr_path
    cut(broken, 0.7)
    config = tmp_path / "mix.json"
    # without an attribute join a truncated document file cannot even show up as misalignment
    joined = [] if damaged == "documents" else ["e"]
    config.write_text(json.dumps(stream(tmp_path, attributes=joined)))
    proc = run_feedline("mix", str(config), check=False)
    assert proc.returncode != 0
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("feedline: error: ") and f"{broken}: truncated zstd stream" in line
    assert "download it again" in line
    out = tmp_path / "out"
    assert not out.exists() or list(out.iterdir()) == [], "no shard, not even a temp file"


# ---- span replacement ---------------------------------------------------------------------------

def test_span_replacement_uses_code_point_offsets():
    text = "Zoë → café ☃ mail: ünï@exämple.org done"
    start = text.index("ünï")
    end = start + len("ünï@exämple.org")
    snow = text.index("☃")
    row = {"attributes": {"pii": [[start, end, 1.0]], "low": [[0, 3, 0.1]], "sym": [[snow, snow + 1, 0.9]]}}
    rules = parse_config({"streams": [{"name": "s", "documents": ["x"], "output": {"path": "o"}, "span_replacement": [
        {"span": "$.attributes.pii", "min_score": 0.5, "replacement": "<{}>"},
        {"span": "$.attributes.low", "min_score": 0.5, "replacement": "NO"},
        {"span": "$.attributes.sym", "max_score": 0.95, "replacement": ""},
    ]}]})[0].span_replacement
    out = replace_spans(text, row, rules)
    assert out == "Zoë → café  mail: <ünï@exämple.org> done"


def test_overlapping_spans_replace_the_earliest(tmp_path):
    rules = [r for r in parse_config({"streams": [{"name": "s", "documents": ["x"], "output": {"path": "o"},
              "span_replacement": [{"span": "$.attributes.a", "min_score": 0, "replacement": "#"}]}]})[0].span_replacement]
    assert replace_spans("abcdefgh", {"attributes": {"a": [[4, 6, 1], [1, 5, 1], [6, 7, 1]]}}, rules) == "a#f#h"
    assert isinstance(rules[0].span, JsonPath)


# ---- output -------------------------------------------------------------------------------------

def test_shards_are_sized_by_output_bytes_and_named_consistently(tmp_path):
    make_corpus(tmp_path, files=2, docs=200, seed=2)
    run_tag([str(tmp_path / "documents" / "*.gz")], TagJob(("char_length_v1",), experiment="e"))
    config = stream(tmp_path, output={"path": str(tmp_path / "out"), "max_size_in_bytes": 20_000,
                                      "discard_fields": ["attributes"]})
    report = run_mix(parse_config(config))
    shards = sorted((tmp_path / "out").glob("mix-*"))
    assert [p.name for p in shards] == [f"mix-{i:04d}.jsonl.gz" for i in range(len(shards))]
    sizes = [p.stat().st_size for p in shards]
    assert len(shards) >= 2, sizes
    assert all(size >= 20_000 for size in sizes[:-1]), sizes
    assert all(size < 20_000 * 1.6 for size in sizes), sizes
    rows = mixed_rows(tmp_path)
    assert len(rows) == 400 == report.streams[0].kept
    assert "attributes" not in rows[0]
    assert rows[0]["metadata"]["provenance"] == "shard_000.jsonl.gz:1"
    assert rows[-1]["metadata"]["provenance"] == "shard_001.jsonl.gz:200"
    # zstd output and a smaller rerun removes the stale shards of the bigger one
    config["streams"][0]["output"].update(max_size_in_bytes=1 << 30, compression="zst")
    run_mix(parse_config(config))
    assert [p.name for p in (tmp_path / "out").glob("mix-*")] == ["mix-0000.jsonl.zst"]
    assert len(read_jsonl(tmp_path / "out" / "mix-0000.jsonl.zst")) == 400


def test_min_text_length_after_replacement(tmp_path):
    write_jsonl(tmp_path / "documents" / "a.jsonl", [{"id": "1", "text": "short"}, {"id": "2", "text": "long enough"}])
    write_jsonl(tmp_path / "attributes" / "e" / "a.jsonl",
                [{"id": "1", "attributes": {}}, {"id": "2", "attributes": {"x": [[0, 5, 1.0]]}}])
    run_mix(parse_config(stream(tmp_path, span_replacement=[{"span": "$.attributes.x", "min_score": 1,
                                                              "replacement": ""}],
                                output={"path": str(tmp_path / "out"), "max_size_in_bytes": 1000,
                                        "min_text_length": 6})))
    assert [(r["id"], r["text"]) for r in mixed_rows(tmp_path)] == [("2", "enough")]


def test_config_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("streams: [{name: s, documents: [x], output: {path: o}, filter: {include: ['$.a[?(@.b <)]']}}]")
    with pytest.raises(CurateError, match=r"bad\.yaml: streams\[0\]: JSONPath"):
        load_config(str(bad))
    bad.write_text("streams: [{name: s, documents: [x], output: {path: o}, filter: {syntax: jq, include: []}}]")
    with pytest.raises(CurateError, match="syntax 'jq' is not supported"):
        load_config(str(bad))
    bad.write_text("streams: [{name: s, documents: [x], outptu: {path: o}}]")
    with pytest.raises(CurateError, match="unknown keys"):
        load_config(str(bad))
    bad.write_text("streams: [{name: s, documents: [x], output: {path: o, max_size_in_bytes: 1GB}}]")
    with pytest.raises(CurateError, match=r"streams\[0\]: output\.max_size_in_bytes must be an integer >= 1, got '1GB'"):
        load_config(str(bad))
    bad.write_text("streams: [{name: s, documents: [x], output: {path: o, min_text_length: -1}}]")
    with pytest.raises(CurateError, match=r"output\.min_text_length must be an integer >= 0, got -1"):
        load_config(str(bad))
    ok = parse_config({"streams": [{"name": "s", "documents": ["x"], "output": {"path": "o", "max_size_in_bytes": 1e9}}]})
    assert ok[0].max_size_in_bytes == 10**9  # JSON's 1e9 is an integer here
    with pytest.raises(CurateError, match=r"^processes must be an integer >= 1, got 0$"):
        run_mix(ok, processes=0)
    proc = run_feedline("mix", str(bad), "--processes", "0", check=False)
    assert proc.returncode == 1 and proc.stderr.strip() == "feedline: error: --processes must be an integer >= 1, got 0"


# ---- Dolma interop --------------------------------------------------------------------------------

def sample_config(tmp: Path, rule: str) -> dict:
    return {"streams": [{
        "name": "m",
        "documents": [str(tmp / "documents" / "*.jsonl.gz")],
        "attributes": ["exp", "dedupe_docs"],
        "filter": {
            "include": ["$.attributes[?(@.exp__whitespace_tokenizer_with_paragraphs_v1__document[0][2] < 1000)]"],
            "exclude": [
                "$.attributes[?(@.exp__whitespace_tokenizer_with_paragraphs_v1__document[0][2] < 10)]",
                f"$.attributes[?(@.bff_duplicate_docs && @.bff_duplicate_docs[0] && @.bff_duplicate_docs[0][2] {rule})]",
            ],
        },
        "span_replacement": [{"span": "$.attributes.exp__pii_regex_v2__EMAIL_ADDRESS", "min_score": 0.5,
                              "replacement": " |||EMAIL||| "}],
        "output": {"path": str(tmp / "out"), "max_size_in_bytes": 100_000_000},
    }], "work_dir": {"input": str(tmp / "wi"), "output": str(tmp / "wo")}, "processes": 1}


def test_dolma_written_attributes_mix_like_dolma(tmp_path):
    shutil.copytree(SAMPLE, tmp_path, dirs_exist_ok=True)
    expected = json.loads((SAMPLE / "dolma_mix_expected.json").read_text())
    for rule in (">= 1", ">= 1.0"):
        config = tmp_path / "mix.yaml"
        raw = sample_config(tmp_path, rule)
        raw.pop("work_dir")
        raw.pop("processes")
        config.write_text(yaml.safe_dump(raw))
        out = run_feedline("mix", str(config))
        assert "kept 22 of 24 documents into 1 shards" in out.stdout
        rows = read_jsonl(tmp_path / "out" / "m-0000.jsonl.gz")
        # Dolma's own mixer gave these with the integer literal; with 1.0 it keeps the duplicates
        assert [r["id"] for r in rows] == expected["int"]["ids"]
        assert {r["id"]: r["text"] for r in rows} == expected["int"]["texts"]
        assert {r["id"]: r["metadata"]["provenance"] for r in rows} == expected["int"]["provenance"]
    assert len(expected["float"]["ids"]) == 24


def _dolma_executable() -> str | None:
    found = os.environ.get("FEEDLINE_DOLMA") or shutil.which("dolma")
    return found if found and os.path.exists(found) else None


@pytest.mark.skipif(_dolma_executable() is None,
                    reason="dolma is not installed (it pins numpy<2: install it in a side venv and set FEEDLINE_DOLMA "
                           "to its `dolma` executable)")
def test_dolma_mix_reads_feedline_attributes(tmp_path):
    shutil.copytree(SAMPLE / "documents", tmp_path / "documents")
    shutil.copytree(SAMPLE / "attributes" / "dedupe_docs", tmp_path / "attributes" / "dedupe_docs")
    run_feedline("tag", "--documents", str(tmp_path / "documents" / "*.gz"), "--experiment", "exp", "--taggers",
                 "whitespace_tokenizer_with_paragraphs_v1", "pii_regex_v2", "char_length_v1")
    # feedline writes Dolma's bytes for the taggers both have
    for name in ("sample.jsonl.gz",):
        assert read_jsonl(tmp_path / "attributes" / "exp" / name) == read_jsonl(SAMPLE / "attributes" / "exp" / name)
    config = tmp_path / "mix.yaml"
    config.write_text(yaml.safe_dump(sample_config(tmp_path, ">= 1")))
    subprocess.run([_dolma_executable(), "-c", str(config), "mix"], check=True, capture_output=True, timeout=120)
    (shard,) = (tmp_path / "out").glob("m-*")  # Dolma names it m-0000.json.gz
    rows = [json.loads(line) for line in gzip.decompress(shard.read_bytes()).splitlines()]
    assert [r["id"] for r in rows] == json.loads((SAMPLE / "dolma_mix_expected.json").read_text())["int"]["ids"]


def test_streams_mix_in_parallel_processes(tmp_path):
    for name in ("a", "b"):
        write_jsonl(tmp_path / name / "documents" / "x.jsonl", [{"id": f"{name}{i}", "text": "t" * i} for i in range(6)])
        write_jsonl(tmp_path / name / "attributes" / "e" / "x.jsonl",
                    [{"id": f"{name}{i}", "attributes": {"e__c__len": [[0, i, float(i)]]}} for i in range(6)])
    streams = parse_config({"streams": [
        {"name": name, "documents": [str(tmp_path / name / "documents" / "*.jsonl")], "attributes": ["e"],
         "filter": {"include": ["$.attributes[?(@.e__c__len[0][2] >= 3)]"]},
         "output": {"path": str(tmp_path / "out"), "max_size_in_bytes": 1000}}
        for name in ("a", "b")
    ]})
    report = run_mix(streams, processes=2)
    assert [s.kept for s in report.streams] == [3, 3]
    assert [r["id"] for r in read_jsonl(tmp_path / "out" / "b-0000.jsonl.gz")] == ["b3", "b4", "b5"]


def test_a_failing_stream_in_parallel_stops_the_mix_with_its_error(tmp_path):
    write_jsonl(tmp_path / "a" / "documents" / "x.jsonl", [{"id": f"a{i}", "text": "t"} for i in range(5)])
    bad = tmp_path / "b" / "documents" / "x.jsonl"
    bad.parent.mkdir(parents=True)
    bad.write_text('{"id": "b0", "text": "t"}\nnot json\n')
    streams = parse_config({"streams": [
        {"name": name, "documents": [str(tmp_path / name / "documents" / "*.jsonl")],
         "output": {"path": str(tmp_path / "out")}} for name in ("a", "b")
    ]})
    with pytest.raises(CurateError, match=rf"^{re.escape(str(bad))}: line 2: invalid JSON"):
        run_mix(streams, processes=2)
    assert not (tmp_path / "out" / "b-0000.jsonl.gz").exists()
    assert not (tmp_path / "out" / ".feedline-mix" / "b.json").exists()
    # stream a may have finished first; whatever it did, no temp or staging folder is left
    left = [p.relative_to(tmp_path / "out") for p in (tmp_path / "out").rglob("*")] if (tmp_path / "out").exists() else []
    assert not [p for p in left if p.name.endswith((".tmp", ".partial"))], left


# ---- configuration mistakes are said, not ignored --------------------------------------------------

def _two_stream_corpus(root: Path) -> dict:
    docs = [{"id": f"d{i}", "text": f"text {i}"} for i in range(10)]
    write_jsonl(root / "documents" / "a.jsonl", docs)
    write_jsonl(root / "attributes" / "e" / "a.jsonl",
                [{"id": d["id"], "attributes": {"e__t__a": [[0, 1, i % 3]]}} for i, d in enumerate(docs)])
    config = stream(root, filter={"exclude": ["$.attributes[?(@.e__t__a[0][2] == 0)]",
                                              "$.attributes[?(@.e__t__a[0][2] == 1)]"]})
    second = dict(config["streams"][0], name="other")
    config["streams"].append(second)
    return config


def test_unknown_keys_are_errors_naming_the_key(tmp_path):
    config = _two_stream_corpus(tmp_path)
    path = tmp_path / "mix.json"
    path.write_text(json.dumps({**config, "procesess": 4}))
    proc = run_feedline("mix", str(path), check=False)
    assert proc.returncode == 1 and "unknown key 'procesess'" in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()
    for section, key in (("filter", "exlude"), ("output", "max_size_bytes")):
        bad = json.loads(json.dumps(config))
        bad["streams"][0][section] = {**(bad["streams"][0].get(section) or {}), key: []}
        with pytest.raises(CurateError, match=f"unknown keys in `{section}`: \\['{key}'\\]"):
            parse_config(bad)
    with pytest.raises(CurateError, match="work_dir"):
        parse_config({**config, "work_dir": "/tmp/x"})
    with pytest.raises(CurateError, match="processes must be an integer >= 1"):
        parse_config({**config, "processes": 0})


def test_config_processes_is_used_and_removals_are_counted(tmp_path, monkeypatch):
    import feedline.curate.mixer as mixer
    from feedline.cli import main

    config = _two_stream_corpus(tmp_path)
    path = tmp_path / "mix.json"
    path.write_text(json.dumps({**config, "processes": 2}))
    used = []
    real = mixer.run_mix
    monkeypatch.setattr(mixer, "run_mix", lambda streams, processes=1: used.append(processes) or real(streams, 1))
    assert main(["mix", str(path)]) == 0
    assert main(["mix", str(path), "--processes", "1"]) == 0
    assert used == [2, 1]
    proc = run_feedline("mix", str(path))
    out = proc.stdout
    assert "mix: kept 3 of 10 documents" in out
    assert "mix:   removed 7 by the filters" in out
    assert "mix:   exclude $.attributes[?(@.e__t__a[0][2] == 0)]: removed 4 (matched 4)" in out
    assert "mix:   exclude $.attributes[?(@.e__t__a[0][2] == 1)]: removed 3 (matched 3)" in out
    assert f"mix:   summary: {tmp_path}/out/.feedline-mix/mix.json" in out


def test_filter_on_an_attribute_no_row_has_is_warned_with_the_count(tmp_path):
    config = _two_stream_corpus(tmp_path)
    config["streams"] = config["streams"][:1]
    config["streams"][0]["filter"] = {"exclude": ["$.attributes[?(@.e__t__typo[0][2] == 0)]"]}
    path = tmp_path / "mix.json"
    path.write_text(json.dumps(config))
    proc = run_feedline("mix", str(path))
    assert "kept 10 of 10" in proc.stdout
    assert "attribute 'e__t__typo', which none of the 10 documents has" in proc.stderr, proc.stderr
