"""No secret of a URL is ever written: every command and reader, given credentialed URLs.

Each root and object URL below carries ``user:PASSWORD@`` and, where a query can ride along (an
object URL), ``?token=TOKEN``. nginx ignores both, so every read still succeeds: the test then
greps every file the run produced (names and bytes, the feedline cache included) and every line
it printed or logged for the two secrets.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

import pytest
import torch

from feedline.episodes import EpisodeDataset, StreamingEpisodeDataset
from feedline.episodes.mixture.sources import Mixture, Source
from feedline.episodes.synth.writer import write_synthetic_dataset
from feedline.errors import FeedlineError
from feedline.text import TokenDataset, TokenSource
from tests.cli import run_feedline
from tests.episodes.conftest import H264_LAYOUT
from tests.text.helpers import train_tokenizer, write_corpus

PASSWORD = "pw5ecretXq"
TOKEN = "tk5ecretZr"
SECRETS = (PASSWORD, TOKEN)


def _leaks(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


def assert_clean(*texts: str, folders: Iterable[Path] = ()) -> None:
    """No secret in ``texts``, nor in the name or bytes of any file below ``folders``."""
    for text in texts:
        lines = [line for line in text.splitlines() if _leaks(line)]
        assert not lines, "secret in output:\n" + "\n".join(lines)
    for folder in folders:
        for path in sorted(Path(folder).rglob("*")):
            assert not _leaks(str(path.relative_to(folder))), f"secret in a file name: {path}"
            if path.is_file():
                data = path.read_bytes().decode("latin-1")
                lines = [line[:300] for line in data.splitlines() if _leaks(line)]
                assert not lines, f"secret inside {path}:\n" + "\n".join(lines)


def credentialed(url: str) -> str:
    return url.replace("http://", f"http://user:{PASSWORD}@", 1)


@pytest.fixture(scope="module")
def served(nginx_server, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A LeRobot dataset, JSON-lines documents and a token corpus on nginx, with their URLs."""
    work = tmp_path_factory.mktemp("secrets-src")
    root = Path(nginx_server.root)
    synth = write_synthetic_dataset(work / "ds", **H264_LAYOUT)
    if not (root / "secrets-ds").exists():
        shutil.copytree(synth.root, root / "secrets-ds")
    write_corpus(root / "secrets-text", 2, 40)
    tokenizer = train_tokenizer(work / "tokenizer")
    tokens = work / "tokens"
    run_feedline("tokenize", str(root / "secrets-text" / "documents"), "--tokenizer", str(tokenizer),
                 "--out", str(tokens), check=True)
    shutil.copytree(tokens, root / "secrets-tokens", dirs_exist_ok=True)
    base = credentialed(nginx_server.url)
    return {
        "root": f"{base}/secrets-ds",
        "missing": f"{base}/secrets-nowhere",
        "doc": f"{base}/secrets-text/documents/part-00.jsonl.gz?token={TOKEN}",
        "doc2": f"{base}/secrets-text/documents/part-01.jsonl.gz?X-Amz-Signature={TOKEN}",
        "tokens": f"{base}/secrets-tokens",
        "tokenizer": str(tokenizer),
        "served": str(root),
    }


@pytest.fixture
def home(tmp_path: Path) -> dict[str, str]:
    """A FEEDLINE_HOME of the test's own, so the caches a command writes are grepped too."""
    return {"FEEDLINE_HOME": str(tmp_path / "home")}


def _run(*args: str, env: dict[str, str], ok: bool = True) -> str:
    proc = run_feedline("-v", *args, env=env, timeout=240, text=False)
    out, err = proc.stdout.decode("latin-1"), proc.stderr.decode("latin-1")
    if ok:
        assert proc.returncode == 0, f"feedline {args[0]} exited {proc.returncode}:\n{err}"
    else:
        assert proc.returncode != 0, out
    return out + err


def test_io_commands(served, tmp_path, home) -> None:
    out = _run("stat", served["doc"], env=home) + _run("cat", "--range", "0-9", served["doc"], env=home)
    out += _run("stat", served["doc"].replace("part-00", "part-99"), env=home, ok=False)
    assert_clean(out, folders=[tmp_path])


def test_download_and_its_manifest(served, tmp_path, home) -> None:
    dest = tmp_path / "dl"
    out = _run("download", served["doc"], served["doc2"], "--dedup", "--out", str(dest), env=home)
    assert list(dest.rglob("*.jsonl.gz")), out
    out += _run("download", served["doc"].replace("part-00", "part-99"), "--out", str(tmp_path / "dl2"),
                env=home, ok=False)
    assert_clean(out, folders=[tmp_path])


