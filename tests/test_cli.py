"""The top-level command: every command is routed to the module that registers it."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from feedline.cli import COMMANDS, build_parser
from tests.cli import run_feedline


def _commands(parser: argparse.ArgumentParser) -> set[str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return set(action.choices)
    return set()


def test_command_table_matches_registered_commands() -> None:
    assert _commands(build_parser()) == set(COMMANDS)


def test_one_command_builds_only_its_part() -> None:
    for command, module in COMMANDS.items():
        registered = _commands(build_parser(command))
        assert command in registered
        assert registered == {c for c, m in COMMANDS.items() if m == module}


def test_error_line_keeps_one_line_and_says_where_the_rest_is() -> None:
    from feedline.cli import error_line

    assert error_line("a.jsonl: no such file") == "a.jsonl: no such file"
    assert error_line("first\n\n  second\nthird\n") == "first (+2 more lines: rerun with -v to see them)"
    assert error_line("first\n  second") == "first (+1 more line: rerun with -v to see them)"
    assert error_line("first\n\n  second\n", full=True) == "first\n  second"
    assert error_line("") == ""


#: Malformed URLs, each with how the one error line names it (credentials masked).
MALFORMED_URLS = {
    "port-not-a-number": ("http://127.0.0.1:notaport/x", "http://127.0.0.1:notaport/x"),
    "port-out-of-range": ("http://127.0.0.1:99999/x", "http://127.0.0.1:99999/x"),
    "port-zero": ("http://example.invalid:0/x", "http://example.invalid:0/x"),
    "unclosed-ipv6": ("http://[::1/x", "http://[::1/x"),
    "bad-ipv6": ("http://[zz]/x", "http://[zz]/x"),
    "ftp": ("ftp://example.invalid/x", "ftp://example.invalid/x"),
    "unknown-scheme": ("zz://bucket/x", "zz://bucket/x"),
    "not-a-scheme": ("1http://host/x", "1http://host/x"),
    "http-no-host": ("https:///x", "https:///x"),
    "http-nothing": ("http://", "http://"),
    "space-in-host": ("http://exa mple/x", "http://exa mple/x"),
    "s3-no-bucket": ("s3:///key", "s3:///key"),
    "s3-nothing": ("s3://", "s3://"),
    "s3-bad-bucket": ("s3://bu cket/key", "s3://bu cket/key"),
    "hf-nothing": ("hf://", "hf://"),
    "hf-no-repo": ("hf://datasets/", "hf://datasets/"),
    "newline": ("http://host/a\nb", "'http://host/a\\nb'"),
    "credentials": ("http://user:hunter2@127.0.0.1:99999/x?sig=s3cret", "http://***@127.0.0.1:99999/x?sig=***"),
}


def _assert_one_error_line(proc, named: str) -> None:
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("feedline: error: "), proc.stderr
    assert named in lines[0], proc.stderr
    assert "hunter2" not in proc.stderr and "s3cret" not in proc.stderr


@pytest.mark.parametrize("command", ["download", "stat", "cat"])
@pytest.mark.parametrize("case", sorted(MALFORMED_URLS))
def test_malformed_urls_are_one_line_naming_them(command: str, case: str, tmp_path: Path) -> None:
    """Every command that takes a URL refuses a malformed one the same way, before any request."""
    url, named = MALFORMED_URLS[case]
    extra = ["--out", str(tmp_path / "out")] if command == "download" else []
    proc = run_feedline(command, url, *extra, cwd=tmp_path, timeout=60)
    _assert_one_error_line(proc, named)
    assert not (tmp_path / "out").exists()


def _list_file(tmp_path: Path, case: str) -> str:
    if case == "empty-argument":
        return ""
    if case == "blank-argument":
        return " "
    if case == "folder":
        (tmp_path / "urls").mkdir()
        return "urls"
    data = {
        "not-utf8": b"\xff\xfehttp://host/x\n",
        "binary": bytes(range(256)) * 4,
        "nul-bytes": b"http://host/x\n\x00\x01\x02\n",
        "bad-url-line": b"# shards\nhttp://127.0.0.1:99999/x\n",
        "not-a-url-line": b"http://host/x\nshard-1.jsonl\n",
        "latin-1": "http://host/caf\xe9.jsonl\n".encode("latin-1"),
    }[case]
    (tmp_path / "urls.txt").write_bytes(data)
    return "urls.txt"


@pytest.mark.parametrize(
    "case",
    ["empty-argument", "blank-argument", "folder", "not-utf8", "binary", "nul-bytes", "bad-url-line",
     "not-a-url-line", "latin-1"],
)
def test_bad_list_files_are_one_line_naming_them(case: str, tmp_path: Path) -> None:
    item = _list_file(tmp_path, case)
    proc = run_feedline("download", item, "--out", str(tmp_path / "out"), cwd=tmp_path, timeout=60)
    _assert_one_error_line(proc, repr(item) if not item.strip() else item)
    if case == "bad-url-line":
        assert "line 2: http://127.0.0.1:99999/x" in proc.stderr


@pytest.mark.parametrize("case", ["below-a-file", "is-a-file", "cannot-create"])
def test_unusable_feedline_home_is_one_line_naming_the_setting(case: str, tmp_path: Path) -> None:
    """``feedline demo`` keeps its dataset in the home: a home it cannot use is named with the fix."""
    (tmp_path / "file").write_text("x")
    home = {"below-a-file": tmp_path / "file" / "home", "is-a-file": tmp_path / "file"}.get(case)
    if home is None:
        if os.geteuid() != 0:
            (tmp_path / "ro").mkdir(mode=0o500)
            home = tmp_path / "ro" / "home"
        elif Path("/proc/self").exists():
            home = Path("/proc/feedline-home")  # even root cannot create a folder here
        else:
            pytest.skip("no folder that root cannot write")
    proc = run_feedline("demo", env={"FEEDLINE_HOME": str(home)}, timeout=120)
    _assert_one_error_line(proc, f"FEEDLINE_HOME={home}")
    assert "set FEEDLINE_HOME to a folder" in proc.stderr
