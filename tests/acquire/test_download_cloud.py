"""``feedline download`` of gs:// and az:// shards (gcp-storage-emulator, Azurite), credentials and
endpoints from the environment as the clients read them (``STORAGE_EMULATOR_HOST``,
``AZURE_STORAGE_CONNECTION_STRING``)."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from tests.cli import run_feedline

pytestmark = pytest.mark.server  # the servers are fixtures asked for by name


@pytest.mark.parametrize("kind", ["gs", "az"])
def test_download_a_folder_of_shards(kind, request, tmp_path):
    if kind == "gs":
        server = request.getfixturevalue("gcs_server")
        fs, bucket = server.filesystem(), server.bucket
        env = {"STORAGE_EMULATOR_HOST": server.endpoint_url}
    else:
        server = request.getfixturevalue("azure_server")
        fs, bucket = server.filesystem(), server.container
        env = {"AZURE_STORAGE_CONNECTION_STRING": server.connection_string()}
    blobs = {f"s{i}.bin": os.urandom(50_000 + i) for i in range(3)}
    for name, data in blobs.items():
        fs.pipe(f"{bucket}/dl/{name}", data)
    out = tmp_path / "out"
    run_feedline("download", f"{kind}://{bucket}/dl/", "--out", str(out), env=env, check=True,
                 timeout=120)
    for name, data in blobs.items():
        assert hashlib.sha256((out / name).read_bytes()).digest() == hashlib.sha256(data).digest()
    text = (out / "manifest.json").read_text()
    assert "AccountKey" not in text
    urls = sorted(s["url"] for s in json.loads(text)["shards"])
    assert urls == [f"{kind}://{bucket}/dl/{name}" for name in sorted(blobs)]
