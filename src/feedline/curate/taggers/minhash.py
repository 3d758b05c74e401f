"""``minhash_near_dup_v1``: exact and near-duplicate scores against the rest of the run's corpus.

Uses feedline's MinHash/LSH engine (:class:`feedline.dedup.engine.Deduplicator`: word 5-gram
shingles, 128-slot one-permutation signatures, banding chosen for Jaccard 0.8, candidates confirmed by exact
Jaccard). Duplicates are relative to the whole run, so this tagger has a corpus pass: before
files are tagged, the processor streams every document of the run, in sorted file order and
line order, through one deduplicator (first occurrence wins, as in ``feedline dedup``). The
verdicts are saved in the run's metadata folder (reused while the file list, sizes and
configuration are unchanged), and each file's tagging then reads its own verdicts, so the
output does not depend on the number of processes, the executor or resumes.

Signals (whole-document spans):

* ``exact_duplicate``: 1 when the normalised text equals an earlier document's, else 0;
* ``near_duplicate``: the confirmed Jaccard similarity to the earlier kept document it
  duplicates (>= the threshold), else 0;
* ``duplicate``: 1 when either is set — the one to exclude on in a mix
  (``$.attributes[?(@.<exp>__minhash_near_dup_v1__duplicate[0][2] >= 1)]``).
"""

from __future__ import annotations

import io
import json
import zlib
from typing import ClassVar

import numpy as np

from feedline.curate import files
from feedline.curate.errors import CurateError
from feedline.curate.model import DocResult, Document, Span
from feedline.curate.registry import add_tagger
from feedline.curate.taggers.base import BaseTagger
from feedline.io.small import read_small

_KEPT, _EXACT, _NEAR = 0, 1, 2


def _id_check(doc_id: str) -> int:
    return zlib.crc32(doc_id.encode("utf-8", "surrogatepass"))


class CorpusVerdicts:
    """Per-file arrays (kind, similarity, id checksum) saved as one ``.npz`` in the metadata folder."""

    def __init__(self, sources: list[str], arrays: dict[str, np.ndarray], meta: dict[str, object]) -> None:
        self.sources = sources
        self.arrays = arrays
        self.meta = meta

    def for_file(self, source: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        try:
            i = self.sources.index(source)
        except ValueError:
            raise CurateError(f"{source}: not part of the corpus pass of minhash_near_dup_v1; rerun the job") from None
        return self.arrays[f"kind_{i}"], self.arrays[f"similarity_{i}"], self.arrays[f"check_{i}"]

    def to_bytes(self) -> bytes:
        buffer = io.BytesIO()
        np.savez(buffer, meta=np.frombuffer(json.dumps(self.meta, sort_keys=True).encode(), np.uint8), **self.arrays)
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> CorpusVerdicts:
        with np.load(io.BytesIO(data)) as npz:
            meta = json.loads(bytes(npz["meta"]).decode())
            arrays = {k: npz[k] for k in npz.files if k != "meta"}
        return cls(list(meta["sources"]), arrays, meta)


@add_tagger("minhash_near_dup_v1")
class MinHashNearDup(BaseTagger):
    """Exact/near-duplicate flags and Jaccard similarity vs. earlier documents of the run (MinHash+LSH)."""

    #: Engine settings; subclass and register under another name to change them.
    threshold: ClassVar[float] = 0.8
    num_perm: ClassVar[int] = 128
    ngram: ClassVar[int] = 5
    needs_corpus_pass: ClassVar[bool] = True

    def __init__(self) -> None:
        self._verdicts: CorpusVerdicts | None = None
        self._file: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._source = ""
        self._row = 0

    @classmethod
    def _config(cls) -> dict[str, object]:
        return {"tagger": cls.name, "threshold": cls.threshold, "num_perm": cls.num_perm, "ngram": cls.ngram}

    @classmethod
    def verdicts_path(cls, workdir: str) -> str:
        return f"{workdir.rstrip('/')}/{cls.name}.corpus.npz"

    @classmethod
    def prepare_corpus(cls, sources: list[str], workdir: str) -> None:
        """Run the corpus pass unless saved verdicts for the same files and settings exist."""
        from feedline.curate.model import DOCUMENT_DECODER
        from feedline.dedup.engine import DedupConfig, Deduplicator

        ordered = sorted(sources)
        meta = {"sources": ordered, "sizes": [files.size_of(s) for s in ordered], **cls._config()}
        path = cls.verdicts_path(workdir)
        saved = read_small(path)
        if saved is not None:
            try:
                if CorpusVerdicts.from_bytes(saved).meta == meta:
                    return
            except (ValueError, KeyError, OSError):
                pass
        config = DedupConfig(threshold=cls.threshold, num_perm=cls.num_perm, ngram=cls.ngram)
        arrays: dict[str, np.ndarray] = {}
        with Deduplicator(config) as dedup:
            for i, source in enumerate(ordered):
                kinds: list[int] = []
                similarity: list[float] = []
                checks: list[int] = []
                with files.open_lines(source) as lines:
                    docs = (DOCUMENT_DECODER.decode(line) for line in lines)
                    for doc, verdict in dedup.stream(docs, lambda d: d.id, lambda d: d.text):
                        checks.append(_id_check(doc.id))
                        if verdict.kind == "exact_dup":
                            kinds.append(_EXACT)
                            similarity.append(1.0)
                        elif verdict.kind == "near_dup":
                            kinds.append(_NEAR)
                            similarity.append(float(verdict.similarity or 0.0))
                        else:
                            kinds.append(_KEPT)
                            similarity.append(0.0)
                arrays[f"kind_{i}"] = np.asarray(kinds, np.int8)
                arrays[f"similarity_{i}"] = np.asarray(similarity, np.float64)
                arrays[f"check_{i}"] = np.asarray(checks, np.uint32)
        files.write_small(path, CorpusVerdicts(ordered, arrays, meta).to_bytes())

    def begin_file(self, source: str, workdir: str | None) -> None:
        if workdir is None:
            raise CurateError(f"{self.name} needs the corpus pass of a tag run (feedline tag / run_tag)")
        if self._verdicts is None:
            data = read_small(self.verdicts_path(workdir))
            if data is None:
                raise CurateError(f"{self.verdicts_path(workdir)}: corpus verdicts missing; rerun the job")
            self._verdicts = CorpusVerdicts.from_bytes(data)
        self._file = self._verdicts.for_file(source)
        self._source = source
        self._row = 0

    def predict(self, doc: Document) -> DocResult:
        if self._file is None:
            raise CurateError(f"{self.name}: begin_file was not called")
        kinds, similarity, checks = self._file
        row = self._row
        self._row += 1
        if row >= len(kinds) or checks[row] != _id_check(doc.id):
            raise CurateError(f"{self._source}: line {row + 1} (id {doc.id!r}) changed since the corpus pass; rerun")
        kind = int(kinds[row])
        n = len(doc.text)
        return DocResult(
            doc,
            [
                Span(0, n, "exact_duplicate", 1.0 if kind == _EXACT else 0.0),
                Span(0, n, "near_duplicate", float(similarity[row]) if kind == _NEAR else 0.0),
                Span(0, n, "duplicate", 0.0 if kind == _KEPT else 1.0),
            ],
        )
