"""A Hugging Face Hub-contract server for the test suite, written from the Hub's HTTP contract.

No Hub-compatible server that serves ranges from a local repository installs from the package
registry, so the suite keeps its own. It serves dataset repositories from plain folders: each
commit is a folder, keyed by (repo, commit sha), and each branch names a commit. Endpoints:

* ``GET /api/datasets/{repo}`` and ``/api/datasets/{repo}/revision/{rev}``: the dataset's info
  (``sha``, ``siblings``);
* ``GET /api/datasets/{repo}/tree/{rev}[/{path}]``: ``recursive``, ``expand``, ``Link``
  pagination (``cursor``);
* ``POST /api/datasets/{repo}/paths-info/{rev}`` (form-encoded ``paths``, ``expand``);
* ``HEAD``/``GET /datasets/{repo}/resolve/{rev}/{path}``: ``206`` with ``Content-Range``,
  ``Accept-Ranges``, a quoted ``ETag`` and ``X-Repo-Commit``; a large-file (LFS) path answers
  with a ``302`` to a second server (the "CDN", another origin) and ``X-Linked-Size`` and
  ``X-Linked-Etag``, as the Hub does;
* ``POST .../preupload/{rev}``, the NDJSON ``.../commit/{rev}`` (regular uploads only, as with
  ``HF_HUB_DISABLE_XET=1``) and ``.../branch/{name}``.

Fault modes (:meth:`HubServer.add_fault`), only where bytes are served unless told otherwise:
``ignore_range`` (200 with the whole body), ``status`` (e.g. 429 with ``Retry-After``, or a 5xx),
``truncate`` (a body cut after N bytes), ``etag`` (a different ETag than the one before);
:meth:`HubServer.move_branch` moves a branch to a new commit.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from tests.servers import send_cut_off

#: Suffixes the Hub stores as LFS (``.gitattributes`` of a new dataset repository).
LFS_SUFFIXES = (".parquet", ".mp4", ".arrow", ".safetensors", ".bin", ".zst", ".gz", ".npy")
COMMIT_DATE = "2026-01-01T00:00:00.000Z"


def git_blob_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Blob:
    path: str
    file: Path
    size: int
    oid: str  # the git blob sha1
    sha256: str | None  # set for LFS files

    @property
    def etag(self) -> str:
        return f'"{self.sha256 or self.oid}"'


@dataclass
class Commit:
    sha: str
    folder: Path
    title: str
    blobs: dict[str, Blob] = field(default_factory=dict)


@dataclass
class Repo:
    repo_id: str
    branches: dict[str, str] = field(default_factory=dict)
    commits: dict[str, Commit] = field(default_factory=dict)


@dataclass
class HubFault:
    kind: str
    count: int
    code: int = 503
    retry_after: str | None = None
    after_bytes: int = 0
    where: str | None = None


@dataclass
class HubServer:
    """The state behind both origins (the Hub at :attr:`url`, its CDN at :attr:`cdn_url`)."""

    work: Path
    url: str = ""
    cdn_url: str = ""
    page_size: int = 1000
    repos: dict[str, Repo] = field(default_factory=dict)
    faults: list[HubFault] = field(default_factory=list)
    #: (origin "hub" | "cdn", method, path, Range, Authorization) of every request.
    requests: list[tuple[str, str, str, str | None, str | None]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _counter: int = 0

    # -- repositories -------------------------------------------------------------------------
    def add_dataset(self, repo_id: str, folder: Path, branch: str = "main", title: str = "initial") -> str:
        """Serve a copy of ``folder`` as a new commit of ``repo_id`` on ``branch``; its sha."""
        with self.lock:
            repo = self.repos.setdefault(repo_id, Repo(repo_id))
            return self._commit_folder(repo, folder, branch, title)

    def move_branch(self, repo_id: str, folder: Path, branch: str = "main") -> str:
        """A new commit on ``branch`` (a moved branch), the old commit still served by sha."""
        return self.add_dataset(repo_id, folder, branch, title="moved")

    def sha(self, repo_id: str, revision: str = "main") -> str:
        return self._commit(self.repos[repo_id], revision).sha

    def _commit_folder(self, repo: Repo, folder: Path, branch: str, title: str) -> str:
        self._counter += 1
        seed = f"{repo.repo_id}\0{branch}\0{self._counter}\0{folder}".encode()
        sha = hashlib.sha1(seed).hexdigest()
        dest = self.work / "commits" / sha
        shutil.copytree(folder, dest)
        commit = Commit(sha, dest, title)
        for file in sorted(p for p in dest.rglob("*") if p.is_file()):
            data = file.read_bytes()
            rel = file.relative_to(dest).as_posix()
            lfs = hashlib.sha256(data).hexdigest() if rel.endswith(LFS_SUFFIXES) else None
            commit.blobs[rel] = Blob(rel, file, len(data), git_blob_oid(data), lfs)
        repo.commits[sha] = commit
        repo.branches[branch] = sha
        return sha

    def _commit(self, repo: Repo, revision: str) -> Commit:
        sha = repo.branches.get(revision, revision)
        if sha not in repo.commits:
            raise HubHttpError(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return repo.commits[sha]

    def lfs_blob(self, sha256: str) -> Blob | None:
        for repo in self.repos.values():
            for commit in repo.commits.values():
                for blob in commit.blobs.values():
                    if blob.sha256 == sha256:
                        return blob
        return None

    # -- faults -------------------------------------------------------------------------------
    def add_fault(
        self,
        kind: str,
        *,
        count: int = 1,
        code: int = 503,
        retry_after: str | None = None,
        after_bytes: int = 0,
        where: str | None = None,
    ) -> None:
        """``where``: a substring of the request path the fault applies to; by default every
        request that serves a file's bytes (``resolve`` on the Hub, or the CDN)."""
        if kind not in ("ignore_range", "status", "truncate", "etag"):
            raise ValueError(f"unknown fault kind {kind!r}")
        with self.lock:
            self.faults.append(HubFault(kind, count, code, retry_after, after_bytes, where))

    def take_fault(self, path: str, serves_bytes: bool) -> HubFault | None:
        with self.lock:
            for fault in self.faults:
                if (fault.where in path) if fault.where is not None else serves_bytes:
                    fault.count -= 1
                    if fault.count <= 0:
                        self.faults.remove(fault)
                    return fault
        return None

    def clear(self) -> None:
        with self.lock:
            self.faults.clear()
            self.requests.clear()

    def hub_requests(self, origin: str = "hub") -> list[tuple[str, str, str | None, str | None]]:
        with self.lock:
            return [r[1:] for r in self.requests if r[0] == origin]

    # -- commits from clients -----------------------------------------------------------------
    def apply_commit(self, repo: Repo, revision: str, lines: list[dict[str, Any]]) -> str:
        with self.lock:
            parent = self._commit(repo, revision)
            if revision not in repo.branches:
                raise HubHttpError(400, "RevisionNotFound", f"{revision!r} is not a branch")
            staging = self.work / "staging" / f"{parent.sha}-{self._counter}"
            shutil.rmtree(staging, ignore_errors=True)
            shutil.copytree(parent.folder, staging)
            title = "commit"
            for line in lines:
                key, value = line.get("key"), line.get("value", {})
                if key == "header":
                    title = value.get("summary", title)
                elif key == "file":
                    target = staging / value["path"]
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(base64.b64decode(value["content"]))
                elif key == "deletedFile":
                    (staging / value["path"]).unlink(missing_ok=True)
                elif key == "deletedFolder":
                    shutil.rmtree(staging / value["path"], ignore_errors=True)
                else:
                    raise HubHttpError(400, None, f"unsupported commit operation {key!r} (regular uploads only)")
            sha = self._commit_folder(repo, staging, revision, title)
            shutil.rmtree(staging)
            return sha


