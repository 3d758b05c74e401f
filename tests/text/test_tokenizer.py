"""The tokenizer of a run: ids equal tokenizers' own encode plus EOS; EOS found or refused by name."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tokenizers import Tokenizer

from feedline.text.errors import TokenizerLoadError
from feedline.text.tokenizer import encode_documents, load_tokenizer, token_dtype
from tests.text.helpers import sentences


def test_ids_are_tokenizers_encode_plus_eos(tokenizer_path):
    loaded = load_tokenizer(str(tokenizer_path))
    reference = Tokenizer.from_file(str(tokenizer_path))
    texts = [*sentences(7, 50), "", "ünïcödé ✓ mixed\nlines"]
    flat, counts = encode_documents(loaded.build(), texts, loaded.dtype)
    expected = [reference.encode(t).ids + [loaded.eos_id] for t in texts]
    assert counts.tolist() == [len(e) for e in expected]
    assert flat.tolist() == [i for e in expected for i in e]
    assert loaded.eos_token == "<|endoftext|>" and loaded.eos_id == reference.token_to_id("<|endoftext|>")
    assert flat.dtype == np.uint16


def test_the_record_names_the_tokenizer_and_its_sha256(tokenizer_path):
    import hashlib

    record = load_tokenizer(str(tokenizer_path.parent)).record()  # a folder means its tokenizer.json
    assert record["sha256"] == hashlib.sha256(tokenizer_path.read_bytes()).hexdigest()
    assert record["dtype"] == "uint16" and record["vocab_size"] == 300


def test_eos_from_the_flag_or_tokenizer_config(tokenizer_path, tmp_path):
    assert load_tokenizer(str(tokenizer_path), "<pad>").eos_token == "<pad>"
    folder = tmp_path / "tok"
    folder.mkdir()
    (folder / "tokenizer.json").write_bytes(tokenizer_path.read_bytes())
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": {"content": "<pad>"}}))
    assert load_tokenizer(str(folder / "tokenizer.json")).eos_token == "<pad>"
    with pytest.raises(TokenizerLoadError, match="'<nope>' is not in its vocabulary"):
        load_tokenizer(str(tokenizer_path), "<nope>")


def test_bad_tokenizer_paths_are_one_line_errors(tmp_path):
    with pytest.raises(TokenizerLoadError, match="no such tokenizer file"):
        load_tokenizer(str(tmp_path / "missing" / "tokenizer.json"))
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "a tokenizer"}')
    with pytest.raises(TokenizerLoadError, match="not a tokenizers tokenizer.json") as info:
        load_tokenizer(str(bad))
    assert "\n" not in str(info.value)


def test_no_eos_anywhere_asks_for_the_flag(tmp_path):
    from tokenizers import models

    tokenizer = Tokenizer(models.WordLevel({"a": 0, "b": 1, "[UNK]": 2}, unk_token="[UNK]"))
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))
    with pytest.raises(TokenizerLoadError, match="give --eos-token"):
        load_tokenizer(str(path))


def test_token_width_follows_the_vocabulary_like_datatrove(tmp_path):
    from tokenizers import models, pre_tokenizers

    assert token_dtype(65_536) == np.uint16 and token_dtype(65_537) == np.uint32
    vocab = {f"w{i}": i for i in range(70_000)}
    vocab["<|endoftext|>"] = 70_000
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))
    loaded = load_tokenizer(str(path))
    assert loaded.dtype == np.uint32
    flat, _ = encode_documents(loaded.build(), ["w69999 w1"], loaded.dtype)
    assert flat.tolist() == [69_999, 1, 70_000]
