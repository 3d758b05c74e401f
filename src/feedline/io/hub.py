"""Hub dataset roots (``hf://datasets/OWNER/NAME[@REV]``), read with feedline's own range client.

Why not huggingface_hub's ``HfFileSystem``: its ``_fetch_range`` never checks for a ``206``, so
behind a proxy or mirror that ignores ``Range`` a read at an offset returns the file's first
bytes; and every read of it is a request to the Hub itself, which rate-limits. Here:

* the revision is resolved to a commit sha once (``/api/datasets/{repo}/revision/{rev}``) and
  every read names that sha, so a branch moving mid-epoch never mixes two commits;
* the listing is the tree API at that sha (``Link`` pagination), kept once per node under
  ``$FEEDLINE_HOME`` (a commit never changes, so neither does its tree);
* each file is located once per process (one ``HEAD`` of ``resolve/{sha}/{path}``, whose
  redirect names the CDN), then read in ranges from there by :class:`HttpRangeClient` (pool,
  sub-ranges, ``206`` and ``Content-Range`` checked, ``If-Match`` on the ETag the location
  answered, exact bytes from a server that ignores ``Range``);
* the token (storage option ``token``, ``HF_TOKEN``, huggingface_hub's stored token) is sent to
  the Hub's own origin only (scheme, host and port), never to the CDN a redirect names, and is
  never written anywhere.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import IO, Any
from urllib.parse import quote, unquote, urljoin, urlsplit

from feedline.io.atomic import atomic_write
from feedline.io.body import Body, ObjectValidator
from feedline.io.errors import (
    AccessDeniedError,
    NotFoundError,
    ObjectChangedError,
    StoreError,
    UrlError,
)
from feedline.io.home import feedline_home
from feedline.io.http.client import Expected, HttpRangeClient, status_error
from feedline.io.http.headers import strong_etag
from feedline.io.http.store import HttpStore
from feedline.io.locks import process_lock
from feedline.io.redact import redact_text
from feedline.io.retry import call_with_retries
from feedline.io.store import ObjectInfo, RangedFile, Store, _check_range

log = logging.getLogger(__name__)

DEFAULT_ENDPOINT = "https://huggingface.co"
#: Storage options a Hub root takes: the token and endpoint, and the HTTP client's knobs.
HUB_OPTIONS = ("token", "endpoint", "max_connections", "subranges", "timeout_s", "min_bytes_per_s")
#: How long a located file's CDN URL is used before it is located again: the Hub's are signed
#: and expire (an expired one answers 403, which also locates again, once).
LOCATION_TTL_S = 3000.0
TREE_CACHE_VERSION = "v1"
_SHA = frozenset("0123456789abcdef")
#: Located files and listed trees, shared by every store of this process on the same commit, so
#: a DataLoader worker forked after the open inherits what its parent already asked the Hub. In
#: memory only: a located URL is a signed one, never written to disk.
_LOCATIONS: dict[tuple[str, ...], _Location] = {}
_TREES: dict[tuple[str, ...], dict[str, dict[str, Any]]] = {}
_LOCATING: dict[tuple[str, ...], threading.Lock] = {}
_SHARED = threading.Lock()


def _after_fork_in_child() -> None:
    """A forked worker keeps the parent's locations and trees, never its locks: a lock a parent
    thread held at the fork would stay held in the child forever."""
    global _SHARED
    _SHARED = threading.Lock()
    _LOCATING.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def hub_endpoint(options: dict[str, Any]) -> str:
    """The Hub's URL: the ``endpoint`` option, else ``HF_ENDPOINT`` (as huggingface_hub reads it),
    else huggingface.co."""
    value = options.get("endpoint") or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT
    return str(value).rstrip("/")


def hub_token(options: dict[str, Any]) -> str | None:
    """The token, from where huggingface_hub looks: the ``token`` option (``False``: none),
    ``HF_TOKEN``, then the token ``hf auth login`` stored."""
    token = options.get("token")
    if token is False:
        return None
    if isinstance(token, str) and token:
        return token
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        if os.environ.get(name):
            return os.environ[name]
    try:
        from huggingface_hub import get_token
    except ImportError:
        return None
    try:
        return get_token() or None
    except Exception:  # noqa: BLE001 - an unreadable token file is no token
        return None


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def parse_hub_url(url: str) -> tuple[str, str | None, str]:
    """``(OWNER/NAME, revision or None, path below the repository)`` of ``hf://datasets/...``.

    A revision with a ``/`` (``refs/pr/1``) is written percent-encoded, as for HfFileSystem."""
    rest = url.split("://", 1)[1]
    if not rest.startswith("datasets/"):
        raise UrlError(f"{redact_text(url)}: not a Hub dataset URL (hf://datasets/OWNER/NAME[@REV])")
    parts = [p for p in rest[len("datasets/") :].split("/") if p]
    if len(parts) < 2:
        raise UrlError(f"{redact_text(url)}: names no repository (hf://datasets/OWNER/NAME[@REV])")
    name, _, revision = parts[1].partition("@")
    if not name or (parts[1].endswith("@")):
        raise UrlError(f"{redact_text(url)}: empty repository name or revision")
    return f"{parts[0]}/{name}", (unquote(revision) or None), "/".join(parts[2:])


@dataclass(frozen=True)
class _Location:
    """Where one file's bytes are read from (the CDN after the Hub's redirect), and what it is."""

    url: str
    size: int
    etag: str | None
    found: float


class HubStore(Store):
    """A Hub dataset repository at one revision (``prefix``: a folder inside it as the root)."""

    def __init__(
        self,
        repo_id: str,
        revision: str | None = None,
        *,
        prefix: str = "",
        endpoint: str = DEFAULT_ENDPOINT,
        token: str | None = None,
        client_kwargs: dict[str, Any] | None = None,
        commit: str | None = None,
    ) -> None:
        self.repo_id, self.revision, self.prefix = repo_id, revision, prefix.strip("/")
        self.endpoint, self._token = endpoint.rstrip("/"), token
        self._client_kwargs = dict(client_kwargs or {})
        auth = (self.endpoint, {"Authorization": f"Bearer {token}"}) if token else None
        self.client = HttpRangeClient(**self._client_kwargs, origin_headers=auth)
        self.max_connections = self.client.max_connections
        at = f"@{quote(revision, safe='')}" if revision else ""
        self.root_url = f"hf://datasets/{repo_id}{at}" + (f"/{self.prefix}" if self.prefix else "")
        self._commit = commit if commit and _is_sha(commit) else None
        if revision and _is_sha(revision):
            self._commit = revision  # a sha is its own commit: nothing to ask
        self._tree: dict[str, dict[str, Any]] | None = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        """Settings and the resolved commit, not the pool (a DataLoader worker opens its own
        connections, and reads the same commit as its parent)."""
        return {"repo_id": self.repo_id, "revision": self.revision, "prefix": self.prefix,
                "endpoint": self.endpoint, "token": self._token, "client_kwargs": self._client_kwargs,
                "commit": self._commit, "retry": self.client.retry}

    def __setstate__(self, state: dict[str, Any]) -> None:
        retry = state.pop("retry")
        self.__init__(state.pop("repo_id"), **state)  # type: ignore[misc]
        self.client.retry = retry

    def __repr__(self) -> str:
        return f"HubStore({self.root_url!r})"

    # -- the commit, the tree ----------------------------------------------------------------
    @property
    def commit(self) -> str:
        """The commit sha every read names, resolved from the revision on first use (one request)."""
        with self._lock:
            if self._commit is None:
                self._commit = self._resolve_commit()
            return self._commit

    @property
    def pinned_url(self) -> str:
        """This root at its commit sha: what a worker reopens, so it reads the same commit."""
        sub = f"/{self.prefix}" if self.prefix else ""
        return f"hf://datasets/{self.repo_id}@{self.commit}{sub}"

    def at_revision(self, revision: str) -> HubStore:
        """The same repository at another revision (the sidecar branch), with this token."""
        return HubStore(self.repo_id, revision, endpoint=self.endpoint, token=self._token,
                        client_kwargs=self._client_kwargs)

    def _api(self, *parts: str) -> str:
        return f"{self.endpoint}/api/datasets/{self.repo_id}/" + "/".join(parts)

    def _get_json(self, url: str, what: str) -> tuple[Any, str | None]:
        """One API answer (JSON) and its ``Link: <...>; rel="next"``, retried as any read."""
        self._check_online(what)

        def once() -> tuple[Any, str | None]:
            resp = self.client.request("GET", url)
            if resp.status != 200:
                raise self._error(url, resp, what)
            try:
                return json.loads(resp.data), _next_link(resp.headers.get("Link"))
            except ValueError:
                raise StoreError(f"{what}: the Hub answered something that is not JSON") from None

        return call_with_retries(once, policy=self.client.retry, what=what, store=self.client.store_name(url))

    def _error(self, url: str, resp: Any, what: str) -> StoreError:
        code = resp.headers.get("X-Error-Code") or ""
        if resp.status in (401, 403) or (resp.status == 404 and code == "RepoNotFound"):
            hint = "" if self._token else " (no token found: set HF_TOKEN for a private or gated dataset)"
            cls = NotFoundError if resp.status == 404 else AccessDeniedError
            return cls(f"{what}: no such dataset repository, or no access to it{hint}")
        if resp.status == 404 and code == "RevisionNotFound":
            return NotFoundError(f"{what}: no revision {self.revision!r} in this repository")
        return status_error(url, resp.status, resp.reason or "", None, resp.headers.get("Retry-After"))

    def _check_online(self, what: str) -> None:
        if hub_offline():
            raise StoreError(f"{what}: HF_HUB_OFFLINE is set; unset it or read from a local root")

    def _resolve_commit(self) -> str:
        rev = quote(self.revision or "main", safe="")
        info, _ = self._get_json(self._api("revision", rev), self.root_url)
        sha = info.get("sha") if isinstance(info, dict) else None
        if not isinstance(sha, str) or not _is_sha(sha):
            raise StoreError(f"{self.root_url}: the Hub did not name a commit for this revision")
        return sha

    def _tree_cache(self) -> Any:
        key = hashlib.sha256(f"{self.endpoint}\0datasets\0{self.repo_id}".encode()).hexdigest()[:32]
        name = hashlib.sha256(self.prefix.encode()).hexdigest()[:16] if self.prefix else "root"
        return feedline_home() / "hub-trees" / TREE_CACHE_VERSION / key / self.commit / f"{name}.json"

    def tree(self) -> dict[str, dict[str, Any]]:
        """Every file below the root at the commit (path → the tree API's entry): from this
        process's copy, else the node's (``$FEEDLINE_HOME``), else the Hub, under a lock so
        ranks opening together list it once."""
        if self._tree is not None:
            return self._tree
        commit = self.commit
        shared = (self.endpoint, self.repo_id, commit, self.prefix)
        with _SHARED:
            loaded = _TREES.get(shared)
        if loaded is not None:
            self._tree = loaded
            return loaded
        cache = self._tree_cache()
        loaded = _load_tree(cache)
        if loaded is None:
            with process_lock(cache.with_name(cache.name + ".lock"), 600.0):
                loaded = _load_tree(cache)
                if loaded is None:
                    loaded = self._list_tree(commit)
                    with atomic_write(cache) as handle:
                        handle.write(json.dumps(loaded, sort_keys=True).encode())
        with _SHARED:
            _TREES[shared] = loaded
        self._tree = loaded
        return loaded

    def _list_tree(self, commit: str) -> dict[str, dict[str, Any]]:
        sub = "/" + quote(self.prefix) if self.prefix else ""
        url: str | None = self._api("tree", commit) + sub + "?recursive=true&expand=false"
        out: dict[str, dict[str, Any]] = {}
        while url is not None:
            page, url = self._get_json(url, self.root_url)
            if not isinstance(page, list):
                raise StoreError(f"{self.root_url}: the Hub's tree listing is not a list")
            for entry in page:
                if isinstance(entry, dict) and entry.get("type") == "file":
                    path = str(entry.get("path", ""))
                    rel = path[len(self.prefix) + 1 :] if self.prefix else path
                    lfs = entry.get("lfs") if isinstance(entry.get("lfs"), dict) else {}
                    large = bool(lfs.get("oid") or entry.get("xetHash"))
                    out[rel] = {"size": int(entry.get("size") or 0), "large": large,
                                "blob": str(lfs.get("oid") or entry.get("xetHash") or entry.get("oid") or "")}
        return out

    # -- the Store interface ----------------------------------------------------------------
    def _info(self, rel: str, entry: dict[str, Any]) -> ObjectInfo:
        blob = entry.get("blob") or None
        # A content hash (LFS sha256, else the git blob id): the same file in another commit
        # keeps its fingerprint, so caches keyed by it carry over.
        return ObjectInfo(path=rel, size=int(entry["size"]), etag=blob,
                          fingerprint=f"hf:{blob}" if blob else None)

    def stat(self, path: str) -> ObjectInfo:
        rel = self.clean_path(path)
        if self._tree is None and self._commit is None:
            self._check_online(self.url(path))  # offline, a known commit's tree is still cached
        entry = self.tree().get(rel)
        if entry is None:
            raise NotFoundError(f"{self.url(path)}: no such file at commit {self.commit[:12]}")
        return self._info(rel, entry)

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        base = self.clean_path(prefix)
        tree = self.tree()
        if base in tree:
            return [self._info(base, tree[base])]
        below = base + "/" if base else ""
        return [self._info(p, e) for p, e in sorted(tree.items()) if p.startswith(below)]

    def _resolve_url(self, rel: str) -> str:
        full = f"{self.prefix}/{rel}" if self.prefix else rel
        return f"{self.endpoint}/datasets/{self.repo_id}/resolve/{self.commit}/{quote(full)}"

    def _locate(self, rel: str, fresh: bool = False) -> _Location:
        """Where ``rel``'s bytes are. A regular (small) file is read from the Hub's resolve URL
        at the commit, its size from the tree: no request to locate it. A large (LFS/Xet) file:
        one ``HEAD`` of the resolve URL, not followed (its ``Location`` is the CDN), then one of
        the location for the ETag its reads are pinned to. Once per process and file."""
        key = (self.endpoint, self.repo_id, self.commit, self.prefix, rel)
        with _SHARED:
            known = _LOCATIONS.get(key)
            locating = _LOCATING.setdefault(key, threading.Lock())
        if known is not None and not fresh and time.monotonic() - known.found < LOCATION_TTL_S:
            return known
        with locating:  # fetch threads reading one file at once locate it once
            with _SHARED:
                again = _LOCATIONS.get(key)
            if again is not None and again is not known and time.monotonic() - again.found < LOCATION_TTL_S:
                return again
            return self._locate_now(key, rel, fresh)

    def _locate_now(self, key: tuple[str, ...], rel: str, fresh: bool) -> _Location:
        url = self._resolve_url(rel)
        where = self.url(rel)
        entry = self.tree().get(rel)
        if entry is None:
            raise NotFoundError(f"{where}: no such file at commit {self.commit[:12]}")
        if not entry.get("large") and not fresh:
            found = _Location(url, int(entry["size"]), None, time.monotonic())
        else:
            found = self._head_location(url, where)
        with _SHARED:
            _LOCATIONS[key] = found
        return found

    def _head_location(self, url: str, where: str) -> _Location:
        self._check_online(where)

        def once() -> _Location:
            resp = self.client.request("HEAD", url, redirect=False)
            resp.release_conn()
            location = resp.headers.get("Location")
            if resp.status in (301, 302, 303, 307, 308) and location:
                target = urljoin(url, location)
                head = self.client.head(target)
                linked = resp.headers.get("X-Linked-Size")
                if linked is not None and linked.isdigit() and int(linked) != head.size:
                    raise StoreError(f"{where}: the Hub says {linked} bytes, its CDN {head.size}")
                return _Location(target, head.size, head.strong_etag, time.monotonic())
            if resp.status == 404:
                raise NotFoundError(f"{where}: no such file at commit {self.commit[:12]}")
            if resp.status != 200 or resp.headers.get("Content-Length") is None:
                raise self._error(url, resp, where)
            size = int(resp.headers["Content-Length"])
            return _Location(url, size, strong_etag(resp.headers.get("ETag")), time.monotonic())

        return call_with_retries(once, policy=self.client.retry, what=f"HEAD {where}",
                                 store=self.client.store_name(url))

    def _read(self, path: str, ranges: list[tuple[int, int]], pin: ObjectInfo | None) -> list[bytearray]:
        rel = self.clean_path(path)
        for start, end in ranges:
            _check_range(self.url(path), start, end)
        for attempt in (0, 1):
            loc = self._locate(rel, fresh=attempt == 1)
            if pin is not None and pin.size != loc.size:
                what = f"size {pin.size} -> {loc.size}"
                raise ObjectChangedError(f"{self.url(path)}: changed ({what})", what, self.url(path))
            try:
                return self.client.get_ranges(loc.url, ranges, Expected(loc.size, loc.etag))
            except ObjectChangedError as exc:
                if attempt == 1:
                    where = self.url(path)
                    raise ObjectChangedError(f"{where}: changed ({exc.what})", exc.what, where) from None
            except (AccessDeniedError, NotFoundError):
                if attempt == 1 or loc.url.startswith(self.endpoint + "/"):
                    raise
            # An expired signed CDN URL (403), one the CDN no longer serves, or a location whose
            # ETag moved (a commit's file cannot change, its CDN copy can): located again, once.
        raise AssertionError("unreachable")

    def prepare_reads(self, paths: list[str]) -> None:
        """Locate the large files of ``paths`` now (at most ``max_connections`` at once), so
        DataLoader workers forked next inherit their locations: Hub requests per epoch then do
        not grow with the worker count. A file that fails here is located again when read."""
        tree = self.tree()
        large = [rel for rel in dict.fromkeys(self.clean_path(p) for p in paths)
                 if tree.get(rel, {}).get("large")]

        def locate(rel: str) -> None:
            try:
                self._locate(rel)
            except StoreError as exc:
                log.debug("could not locate %s ahead of the workers: %s", self.url(rel), exc)

        self.client.map(locate, large)

    def read_range(self, path: str, start: int, end: int) -> bytearray:
        return self._read(path, [(start, end)], None)[0]

    def read_ranges(self, path: str, ranges: list[tuple[int, int]]) -> list[bytearray]:
        return self._read(path, ranges, None)

    def read_ranges_pinned(self, path: str, ranges: list[tuple[int, int]], pin: ObjectInfo) -> list[bytearray]:
        """Reads name the commit, and each is pinned to the size and ETag its location answered:
        no stat after them (the commit's file cannot change; a CDN that changes is an error)."""
        return self._read(path, ranges, pin)

    def check_pin(self, path: str, pin: ObjectInfo) -> None:
        now = self.stat(path)  # from the commit's tree: free after the first listing
        if (now.size, now.fingerprint) != (pin.size, pin.fingerprint or now.fingerprint):
            what = "another file at this commit"
            raise ObjectChangedError(f"{self.url(path)}: changed ({what})", what, self.url(path))

    def open(self, path: str) -> IO[bytes]:
        return self.open_pinned(path, self.stat(path))

    def open_pinned(self, path: str, pin: ObjectInfo) -> IO[bytes]:
        import io

        return io.BufferedReader(RangedFile(self, path, pin.size, pin), buffer_size=64 << 10)

    def _located_view(self, path: str) -> HttpStore:
        """An HTTP store whose root is the file's location (its only object is ``""``); it
        shares this store's client, so it must not be closed."""
        return HttpStore(self._locate(self.clean_path(path)).url, self.client)

    def validator(self, path: str) -> ObjectValidator:
        return self._located_view(path).validator("")

    def open_from(self, path: str, offset: int = 0, validator: ObjectValidator | None = None) -> Body:
        return self._located_view(path).open_from("", offset, validator)

    def write_bytes(self, path: str, data: bytes) -> None:
        """One commit of ``path`` to the revision's branch (through huggingface_hub's commit API)."""
        from feedline.io.hubpush import upload_bytes

        full = f"{self.prefix}/{self.clean_path(path)}" if self.prefix else self.clean_path(path)
        upload_bytes(self, full, data, f"Upload {full}")
        with self._lock:
            self._commit = self._tree = None  # the branch has a new commit: resolved at next use

    def close(self) -> None:
        self.client.close()

    def set_outage_s(self, outage_s: float) -> None:
        self.client.retry = self.client.retry.with_outage(outage_s)


def _is_sha(text: str) -> bool:
    return len(text) == 40 and set(text) <= _SHA


def _next_link(value: str | None) -> str | None:
    """The ``rel="next"`` URL of a ``Link`` header (the tree API's pagination)."""
    for part in (value or "").split(","):
        url, _, params = part.partition(";")
        if 'rel="next"' in params.replace(" ", "") and url.strip().startswith("<"):
            return url.strip()[1:-1]
    return None


def _load_tree(path: Any) -> dict[str, dict[str, Any]] | None:
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not all(
        isinstance(v, dict) and isinstance(v.get("size"), int) for v in data.values()
    ):
        return None
    return data


def open_hub_store(url: str, options: dict[str, Any]) -> HubStore:
    """:class:`HubStore` for an ``hf://datasets/...`` URL and its storage options."""
    unknown = set(options) - set(HUB_OPTIONS)
    if unknown:
        raise StoreError(f"{redact_text(url)}: unknown Hub storage options {sorted(unknown)} (takes {list(HUB_OPTIONS)})")
    repo_id, revision, prefix = parse_hub_url(url)
    client = {k: options[k] for k in ("max_connections", "subranges", "timeout_s", "min_bytes_per_s")
              if options.get(k) is not None}
    for key in ("max_connections", "subranges"):
        if key in client:
            client[key] = int(client[key])
    for key in ("timeout_s", "min_bytes_per_s"):
        if key in client:
            client[key] = float(client[key])
    endpoint = hub_endpoint(options)
    if not urlsplit(endpoint).scheme.startswith("http"):
        raise StoreError(f"{redact_text(endpoint)}: the Hub endpoint must be an http(s):// URL")
    return HubStore(repo_id, revision, prefix=prefix, endpoint=endpoint, token=hub_token(options),
                    client_kwargs=client)
