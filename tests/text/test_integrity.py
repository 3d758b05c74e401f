"""Token folders that lie: shard paths escaping the root, shards listed twice, files replaced or
damaged after the open, ids past the vocabulary. Each is one line naming the file."""

from __future__ import annotations

import json
import shutil
import urllib.request
from pathlib import Path

import pytest

from feedline.text import TokenDataset
from feedline.text.errors import TokenFileError

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
