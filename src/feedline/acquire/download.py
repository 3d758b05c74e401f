"""``download_shard``: a resumable download that never trusts bytes it has not re-verified.

curl ``-C -``, ``wget -c`` and aria2c resume from the size of the file on disk: a corrupted
prefix or a replaced source gives a file of the right size with the wrong bytes, and exit 0.
Here the data goes to ``<dest>.part``; ``<dest>.partial.json`` records how many of its bytes are
fsynced and what they hash to. A new run re-hashes that prefix and resumes with ``Range`` +
``If-Range`` only when it matches (and, where ETag and date cannot prove identity, HTTP, only
when sampled prefix bytes equal the server's: :mod:`feedline.acquire.prefix`); every other case (no checkpoint, hash mismatch, a 200 to a
ranged request, a changed validator, a 416 before the end) restarts from byte zero, never
splicing old and new bytes. ``dest`` itself only ever appears complete and verified (feedline
differs on purpose from "write into dest": a crashed run cannot leave a truncated shard under its
final name for a downstream reader to pick up).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import random
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from feedline.acquire.checkpoint import Checkpoint, hash_prefix, remove_quietly
from feedline.acquire.errors import DownloadError
from feedline.acquire.prefix import open_resume, resume_record
from feedline.acquire.sources import Source, open_source
from feedline.io import (
    Body,
    RangeError,
    StoreError,
    StoreUnavailableError,
    TransientError,
    process_lock,
)
from feedline.io.atomic import install, remove_stale_temps
from feedline.io.retry import RetryPolicy, default_retry, retry_after
from feedline.validate import check_int

log = logging.getLogger(__name__)

DEFAULT_BUFFER_BYTES = (
    256 << 10
)  # per ring buffer: 4 x 256 KiB stay in L2; 1 MiB cost 35 % more CPU
DEFAULT_CHECKPOINT_BYTES = 32 << 20  # fsync + checkpoint cadence: at most this much is re-fetched
HASH_BUFFERS = 4  # read-ahead ring: the hash thread may lag the network by this many buffers
#: An attempt that ends in a failure counts as progress (resetting the failure count) only when
#: it moved the verified offset this far: a server trickling a few bytes per attempt is failing.
PROGRESS_BYTES = 64 << 10
MAX_RESTARTS = 3  # a source that changes under us more often than this is not downloadable now


@dataclass(frozen=True)
class ShardResult:
    """The outcome of one shard: where it is, what it hashes to, and how it got there."""

    url: str
    path: Path
    sha256: str
    size: int
    reused_bytes: int  # verified bytes kept from an earlier run
    fetched_bytes: int  # bytes received over the network by this call
    restarts: int  # times this call started over from byte zero
    etag: str | None
    last_modified: str | None
    seconds: float
    already_complete: bool = False
    #: What a resume relied on (``None`` for a download from byte 0): the validator sent with
    #: If-Range, how many bytes of the kept prefix were compared with the server's, and whether
    #: an expected sha256 was given.
    resume: dict[str, Any] | None = None


def checkpoint_path(dest: Path) -> Path:
    return dest.with_name(dest.name + ".partial.json")


def part_path(dest: Path) -> Path:
    return dest.with_name(dest.name + ".part")


def corrupt_path(dest: Path) -> Path:
    return dest.with_name(dest.name + ".corrupt")


def reusable_bytes(dest: str | os.PathLike[str], size: int | None) -> int:
    """The bytes of ``dest`` a rerun should keep, judged from the files alone without hashing.

    Only a progress bar's starting point (so a resumed run does not show its kept bytes as still
    to fetch): :func:`download_shard` verifies and reports the real figure through ``on_reused``.
    ``size`` is the object's size when known. Quiet on unusable checkpoints: the download itself
    warns about them.
    """
    target = Path(dest)
    part = part_path(target)
    try:
        if target.is_file() and not part.exists():
            have = target.stat().st_size
            return have if size is None or have == size else 0
        raw = json.loads(checkpoint_path(target).read_text(encoding="utf-8"))
        verified = int(raw["verified_bytes"])
        on_disk = part.stat().st_size
    except (OSError, ValueError, TypeError, KeyError):
        return 0
    if verified < 0 or verified > on_disk or (size is not None and verified > size):
        return 0
    return verified


def download_shard(
    url: str,
    dest: str | os.PathLike[str],
    *,
    expected_sha256: str | None = None,
    storage_options: dict[str, Any] | None = None,
    checkpoint_bytes: int = DEFAULT_CHECKPOINT_BYTES,
    buffer_bytes: int = DEFAULT_BUFFER_BYTES,
    retry: RetryPolicy | None = None,
    on_bytes: Callable[[int], None] | None = None,
    lock_timeout_s: float = 0.0,
    fsync: bool = True,
    source: Source | None = None,
    on_reused: Callable[[int], None] | None = None,
    on_discard: Callable[[int], None] | None = None,
) -> ShardResult:
    """Download ``url`` to ``dest``, resuming a verified prefix left by an earlier run.

    ``on_bytes(n)`` is called as bytes are written (for one progress bar across shards);
    ``on_reused(n)`` once, before any transfer, with the verified bytes kept from an earlier run
    (0 when none); ``on_discard(n)`` when starting over throws away ``n`` bytes already counted
    by the other two. Their sum is always the bytes of ``dest`` on disk, so a bar fed by them
    never runs past the object's size.
    Transient failures (drops, 5xx, short bodies) are retried from the verified offset with
    backoff for as long as the store's ``outage_s`` (a run of failures without progress that
    lasted that long ends the download; ``retry.attempts`` bounds their count). Two processes
    never write the same ``dest``: the second fails after ``lock_timeout_s``.

    ``fsync=False`` skips flushing the data to disk before each checkpoint and before the final
    rename. Resume after ``kill -9`` is unaffected (the page cache outlives the process) and
    stays safe after a power loss too, because the prefix is re-hashed: unflushed bytes fail
    the check and the download restarts. What it gives up is *keeping progress* across an OS
    crash; what it buys is not waiting for the disk (see docs/benchmarks.md, Downloader).

    Args:
        url: the shard's URL (http(s)://, s3://, memory://, file:// or a local path).
        dest: the local file; written only complete and verified.
        expected_sha256: hex digest the finished file must have (else it is kept aside as
            ``<dest>.corrupt`` and the call fails).
        storage_options: for the URL's store (credentials, endpoint).
        checkpoint_bytes: fsync + checkpoint cadence: at most this much is fetched again after
            a crash (32 MiB).
        buffer_bytes: size of each read buffer of the hashing ring (256 KiB).
        retry: backoff policy for transient failures; ``None`` is the io default every store
            uses (``$FEEDLINE_OUTAGE_S`` or 60 s), so a download gives up when its store does.
        on_bytes: progress callback, called with each number of bytes written.
        lock_timeout_s: how long to wait for another process writing the same ``dest``.
        fsync: wait for the disk before each checkpoint (see above).
        source: the download source to read instead of opening ``url``, on a store the caller
            keeps open for other shards and closes (see :mod:`feedline.acquire.sources`).
        on_reused: called once with the bytes kept from an earlier run (see above).
        on_discard: called with the bytes thrown away by a start from byte 0 (see above).
    """
    check_int("buffer_bytes", buffer_bytes, minimum=1, error=DownloadError)
    check_int("checkpoint_bytes", checkpoint_bytes, minimum=1, error=DownloadError)
    if checkpoint_bytes < buffer_bytes:
        raise DownloadError(
            f"checkpoint_bytes ({checkpoint_bytes}) must be at least buffer_bytes ({buffer_bytes})"
        )
    target = Path(dest)
    target.parent.mkdir(parents=True, exist_ok=True)
    lock = target.with_name(f".{target.name}.lock")
    own = source is None  # a source passed in stays open for its owner's other shards
    source = source or open_source(url, storage_options)
    with contextlib.ExitStack() as cleanup:
        if own:
            cleanup.callback(source.close)
        cleanup.enter_context(process_lock(lock, lock_timeout_s, remove=True))
        job = _Download(
            source,
            target,
            expected_sha256=expected_sha256.lower() if expected_sha256 else None,
            checkpoint_bytes=checkpoint_bytes,
            buffer=bytearray(buffer_bytes),
            retry=retry or default_retry(),
            on_bytes=on_bytes,
            fsync=fsync,
            on_reused=on_reused,
            on_discard=on_discard,
        )
        return job.run()


class _Interrupted(TransientError):
    """The body broke after ``offset`` bytes of the object were written and hashed."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


