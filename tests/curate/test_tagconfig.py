"""``feedline tag --config``: a Dolma-style tag config gives what the same flags give."""

from __future__ import annotations

import gzip
import json
import shutil

import pytest

from feedline.curate.errors import CurateError
from feedline.curate.tagconfig import KEYS, read_tag_config
from tests.curate.helpers import make_corpus, run_feedline, tree_bytes

TAGGERS = ["char_length_with_paragraphs_v1", "pii_regex_v2", "whitespace_tokenizer_v1"]


def dolma_yaml(root, meta, **extra) -> str:
    lines = [
        "documents:",
        f"  - {root}/documents/*.jsonl.gz",
        "experiment: quality",
        "taggers:",
        *[f"  - {t}" for t in TAGGERS],
        "processes: 2",
        "ignore_existing: false",
        "debug: false",
        "dryrun: false",
        "work_dir:",
        f"  output: {meta}",
    ]
    lines += [f"{k}: {v}" for k, v in extra.items()]
    return "\n".join(lines) + "\n"


@pytest.fixture()
def two_corpora(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    make_corpus(a, files=3, docs=30)
    shutil.copytree(a, b)
    return tmp_path, a, b


def test_dolma_yaml_equals_the_same_flags(two_corpora):
    tmp, a, b = two_corpora
    config = tmp / "tag.yaml"
    config.write_text(dolma_yaml(a, tmp / "meta-a"))
    by_config = run_feedline("tag", "-c", str(config))
    by_flags = run_feedline("tag", "--documents", f"{b}/documents/*.jsonl.gz", "--experiment", "quality",
                            "--taggers", *TAGGERS, "--processes", "2", "--metadata", str(tmp / "meta-b"))
    assert "tagged 3 files" in by_config.stdout and "tagged 3 files" in by_flags.stdout
    attrs_a, attrs_b = tree_bytes(a / "attributes"), tree_bytes(b / "attributes")
    assert sorted(attrs_a) == [f"quality/shard_{i:03d}.jsonl.gz" for i in range(3)]
    assert attrs_a == attrs_b
    # work_dir.output is where Dolma keeps its .done markers: feedline's --metadata
    assert sorted(p.name for p in (tmp / "meta-a").iterdir()) == [f"shard_{i:03d}.jsonl.gz.done" for i in range(3)]
    again = run_feedline("tag", "-c", str(config))
    assert "already done" in again.stdout


def test_json_config_and_flags_override_the_file(two_corpora):
    tmp, a, _ = two_corpora
    config = tmp / "tag.json"
    config.write_text(json.dumps({"documents": [f"{a}/documents/shard_000.jsonl.gz"], "taggers": ["char_length_v1"],
                                  "experiment": "from_file", "processes": 1}))
    run_feedline("tag", "--config", str(config), "--experiment", "from_flag", "--taggers", "doc_count_v1")
    assert sorted(tree_bytes(a / "attributes")) == ["from_flag/shard_000.jsonl.gz"]
    row = json.loads(gzip.decompress((a / "attributes/from_flag/shard_000.jsonl.gz").read_bytes())
                     .splitlines()[0])
    assert list(row["attributes"]) == ["from_flag__doc_count_v1__docs"]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("taggerz: [char_length_v1]\n", "unknown key 'taggerz'"),
        ("profile: {enable: true}\n", "`profile` is not supported by feedline"),
        ("destination: [x, y]\n", "feedline does not support one destination per documents glob"),
        ("processes: two\n", "`processes` must be an integer"),
        ("work_dir: /tmp/x\n", "`work_dir` must be a mapping"),
        ("documents: [\n", "not valid YAML"),
        ("- a\n- b\n", "a tag config is a mapping"),
    ],
)
def test_bad_configs_are_one_line_errors_naming_the_file(tmp_path, body, expected):
    make_corpus(tmp_path, files=1, docs=3)
    config = tmp_path / "tag.yaml"
    base = f"documents: ['{tmp_path}/documents/*.jsonl.gz']\ntaggers: [char_length_v1]\n"
    config.write_text(body if body.startswith(("- ", "documents")) else base + body)
    proc = run_feedline("tag", "-c", str(config), check=False)
    assert proc.returncode != 0
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert str(config) in proc.stderr and expected in proc.stderr
    assert not (tmp_path / "attributes").exists()


