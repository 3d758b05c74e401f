"""Token folders from every store: a local folder (with or without a manifest), nginx, moto's S3."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from torch.utils.data import DataLoader

from feedline.text import TokenDataset
from feedline.text.corpus import TokenCorpus
from feedline.text.errors import TokenFileError

SEQ = 31


def _reference(root: Path) -> dict[int, list[int]]:
    ds = TokenDataset(root, SEQ, return_index=True, chunk_windows=8)
    return {int(i["window_index"]): i["input_ids"].tolist() for i in ds}


def _read_all(ds: TokenDataset, num_workers: int = 2) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for batch in ds.track(DataLoader(ds, batch_size=8, num_workers=num_workers)):
        for w, ids in zip(batch["window_index"].tolist(), batch["input_ids"].tolist(), strict=True):
            assert w not in out
            out[w] = ids
    return out


def test_a_folder_without_manifest_is_listed_like_datatroves(tokens_root, tmp_path):
    bare = tmp_path / "bare"
    shutil.copytree(tokens_root, bare, ignore=shutil.ignore_patterns("manifest.json", ".*"))
    corpus = TokenCorpus(str(bare))
    assert corpus.manifest is None and corpus.token_bytes == 2
    assert corpus.names == sorted(p.name for p in tokens_root.glob("*.ds"))
    assert _read_all(TokenDataset(bare, SEQ, return_index=True, chunk_windows=8)) == _reference(tokens_root)


def test_damaged_folders_are_one_line_errors(tokens_root, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(tokens_root, broken)
    index = broken / "part-01.ds.index"
    index.write_bytes(index.read_bytes()[:-8])
    with pytest.raises(TokenFileError, match=r"part-01\.ds\.index: \d+ document ends, but the manifest lists"):
        TokenCorpus(str(broken))
    index.unlink()
    with pytest.raises(TokenFileError, match=r"part-01\.ds\.index: missing"):
        TokenCorpus(str(broken))
    shutil.copy(tokens_root / "part-01.ds.index", index)
    tokens = broken / "part-02.ds"
    tokens.write_bytes(tokens.read_bytes()[:-2])
    with pytest.raises(TokenFileError, match=r"part-02\.ds: \d+ bytes, but the manifest lists"):
        TokenCorpus(str(broken))


def test_over_http_the_files_are_found_through_the_manifest_and_read_by_range(tokens_root, nginx_server):
    shutil.copytree(tokens_root, Path(nginx_server.root) / "tokens", dirs_exist_ok=True)
    url = f"{nginx_server.url}/tokens"
    before = len(nginx_server.log_lines())
    ds = TokenDataset(url, SEQ, return_index=True, chunk_windows=8)
    assert _read_all(ds) == _reference(tokens_root)
    requests = nginx_server.log_lines()[before:]
    token_reads = [line for line in requests if line.startswith('"GET ') and ".ds " in line]
    assert token_reads and all('"bytes=' in line for line in token_reads)  # ranged, never whole files
    fetched = sum(int(line.split('" ')[1].split()[1]) for line in token_reads)
    windows_bytes = ds.windows * (SEQ + 1) * 2
    assert fetched == windows_bytes  # each chunk read once; the tails that hold no window never
    assert ds.metrics()["bytes_fetched"] == windows_bytes


def test_http_without_manifest_says_how_the_files_are_found(tokens_root, nginx_server):
    target = Path(nginx_server.root) / "no-manifest"
    shutil.copytree(tokens_root, target, ignore=shutil.ignore_patterns("manifest.json"), dirs_exist_ok=True)
    with pytest.raises(TokenFileError, match="over HTTP the token files are found through the manifest"):
        TokenDataset(f"{nginx_server.url}/no-manifest", SEQ)


def test_from_s3_with_ranged_reads(tokens_root, s3_server):
    import s3fs

    fs = s3fs.S3FileSystem(**s3_server.storage_options)
    for path in sorted(tokens_root.iterdir()):
        if path.is_file():
            fs.pipe(f"{s3_server.bucket}/tokens/{path.name}", path.read_bytes())
    ds = TokenDataset(f"s3://{s3_server.bucket}/tokens", SEQ, return_index=True, chunk_windows=8,
                      storage_options=s3_server.storage_options)
    assert _read_all(ds) == _reference(tokens_root)
    assert ds.metrics()["bytes_fetched"] == ds.windows * (SEQ + 1) * 2
    assert np.array_equal(ds.corpora[0].tokens, TokenCorpus(str(tokens_root)).tokens)
