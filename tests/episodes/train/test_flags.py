"""feedline's flags split from lerobot-train's, checked and named as typed."""

from __future__ import annotations

import pytest

from feedline.episodes.errors import TrainError
from feedline.episodes.settings import CLI_FLAGS
from feedline.episodes.train.flags import (
    SETTINGS,
    dataset_kwargs,
    settings_help,
    split_args,
    storage_kwargs,
    train_message,
)


def test_feedline_flags_come_out_and_the_rest_passes_through_in_order() -> None:
    args = split_args([
        "--dataset.repo_id=o/n", "--dataset.streaming=true",
        "--dataset.streaming_episode_pool_size=16", "--dataset.streaming_byte_budget_gb", "4",
        "--dataset.video_decoder_cache_size=3", "--policy.type=act", "--steps", "20",
        "--dataset.streaming_native_http_connections=4", "--dataset.storage_options={\"anon\": true}",
    ])
    assert args.lerobot_args == ["--dataset.repo_id=o/n", "--dataset.streaming=true",
                                 "--policy.type=act", "--steps", "20"]
    assert args.settings == {"episode_pool_size": 16, "byte_budget_gb": 4.0, "decoder_cache_size": 3,
                             "max_connections": 4, "storage_options": {"anon": True}}
    assert args.streaming is True
    assert args.peeked["--dataset.repo_id"] == "o/n"
    assert dataset_kwargs(args.settings) == {"episode_pool_size": 16, "byte_budget_gb": 4.0,
                                             "decoder_cache_size": 3}
    assert storage_kwargs(args.settings) == {"anon": True, "max_connections": 4}


def test_flags_are_spelled_as_the_readers_cli_table() -> None:
    for setting in SETTINGS:
        if setting.target == "dataset" and setting.keyword in CLI_FLAGS:
            assert setting.flag == CLI_FLAGS[setting.keyword]
    assert len({s.flag for s in SETTINGS}) == len(SETTINGS)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--dataset.streaming_pool=3"], ["unknown flag --dataset.streaming_pool",
                                          "--dataset.streaming_episode_pool_size"]),
        (["--dataset.streaming_decode_threads=two"], ["--dataset.streaming_decode_threads", "'two'"]),
        (["--dataset.streaming_prefetch_episodes"], ["needs a value"]),
        (["--dataset.storage_options=[1]"], ["JSON object"]),
        (["--dataset.streaming=false", "--dataset.streaming_byte_budget_gb=2"],
         ["--dataset.streaming_byte_budget_gb", "--dataset.streaming=true"]),
    ],
)
def test_bad_flags_are_one_line_naming_the_flag(argv: list[str], words: list[str]) -> None:
    with pytest.raises(TrainError) as info:
        split_args(argv)
    message = str(info.value)
    assert "\n" not in message
    for word in words:
        assert word in message


def test_null_and_booleans() -> None:
    args = split_args(["--dataset.max_num_shards=null", "--dataset.streaming_allow_order_change=true"])
    assert args.settings == {"max_num_shards": None, "allow_order_change": True}
    assert dataset_kwargs(args.settings) == {}


def test_help_lists_every_flag_with_the_readers_defaults() -> None:
    text = settings_help()
    for setting in SETTINGS:
        assert setting.flag in text
    assert "--dataset.streaming_episode_pool_size" in text and "[default: 256]" in text


def test_resume_errors_name_flags() -> None:
    message = train_message(
        "cannot resume sample-exactly: pool_settings (checkpoint 1, now 2). Restore those "
        "settings, or pass allow_order_change=True; byte_budget_gb too"
    )
    assert "--dataset.streaming_episode_pool_size" in message
    assert "--dataset.streaming_allow_order_change=true" in message
    assert "--dataset.streaming_byte_budget_gb too" in message
