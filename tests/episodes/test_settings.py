"""Setting names: errors say the Python keyword; the CLI table turns them into its flags."""

from __future__ import annotations

import inspect

from feedline.episodes.base import EpisodeDatasetBase
from feedline.episodes.errors import EpisodeTooLargeError
from feedline.episodes.settings import CLI_FLAGS, cli_message
from feedline.episodes.stream.dataset import StreamingEpisodeDataset

LOADER_KEYWORDS = {"num_workers", "batch_size"}  # the DataLoader's, named in resume errors


def test_every_keyword_of_the_table_is_a_constructor_keyword() -> None:
    """A renamed parameter must not leave a stale row (errors would name a missing keyword)."""
    accepted = set(inspect.signature(StreamingEpisodeDataset.__init__).parameters)
    accepted |= set(inspect.signature(EpisodeDatasetBase.__init__).parameters)
    assert set(CLI_FLAGS) - LOADER_KEYWORDS <= accepted
    assert all(flag.startswith("--") for flag in CLI_FLAGS.values())
    streaming = {"episode_pool_size", "sampling_strategy", "prefetch_episodes", "byte_budget_gb",
                 "decode_threads", "decoded_queue_size", "sidecar_lock_timeout_s"}
    for keyword in streaming:  # lerobot-train's spelling: --dataset.streaming_<keyword>
        assert CLI_FLAGS[keyword] == f"--dataset.streaming_{keyword}"


def test_cli_message_names_the_flags_of_a_real_error() -> None:
    error = EpisodeTooLargeError(1, 5 * 2**30, 4 * 2**30, rank_budget_bytes=8 * 2**30,
                                 num_workers=2)
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
