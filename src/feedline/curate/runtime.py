"""The one-pass tagging runtime: each file read once, each row decoded once, every tagger run.

Taggers writing to the same attribute file share one output (one row per document holding all
their keys); every output is a temp file renamed into place only when the whole document file
has been tagged, so a crash never leaves a partial attribute file where a reader would find it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from feedline.curate import files
from feedline.curate.documents import DOCUMENTS_SEGMENT, relative_name, split_documents
from feedline.curate.errors import CurateError, RetryableFailure
from feedline.curate.model import KEY_SEPARATOR, AttributeRow, Document, document_decoder
from feedline.curate.registry import check_name, get_tagger, import_tagger_modules
from feedline.curate.taggers.base import BaseTagger
from feedline.io.atomic import remove_stale_temps

BATCH_SIZE = 256  # rows handed to each tagger at once (taggers may vectorise across them)
ProgressFn = Callable[[int], None]


@dataclass(frozen=True)
class TagJob:
    """What to run: tagger names, the experiment (None: each tagger is its own), where to write."""

    taggers: tuple[str, ...]
    experiment: str | None = None
    destination: str | None = None
    tagger_modules: tuple[str, ...] = ()
    progress_every_docs: int = 1000
    progress_every_s: float = 2.0
    #: The run's metadata folder, where corpus-pass taggers keep their results.
    workdir: str | None = None
    #: Digest of the run's file list and sizes, set when a tagger has a corpus pass: its scores
    #: depend on every file, so markers of a different corpus do not count.
    corpus_digest: str | None = None
    #: ``(tagger, option, value)`` triples handed to the tagger's constructor as keywords
    #: (``--tagger-option tagger.option=value``); a tuple so the job stays hashable.
    tagger_options: tuple[tuple[str, str, str], ...] = ()

    def __post_init__(self) -> None:
        if not self.taggers:
            raise CurateError("no taggers given")
        if len(set(self.taggers)) != len(self.taggers):
            raise CurateError(f"a tagger is listed twice: {list(self.taggers)}")
        if self.experiment is not None:
            check_name(self.experiment, "experiment")
        for tagger, option, _ in self.tagger_options:
            if tagger not in self.taggers:
                raise CurateError(f"tagger option {tagger}.{option}: {tagger!r} is not one of the job's taggers "
                                  f"({', '.join(self.taggers)})")

    def options_of(self, tagger: str) -> dict[str, str]:
        """The constructor keywords of ``tagger`` in this job."""
        return {option: value for name, option, value in self.tagger_options if name == tagger}

    def experiment_of(self, tagger: str) -> str:
        return self.experiment or tagger

    def signature(self) -> dict[str, object]:
        """What a ``.done`` marker must match for a file to count as done."""
        signature: dict[str, object] = {
            "taggers": sorted(self.taggers), "experiment": self.experiment, "destination": self.destination
        }
        if self.corpus_digest:
            signature["corpus"] = self.corpus_digest
        if self.tagger_options:  # another model file gives other scores: earlier markers do not count
            signature["options"] = sorted(f"{t}.{o}={v}" for t, o, v in self.tagger_options)
        return signature


def attribute_path(doc_path: str, experiment: str, destination: str | None = None, base: str = "") -> str:
    """Where the attributes of ``doc_path`` for ``experiment`` go.

    Default: the ``documents`` segment replaced by ``attributes/<experiment>``. With a
    destination: ``<destination>/<experiment>/<path below documents/ (or below base)>``.
    """
    if destination:
        return f"{destination.rstrip('/')}/{experiment}/{relative_name(doc_path, base)}"
    split = split_documents(doc_path)
    if split is None:
        raise CurateError(
            f"{doc_path}: no '{DOCUMENTS_SEGMENT}/' folder in the path to derive attributes/<experiment>/ from; "
            "pass --destination"
        )
    prefix, rest = split
    return f"{prefix}/attributes/{experiment}/{rest}" if prefix else f"attributes/{experiment}/{rest}"


def attributes_root(doc_path: str, destination: str | None = None) -> str:
    """The folder holding every experiment's attribute tree for ``doc_path``."""
    if destination:
        return destination.rstrip("/")
    split = split_documents(doc_path)
    if split is None:
        raise CurateError(f"{doc_path}: no '{DOCUMENTS_SEGMENT}/' folder in the path; pass --destination")
    return f"{split[0]}/attributes" if split[0] else "attributes"


def plan_outputs(doc_path: str, job: TagJob, base: str = "") -> dict[str, list[str]]:
    """Destination file -> the taggers writing into it, in the job's tagger order."""
    outputs: dict[str, list[str]] = {}
    for name in job.taggers:
        outputs.setdefault(attribute_path(doc_path, job.experiment_of(name), job.destination, base), []).append(name)
    return outputs


def parse_tagger_option(text: str) -> tuple[str, str, str]:
    """``tagger.option=value`` (the CLI's ``--tagger-option``) as a triple."""
    key, sep, value = text.partition("=")
    tagger, dot, option = key.rpartition(".")
    if not sep or not dot or not tagger or not option:
        raise CurateError(f"tagger option {text!r}: expected TAGGER.OPTION=VALUE "
                          "(e.g. ft_lang_id_en_doc_v2.model=lid.176.bin)")
    return tagger, option, value


