"""Where a mix writes: the output folder checked before any work, shards staged and installed
together, and only the mixer's own previous shards removed.

Why checks before any work: an ``output.path`` that is the folder of the stream's own documents
would put shards among its inputs (and a rerun would mix them again), and a file named like one
of the stream's shards that the stream did not write (``m-0001.jsonl.gz`` from elsewhere) would
be overwritten or read as part of the mix. Ownership is the stream's summary,
``<output.path>/.feedline-mix/<name>.json``, written last by a finished mix: a file it lists was
written by this stream; any other file is never deleted.

Why staging: shards close one by one as they fill, so a mix that fails half-way used to leave
its first shards under their final names (over the previous run's). Local shards are written to
``.feedline-mix/<name>.partial/`` and renamed into place only when the whole stream succeeded;
a failed or killed stream leaves the previous output as it was. URL outputs are uploaded one
shard at a time (object stores have no rename) and are not cleaned up.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil

from feedline.curate import files
from feedline.curate.documents import DOCUMENTS_SEGMENT
from feedline.curate.errors import CurateError
from feedline.curate.mixconfig import StreamConfig
from feedline.io.atomic import fsync_dir, remove_stale_temps
from feedline.io.paths import is_url
from feedline.io.small import read_small

SUMMARY_FOLDER = ".feedline-mix"
EXTENSIONS = {"gz": ".jsonl.gz", "zst": ".jsonl.zst", "": ".jsonl"}


def summary_path(stream: StreamConfig) -> str:
    """``<output.path>/.feedline-mix/<name>.json``: beside the shards, but hidden, so a glob over
    the mixed folder (``*``, ``*.gz``) never reads it as documents."""
    return f"{stream.output_path}/{SUMMARY_FOLDER}/{stream.name}.json"


def staging_folder(stream: StreamConfig) -> str:
    return f"{stream.output_path}/{SUMMARY_FOLDER}/{stream.name}.partial"


def _shard_names(stream: StreamConfig) -> re.Pattern[str]:
    return re.compile(rf"^{re.escape(stream.name)}-\d{{4,}}\.jsonl(\.gz|\.zst)?$")


def owned_shards(stream: StreamConfig) -> set[str]:
    """File names (in ``output.path``) of the shards the stream's previous finished mix wrote."""
    data = read_small(summary_path(stream))
    try:
        shards = json.loads(data)["shards"] if data else []
    except (ValueError, KeyError, TypeError):
        return set()
    if not isinstance(shards, list):
        return set()
    return {os.path.basename(s) for s in shards if isinstance(s, str) and os.path.dirname(s) == stream.output_path}


def check_output(stream: StreamConfig) -> list[str]:
    """Before any work: an error when ``output.path`` is an input file, the folder of one, or its
    ``documents/`` folder (or below it), or when a file named like this run's shards is there
    that the stream did not write; the warnings for such files of another compression, left alone."""
    if is_url(stream.output_path):
        return []
    out = os.path.realpath(stream.output_path)
    for doc in files.expand(stream.documents):
        if is_url(doc):
            continue
        real = os.path.realpath(doc)
        if out == real:
            raise CurateError(f"stream {stream.name!r}: output.path {stream.output_path} is its input file {doc}; "
                              "choose another output.path")
        folder = os.path.dirname(real)
        chain = [folder]
        if DOCUMENTS_SEGMENT in folder.split(os.sep):
            while os.path.basename(chain[-1]) != DOCUMENTS_SEGMENT:
                chain.append(os.path.dirname(chain[-1]))
        if out in chain:
            raise CurateError(f"stream {stream.name!r}: output.path {stream.output_path} holds its input {doc}: "
                              "shards would be written among the documents; choose another output.path")
    if not os.path.isdir(out):
        return []
    owned = owned_shards(stream)
    ext = EXTENSIONS[stream.compression]
    pattern = _shard_names(stream)
    warnings = []
    for name in sorted(os.listdir(out)):
        if not pattern.match(name) or name in owned:
            continue
        path = f"{stream.output_path}/{name}"
        if name.endswith(ext):  # a name this run may write
            raise CurateError(
                f"{path} is in the way of stream {stream.name!r}'s shards: it was not written by this "
                f"stream's previous mix (not listed in {summary_path(stream)}); move it away or choose "
                "another output.path")
        warnings.append(f"{path}: not written by stream {stream.name!r}'s previous mix, left alone "
                        f"(a glob over {stream.output_path} reads it with the mix)")
    return warnings