def test_harmless_dolma_keys_warn(tmp_path):
    make_corpus(tmp_path, files=1, docs=3)
    config = tmp_path / "tag.yaml"
    config.write_text(
        f"documents: ['{tmp_path}/documents/*.jsonl.gz']\ntaggers: [char_length_v1]\n"
        f"destination: ['{tmp_path}/attrs']\nwork_dir: {{input: /somewhere, output: '{tmp_path}/meta'}}\n"
        "profile: {enable: false}\n"
    )
    proc = run_feedline("tag", "-c", str(config))
    assert "`work_dir.input` is not used" in proc.stderr
    assert "`profile` is ignored" in proc.stderr
    assert f"{tmp_path}/attrs/<experiment>/<path below documents/>" in proc.stderr
    assert (tmp_path / "attrs" / "char_length_v1" / "shard_000.jsonl.gz").is_file()


def test_dryrun_writes_nothing(tmp_path):
    make_corpus(tmp_path, files=2, docs=3)
    config = tmp_path / "tag.yaml"
    config.write_text(f"documents: ['{tmp_path}/documents/*.jsonl.gz']\ntaggers: [char_length_v1]\ndryrun: true\n")
    proc = run_feedline("tag", "-c", str(config))
    assert "dry run: 2 files would be tagged" in proc.stdout
    assert f"{tmp_path}/attributes/char_length_v1/shard_001.jsonl.gz" in proc.stdout
    assert not (tmp_path / "attributes").exists()
    missing = run_feedline("tag", "-c", str(config), "--taggers", "no_such_tagger_v9", check=False)
    assert missing.returncode != 0 and "unknown tagger 'no_such_tagger_v9'" in missing.stderr


def test_values_debug_and_env_interpolation(tmp_path, monkeypatch):
    monkeypatch.setenv("CORPUS_ROOT", str(tmp_path))
    config = tmp_path / "tag.yaml"
    config.write_text(
        "documents: ['${oc.env:CORPUS_ROOT}/documents/*.gz']\ntaggers: [a_v1]\n"
        "debug: true\nprocesses: 8\nignore_existing: true\nretries_on_error: 2\nskip_on_failure: true\n"
        "tagger_options: {a_v1: {model: '${oc.env:NO_SUCH_VAR_X,/m.bin}'}}\n"
    )
    values = read_tag_config(str(config)).values
    assert values == {
        "documents": [f"{tmp_path}/documents/*.gz"], "taggers": ["a_v1"], "processes": 1, "ignore_done": True,
        "retries": 2, "skip_on_failure": True, "tagger_option": ["a_v1.model=/m.bin"],
    }
    config.write_text("documents: ['${oc.env:NO_SUCH_VAR_X}']\n")
    with pytest.raises(CurateError, match="NO_SUCH_VAR_X is not set"):
        read_tag_config(str(config))


def test_every_dolma_tagger_config_key_is_decided():
    # Dolma's TaggerConfig fields (cli/tagger.py) plus create_and_run_tagger's skip/retry arguments
    dolma = {"documents", "destination", "tagger_modules", "taggers", "experiment", "processes", "ignore_existing",
             "debug", "profile", "work_dir", "dryrun", "skip_on_failure", "retries_on_error"}
    assert dolma <= set(KEYS)


def test_no_config_no_documents(tmp_path):
    proc = run_feedline("tag", "--taggers", "char_length_v1", check=False)
    assert proc.returncode != 0 and "no documents to tag (give --documents)" in proc.stderr
