"""``feedline stat`` / ``feedline cat`` as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from feedline.io.cli import parse_inclusive_range
from feedline.io.errors import StoreError
from tests.cli import run_feedline


def run(*args: str, env: dict[str, str] | None = None, **kw) -> subprocess.CompletedProcess[bytes]:
    return run_feedline(*args, env=env, text=False, **kw)


def test_version_and_help() -> None:
    out = run("--version")
    assert out.returncode == 0 and out.stdout.decode().startswith("feedline ")
    assert b"stat" in run("--help").stdout


def test_stat_and_cat_over_http(nginx_server) -> None:
    data = bytes(range(256)) * 40
    (nginx_server.root / "cli.bin").write_bytes(data)
    url = f"{nginx_server.url}/cli.bin"
    info = json.loads(run("stat", url).stdout)
    assert info["size"] == len(data) and info["fingerprint"].startswith("http:")
    assert run("cat", url).stdout == data
    assert run("cat", url, "--range", "10-19").stdout == data[10:20]
    assert run("cat", url, "--range", "10000-").stdout == data[10000:]


def test_cat_s3(s3_server) -> None:
    import s3fs

    fs = s3fs.S3FileSystem(**s3_server.storage_options)
    fs.pipe_file(f"{s3_server.bucket}/cli/x.txt", b"hello s3")
    out = run("cat", f"s3://{s3_server.bucket}/cli/x.txt", "--range", "6-7", env=s3_server.env)
    assert out.returncode == 0, out.stderr
    assert out.stdout == b"s3"


def test_errors_are_one_line_and_nonzero(nginx_server, tmp_path) -> None:
    out = run("cat", f"{nginx_server.url}/absent.bin")
    assert out.returncode == 1
    assert out.stderr.decode().count("\n") == 1 and "404" in out.stderr.decode()
    (tmp_path / "f").write_bytes(b"abc")
    out = run("cat", str(tmp_path / "f"), "--range", "1-9")
    assert out.returncode == 1 and "past the last byte" in out.stderr.decode()


def test_parse_inclusive_range() -> None:
    assert parse_inclusive_range("0-0") == (0, 1)
    assert parse_inclusive_range("5-") == (5, None)
    for bad in ["", "a-b", "9-3", "-5"]:
        with pytest.raises(StoreError):
            parse_inclusive_range(bad)


@pytest.mark.timeout(90)
def test_cat_against_a_trickling_server_errors_in_bounded_time(fault_proxy, nginx_server) -> None:
    (nginx_server.root / "trickle.bin").write_bytes(os.urandom(100_000))
    fault_proxy.add_fault("trickle", bytes_per_s=4, count=1000)
    began = time.monotonic()
    out = run(
        "cat", "--range", "0-65535", "--timeout-s", "1", "--outage-s", "3", f"{fault_proxy.url}/trickle.bin"
    )
    assert time.monotonic() - began < 15  # 3 s of retries, plus starting the command
    assert out.returncode != 0 and out.stdout == b""
    lines = out.stderr.decode().strip().splitlines()  # one warning while retrying, one error
    assert len(lines) == 2 and "unreachable" in lines[0] and "retrying for up to 3 s" in lines[0], lines
    assert "too slow" in lines[1] and fault_proxy.url in lines[1] and "outage_s=3" in lines[1], lines
