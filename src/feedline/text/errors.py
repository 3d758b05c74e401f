"""Errors of feedline.text: each message names the file (or setting) and what to do about it."""

from __future__ import annotations

from feedline.errors import FeedlineError


class TextError(FeedlineError):
    """Bad tokenize input or TokenDataset setting; the message names the file and the problem."""


class TokenizerLoadError(TextError):
    """The tokenizer cannot be loaded (no such file, not a tokenizer.json, unknown EOS token)."""


class DocumentError(TextError):
    """An input document cannot be tokenized (no text, not JSON, a truncated file)."""


class TokenFileError(TextError):
    """A token file, its index or the manifest is missing, damaged or does not fit the others."""


class RetryableTextFailure(TextError):
    """A transient read failure of an input shard; the shard is worth another try."""


class TokenFileChangedError(TokenFileError):
    """A ``.ds`` or ``.ds.index`` is no longer the file the dataset opened (replaced or removed):
    its windows would be other tokens than the plan and the checkpoint count."""
