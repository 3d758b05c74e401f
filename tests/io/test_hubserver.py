"""The Hub-contract test server (tests/hubserver.py) checked by huggingface_hub's own client.

Every other Hub test trusts this server to answer as the Hub does; these tests are what earns
that trust: ``HfApi``, ``HfFileSystem`` and ``hf_hub_download`` run against it unchanged.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hubserver import HubServer

huggingface_hub = pytest.importorskip("huggingface_hub")

PARQUET = bytes(range(256)) * 40  # 10 KiB, served as LFS (through the CDN origin)
INFO = b'{"codebase_version": "v3.0"}\n'


def _folder(tmp_path: Path, name: str = "repo", n_episodes: int = 3) -> Path:
    root = tmp_path / name
    (root / "meta").mkdir(parents=True)
    (root / "meta" / "info.json").write_bytes(INFO)
    for i in range(n_episodes):
        (root / "data" / "chunk-000").mkdir(parents=True, exist_ok=True)
        (root / "data" / "chunk-000" / f"file-{i:03d}.parquet").write_bytes(PARQUET[i:])
    (root / "README.md").write_text("# a dataset\n")
    return root


def test_dataset_info_and_revisions(hub: HubServer, tmp_path: Path) -> None:
    from huggingface_hub import HfApi
    from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

    sha = hub.add_dataset("owner/info", _folder(tmp_path))
    api = HfApi(endpoint=hub.url)
    info = api.dataset_info("owner/info")
    assert info.sha == sha
    assert info.id == "owner/info"
    assert "meta/info.json" in {s.rfilename for s in info.siblings}
    assert api.dataset_info("owner/info", revision=sha).sha == sha
    moved = hub.move_branch("owner/info", _folder(tmp_path, "v2", 1))
    assert api.dataset_info("owner/info", revision="main").sha == moved != sha
    assert api.dataset_info("owner/info", revision=sha).sha == sha  # the old commit, by sha
    with pytest.raises(RevisionNotFoundError):
        api.dataset_info("owner/info", revision="nope")
    with pytest.raises(RepositoryNotFoundError):
        api.dataset_info("owner/missing")


def test_tree_paginates_and_paths_info(hub: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import HfApi
    from huggingface_hub.hf_api import RepoFile, RepoFolder

    hub.add_dataset("owner/tree", _folder(tmp_path, n_episodes=7))
    monkeypatch.setattr(hub, "page_size", 3)
    api = HfApi(endpoint=hub.url)
    entries = list(api.list_repo_tree("owner/tree", repo_type="dataset", recursive=True, expand=True))
    paths = [e.path for e in entries]
    assert len(paths) == len(set(paths)) == 7 + 2 + 3  # files, meta/ data/ data/chunk-000, README
    assert sum(1 for m, p, _r, _a in hub.hub_requests() if "/tree/" in p) == 4  # 12 entries, 3 a page
    files = {e.path: e for e in entries if isinstance(e, RepoFile)}
    assert files["data/chunk-000/file-002.parquet"].size == len(PARQUET) - 2
    assert files["data/chunk-000/file-002.parquet"].lfs is not None
    assert files["meta/info.json"].lfs is None
    assert files["meta/info.json"].last_commit is not None
    top = list(api.list_repo_tree("owner/tree", repo_type="dataset"))
    assert {(type(e), e.path) for e in top} == {
        (RepoFolder, "data"), (RepoFolder, "meta"), (RepoFile, "README.md")
    }
    below = [e.path for e in api.list_repo_tree("owner/tree", path_in_repo="data/chunk-000", repo_type="dataset")]
    assert len(below) == 7
    info = api.get_paths_info("owner/tree", ["meta/info.json", "data", "absent"], repo_type="dataset")
    assert {type(e).__name__: e.path for e in info} == {"RepoFile": "meta/info.json", "RepoFolder": "data"}


def test_hf_file_system_reads_ranges(hub: HubServer, tmp_path: Path) -> None:
    from huggingface_hub import HfFileSystem

    sha = hub.add_dataset("owner/fs", _folder(tmp_path))
    fs = HfFileSystem(endpoint=hub.url, skip_instance_cache=True)
    assert sorted(fs.ls("datasets/owner/fs/data/chunk-000", detail=False)) == [
        f"datasets/owner/fs/data/chunk-000/file-{i:03d}.parquet" for i in range(3)
    ]
    assert fs.info("datasets/owner/fs/meta/info.json")["size"] == len(INFO)
    with fs.open(f"datasets/owner/fs@{sha}/data/chunk-000/file-000.parquet", block_size=1024) as f:
        f.seek(5000)
        assert f.read(100) == PARQUET[5000:5100]
    ranged = [r for _m, _p, r, _a in hub.hub_requests("cdn") if r]
    assert ranged and all(r.startswith("bytes=") for r in ranged)
    assert fs.cat_file("datasets/owner/fs/meta/info.json", start=2, end=12) == INFO[2:12]
    assert fs.glob("datasets/owner/fs/**/*.parquet") == [
        f"datasets/owner/fs/data/chunk-000/file-{i:03d}.parquet" for i in range(3)
    ]


def test_hf_file_system_is_fooled_by_a_server_that_ignores_range(hub: HubServer, tmp_path: Path) -> None:
    """The fault feedline guards against: huggingface_hub never checks for a 206, so a read at
    an offset returns the file's first bytes. Shown here so the fault mode is known to bite."""
    from huggingface_hub import HfFileSystem

    hub.add_dataset("owner/norange", _folder(tmp_path))
    fs = HfFileSystem(endpoint=hub.url, skip_instance_cache=True)
    hub.add_fault("ignore_range", count=10)
    data = fs.cat_file("datasets/owner/norange/data/chunk-000/file-000.parquet", start=1000, end=1010)
    assert data != PARQUET[1000:1010]


