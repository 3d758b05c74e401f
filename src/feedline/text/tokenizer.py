"""The tokenizer of a tokenize run: Hugging Face ``tokenizers``, EOS after every document.

What a run records of it (the manifest's ``tokenizer``): the name it was given, the sha256 of its
``tokenizer.json`` bytes, the vocabulary size (which fixes the token width: uint16 when every id
fits, else uint32, as datatrove decides) and the EOS token and id. EOS is appended the way
datatrove's ``DocumentTokenizer`` appends it: the tokenizer's post-processor becomes the template
``$A <EOS>``, so a feedline token file and a datatrove one of the same corpus hold the same ids.

Which EOS by default: ``eos_token`` of a ``tokenizer_config.json`` beside the ``tokenizer.json``,
else the one special token of the usual end-of-text names the vocabulary has; else the run asks
for ``--eos-token``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np

from feedline.text.errors import TokenizerLoadError

__all__ = ["TextTokenizer", "load_tokenizer", "token_dtype"]

#: End-of-text tokens tried, in order, when neither --eos-token nor tokenizer_config.json names one.
EOS_NAMES = ("<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>", "<|eot_id|>", "[EOS]", "<EOS>")


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id fits (vocabularies up to 65,536, datatrove's rule), else uint32."""
    return np.dtype(np.uint16 if vocab_size <= np.iinfo(np.uint16).max + 1 else np.uint32)


@dataclass(frozen=True)
class TextTokenizer:
    """A loaded tokenizer and what a run records of it (see the module docstring).

    Args:
        name: the path or Hub name it was loaded from.
        sha256: sha256 of its ``tokenizer.json`` bytes.
        eos_token: the token appended to every document.
        eos_id: its id.
        vocab_size: ids the tokenizer can produce (added tokens included).
        json: the ``tokenizer.json`` text, so a worker process rebuilds the same tokenizer.
    """

    name: str
    sha256: str
    eos_token: str
    eos_id: int
    vocab_size: int
    json: str

    @property
    def dtype(self) -> np.dtype:
        return token_dtype(self.vocab_size)

    def record(self) -> dict[str, Any]:
        """The manifest's ``tokenizer`` entry."""
        return {"name": self.name, "sha256": self.sha256, "eos_token": self.eos_token,
                "eos_id": self.eos_id, "vocab_size": self.vocab_size, "dtype": self.dtype.name}

    def build(self) -> Any:
        """A ``tokenizers.Tokenizer`` that appends EOS (datatrove's template)."""
        from tokenizers import Tokenizer
        from tokenizers.processors import TemplateProcessing

        tokenizer = Tokenizer.from_str(self.json)
        tokenizer.post_processor = TemplateProcessing(
            single="$A <EOS>", special_tokens=[("<EOS>", self.eos_id)], pair=None
        )
        return tokenizer


def encode_documents(tokenizer: Any, texts: Sequence[str], dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """(tokens of every document with its EOS, concatenated; each document's token count)."""
    if not texts:
        return np.empty(0, dtype), np.empty(0, np.int64)
    encode = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)
    ids = [e.ids for e in encode(list(texts))]
    counts = np.fromiter(map(len, ids), np.int64, len(ids))
    flat = np.fromiter(chain.from_iterable(ids), dtype, int(counts.sum()))
    return flat, counts


def _read_tokenizer_json(name: str) -> tuple[bytes, str | None]:
    """(the tokenizer.json bytes, the folder it came from or None for a Hub download)."""
    path = os.path.expanduser(name)
    if os.path.isdir(path):
        path = os.path.join(path, "tokenizer.json")
    if os.path.exists(path):
        try:
            with open(path, "rb") as handle:
                return handle.read(), os.path.dirname(os.path.abspath(path))
        except OSError as exc:
            raise TokenizerLoadError(f"{name}: cannot read the tokenizer ({exc.strerror})") from None
    hub_name = name.count("/") == 1 and not name.startswith((".", "/", "~")) and not name.endswith(".json")
    if not hub_name:
        raise TokenizerLoadError(f"{name}: no such tokenizer file (give a tokenizer.json path or a Hub name)")
    try:  # a Hub name (OWNER/NAME), where the network allows
        from huggingface_hub import hf_hub_download

        local = hf_hub_download(name, "tokenizer.json")
    except Exception as exc:
        raise TokenizerLoadError(
            f"{name}: not a local tokenizer.json and not loadable from the Hub ({type(exc).__name__}); "
            "give the path of a tokenizer.json"
        ) from None
    with open(local, "rb") as handle:
        return handle.read(), os.path.dirname(local)


def _config_eos(folder: str | None) -> str | None:
    if folder is None:
        return None
    config = os.path.join(folder, "tokenizer_config.json")
    if not os.path.exists(config):
        return None
    import orjson

    try:
        with open(config, "rb") as handle:
            eos = orjson.loads(handle.read()).get("eos_token")
    except (orjson.JSONDecodeError, OSError, AttributeError):
        return None
    if isinstance(eos, dict):
        eos = eos.get("content")
    return eos if isinstance(eos, str) else None


def load_tokenizer(name: str, eos_token: str | None = None) -> TextTokenizer:
    """Load ``name`` (a ``tokenizer.json`` path, its folder, or a Hub name) with its EOS token.

    Raises :class:`TokenizerLoadError` (one line naming ``name``) for a missing or unreadable
    file, one that is not a tokenizer, or an EOS token the vocabulary lacks.
    """
    from tokenizers import Tokenizer

    data, folder = _read_tokenizer_json(name)
    try:
        text = data.decode("utf-8")
        tokenizer = Tokenizer.from_str(text)
    except Exception as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise TokenizerLoadError(f"{name}: not a tokenizers tokenizer.json ({first[:120]})") from None
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    chosen = eos_token or _config_eos(folder)
    if chosen is None:
        chosen = next((t for t in EOS_NAMES if t in vocab), None)
        if chosen is None:
            raise TokenizerLoadError(
                f"{name}: no end-of-document token found (none of {', '.join(EOS_NAMES)}); give --eos-token"
            )
    eos_id = tokenizer.token_to_id(chosen)
    if eos_id is None:
        raise TokenizerLoadError(f"{name}: the EOS token {chosen!r} is not in its vocabulary")
    vocab_size = max(tokenizer.get_vocab_size(with_added_tokens=True), max(vocab.values()) + 1)
    return TextTokenizer(name, hashlib.sha256(data).hexdigest(), chosen, int(eos_id), int(vocab_size), text)