class HubHttpError(Exception):
    def __init__(self, status: int, code: str | None, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _tree_entries(commit: Commit, path: str, recursive: bool) -> list[dict[str, Any]]:
    prefix = f"{path.strip('/')}/" if path.strip("/") else ""
    if prefix and prefix[:-1] in commit.blobs:
        raise HubHttpError(404, "EntryNotFound", f"{path} is a file, not a folder")
    dirs: set[str] = set()
    files: list[Blob] = []
    for rel, blob in commit.blobs.items():
        if not rel.startswith(prefix):
            continue
        rest = rel[len(prefix) :]
        parts = rest.split("/")
        for depth in range(1, len(parts)):
            if recursive or depth == 1:
                dirs.add(prefix + "/".join(parts[:depth]))
        if recursive or len(parts) == 1:
            files.append(blob)
    if prefix and not files and not dirs:
        raise HubHttpError(404, "EntryNotFound", f"{path} does not exist at {commit.sha}")
    entries: list[tuple[str, dict[str, Any]]] = []
    for d in dirs:
        oid = hashlib.sha1(f"tree\0{commit.sha}\0{d}".encode()).hexdigest()
        entries.append((d, {"type": "directory", "oid": oid, "size": 0, "path": d}))
    for blob in files:
        entries.append((blob.path, _file_entry(blob)))
    return [e for _, e in sorted(entries, key=lambda pe: pe[0])]


def _file_entry(blob: Blob) -> dict[str, Any]:
    entry: dict[str, Any] = {"type": "file", "oid": blob.oid, "size": blob.size, "path": blob.path}
    if blob.sha256:
        entry["lfs"] = {"oid": blob.sha256, "size": blob.size, "pointerSize": 134}
    return entry


def _expanded(entry: dict[str, Any], commit: Commit) -> dict[str, Any]:
    return {**entry, "lastCommit": {"id": commit.sha, "title": commit.title, "date": COMMIT_DATE}}


def _handler(hub: HubServer, origin: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, *args: Any) -> None:
            return None

        # -- plumbing ---------------------------------------------------------------------------
        def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None,
                  content_type: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _json(self, value: Any, headers: dict[str, str] | None = None, status: int = 200) -> None:
            self._send(status, json.dumps(value).encode(), headers)

        def _error(self, exc: HubHttpError) -> None:
            headers = {"X-Error-Message": exc.message}
            if exc.code:
                headers["X-Error-Code"] = exc.code
            self._json({"error": exc.message}, headers, exc.status)

        def _body(self) -> bytes:
            if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                out = bytearray()
                while (size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)) > 0:
                    out += self.rfile.read(size)
                    self.rfile.readline()
                self.rfile.readline()
                return bytes(out)
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def _dispatch(self) -> None:
            split = urlsplit(self.path)
            with hub.lock:
                hub.requests.append(
                    (origin, self.command, self.path, self.headers.get("Range"), self.headers.get("Authorization"))
                )
            body = self._body() if self.command in ("POST", "PUT") else b""
            serves_bytes = origin == "cdn" or "/resolve/" in split.path
            fault = hub.take_fault(split.path, serves_bytes)
            if fault is not None and fault.kind == "status":
                headers = {"Retry-After": fault.retry_after} if fault.retry_after else {}
                self._json({"error": f"injected {fault.code}"}, headers, fault.code)
                return
            try:
                segments = [unquote(s) for s in split.path.split("/")[1:]]
                query = {k: v[-1] for k, v in parse_qs(split.query).items()}
                if origin == "cdn":
                    self._cdn(segments, fault)
                elif segments[:1] == ["api"] and segments[1:2] == ["datasets"] and len(segments) >= 4:
                    self._api(segments[2] + "/" + segments[3], segments[4:], query, body)
                elif segments[:1] == ["datasets"] and len(segments) >= 6 and segments[3] == "resolve":
                    self._resolve(segments[1] + "/" + segments[2], segments[4], "/".join(segments[5:]), fault)
                else:
                    raise HubHttpError(404, None, f"no route for {self.command} {split.path}")
            except HubHttpError as exc:
                self._error(exc)

        do_GET = do_HEAD = do_POST = _dispatch  # noqa: N815

        def _repo(self, repo_id: str) -> Repo:
            repo = hub.repos.get(repo_id)
            if repo is None:
                raise HubHttpError(404, "RepoNotFound", f"Repository not found: {repo_id}")
            return repo

        # -- the API ----------------------------------------------------------------------------
        def _api(self, repo_id: str, rest: list[str], query: dict[str, str], body: bytes) -> None:
            repo = self._repo(repo_id)
            if self.command == "GET" and (rest == [] or (rest[:1] == ["revision"] and len(rest) == 2)):
                commit = self._commit(repo, rest[1] if len(rest) == 2 else "main")
                self._json(self._info(repo, commit))
            elif self.command == "GET" and rest[:1] == ["tree"] and len(rest) >= 2:
                self._tree(repo, rest[1], "/".join(rest[2:]), query)
            elif self.command == "POST" and rest[:1] == ["paths-info"] and len(rest) == 2:
                commit = self._commit(repo, rest[1])
                form = parse_qs(body.decode())
                expand = form.get("expand", ["false"])[-1].lower() == "true"
                out = []
                for path in form.get("paths", []):
                    path = path.strip("/")
                    if path in commit.blobs:
                        entry = _file_entry(commit.blobs[path])
                    elif any(rel.startswith(path + "/") for rel in commit.blobs):
                        oid = hashlib.sha1(f"tree\0{commit.sha}\0{path}".encode()).hexdigest()
                        entry = {"type": "directory", "oid": oid, "size": 0, "path": path}
                    else:
                        continue
                    out.append(_expanded(entry, commit) if expand else entry)
                self._json(out)
            elif self.command == "POST" and rest[:1] == ["preupload"] and len(rest) == 2:
                self._commit(repo, rest[1])
                files = json.loads(body or b"{}").get("files", [])
                self._json({"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False}
                                      for f in files]})
            elif self.command == "POST" and rest[:1] == ["commit"] and len(rest) == 2:
                lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
                sha = hub.apply_commit(repo, rest[1], lines)
                self._json({"commitOid": sha, "commitUrl": f"{hub.url}/datasets/{repo_id}/commit/{sha}",
                            "success": True})
            elif self.command == "POST" and rest[:1] == ["branch"] and len(rest) == 2:
                data = json.loads(body or b"{}")
                with hub.lock:
                    if rest[1] in repo.branches:
                        raise HubHttpError(409, None, f"Reference already exists: refs/heads/{rest[1]}")
                    start = hub._commit(repo, data.get("startingPoint") or "main")
                    repo.branches[rest[1]] = start.sha
                self._json({"name": rest[1], "ref": f"refs/heads/{rest[1]}", "targetCommit": start.sha})
            else:
                raise HubHttpError(404, None, f"no route for {self.command} {self.path}")

        def _commit(self, repo: Repo, revision: str) -> Commit:
            with hub.lock:
                return hub._commit(repo, revision)

        def _info(self, repo: Repo, commit: Commit) -> dict[str, Any]:
            return {
                "_id": hashlib.sha1(repo.repo_id.encode()).hexdigest()[:24],
                "id": repo.repo_id,
                "author": repo.repo_id.split("/")[0],
                "sha": commit.sha,
                "lastModified": COMMIT_DATE,
                "private": False,
                "gated": False,
                "disabled": False,
                "downloads": 0,
                "likes": 0,
                "tags": [],
                "cardData": {},
                "siblings": [{"rfilename": rel} for rel in sorted(commit.blobs)],
            }

        def _tree(self, repo: Repo, revision: str, path: str, query: dict[str, str]) -> None:
            commit = self._commit(repo, revision)
            recursive = query.get("recursive", "false").lower() == "true"
            expand = query.get("expand", "false").lower() == "true"
            entries = _tree_entries(commit, path, recursive)
            start = int(query.get("cursor", "0"))
            page = entries[start : start + hub.page_size]
            headers = {}
            if start + hub.page_size < len(entries):
                params = [f"{k}={quote(v)}" for k, v in query.items() if k != "cursor"]
                params.append(f"cursor={start + hub.page_size}")
                here = urlsplit(self.path).path
                headers["Link"] = f'<{hub.url}{here}?{"&".join(params)}>; rel="next"'
            self._json([_expanded(e, commit) if expand else e for e in page], headers)

        # -- file bytes -------------------------------------------------------------------------
        def _resolve(self, repo_id: str, revision: str, path: str, fault: HubFault | None) -> None:
            repo = self._repo(repo_id)
            commit = self._commit(repo, revision)
            blob = commit.blobs.get(path)
            if blob is None:
                headers = {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": commit.sha}
                self._send(404, b'{"error":"Entry not found"}', {**headers, "X-Error-Message": "Entry not found"})
                return
            headers = {"X-Repo-Commit": commit.sha, "Accept-Ranges": "bytes"}
            if blob.sha256:
                headers.update({
                    "Location": f"{hub.cdn_url}/lfs/{blob.sha256}?repo={quote(repo_id, safe='')}",
                    "X-Linked-Size": str(blob.size),
                    "X-Linked-Etag": self._etag(blob, fault),
                    "ETag": self._etag(blob, fault),
                })
                self._send(302, b"", headers, content_type="text/plain")
                return
            self._bytes(blob, fault, headers)

        def _cdn(self, segments: list[str], fault: HubFault | None) -> None:
            blob = hub.lfs_blob(segments[1]) if segments[:1] == ["lfs"] and len(segments) == 2 else None
            if blob is None:
                raise HubHttpError(404, None, "no such object")
            self._bytes(blob, fault, {"Accept-Ranges": "bytes"})

        def _etag(self, blob: Blob, fault: HubFault | None) -> str:
            return f'"{blob.sha256 or blob.oid}-changed"' if fault is not None and fault.kind == "etag" else blob.etag

        def _bytes(self, blob: Blob, fault: HubFault | None, headers: dict[str, str]) -> None:
            data = blob.file.read_bytes()
            headers = {**headers, "ETag": self._etag(blob, fault)}
            wanted = self.headers.get("Range")
            status, body = 200, data
            if wanted and not (fault is not None and fault.kind == "ignore_range"):
                first = _parse_range(wanted, len(data))
                if first is None:
                    self._send(416, b"", {**headers, "Content-Range": f"bytes */{len(data)}"})
                    return
                start, end = first
                status, body = 206, data[start : end + 1]
                headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
            self.send_response(status)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(body)))
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            if self.command == "HEAD":
                return
            if fault is not None and fault.kind == "truncate":
                send_cut_off(self, body, fault.after_bytes)
                return
            self.wfile.write(body)

    return Handler


def _parse_range(value: str, size: int) -> tuple[int, int] | None:
    """The first range of a ``bytes=`` header, inclusive; None when it is unsatisfiable."""
    spec = value.split("=", 1)[1].split(",")[0].strip()
    first, _, last = spec.partition("-")
    if not first:
        start, end = max(0, size - int(last)), size - 1
    else:
        start, end = int(first), min(int(last), size - 1) if last else size - 1
    return (start, end) if start <= end and start < size else None


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        return None  # clients hanging up on injected faults is the point


@contextlib.contextmanager
def run_hub(work: Path) -> Iterator[HubServer]:
    """The Hub and its CDN on two free ports of 127.0.0.1 (two origins, as on the real Hub)."""
    hub = HubServer(work)
    servers = [_QuietServer(("127.0.0.1", 0), _handler(hub, origin)) for origin in ("hub", "cdn")]
    hub.url, hub.cdn_url = (f"http://127.0.0.1:{s.server_address[1]}" for s in servers)
    threads = [threading.Thread(target=s.serve_forever, name="hub-server", daemon=True) for s in servers]
    for thread in threads:
        thread.start()
    try:
        yield hub
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