def test_hf_hub_download_and_metadata(hub: HubServer, tmp_path: Path) -> None:
    from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url

    sha = hub.add_dataset("owner/dl", _folder(tmp_path))
    cache = tmp_path / "cache"
    local = hf_hub_download(
        "owner/dl", "data/chunk-000/file-001.parquet", repo_type="dataset", cache_dir=cache, endpoint=hub.url
    )
    assert Path(local).read_bytes() == PARQUET[1:]
    assert f"/snapshots/{sha}/" in local
    small = hf_hub_download("owner/dl", "meta/info.json", repo_type="dataset", cache_dir=cache, endpoint=hub.url)
    assert Path(small).read_bytes() == INFO
    url = hf_hub_url("owner/dl", "data/chunk-000/file-001.parquet", repo_type="dataset", endpoint=hub.url)
    meta = get_hf_file_metadata(url)
    assert meta.commit_hash == sha
    assert meta.size == len(PARQUET) - 1
    assert meta.location.startswith(hub.cdn_url)  # the LFS redirect, to another origin
    assert meta.etag and len(meta.etag) == 64  # the LFS sha256


def test_faults_reach_the_client(hub: HubServer, tmp_path: Path) -> None:
    from huggingface_hub import HfFileSystem, hf_hub_download
    from huggingface_hub.errors import HfHubHTTPError

    hub.add_dataset("owner/faults", _folder(tmp_path))
    fs = HfFileSystem(endpoint=hub.url, skip_instance_cache=True)
    name = "datasets/owner/faults/meta/info.json"
    hub.add_fault("status", code=503, count=1)  # huggingface_hub's backoff retries a 503
    assert fs.cat_file(name, start=0, end=5) == INFO[:5]
    hub.add_fault("status", code=429, retry_after="0", count=1)
    assert fs.cat_file(name, start=0, end=5) == INFO[:5]
    hub.add_fault("status", code=501, count=1)  # not a code it retries
    with pytest.raises(HfHubHTTPError):
        fs.cat_file(name, start=0, end=5)
    hub.clear()
    hub.add_fault("truncate", after_bytes=100, where="/lfs/", count=10)
    with pytest.raises(Exception, match="(?i)consistency|incomplete|peer|closed|remote"):
        hf_hub_download("owner/faults", "data/chunk-000/file-000.parquet", repo_type="dataset",
                        cache_dir=tmp_path / "c", endpoint=hub.url)


def test_retry_after_and_etag_change_are_on_the_wire(hub: HubServer, tmp_path: Path) -> None:
    import requests

    hub.add_dataset("owner/wire", _folder(tmp_path))
    url = f"{hub.url}/datasets/owner/wire/resolve/main/meta/info.json"
    hub.add_fault("status", code=429, retry_after="7")
    resp = requests.get(url, timeout=5)
    assert (resp.status_code, resp.headers["Retry-After"]) == (429, "7")
    head = requests.head(url, timeout=5)
    hub.add_fault("etag")
    got = requests.get(url, headers={"Range": "bytes=0-3"}, timeout=5)
    assert got.status_code == 206 and got.headers["Content-Range"] == f"bytes 0-3/{len(INFO)}"
    assert head.headers["ETag"].startswith('"') and got.headers["ETag"] != head.headers["ETag"]
    assert head.headers["X-Repo-Commit"] == hub.sha("owner/wire")


def test_upload_and_branch(hub: HubServer, tmp_path: Path) -> None:
    from huggingface_hub import HfApi

    first = hub.add_dataset("owner/up", _folder(tmp_path))
    api = HfApi(endpoint=hub.url, token="hf_test")
    api.create_branch("owner/up", repo_type="dataset", branch="lerobot-sidecars", exist_ok=True)
    api.create_branch("owner/up", repo_type="dataset", branch="lerobot-sidecars", exist_ok=True)
    info = api.upload_file(
        path_or_fileobj=b"sidecar bytes", path_in_repo=f"sidecars/{first}.bin", repo_id="owner/up",
        repo_type="dataset", revision="lerobot-sidecars", commit_message="add sidecar",
    )
    new = hub.sha("owner/up", "lerobot-sidecars")
    assert info.oid == new != first
    assert hub.sha("owner/up", "main") == first  # the source branch is untouched
    files = api.list_repo_files("owner/up", repo_type="dataset", revision="lerobot-sidecars")
    assert f"sidecars/{first}.bin" in files
    assert api.dataset_info("owner/up", revision="lerobot-sidecars").sha == new
    assert any(a == "Bearer hf_test" for _m, p, _r, a in hub.hub_requests() if "/commit/" in p)
