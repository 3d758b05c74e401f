"""fastText language-ID taggers: Dolma's names, span shape and arithmetic, through the real runner.

The oracle is the model itself: each expected score is the model's ``__label__en`` probability of
the slice exactly as Dolma prepares it (lower-cased, newlines to spaces, stripped), and the
document score is Dolma's length-weighted mean of the paragraph scores.
"""

from __future__ import annotations

import random
import re

import pytest

from feedline.curate.errors import CurateError
from feedline.curate.model import Document
from feedline.curate.processor import run_tag
from feedline.curate.registry import get_tagger
from feedline.curate.runtime import TagJob
from feedline.curate.taggers.fasttext_lid import MODEL_ENV
from tests.curate.conftest import sentence
from tests.curate.helpers import read_jsonl, run_feedline, write_jsonl

fasttext = pytest.importorskip("fasttext")

DOLMA_PARAGRAPH = re.compile(r"[^\n]*\n|[^\n]+$")  # Dolma's split_paragraphs, empty ones removed


def dolma_paragraphs(text: str) -> list[tuple[int, int]]:
    return [m.span() for m in DOLMA_PARAGRAPH.finditer(text) if m.group().strip()]


def en_probability(model, text: str) -> float:
    labels, probs = model.predict(text.lower().replace("\n", " ").strip(), k=-1)
    return next((float(p) for label, p in zip(labels, probs, strict=True) if label == "__label__en"), 0.0)


def mixed_corpus(seed: int = 3, docs: int = 30) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for i in range(docs):
        lines = [sentence(rng, rng.choice(["en", "de", "fr"]), rng.randint(2, 14)) for _ in range(rng.randint(0, 6))]
        text = "\n".join(lines) + rng.choice(["", "\n", "\n\n  \n"])
        rows.append({"id": f"d{i}", "text": text, "source": "synthetic"})
    rows.append({"id": "empty", "text": "", "source": "synthetic"})
    rows.append({"id": "blank", "text": " \n\n\t\n", "source": "synthetic"})
    return rows


@pytest.fixture()
def corpus(tmp_path):
    rows = mixed_corpus()
    path = write_jsonl(tmp_path / "documents" / "part_000.jsonl.gz", rows)
    return tmp_path, path, rows


def test_attribute_rows_have_dolmas_shape_and_scores(corpus, lid_model):
    root, path, rows = corpus
    model = fasttext.load_model(str(lid_model))
    job = TagJob(("ft_lang_id_en_doc_v2", "ft_lang_id_en_paragraph_with_doc_score_v2"), experiment="lang",
                 tagger_options=(("ft_lang_id_en_doc_v2", "model", str(lid_model)),
                                 ("ft_lang_id_en_paragraph_with_doc_score_v2", "model", str(lid_model))))
    report = run_tag([str(path)], job)
    assert report.documents == len(rows)
    out = read_jsonl(root / "attributes" / "lang" / "part_000.jsonl.gz")
    assert [r["id"] for r in out] == [r["id"] for r in rows]
    for doc, row in zip(rows, out, strict=True):
        text = doc["text"]
        assert set(row) == {"id", "attributes", "source"} and row["source"] == "synthetic"
        attrs = row["attributes"]
        en = round(en_probability(model, text), 5)
        assert attrs["lang__ft_lang_id_en_doc_v2__en"] == [[0, len(text), en]]
        assert attrs["lang__ft_lang_id_en_doc_v2__not_en"] == [[0, len(text), round(1.0 - en_probability(model, text), 5)]]

        paragraphs = dolma_paragraphs(text)
        scores = [en_probability(model, text[s:e]) for s, e in paragraphs]
        prefix = "lang__ft_lang_id_en_paragraph_with_doc_score_v2__"
        if paragraphs:
            assert attrs[prefix + "en"] == [[s, e, round(p, 5)] for (s, e), p in zip(paragraphs, scores, strict=True)]
            assert attrs[prefix + "not_en"] == [[s, e, round(1 - p, 5)] for (s, e), p in
                                                zip(paragraphs, scores, strict=True)]
        else:  # Dolma writes no paragraph key at all when there is no paragraph
            assert prefix + "en" not in attrs and prefix + "not_en" not in attrs
        if text:
            doc_en = sum((e - s) * p for (s, e), p in zip(paragraphs, scores, strict=True)) / len(text)
            expected = [[[0, len(text), round(doc_en, 5)]], [[0, len(text), round(1 - doc_en, 5)]]]
        else:
            expected = [[[0, 0, 0.0]], [[0, 0, 0.0]]]
        assert [attrs[prefix + "doc_en"], attrs[prefix + "doc_not_en"]] == expected
        for values in attrs.values():
            for start, end, score in values:
                assert 0 <= start <= end <= len(text) and isinstance(score, float)