def _no_sync(_fd: int) -> None:
    return None


def _ignore(_n: int) -> None:
    return None


def _drain(pending: list[Future[None] | None]) -> None:
    for index, future in enumerate(pending):
        if future is not None:
            future.result()
            pending[index] = None


class _Download:
    def __init__(
        self,
        source: Source,
        dest: Path,
        *,
        expected_sha256: str | None,
        checkpoint_bytes: int,
        buffer: bytearray,
        retry: RetryPolicy,
        on_bytes: Callable[[int], None] | None,
        fsync: bool = True,
        on_reused: Callable[[int], None] | None = None,
        on_discard: Callable[[int], None] | None = None,
    ) -> None:
        self.source = source
        self.dest = dest
        self.part = part_path(dest)
        self.ckpt_path = checkpoint_path(dest)
        self.expected = expected_sha256
        self.checkpoint_bytes = checkpoint_bytes
        self.buffer = buffer
        self.retry = retry
        self.on_bytes = on_bytes
        self.on_reused = on_reused or _ignore
        self.on_discard = on_discard or _ignore
        self.sync = os.fsync if fsync else _no_sync
        self.durable = fsync
        self.started = time.monotonic()
        self.fetched = 0
        self.restarts = 0
        self.reused = 0
        self.resume: dict[str, Any] | None = None
        self.hasher: Any = hashlib.sha256()
        self.views = [memoryview(buffer)] + [
            memoryview(bytearray(len(buffer))) for _ in range(HASH_BUFFERS - 1)
        ]
        self.hash_pool = ThreadPoolExecutor(1, thread_name_prefix="feedline-sha256")
        self.ckpt_pool = ThreadPoolExecutor(1, thread_name_prefix="feedline-ckpt")
        self.ckpt_future: Future[None] | None = None
        self.rng = random.Random()
        #: when the current run of failures without progress began (its first attempt's start)
        self.failing_since: float | None = None
        self.attempt_began = time.monotonic()

    # -- entry -------------------------------------------------------------------------------
    def run(self) -> ShardResult:
        try:
            return self._run()
        finally:
            self.hash_pool.shutdown()
            self.ckpt_pool.shutdown()

    def _run(self) -> ShardResult:
        remove_stale_temps(self.ckpt_path)  # of a killed checkpoint save; we hold dest's lock
        if self.dest.exists() and not self.part.exists():
            remove_quietly(self.ckpt_path)  # a stale checkpoint of a run that finished
            done = self._existing()
            if done is not None:
                self.on_reused(done.size)
                return done
        offset, self.hasher, ckpt = self._recover()
        self.reused = offset
        self.on_reused(offset)
        try:
            with open(self.part, "r+b" if self.part.exists() else "w+b") as handle:
                handle.truncate(offset)
                handle.seek(offset)
                try:
                    total = self._transfer(handle, offset, ckpt)
                finally:
                    self._wait_checkpoint()
                handle.flush()
                self.sync(handle.fileno())
        except BaseException:
            self._drop_empty_part()
            raise
        return self._finish(total, ckpt)

    def _drop_empty_part(self) -> None:
        """A failure before the first byte leaves nothing worth resuming: no empty ``.part``."""
        with contextlib.suppress(OSError):
            if self.part.stat().st_size == 0:
                remove_quietly(self.part, self.ckpt_path)

    def _existing(self) -> ShardResult | None:
        """A finished ``dest`` from an earlier run: keep it if it still matches the source."""
        size = self.dest.stat().st_size
        try:
            info = self.source.stat()
        except TransientError:
            info = None  # offline: judge the file on its own (and on the expected hash)
        if info is not None and info.size != size:
            log.info(
                "%s: source size is now %d, file has %d; downloading again",
                self.dest,
                info.size,
                size,
            )
            return None
        hasher = hash_prefix(self.dest, size, self.buffer)
        if hasher is None:
            return None
        digest = hasher.hexdigest()
        if self.expected and digest != self.expected:
            log.warning(
                "%s: existing file does not match the expected sha256; downloading again", self.dest
            )
            return None
        log.info("%s: already complete (%d bytes)", self.dest, size)
        return ShardResult(
            self.source.url,
            self.dest,
            digest,
            size,
            size,
            0,
            0,
            info.etag if info else None,
            info.last_modified if info else None,
            time.monotonic() - self.started,
            already_complete=True,
        )

    # -- resume ------------------------------------------------------------------------------
    def _recover(self) -> tuple[int, Any, Checkpoint]:
        """The verified offset, the sha256 state over it, and the checkpoint to keep updating."""
        fresh = Checkpoint(
            url=self.source.url,
            expected_size=None,
            verified_bytes=0,
            sha256_prefix=hashlib.sha256().hexdigest(),
        )
        ckpt = Checkpoint.load(self.ckpt_path)
        if ckpt is None:
            if self.part.exists() and self.part.stat().st_size:
                log.info("%s: partial file without checkpoint; starting from byte 0", self.part)
            return 0, hashlib.sha256(), fresh
        reason = ""
        on_disk = self.part.stat().st_size if self.part.exists() else -1
        if ckpt.url != self.source.url:
            reason = f"checkpoint is for {ckpt.url}"
        elif not ckpt.has_validator:
            reason = "checkpoint has no ETag or Last-Modified to resume against"
        elif on_disk < ckpt.verified_bytes:
            reason = f"partial file holds {max(on_disk, 0)} bytes, checkpoint claims {ckpt.verified_bytes}"
        elif ckpt.expected_size is not None and ckpt.verified_bytes > ckpt.expected_size:
            reason = "checkpoint offset past the object size"
        if not reason:
            hasher = hash_prefix(self.part, ckpt.verified_bytes, self.buffer)
            if hasher is None or hasher.hexdigest() != ckpt.sha256_prefix:
                reason = (
                    f"first {ckpt.verified_bytes} bytes on disk do not match the checkpoint hash"
                )
            else:
                if on_disk > ckpt.verified_bytes:
                    log.info(
                        "%s: dropping %d unverified bytes past the checkpoint",
                        self.part,
                        on_disk - ckpt.verified_bytes,
                    )
                self.resume = resume_record(ckpt, bool(self.expected))
                log.info("%s: resuming at verified byte %d", self.dest, ckpt.verified_bytes)
                return ckpt.verified_bytes, hasher, ckpt
        log.warning("%s: %s; starting from byte 0", self.dest, reason)
        self.restarts += 1
        return 0, hashlib.sha256(), fresh

    # -- transfer ----------------------------------------------------------------------------
    def _transfer(self, handle: Any, offset: int, ckpt: Checkpoint) -> int:
        """Stream until the object is complete; returns its size. Retries from the verified offset."""
        failures = 0
        while True:
            before = offset
            self.attempt_began = time.monotonic()
            try:
                body = open_resume(
                    self.source, offset, ckpt, lambda a, b: self._kept(handle, a, b), self.resume
                )
            except RangeError as exc:
                if offset > 0 and ckpt.expected_size == offset and exc.total in (None, offset):
                    return offset  # killed after the last byte, before the rename
                offset = self._restart(handle, ckpt, f"416 for bytes={offset}- (size {exc.total})", offset)
                continue
            except TransientError as exc:
                failures = self._failed(failures, exc, progressed=False)
                continue
            try:
                if body.start != offset:
                    offset = self._restart(handle, ckpt, body.why_restart or "source restarted", offset)
                self._adopt(ckpt, body)
                offset = self._stream(handle, body, offset, ckpt)
            except _Interrupted as exc:
                offset = exc.offset  # every byte up to here is written and hashed
                self._save(handle, offset, ckpt)
                failures = self._failed(failures, exc, progressed=offset - before >= PROGRESS_BYTES)
                continue
            finally:
                body.close()
            if body.total is not None and offset < body.total:
                self._save(handle, offset, ckpt)
                exc = TransientError(f"short body: {offset} of {body.total} bytes")
                failures = self._failed(failures, exc, progressed=offset - before >= PROGRESS_BYTES)
                continue
            return offset

    @staticmethod
    def _kept(handle: Any, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the part file as written so far (the resume's re-read)."""
        handle.flush()
        return os.pread(handle.fileno(), end - start, start)

    def _restart(self, handle: Any, ckpt: Checkpoint, why: str, offset: int) -> int:
        """Throw away the ``offset`` bytes kept so far and start from byte 0."""
        self._wait_checkpoint()  # no late checkpoint of the old bytes after this point
        self.restarts += 1
        if self.restarts > MAX_RESTARTS + 1:
            raise DownloadError(
                f"{self.source.url}: had to start over {self.restarts} times ({why}); "
                "the source keeps changing, try again later"
            )
        log.warning("%s: %s; starting from byte 0", self.dest, why)
        handle.seek(0)
        handle.truncate(0)
        ckpt.verified_bytes = 0
        ckpt.sha256_prefix = hashlib.sha256().hexdigest()
        remove_quietly(self.ckpt_path)
        self.hasher = hashlib.sha256()
        self.reused = 0
        self.on_discard(offset)
        return 0

    def _failed(self, failures: int, exc: Exception, *, progressed: bool) -> int:
        """Back off after a transient failure; give up once failures without progress have
        lasted ``outage_s`` (counted from the start of the first failed attempt, so the time an
        inner call spent retrying counts) or used up ``retry.attempts``."""
        now = time.monotonic()
        if progressed:
            self.failing_since = now  # the attempt moved the offset: a new run starts here
        elif self.failing_since is None:
            self.failing_since = self.attempt_began
        failures = 1 if progressed else failures + 1
        failing = now - self.failing_since
        left = self.retry.outage_s - failing
        # a store that gave up (its outage clock passed outage_s) is not asked again and again
        if failures >= self.retry.attempts or left <= 0 or isinstance(exc, StoreUnavailableError):
            raise DownloadError(
                f"{self.source.url}: giving up after {failures} failed attempts in {failing:.1f} s "
                f"({exc}; outage_s={self.retry.outage_s:g}); rerun to resume from the verified offset"
            ) from None
        pause = min(max(self.retry.delay(failures - 1, self.rng), retry_after(exc)), left)
        log.info("%s: %s; retrying in %.2f s", self.source.url, exc, pause)
        time.sleep(pause)
        return failures

    @staticmethod
    def _adopt(ckpt: Checkpoint, body: Body) -> None:
        if body.start == 0 or ckpt.fetched_at is None:
            ckpt.fetched_at = time.time()  # when these bytes began to arrive (for the record)
        ckpt.expected_size = body.total
        ckpt.etag = body.etag
        ckpt.last_modified = body.last_modified
        ckpt.version_id = body.version_id

    def _stream(self, handle: Any, body: Body, offset: int, ckpt: Checkpoint) -> int:
        """Read into a ring of buffers; hash each one on a helper thread while the next is read.

        sha256 and the network both release the GIL, so hashing costs no wall time on a second
        core; a buffer is reused only after its hash update finished.
        """
        views = self.views
        pending: list[Future[None] | None] = [None] * len(views)
        submit, update = self.hash_pool.submit, self.hasher.update
        write, readinto = handle.write, body.readinto
        next_checkpoint = offset + self.checkpoint_bytes
        total = body.total
        on_bytes = self.on_bytes
        slot = 0
        try:
            while True:
                view = views[slot]
                want = len(view) if total is None else min(len(view), total - offset)
                if want <= 0:
                    break
                if pending[slot] is not None:
                    pending[slot].result()  # type: ignore[union-attr]
                got = readinto(view[:want])
                if not got:
                    break
                chunk = view[:got]
                write(chunk)
                pending[slot] = submit(update, chunk)
                slot = (slot + 1) % len(views)
                offset += got
                self.fetched += got
                if on_bytes is not None:
                    on_bytes(got)
                if offset >= next_checkpoint:
                    _drain(pending)
                    self._checkpoint_in_background(handle, offset, ckpt)
                    next_checkpoint = offset + self.checkpoint_bytes
            if total is not None and offset == total and total > 0 and readinto(views[0][:1]):
                raise DownloadError(f"{self.source.url}: server sent more than its {total} bytes")
        except TransientError as exc:
            raise _Interrupted(str(exc), offset) from None
        except StoreError as exc:  # the store failed for good mid-body
            raise DownloadError(str(exc)) from None
        except OSError as exc:  # the network's OSErrors are TransientError by now: this is the disk
            raise DownloadError(f"{self.part}: cannot write ({exc.strerror or exc})") from None
        finally:
            _drain(pending)
        return offset

    def _checkpoint_in_background(self, handle: Any, offset: int, ckpt: Checkpoint) -> None:
        """fsync + checkpoint on a helper thread; skipped while the previous one still runs."""
        if not ckpt.has_validator or (self.ckpt_future is not None and not self.ckpt_future.done()):
            return
        self._wait_checkpoint()  # surface an error of the previous one
        handle.flush()  # everything up to ``offset`` is in the OS; fsync below makes it durable
        snapshot = replace(
            ckpt, verified_bytes=offset, sha256_prefix=self.hasher.copy().hexdigest()
        )
        self.ckpt_future = self.ckpt_pool.submit(self._durable, handle.fileno(), snapshot)

    def _durable(self, fd: int, snapshot: Checkpoint) -> None:
        self.sync(fd)
        snapshot.save(self.ckpt_path, durable=self.durable)

    def _wait_checkpoint(self) -> None:
        future, self.ckpt_future = self.ckpt_future, None
        if future is None:
            return
        try:
            future.result()
        except OSError as exc:
            raise DownloadError(f"{self.ckpt_path}: cannot write the checkpoint: {exc}") from None

    def _save(self, handle: Any, offset: int, ckpt: Checkpoint) -> None:
        """Make ``offset`` bytes durable, *then* promise them in the checkpoint."""
        self._wait_checkpoint()
        if offset == 0 or not ckpt.has_validator:
            return
        handle.flush()
        self.sync(handle.fileno())
        replace(ckpt, verified_bytes=offset, sha256_prefix=self.hasher.copy().hexdigest()).save(
            self.ckpt_path, durable=self.durable
        )

    # -- completion --------------------------------------------------------------------------
    def _finish(self, total: int, ckpt: Checkpoint) -> ShardResult:
        digest = self.hasher.hexdigest()
        if self.expected and digest != self.expected:
            bad = corrupt_path(self.dest)
            os.replace(self.part, bad)
            remove_quietly(self.ckpt_path)
            raise DownloadError(
                f"{self.source.url}: sha256 {digest} does not match the expected {self.expected}; "
                f"bytes kept as {bad.name} for inspection, {self.dest.name} not written"
            )
        install(self.part, self.dest)
        remove_quietly(self.ckpt_path)
        return ShardResult(
            self.source.url,
            self.dest,
            digest,
            total,
            self.reused,
            self.fetched,
            self.restarts,
            ckpt.etag,
            ckpt.last_modified,
            time.monotonic() - self.started,
            resume=self.resume if self.reused else None,
        )
