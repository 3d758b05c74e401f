"""No read outside a dataset's root: path templates that escape it after percent-decoding, over nginx.

nginx decodes ``%2e%2e/`` to ``../`` and resolves it before it looks for the file, so a template
that ``posixpath.normpath`` keeps inside the root (a folder named ``%2e%2e``) reads another folder
of the same server. These tests first show nginx doing so, then that feedline refuses it.
"""

from __future__ import annotations

import json
import shutil
import urllib.request
from pathlib import Path

import pytest

from feedline.episodes.errors import EpisodeFormatError
from feedline.episodes.format import load_meta
from feedline.io import StoreError, open_store

ESCAPING = [
    "%2e%2e/secret/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
    "..%2fsecret/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
    "data/%2e%2e/%2e%2e/secret/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
    "data/%252e%252e/%252e%252e/secret/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
    "%2fetc/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
]


@pytest.fixture
def dataset_copy(av1_dataset, tmp_path):
    root = tmp_path / "copy"
    shutil.copytree(av1_dataset.root, root)
    return root


def _serve(av1_dataset, nginx_server, name: str) -> Path:
    """``<name>/ds`` (the dataset) beside ``<name>/secret`` (a copy of its data folder)."""
    base = Path(nginx_server.root) / name
    shutil.copytree(av1_dataset.root, base / "ds")
    shutil.copytree(Path(av1_dataset.root) / "data", base / "secret")
    return base


def test_nginx_itself_resolves_a_percent_encoded_dotdot(av1_dataset, nginx_server):
    _serve(av1_dataset, nginx_server, "escape-proof")
    first = sorted((Path(av1_dataset.root) / "data").rglob("*.parquet"))[0]
    rel = first.relative_to(Path(av1_dataset.root) / "data").as_posix()
    with urllib.request.urlopen(f"{nginx_server.url}/escape-proof/ds/%2e%2e/secret/{rel}") as answer:
        assert answer.status == 200 and answer.read() == first.read_bytes()  # what the check prevents


@pytest.mark.parametrize("template", ESCAPING)
def test_a_template_escaping_after_percent_decoding_is_one_line(av1_dataset, nginx_server, template):
    name = f"escape-{ESCAPING.index(template)}"
    base = _serve(av1_dataset, nginx_server, name)
    info_path = base / "ds/meta/info.json"
    info = json.loads(info_path.read_text())
    info["data_path"] = template
    info_path.write_text(json.dumps(info))
    before = len(nginx_server.log_lines())
    with pytest.raises(EpisodeFormatError, match="escapes the dataset root") as err:
        load_meta(open_store(f"{nginx_server.url}/{name}/ds"))
    message = str(err.value)
    assert "\n" not in message and "data_path" in message and "meta/info.json" in message
    # nothing asked (a line of another test's request may land late: only this dataset's count)
    assert not [line for line in nginx_server.log_lines()[before:] if f"/{name}/" in line and "secret" in line]


@pytest.mark.parametrize("path", ["%2e%2e/secret/x", "..%2fsecret/x", "data/%2e%2e/%2e%2e/x", "%2e%2e%2fx"])
def test_the_store_refuses_a_percent_encoded_escape_before_any_request(nginx_server, path):
    store = open_store(f"{nginx_server.url}/escape-store/ds")
    before = len(nginx_server.log_lines())
    with pytest.raises(StoreError, match="escapes the store root"):
        store.read_bytes(path)
    assert not [line for line in nginx_server.log_lines()[before:] if "escape-store" in line]


@pytest.mark.parametrize(
    ("key", "template", "match"),
    [
        ("video_path", "videos/{video_key.__init__.__globals__}/file.mp4", "is not one of"),
        ("video_path", "videos/{video_key[0]}/{chunk_index}/{file_index}.mp4", "is not one of"),
        ("data_path", "data/{chunk_index:0>1000000000}/{file_index}.parquet", "is not a plain format"),
        ("data_path", "data/{chunk_index!r}/{file_index}.parquet", "is not a plain format"),
        ("data_path", "data/{chunk_index:{file_index}}/x.parquet", "is not a plain format"),
        ("data_path", "data/{video_key}/{chunk_index}/{file_index}.parquet", "is not one of"),
        ("data_path", "data/{}/{file_index}.parquet", "is not one of"),
        ("data_path", "data/{chunk_index/{file_index}.parquet", "cannot be filled"),
    ],
)
def test_templates_use_only_documented_fields_with_plain_specs(dataset_copy, key, template, match):
    info = json.loads((dataset_copy / "meta/info.json").read_text())
    info[key] = template
    (dataset_copy / "meta/info.json").write_text(json.dumps(info))
    with pytest.raises(EpisodeFormatError, match=match) as err:
        load_meta(open_store(str(dataset_copy)))
    assert "\n" not in str(err.value) and key in str(err.value)