def test_english_paragraphs_score_higher_than_german_and_french(lid_model):
    rng = random.Random(11)
    tagger = get_tagger("ft_lang_id_en_paragraph_v2")(model=str(lid_model))
    for _ in range(20):
        langs = ["en", "de", "fr"]
        rng.shuffle(langs)
        text = "\n".join(sentence(rng, lang, 12) for lang in langs)
        spans = tagger.tag(Document(id="x", text=text))["en"]
        by_lang = dict(zip(langs, (score for _, _, score in spans), strict=True))
        assert by_lang["en"] > 0.5 > max(by_lang["de"], by_lang["fr"]), (text, by_lang)


def test_all_languages_tagger_lists_every_label_best_first(lid_model):
    tagger = get_tagger("ft_lang_id_doc_v1")(model=str(lid_model))
    text = "Der Hund und die Katze sind nicht in dem Haus"
    out = tagger.tag(Document(id="x", text=text))
    assert set(out) == {"en", "de", "fr"}
    ranked = sorted(out, key=lambda k: out[k][0][2], reverse=True)
    assert ranked[0] == "de"
    assert tagger.predict(Document(id="x", text=text)).spans[0].type == "de"
    assert abs(sum(v[0][2] for v in out.values()) - 1.0) < 1e-3


def test_batch_equals_one_by_one(lid_model):
    rows = mixed_corpus(seed=5, docs=40)
    docs = [Document(id=r["id"], text=r["text"]) for r in rows]
    docs.append(Document(id="surrogate", text="the water \ud800 and\nder \x00 hund"))  # JSON may carry a lone one
    for name in ("ft_lang_id_en_doc_v2", "ft_lang_id_en_paragraph_v2", "ft_lang_id_en_paragraph_with_doc_score_v2",
                 "ft_lang_id_doc_v1", "ft_lang_id_paragraph_v1"):
        tagger = get_tagger(name)(model=str(lid_model))
        assert tagger.tag_batch(docs) == [tagger.tag(d) for d in docs], name


def test_cli_model_from_env_option_and_config(corpus, lid_model, tmp_path):
    root, path, rows = corpus
    second = write_jsonl(root / "documents" / "part_001.jsonl.gz", mixed_corpus(seed=9, docs=10))
    by_env = run_feedline("tag", "--documents", str(path), str(second), "--taggers", "ft_lang_id_en_doc_v2",
                          "--experiment", "a", "--processes", "2", env={MODEL_ENV: str(lid_model)})
    assert "tagged 2 files" in by_env.stdout  # spawn workers load the model from the inherited variable
    config = tmp_path / "tag.yaml"
    config.write_text(
        f"documents: ['{path}', '{second}']\ntaggers: [ft_lang_id_en_doc_v2]\nexperiment: b\nprocesses: 2\n"
        f"tagger_options: {{ft_lang_id_en_doc_v2: {{model: '{lid_model}'}}}}\n"
    )
    run_feedline("tag", "--config", str(config), env={MODEL_ENV: ""})
    a = read_jsonl(root / "attributes" / "a" / "part_000.jsonl.gz")
    b = read_jsonl(root / "attributes" / "b" / "part_000.jsonl.gz")
    assert [r["attributes"]["a__ft_lang_id_en_doc_v2__en"] for r in a] == [
        r["attributes"]["b__ft_lang_id_en_doc_v2__en"] for r in b]