def test_dedup_tag_tokenize_and_mix(served, tmp_path, tmp_path_factory, home) -> None:
    # the one-process dedup reads local shards only: its refusal of URLs is checked for secrets
    out = _run("dedup", served["doc"], served["doc2"], "--out", str(tmp_path / "dedup"), env=home, ok=False)
    tokens = tmp_path / "tokens"
    out += _run("tokenize", served["doc"], served["doc2"], "--tokenizer", served["tokenizer"],
                "--out", str(tokens), env=home)
    assert json.loads((tokens / "manifest.json").read_text())["shards"], out
    out += _run("tokenize", served["doc"], "--tokenizer", served["tokenizer"], "--out", str(tokens),
                env=home)  # the rerun reads its done markers
    out += _run("tag", "--documents", served["doc"], "--taggers", "char_length_v1",
                "--destination", str(tmp_path / "attributes"), "--metadata", str(tmp_path / "meta"),
                env=home)
    # mix reads the documents and their attributes by URL: serve the attributes tag wrote
    shutil.copytree(tmp_path / "attributes", Path(served["served"]) / "secrets-text" / "attributes",
                    dirs_exist_ok=True)
    config = tmp_path_factory.mktemp("secrets-mix") / "mix.json"  # the user's own file
    config.write_text(json.dumps({"streams": [{
        "name": "kept", "documents": [served["doc"]], "attributes": ["char_length_v1"],
        "output": {"path": str(tmp_path / "mixed"), "max_size_in_bytes": 1 << 20},
        "filter": {"include": ["$.attributes[?(@.char_length_v1__char_length_v1__length[0][2] > 0)]"]},
    }]}))
    out += _run("mix", str(config), "--summary", str(tmp_path / "mix-summary.json"), env=home)
    assert list((tmp_path / "mixed").glob("kept-*")), out
    assert_clean(out, folders=[tmp_path])


def test_episode_commands(served, tmp_path, tmp_path_factory, home) -> None:
    root = served["root"]
    mixture = tmp_path_factory.mktemp("secrets-mixture") / "mix.yaml"  # the user's own file
    mixture.write_text(f"sources:\n  - root: {root}\n    weight: 1\n  - root: {root}\n    episodes: [0, 1]\n")
    out = _run("doctor", root, env=home) + _run("doctor", root, "--json", env=home)
    out += _run("doctor", served["missing"], env=home, ok=False)
    out += _run("build-sidecar", "--data-root", root, "--output", str(tmp_path / "sidecar.npz"), env=home)
    out += _run("plan", root, "--no-calibration", env=home)
    out += _run("plan", root, "--json", "--no-calibration", env=home)
    header = json.dumps({"headers": {"Authorization": f"Bearer {TOKEN}"}})  # a store option's secret
    out += _run("plan", root, "--no-calibration", "--measure", "1", "--report", str(tmp_path / "report"),
                "--trace", str(tmp_path / "trace.json"), f"--dataset.storage_options={header}", env=home)
    out += _run("plan", root, "--no-calibration", "--json", f"--dataset.storage_options={header}", env=home)
    out += _run("plan", f"--dataset.mixture={mixture}", "--no-calibration", "--json", env=home)
    out += _run("plan", served["missing"], "--no-calibration", env=home, ok=False)
    assert (tmp_path / "report" / "report.html").exists()
    assert_clean(out, folders=[tmp_path, Path(home["FEEDLINE_HOME"])])


def _shown(reader: object) -> str:
    return " ".join([repr(reader), str(getattr(reader, "root_url", "")), json.dumps(
        reader.state_dict(), default=str) if hasattr(reader, "state_dict") else ""])


def test_episode_readers(served, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    root = served["root"]
    texts = []
    stream = StreamingEpisodeDataset(root=root, seed=0)
    loader = torch.utils.data.DataLoader(stream, batch_size=4, num_workers=1)
    assert sum(len(b["index"]) for b in stream.track(loader)) == stream.num_frames  # workers reopen the store
    texts.append(_shown(stream))
    mapped = EpisodeDataset(root=root)
    assert int(mapped[0]["index"]) == 0
    texts.append(_shown(mapped))
    mixed = StreamingEpisodeDataset(sources=[{"root": root, "weight": 1.0},
                                             {"root": root, "episodes": [0, 1]}], seed=0)
    assert sum(1 for _ in mixed.track(torch.utils.data.DataLoader(mixed, batch_size=4))) > 0
    texts.append(_shown(mixed))
    texts.append(repr(Source(root=root, storage_options={"key": "AKIA", "secret": PASSWORD})))
    texts.append(repr(Mixture.of([root])))
    for bad in (lambda: StreamingEpisodeDataset(root=served["missing"]),
                lambda: EpisodeDataset(root=served["missing"]),
                lambda: StreamingEpisodeDataset(sources=[served["missing"]])):
        with pytest.raises(FeedlineError) as info:
            bad()
        texts.append(str(info.value))
    assert_clean(*texts, "\n".join(r.getMessage() for r in caplog.records),
                 folders=[Path(os.environ["FEEDLINE_HOME"])])  # the MP4 index cache


def test_token_readers(served, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    texts = []
    one = TokenDataset(served["tokens"], seq_len=16, seed=0)
    loader = torch.utils.data.DataLoader(one, batch_size=8, num_workers=1)
    assert sum(len(b["input_ids"]) for b in one.track(loader)) == one.windows
    texts.append(_shown(one))
    mixed = TokenDataset([{"root": served["tokens"], "weight": 1.0},
                          {"root": served["tokens"] + "/", "repeat": 1.0}], seq_len=16, seed=0)
    assert sum(1 for _ in mixed.track(torch.utils.data.DataLoader(mixed, batch_size=8))) > 0
    texts.append(_shown(mixed))
    texts.append(repr(TokenSource(served["tokens"], storage_options={"secret": PASSWORD})))
    with pytest.raises(FeedlineError) as info:
        TokenDataset(served["missing"], seq_len=16)
    texts.append(str(info.value))
    assert_clean(*texts, "\n".join(r.getMessage() for r in caplog.records))


def test_the_secret_check_itself_finds_a_leak(tmp_path) -> None:
    (tmp_path / "x.json").write_text(json.dumps({"root": f"http://u:{PASSWORD}@h/x"}))
    with pytest.raises(AssertionError):
        assert_clean(folders=[tmp_path])
    assert os.environ.get("FEEDLINE_HOME")  # the suite's own home, never the user's
