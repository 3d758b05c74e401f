"""Token folders that lie: shard paths escaping the root, shards listed twice, files replaced or
damaged after the open, ids past the vocabulary. Each is one line naming the file."""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from torch.utils.data import DataLoader

from feedline.streaming.errors import MixtureError
from feedline.text import TokenDataset
from feedline.text.errors import TokenFileChangedError, TokenFileError

SEQ = 31


def _edit_manifest(root: Path, edit) -> None:
    path = root / "manifest.json"
    body = json.loads(path.read_text())
    edit(body)
    path.write_text(json.dumps(body))


@pytest.mark.parametrize("prefix", ["%2e%2e/other/", "..%2fother/", "sub/%2e%2e/%2e%2e/other/"])
def test_a_shard_path_escaping_after_percent_decoding_is_refused(tokens_root, nginx_server, prefix):
    base = Path(nginx_server.root) / f"tok-escape-{len(prefix)}"
    shutil.copytree(tokens_root, base / "tokens")
    shutil.copytree(tokens_root, base / "other")
    first = json.loads((tokens_root / "manifest.json").read_text())["shards"][0]["path"]
    proof = f"{nginx_server.url}/{base.name}/tokens/%2e%2e/other/{first}"
    with urllib.request.urlopen(proof) as answer:  # nginx does serve the other folder
        assert answer.status == 200
    nginx_server.wait_logged(f"/{base.name}/tokens/%2e%2e/other/{first}")

    def escape(body):
        body["shards"][0]["path"] = prefix + body["shards"][0]["path"]

    _edit_manifest(base / "tokens", escape)
    before = len(nginx_server.log_lines())
    with pytest.raises(TokenFileError, match="escapes the root") as err:
        TokenDataset(f"{nginx_server.url}/{base.name}/tokens", SEQ)
    assert "\n" not in str(err.value) and "manifest.json" in str(err.value)
    assert not [line for line in nginx_server.log_lines()[before:] if "other" in line]


def test_a_shard_listed_twice_is_refused(tokens_root, tmp_path):
    root = tmp_path / "tokens"
    shutil.copytree(tokens_root, root)

    def twice(body):
        body["shards"].append(dict(body["shards"][0], path="./" + body["shards"][0]["path"]))

    _edit_manifest(root, twice)
    with pytest.raises(TokenFileError, match="is listed twice") as err:
        TokenDataset(root, SEQ)
    assert "\n" not in str(err.value)


def _shard(root: Path, n: int = 0) -> Path:
    return root / json.loads((root / "manifest.json").read_text())["shards"][n]["path"]


def _first_batches(ds: TokenDataset, num_workers: int):
    loader = DataLoader(ds, batch_size=4, num_workers=num_workers)
    return iter(ds.track(loader))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_ds_replaced_mid_epoch_on_nginx_is_changed_naming_it(tokens_root, nginx_server, num_workers):
    base = Path(nginx_server.root) / f"tok-replaced-{num_workers}"
    shutil.copytree(tokens_root, base)
    ds = TokenDataset(f"{nginx_server.url}/{base.name}", SEQ, chunk_windows=2, pool_size=2,
                      prefetch_chunks=1, fetch_threads=1, queue_size=2, seed=3)
    batches = _first_batches(ds, num_workers)
    next(batches)
    for n in range(4):  # every shard: same size, other tokens (a re-tokenize with another seed)
        path = _shard(base, n)
        data = np.fromfile(path, dtype="<u2")
        path.write_bytes(data[::-1].tobytes())
        os.utime(path, (time.time() + 5 + n, time.time() + 5 + n))  # a new ETag even within a second
    with pytest.raises(TokenFileChangedError, match=r"part-\d+\.ds: changed since the dataset was opened") as err:
        for _ in batches:
            pass
    # torch re-raises a worker's error as its class with the worker's traceback before our line
    line = str(err.value).strip().splitlines()[-1].removeprefix("feedline.text.errors.TokenFileChangedError: ")
    assert line.startswith(f"{nginx_server.url}/{base.name}/") and "changed since the dataset was opened" in line
    assert num_workers or "\n" not in str(err.value)


def test_a_local_index_replaced_after_open_is_changed_naming_it(tokens_root, tmp_path):
    root = tmp_path / "tokens"
    shutil.copytree(tokens_root, root)
    ds = TokenDataset(root, SEQ, chunk_windows=4)
    for n in range(4):
        index = Path(str(_shard(root, n)) + ".index")
        ends = np.fromfile(index, dtype="<u8")
        index.unlink()  # a new inode: what an atomic re-write does
        ends.tofile(index)
    with pytest.raises(TokenFileChangedError, match=r"part-\d+\.ds\.index: changed since the dataset was opened"):
        list(ds)


def test_a_token_id_past_the_vocabulary_names_file_and_offset(tokens_root, tmp_path):
    root = tmp_path / "tokens"
    shutil.copytree(tokens_root, root)
    vocab = json.loads((root / "manifest.json").read_text())["tokenizer"]["vocab_size"]
    path = _shard(root, 1)
    data = np.fromfile(path, dtype="<u2")
    data[100] = vocab  # one flipped id: the file keeps its size
    data.tofile(path)
    with pytest.raises(TokenFileError, match=rf"{path.name}: token id {vocab} at token 100 \(byte 200\) "
                                             rf"is not below the manifest's vocabulary size {vocab}") as err:
        list(TokenDataset(root, SEQ, chunk_windows=4))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("case", ["empty", "fewer", "last end short"])
def test_an_index_that_does_not_fit_the_manifest_or_the_ds_is_refused(tokens_root, tmp_path, case):
    root = tmp_path / "tokens"
    shutil.copytree(tokens_root, root)
    index = Path(str(_shard(root, 2)) + ".index")
    ends = np.fromfile(index, dtype="<u8")
    if case == "empty":
        index.write_bytes(b"")
        match = "empty, but"
    elif case == "fewer":
        ends[:-2].tofile(index)
        match = "document ends, but the manifest lists"
    else:
        ends[-1] -= 1
        ends.tofile(index)
        match = "document ends do not fit"
    with pytest.raises(TokenFileError, match=match) as err:
        TokenDataset(root, SEQ)
    assert index.name in str(err.value) and "\n" not in str(err.value)


def test_without_a_manifest_an_empty_index_is_refused_too(tokens_root, tmp_path):
    root = tmp_path / "tokens"
    shutil.copytree(tokens_root, root, ignore=shutil.ignore_patterns("manifest.json"))
    first = sorted(root.rglob("*.ds.index"))[0]
    first.write_bytes(b"")
    with pytest.raises(TokenFileError, match="empty, but"):
        TokenDataset(root, SEQ)


def test_token_epoch_size_past_the_bound_is_one_line(tokens_root):
    started = time.monotonic()
    with pytest.raises(MixtureError, match="epoch_size=1000000000000 gives") as err:
        TokenDataset([{"root": str(tokens_root), "weight": 1}], 31, epoch_size=10**12)
    assert time.monotonic() - started < 10 and "\n" not in str(err.value)