def check_options(cls: type[BaseTagger], options: dict[str, str]) -> None:
    """Every option is one the tagger declares; checked before any file is read."""
    for option in options:
        if option not in cls.options:
            known = ", ".join(sorted(cls.options)) or "none"
            raise CurateError(f"tagger {cls.name!r} has no option {option!r} (its options: {known})")


class _Output:
    """One attribute file being written and the taggers (with key prefixes) feeding it."""

    __slots__ = ("path", "sink", "taggers", "buffer")

    def __init__(self, path: str, taggers: list[tuple[str, BaseTagger]]) -> None:
        self.path = path
        self.sink = files.AtomicOutput(path)
        self.taggers = taggers
        self.buffer = bytearray()


class FileTagger:
    """Built once per worker process: user modules imported, tagger objects created once."""

    def __init__(self, job: TagJob) -> None:
        import_tagger_modules(job.tagger_modules)
        self.job = job
        self.taggers: dict[str, BaseTagger] = {}
        for name in job.taggers:
            cls = get_tagger(name)
            options = job.options_of(name)
            check_options(cls, options)
            try:
                self.taggers[name] = cls(**options)
            except CurateError:
                raise
            except Exception as exc:
                raise CurateError(f"tagger {name!r} could not be created: {type(exc).__name__}: {exc}") from exc
        self.with_metadata = any(t.needs_metadata for t in self.taggers.values())
        self.decoder = document_decoder(self.with_metadata)
        self.encoder = msgspec.json.Encoder()

    def tag_file(self, src: str, base: str = "", progress: ProgressFn | None = None) -> int:
        """Tag every row of ``src``; returns the number of documents. Outputs appear atomically."""
        plan = plan_outputs(src, self.job, base)
        outputs: list[_Output] = []
        try:
            for path, names in plan.items():
                remove_stale_temps(path)  # left by a killed run; this task owns the file
                prefixed = [(f"{self.job.experiment_of(n)}{KEY_SEPARATOR}{n}{KEY_SEPARATOR}", self.taggers[n]) for n in names]
                outputs.append(_Output(path, prefixed))
            for tagger in self.taggers.values():
                tagger.begin_file(src, self.job.workdir)
            count = self._run(src, outputs, progress)
            for out in outputs:
                out.sink.commit()
            return count
        except BaseException:
            for out in outputs:
                out.sink.abort()
            raise

    def _run(self, src: str, outputs: list[_Output], progress: ProgressFn | None) -> int:
        decode = self.decoder.decode
        every_docs = max(1, self.job.progress_every_docs)
        every_s = self.job.progress_every_s
        reported = count = 0
        last_report = time.monotonic()
        batch: list[Document] = []
        with files.open_lines(src) as lines:
            for line in lines:
                count += 1
                try:
                    batch.append(decode(line))
                except msgspec.DecodeError as exc:
                    raise CurateError(f"{src}: line {count}: not a valid document row ({exc})") from None
                if len(batch) == BATCH_SIZE:
                    self._tag_batch(src, count - len(batch) + 1, batch, outputs)
                    batch = []
                    if progress is not None:
                        now = time.monotonic()
                        if count - reported >= every_docs or now - last_report >= every_s:
                            progress(count - reported)
                            reported, last_report = count, now
            if batch:
                self._tag_batch(src, count - len(batch) + 1, batch, outputs)
        for out in outputs:
            if out.buffer:
                out.sink.write(bytes(out.buffer))
                out.buffer.clear()
        if progress is not None and count > reported:
            progress(count - reported)
        return count

    def _tag_batch(self, src: str, first_line: int, docs: list[Document], outputs: list[_Output]) -> None:
        """Run every tagger on a batch of rows (taggers may vectorise across it), then write
        one attribute row per document and output, in document order."""
        encode_into = self.encoder.encode_into
        for out in outputs:
            per_tagger = [(prefix, self._run_tagger(tagger, src, first_line, docs)) for prefix, tagger in out.taggers]
            buffer = out.buffer
            for i, doc in enumerate(docs):
                attributes: dict[str, list[tuple[int, int, float]]] = {}
                for prefix, results in per_tagger:
                    for signal, values in results[i].items():
                        attributes[prefix + signal] = values
                encode_into(AttributeRow(doc.id, attributes, doc.source), buffer, -1)
                buffer.extend(b"\n")
            if len(buffer) >= 1 << 20:
                out.sink.write(bytes(buffer))
                buffer.clear()

    @staticmethod
    def _run_tagger(
        tagger: BaseTagger, src: str, first_line: int, docs: list[Document]
    ) -> list[dict[str, list[tuple[int, int, float]]]]:
        try:
            return tagger.tag_batch(docs)
        except (CurateError, RetryableFailure):
            raise
        except Exception as batch_error:
            # name the document: rerun one by one up to the failing row
            for offset, doc in enumerate(docs):
                try:
                    tagger.tag(doc)
                except (CurateError, RetryableFailure):
                    raise
                except Exception as exc:
                    raise CurateError(
                        f"{src}: line {first_line + offset} (id {doc.id!r}): tagger {tagger.name!r} failed: "
                        f"{type(exc).__name__}: {exc}"
                    ) from exc
            raise CurateError(
                f"{src}: lines {first_line}-{first_line + len(docs) - 1}: tagger {tagger.name!r} failed: "
                f"{type(batch_error).__name__}: {batch_error}"
            ) from batch_error