def remove_stale_shards(stream: StreamConfig, produced: list[str]) -> None:
    """The shards of the stream's previous mix that this one did not write again (more of them,
    or another compression): left in place they would be read as part of this mix. Only files
    the previous summary lists are removed."""
    keep = {os.path.basename(p) for p in produced}
    pattern = _shard_names(stream)
    for name in owned_shards(stream) - keep:
        if pattern.match(name):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(stream.output_path, name))


def discard_partial_output(stream: StreamConfig) -> None:
    """What a failed, killed or dead stream left: its staging folder and summary temps.

    The summary folder itself stays: streams share an output path, and another stream still at
    work may be about to write its summary there. :func:`remove_empty_summary_folder` removes it
    once no stream runs."""
    if is_url(stream.output_path):
        return
    shutil.rmtree(staging_folder(stream), ignore_errors=True)
    remove_stale_temps(summary_path(stream))


def remove_empty_summary_folder(stream: StreamConfig) -> None:
    """After a failed mix, once every worker has stopped: the summary folder a failure left empty."""
    if is_url(stream.output_path):
        return
    with contextlib.suppress(OSError):  # only when empty: a previous summary may live there
        os.rmdir(f"{stream.output_path}/{SUMMARY_FOLDER}")


class ShardWriter:
    """Size-capped shards ``<path>/<name>-NNNN<ext>``, staged until :meth:`finish` installs them."""

    def __init__(self, stream: StreamConfig) -> None:
        self.stream = stream
        self.ext = EXTENSIONS[stream.compression]
        self.shards: list[str] = []
        self.bytes_written = 0
        self.current: files.AtomicOutput | None = None
        self.since_check = 0
        self.uncompressed = 0
        self.ratio = 1.0  # compressed / uncompressed, refined by each measurement
        self.check_every = max(1, min(stream.max_size_in_bytes // 64, 1 << 18))
        self.staging = None if is_url(stream.output_path) else staging_folder(stream)
        if self.staging is not None:
            shutil.rmtree(self.staging, ignore_errors=True)  # a killed run's; this stream owns it

    def _open(self) -> files.AtomicOutput:
        name = f"{self.stream.name}-{len(self.shards):04d}{self.ext}"
        self.shards.append(f"{self.stream.output_path}/{name}")
        target = f"{self.staging}/{name}" if self.staging is not None else self.shards[-1]
        return files.AtomicOutput(target, self.stream.compression)

    def write(self, line: bytes) -> None:
        if self.current is None:
            self.current = self._open()
            self.uncompressed = 0
        self.current.write(line)
        self.uncompressed += len(line)
        self.since_check += len(line)
        if self.since_check >= self.check_every:
            self.since_check = 0
            # Estimate from the last measured ratio; measure exactly (a compressor flush) only
            # when the estimate gets close, so a shard costs a handful of flushes.
            if self.uncompressed * self.ratio >= 0.9 * self.stream.max_size_in_bytes:
                size = self.current.compressed_size()
                self.ratio = max(size / self.uncompressed, 1e-3)
                if size >= self.stream.max_size_in_bytes:
                    self._close()

    def _close(self) -> None:
        if self.current is not None:
            self.current.commit()
            self.bytes_written += os.path.getsize(self.current.path) if self.staging is not None else 0
            self.current = None

    def finish(self) -> None:
        """Install every staged shard under its final name, then remove the previous run's extra ones."""
        self._close()
        if self.staging is None:
            return
        os.makedirs(self.stream.output_path, exist_ok=True)
        for final in self.shards:
            os.replace(f"{self.staging}/{os.path.basename(final)}", final)
        fsync_dir(self.stream.output_path)
        shutil.rmtree(self.staging, ignore_errors=True)
        remove_stale_shards(self.stream, self.shards)

    def abort(self) -> None:
        if self.current is not None:
            self.current.abort()
        discard_partial_output(self.stream)
