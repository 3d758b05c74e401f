"""io.upload: atomic writes to URLs, with the store opened for the upload closed again, and
io.atomic below every store (imports run one way inside io)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from feedline.io import AtomicFile, atomic_file, open_store
from feedline.io.upload import atomic_write


def test_a_url_target_is_uploaded_on_commit_only() -> None:
    root = f"memory://feedline-upload-{os.getpid()}"
    with atomic_file(f"{root}/dir/obj.bin") as output:
        output.handle.write(b"new")
        assert not open_store(root).exists("dir/obj.bin")
    assert open_store(root).read_bytes("dir/obj.bin") == b"new"
    with pytest.raises(RuntimeError), atomic_write(f"{root}/dir/obj.bin") as handle:
        handle.write(b"half")
        raise RuntimeError
    assert open_store(root).read_bytes("dir/obj.bin") == b"new"


def test_atomic_file_needs_an_upload_for_a_url() -> None:
    with pytest.raises(ValueError, match="no upload was given"):
        AtomicFile("s3://bucket/key.bin")
    seen: list[bytes] = []
    with AtomicFile("s3://bucket/key.bin", upload=lambda staged: seen.append(staged.read_bytes())) as out:
        out.handle.write(b"x")
    assert seen == [b"x"]


def test_atomic_imports_no_store() -> None:
    code = "import sys, feedline.io.atomic; print(sorted(m for m in sys.modules if m.startswith('feedline.io.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "feedline.io.store" not in out.stdout and "feedline.io.open" not in out.stdout
