"""datatrove's on-disk token layout, written all-or-nothing, and its file names.

One input shard becomes three files (four with a loss mask) (datatrove's ``DocumentTokenizer`` names them the same):

* ``X.ds``: every document's tokens, then its EOS, little-endian uint16 (uint32 for a vocabulary
  over 65,536 ids);
* ``X.ds.index``: uint64 little-endian, the token position where each document ends (exclusive);
* ``X.ds.loss`` (with ``--loss-mask`` only): one byte a token, 1 where a loss is taken on it
  (datatrove's ``DocumentTokenizer`` writes the same with ``save_loss_metadata``);
* ``X.ds.metadata``: three text lines: ``<tokenizer name>|<token bytes>``, the token count, and
  the count with a metric prefix (``1.23 MT``), as datatrove's ``write_final_metadata`` writes them.

datatrove's ``DatatroveFileDataset(X.ds, seq_len, token_size)`` reads them unchanged. The three
are staged as temps and installed together (:class:`feedline.run.outputs.InstallSet`), so a killed
or failed writer leaves none of them under its final name.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from feedline.io.atomic import remove_stale_temps
from feedline.run.outputs import InstallSet

__all__ = ["INDEX_SUFFIX", "LOSS_SUFFIX", "METADATA_SUFFIX", "TOKENS_SUFFIX", "ShardWriter", "metadata_text", "shard_files"]

TOKENS_SUFFIX = ".ds"
INDEX_SUFFIX = ".ds.index"
METADATA_SUFFIX = ".ds.metadata"
LOSS_SUFFIX = ".ds.loss"
_PREFIXES = ("", "k", "M", "G", "T", "P", "E", "Z", "Y", "R", "Q")


def metric(value: int, unit: str) -> str:
    """``value`` with three significant digits and an SI prefix: ``humanize.metric``'s format."""
    exponent = math.floor(math.log10(abs(value))) if value else 0
    scaled = value / 10 ** (exponent // 3 * 3)
    digits = max(0, 2 - exponent % 3)
    if round(abs(scaled), digits) >= 10 ** (exponent % 3 + 1):  # 999.9 -> 1.00 k
        exponent += 1
        scaled = value / 10 ** (exponent // 3 * 3)
        digits = max(0, 2 - exponent % 3)
    return f"{scaled:.{digits}f} {_PREFIXES[exponent // 3]}{unit}"


def metadata_text(tokenizer_name: str, token_bytes: int, tokens: int) -> str:
    """The ``.ds.metadata`` text datatrove writes for a file of ``tokens`` tokens."""
    return "\n".join([f"{tokenizer_name}|{token_bytes}", str(tokens), metric(tokens, "T")])


def shard_files(tokens_path: str | os.PathLike[str]) -> tuple[str, str, str]:
    """The ``.ds``, ``.ds.index`` and ``.ds.metadata`` paths of one shard."""
    base = os.fspath(tokens_path)
    stem = base[: -len(TOKENS_SUFFIX)] if base.endswith(TOKENS_SUFFIX) else base
    return stem + TOKENS_SUFFIX, stem + INDEX_SUFFIX, stem + METADATA_SUFFIX


@dataclass
class ShardWriter:
    """Write one shard's three files; nothing appears under their names before :meth:`commit`.

    Args:
        tokens_path: the ``.ds`` path (the other two are beside it).
        dtype: the token width (uint16 or uint32).
        tokenizer_name: what the ``.ds.metadata`` names.
        loss: also write the ``.ds.loss`` (every :meth:`write` then gives its mask). Default ``False``.
    """

    tokens_path: str
    dtype: np.dtype
    tokenizer_name: str
    loss: bool = False

    def __post_init__(self) -> None:
        self.paths = shard_files(self.tokens_path)
        self.loss_path = self.paths[0][: -len(TOKENS_SUFFIX)] + LOSS_SUFFIX
        for path in (*self.paths, self.loss_path):
            remove_stale_temps(path)  # what a killed writer of the same shard left
        self._set = InstallSet()
        self._tokens = self._set.add(self.paths[0])
        self._loss = self._set.add(self.loss_path) if self.loss else None
        self._ends: list[np.ndarray] = []
        self.tokens = 0
        self.documents = 0

    def write(self, tokens: np.ndarray, counts: np.ndarray, loss: np.ndarray | None = None) -> None:
        """Append documents: their concatenated tokens (each with its EOS), token counts and,
        for a writer with ``loss``, every token's loss mask."""
        if counts.size == 0:
            return
        if (loss is None) != (self._loss is None) or (loss is not None and loss.size != tokens.size):
            raise ValueError(f"{self.paths[0]}: a loss mask of one value a token goes with loss=True only")
        self._tokens.handle.write(np.ascontiguousarray(tokens, self.dtype.newbyteorder("<")).tobytes())
        if self._loss is not None and loss is not None:
            self._loss.handle.write(np.ascontiguousarray(loss, np.uint8).tobytes())
        self._ends.append(self.tokens + np.cumsum(counts, dtype=np.int64))
        self.tokens += int(counts.sum())
        self.documents += int(counts.size)

    @property
    def doc_ends(self) -> np.ndarray:
        return np.concatenate(self._ends) if self._ends else np.empty(0, np.int64)

    def commit(self) -> None:
        """Install the files together (the index and metadata written last)."""
        try:
            self._set.add(self.paths[1]).handle.write(self.doc_ends.astype("<u8").tobytes())
            meta = self._set.add(self.paths[2])
            meta.handle.write(metadata_text(self.tokenizer_name, self.dtype.itemsize, self.tokens).encode())
        except BaseException:
            self._set.abort()
            raise
        self._set.commit()

    def abort(self) -> None:
        self._set.abort()


def read_shard(tokens_path: str | os.PathLike[str], dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """(tokens, document ends) of a local shard: for tests and tools, not for training reads."""
    ds, index, _ = shard_files(tokens_path)
    return np.fromfile(Path(ds), dtype=dtype.newbyteorder("<")), np.fromfile(Path(index), dtype="<u8")
