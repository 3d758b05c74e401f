"""The settings table: one row per setting, from which the constructor, the flags and the docs
come; errors say the Python keyword and the CLI table turns them into its flags."""

from __future__ import annotations

import inspect
import re
from dataclasses import fields
from pathlib import Path

import pytest

from feedline.episodes.base import EpisodeDatasetBase
from feedline.episodes.errors import EpisodeTooLargeError, StreamingError
from feedline.episodes.settings import (
    CLI_FLAGS,
    DEFAULT_SEED,
    DEFAULTS,
    NONE_SEED,
    OTHER_SETTINGS,
    SETTINGS_TABLE,
    StreamingSettings,
    cli_message,
    gib_bytes,
    resolve_seed,
    settings_markdown,
)
from feedline.episodes.stream.dataset import StreamingEpisodeDataset
from feedline.streaming.schedule.resume import ResumeSettings

DOCS = Path(__file__).resolve().parents[2] / "docs" / "episodes.md"
LOADER_KEYWORDS = {"num_workers", "batch_size"}  # the DataLoader's, named in resume errors


def test_the_constructor_takes_the_tables_keywords_with_its_defaults() -> None:
    """The signature is written out for readers and tools; it must be the table's."""
    params = inspect.signature(StreamingEpisodeDataset.__init__).parameters
    own = {name: p.default for name, p in params.items()
           if p.kind is inspect.Parameter.KEYWORD_ONLY
           and name not in ("rank", "world_size", "sources", "epoch_size", "batching")}
    table = {f.name: f.default for f in fields(StreamingSettings)}
    source = table.pop("decoder_cache_size")  # travels in **source_options, as map-style's does
    assert source is None and own == table
    assert "decoder_cache_size" in inspect.signature(EpisodeDatasetBase.__init__).parameters
    base = inspect.signature(EpisodeDatasetBase.__init__).parameters
    lock = next(row for row in OTHER_SETTINGS if row.keyword == "sidecar_lock_timeout_s")
    assert base["sidecar_lock_timeout_s"].default == lock.default


def test_every_keyword_of_the_table_is_a_constructor_keyword() -> None:
    """A renamed parameter must not leave a stale row (errors would name a missing keyword)."""
    accepted = set(inspect.signature(StreamingEpisodeDataset.__init__).parameters)
    accepted |= set(inspect.signature(EpisodeDatasetBase.__init__).parameters)
    assert set(CLI_FLAGS) - LOADER_KEYWORDS <= accepted
    assert all(flag.startswith("--") for flag in CLI_FLAGS.values())
    assert len({row.flag for row in SETTINGS_TABLE}) == len(SETTINGS_TABLE)
    streaming = {"episode_pool_size", "sampling_strategy", "prefetch_episodes", "byte_budget_gb",
                 "decode_threads", "decoded_queue_size", "sidecar_lock_timeout_s"}
    for keyword in streaming:  # lerobot-train's spelling: --dataset.streaming_<keyword>
        assert CLI_FLAGS[keyword] == f"--dataset.streaming_{keyword}"


def test_the_docs_settings_table_is_the_tables() -> None:
    """docs/episodes.md shows the table as :func:`settings_markdown` renders it."""
    text = DOCS.read_text()
    rendered = settings_markdown()
    assert rendered in text, "regenerate the docs table with feedline.episodes.settings.settings_markdown()"
    rows = re.findall(r"^\| (.+?) \| `(--[\w.]+)` \| (.+?) \| (.+?) \| .+ \|$", rendered, re.M)
    assert [flag for _, flag, _, _ in rows] == [row.flag for row in SETTINGS_TABLE]
    for (_, _, default, unit), row in zip(rows, SETTINGS_TABLE, strict=True):
        assert unit == row.unit
        if row.shown is None:
            assert default.strip("`") == str(row.default).lower().removesuffix(".0")


def test_settings_are_validated_once_with_one_line_errors_naming_the_keyword() -> None:
    cases = {
        "episode_pool_size": (0, "episode_pool_size must be an integer >= 1, got 0"),
        "prefetch_episodes": (-1, "prefetch_episodes must be an integer >= 0, got -1"),
        "byte_budget_gb": (0, "byte_budget_gb must be > 0, got 0"),
        "decoded_cache_gb": (-1.0, "decoded_cache_gb must be >= 0, got -1.0"),
        "decode_threads": (0, "decode_threads must be an integer >= 1, got 0"),
        "decoder_cache_size": (-1, "decoder_cache_size must be an integer >= 0, got -1"),
        "sampling_strategy": ("uniform", "unknown sampling_strategy 'uniform'"),
        "seed": (-3, "seed must be a non-negative integer or None, got -3"),
    }
    for keyword, (value, message) in cases.items():
        with pytest.raises(StreamingError, match=re.escape(message)) as info:
            StreamingSettings(**{keyword: value})
        assert "\n" not in str(info.value)
        assert CLI_FLAGS[keyword] in cli_message(info.value)


def test_defaults_units_and_order_settings() -> None:
    assert (DEFAULT_SEED, NONE_SEED) == (1000, 42)
    assert resolve_seed(None) == 42 and resolve_seed(7) == 7
    assert StreamingSettings(seed=None).seed == NONE_SEED
    assert StreamingSettings() == DEFAULTS
    assert DEFAULTS.byte_budget_bytes == 8 * 2**30 == gib_bytes(8)
    assert DEFAULTS.decoded_cache_bytes == 4 * 2**30
    assert StreamingSettings(byte_budget_gb=0.5).byte_budget_bytes == 2**29
    assert DEFAULTS.pool_settings == {"pool_size": 256, "byte_budget": 8 * 2**30}
    resume = ResumeSettings.for_reader(
        StreamingSettings(sampling_strategy="round_robin", seed=None), world_size=2,
        batch_size=4, num_workers=0, drop_last=False, sampler_identity="x",
    )
    assert (resume.seed, resume.strategy, resume.parts) == (42, "round_robin", 1)
    assert resume.pool_settings == DEFAULTS.pool_settings
    order = {row.order_key for row in StreamingSettings.rows() if row.order_key}
    assert order == {"seed", "strategy", *DEFAULTS.pool_settings}


def test_cli_message_names_the_flags_of_a_real_error() -> None:
    error = EpisodeTooLargeError(1, 5 * 2**30, 4 * 2**30, rank_budget_bytes=8 * 2**30, parts=2)
    python = str(error)
    assert "byte_budget_gb=8.000" in python and "episode_pool_size" in python
    assert "--" not in python and "streaming_" not in python
    cli = cli_message(error)
    assert "rank budget --dataset.streaming_byte_budget_gb=8.000" in cli
    assert "raise --dataset.streaming_byte_budget_gb to at least 10.00" in cli
    assert "fewer --num_workers / --dataset.streaming_episode_pool_size" in cli
    assert cli.replace("--dataset.streaming_", "").replace("--", "") == python


def test_cli_message_swaps_whole_keywords_only() -> None:
    text = "seeds, seed_x, x_seed, --seed, a.seed, max_num_shards_total and seed=3"
    assert cli_message(text) == text.replace("seed=3", "--seed=3")
