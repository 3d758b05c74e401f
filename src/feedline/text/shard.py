"""One tokenize task: one input shard read, tokenized and written, then its ``.done`` marker.

Every executor (in process, the spawn pool, Ray) runs :func:`run_shard` and gets a
:class:`ShardResult` back, never an exception for a failure of the shard itself, so all of them
report failures alike (the curate processor's contract). The marker is a
:class:`~feedline.run.markers.DoneMarker` tied to a digest of the job's signature, so a shard
counts as done only for the same tokenizer (by sha256), EOS, shuffle seed, text field and loss
mask field (:mod:`feedline.text.lossmask`).

A document is one JSON line with a ``text`` string (Dolma's and datatrove's field). A line that
is not JSON, a document without text, or a truncated compressed file fails the shard with one
line naming the file and the document, before anything is installed: the shard's three files
appear together, after its last document, or not at all.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from feedline.run.markers import DoneMarker, params_digest
from feedline.run.task import TaskResult, attempt_task
from feedline.text.errors import DocumentError, RetryableTextFailure, TextError
from feedline.text.layout import ShardWriter
from feedline.text.lossmask import LossValue, encode_with_loss, parse_loss_value
from feedline.text.tokenizer import TextTokenizer, encode_documents

__all__ = ["ShardResult", "ShardTask", "TokenizeJob", "run_shard"]

log = logging.getLogger("feedline.text")
FORMAT_VERSION = 1


@dataclass(frozen=True)
class TokenizeJob:
    """What every shard of a run shares.

    Args:
        tokenizer: the loaded tokenizer (its ``tokenizer.json`` text travels to the workers).
        shuffle_seed: shuffle documents within each shard with this seed; ``None`` keeps them
            in input order.
        text_field: the JSON field holding a document's text.
        batch_size: documents encoded per ``encode_batch`` call.
        loss_field: the JSON field a ``.ds.loss`` is written from (a bool or character spans);
            ``None`` writes none.
        loss_spans: what the field's spans are: ``"train"`` (the tokens a loss is taken on) or
            ``"ignore"`` (the ones it is not, datatrove's ``no_loss_ranges``).
    """

    tokenizer: TextTokenizer
    shuffle_seed: int | None = None
    text_field: str = "text"
    batch_size: int = 1024
    loss_field: str | None = None
    loss_spans: str = "train"

    def _loss(self) -> dict[str, Any]:
        # only with a loss mask: a run without one keeps its markers' digests and its manifest's bytes
        return {} if self.loss_field is None else {"loss_mask": self.loss_field, "loss_spans": self.loss_spans}

    def signature(self) -> dict[str, Any]:
        """Everything that changes a shard's bytes (what its marker is tied to)."""
        t = self.tokenizer
        return {"format": FORMAT_VERSION, "tokenizer": t.sha256, "name": t.name, "eos": t.eos_id,
                "dtype": t.dtype.name, "shuffle": self.shuffle_seed, "text_field": self.text_field,
                **self._loss()}

    def parameters(self) -> dict[str, Any]:
        """The manifest's ``parameters``."""
        return {"shuffle_documents": self.shuffle_seed, "text_field": self.text_field,
                "eos_token": self.tokenizer.eos_token, **self._loss()}


@dataclass(frozen=True)
class ShardTask:
    """One input shard: ``source`` (path or URL), ``name`` the output ``.ds`` path below
    ``--out``, ``tokens_path`` that file, ``marker`` where its ``.done`` marker goes."""

    source: str
    name: str
    tokens_path: str
    marker: str

    def done_marker(self, job: TokenizeJob) -> DoneMarker:
        return DoneMarker(self.marker, params_digest({**job.signature(), "source": self.source,
                                                      "name": self.name}))


@dataclass
class ShardResult(TaskResult):
    """A file task's result, plus the shard's output name and its token count."""

    name: str = ""
    tokens: int = 0


_BUILT: dict[str, Any] = {}


def _tokenizer_for(job: TokenizeJob) -> Any:
    key = f"{job.tokenizer.sha256}:{job.tokenizer.eos_id}"
    built = _BUILT.get(key)
    if built is None:
        built = _BUILT[key] = job.tokenizer.build()
    return built


def _texts(path: str, field: str, batch_size: int,
           loss_field: str | None = None) -> Iterator[tuple[list[str], list[LossValue]]]:
    """The documents' texts in batches, with their loss mask fields (``None`` each without
    ``loss_field``); errors name the file and the document."""
    from feedline.curate.documents import CurateError, RetryableFailure, open_lines

    loads = orjson.loads
    batch: list[str] = []
    values: list[LossValue] = []
    n = 0
    try:
        with open_lines(path) as lines:
            for line in lines:
                n += 1
                try:
                    doc = loads(line)
                except orjson.JSONDecodeError:
                    raise DocumentError(f"{path}: document {n} is not a JSON line") from None
                text = doc.get(field) if isinstance(doc, dict) else None
                if not isinstance(text, str):
                    what = "no" if text is None else f"a non-string ({type(text).__name__})"
                    ident = doc.get("id") if isinstance(doc, dict) else None
                    named = f" (id {ident!r})" if ident is not None else ""
                    raise DocumentError(f"{path}: document {n}{named} has {what} {field!r} text")
                batch.append(text)
                if loss_field is None:
                    values.append(None)
                else:
                    ident = doc.get("id")
                    named = f" (id {ident!r})" if ident is not None else ""
                    values.append(parse_loss_value(doc.get(loss_field), text, loss_field,
                                                   f"{path}: document {n}{named}"))
                if len(batch) >= batch_size:
                    yield batch, values
                    batch, values = [], []
    except RetryableFailure as exc:
        raise RetryableTextFailure(str(exc)) from exc
    except CurateError as exc:
        raise DocumentError(str(exc)) from None
    if batch:
        yield batch, values


def _shuffled(tokens: np.ndarray, counts: np.ndarray, seed: int, name: str,
              loss: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The documents (and their loss masks) in a seeded order (per shard: the seed and the
    shard's name)."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    order = rng.permutation(counts.size)
    starts = np.cumsum(counts) - counts
    new_counts = counts[order]
    new_starts = np.cumsum(new_counts) - new_counts
    gather = np.repeat(starts[order] - new_starts, new_counts) + np.arange(int(counts.sum()))
    return tokens[gather], new_counts, None if loss is None else loss[gather]


def tokenize_shard(task: ShardTask, job: TokenizeJob, progress: Callable[[int], None] | None) -> tuple[int, int]:
    """Write the shard's files; (documents, tokens)."""
    tokenizer = _tokenizer_for(job)
    dtype = job.tokenizer.dtype
    with_loss = job.loss_field is not None
    writer = ShardWriter(task.tokens_path, dtype, job.tokenizer.name, loss=with_loss)
    held: list[tuple[np.ndarray, np.ndarray, np.ndarray | None]] = []
    try:
        for texts, values in _texts(task.source, job.text_field, job.batch_size, job.loss_field):
            loss: np.ndarray | None = None
            if with_loss:
                tokens, counts, loss = encode_with_loss(tokenizer, texts, values, dtype, job.loss_spans)
            else:
                tokens, counts = encode_documents(tokenizer, texts, dtype)
            if job.shuffle_seed is None:
                writer.write(tokens, counts, loss)
            else:
                held.append((tokens, counts, loss))
            if progress is not None:
                progress(int(counts.sum()))
        if held:
            tokens = np.concatenate([h[0] for h in held])
            counts = np.concatenate([h[1] for h in held])
            losses = np.concatenate([h[2] for h in held]) if with_loss else None  # type: ignore[misc]
            writer.write(*_shuffled(tokens, counts, int(job.shuffle_seed), task.name, losses))  # type: ignore[arg-type]
        writer.commit()
    except BaseException:
        writer.abort()
        raise
    return writer.documents, writer.tokens


def run_shard(task: ShardTask, job: TokenizeJob, retries: int,
              progress: Callable[[int], None] | None = None) -> ShardResult:
    """Tokenize one shard with retries on :class:`RetryableTextFailure`, then write its marker."""

    def tokenize() -> dict[str, Any]:
        documents, tokens = tokenize_shard(task, job, progress)
        task.done_marker(job).write(source=task.source, name=task.name, documents=documents,
                                    tokens=tokens)
        return {"documents": documents, "tokens": tokens}

    return attempt_task(task.source, tokenize, retries, retryable=RetryableTextFailure, known=TextError,
                        result=ShardResult, logger=log, name=task.name)