def test_missing_or_bad_model_is_one_line_and_writes_nothing(corpus, tmp_path):
    root, path, _ = corpus
    missing = run_feedline("tag", "--documents", str(path), "--taggers", "ft_lang_id_en_doc_v2",
                           "--processes", "2", check=False, env={MODEL_ENV: ""})
    assert missing.returncode != 0
    assert missing.stderr.count("\n") == 1 and "lid.176.bin" in missing.stderr and MODEL_ENV in missing.stderr
    not_a_model = tmp_path / "lid.176.bin"
    not_a_model.write_bytes(b"\x00" * 64)
    bad = run_feedline("tag", "--documents", str(path), "--taggers", "ft_lang_id_en_paragraph_v2",
                       "--tagger-option", f"ft_lang_id_en_paragraph_v2.model={not_a_model}", check=False)
    assert bad.returncode != 0 and bad.stderr.count("\n") == 1 and str(not_a_model) in bad.stderr
    nowhere = run_feedline("tag", "--documents", str(path), "--taggers", "ft_lang_id_en_doc_v2",
                           "--tagger-option", f"ft_lang_id_en_doc_v2.model={tmp_path / 'nope.bin'}", check=False)
    assert nowhere.returncode != 0 and "no such fastText model file" in nowhere.stderr
    assert not (root / "attributes").exists() or not any(p.is_file() for p in (root / "attributes").rglob("*.gz"))


def test_options_are_checked(lid_model):
    with pytest.raises(CurateError, match="has no option 'modle'"):
        run_tag(["unused"], TagJob(("ft_lang_id_en_doc_v2",), tagger_options=(("ft_lang_id_en_doc_v2", "modle", "x"),)))
    with pytest.raises(CurateError, match="not one of the job's taggers"):
        TagJob(("char_length_v1",), tagger_options=(("ft_lang_id_en_doc_v2", "model", "x"),))


def test_dolma_pipeline_tag_then_mix_on_doc_en(tmp_path, lid_model):
    """A Dolma-style run: tag.yaml names the fastText tagger, mix.yaml keeps documents whose
    doc_en >= 0.5; kept documents are those whose length-weighted English share is over half."""
    rng = random.Random(21)
    rows = []
    for i in range(40):
        langs = [rng.choice(["en", "de", "fr"]) for _ in range(rng.randint(1, 5))]
        rows.append({"id": f"m{i}", "text": "\n".join(sentence(rng, lang, 10) for lang in langs), "langs": langs})
    write_jsonl(tmp_path / "documents" / "web.jsonl.gz", [{k: r[k] for k in ("id", "text")} for r in rows])
    tag = tmp_path / "tag.yaml"
    tag.write_text(f"documents: ['{tmp_path}/documents/*.gz']\nexperiment: lang\n"
                   "taggers: [ft_lang_id_en_paragraph_with_doc_score_v2]\n"
                   f"tagger_options: {{ft_lang_id_en_paragraph_with_doc_score_v2: {{model: '{lid_model}'}}}}\n")
    run_feedline("tag", "-c", str(tag))
    mix = tmp_path / "mix.yaml"
    mix.write_text(
        f"streams:\n- name: en\n  documents: ['{tmp_path}/documents/*.gz']\n  attributes: [lang]\n"
        "  filter:\n    include: ['$.attributes[?(@.lang__ft_lang_id_en_paragraph_with_doc_score_v2__doc_en[0][2] >= 0.5)]']\n"
        f"  output: {{path: '{tmp_path}/mixed'}}\n"
    )
    run_feedline("mix", str(mix))
    kept = {r["id"] for r in read_jsonl(tmp_path / "mixed" / "en-0000.jsonl.gz")}
    for r in rows:
        english = sum(len(line) + 1 for line, lang in zip(r["text"].split("\n"), r["langs"], strict=True)
                      if lang == "en") / (len(r["text"]) + 1)
        if english > 0.7:
            assert r["id"] in kept, r
        elif english < 0.3:
            assert r["id"] not in kept, r
    assert 0 < len(kept) < len(rows)
