"""How the episode reader's settings are spelled: the Python keyword and the command-line flag.

Errors name a setting the way the caller spelled it. In Python that is the keyword the
constructor takes (``byte_budget_gb``), so every message is built from the keyword. A command
line that exposes the same setting as a flag (``feedline train
--dataset.streaming_byte_budget_gb``, lerobot-train's spelling) shows the same error through
:func:`cli_message`, which swaps each keyword for its flag. :data:`CLI_FLAGS` is the one place
the two spellings meet: add a row when a setting gains a flag.
"""

from __future__ import annotations

import re

__all__ = ["CLI_FLAGS", "cli_message"]

#: Python keyword -> the flag a ``feedline train`` command line uses for it (lerobot-train's).
CLI_FLAGS: dict[str, str] = {
    "episode_pool_size": "--dataset.streaming_episode_pool_size",
    "sampling_strategy": "--dataset.streaming_sampling_strategy",
    "prefetch_episodes": "--dataset.streaming_prefetch_episodes",
    "byte_budget_gb": "--dataset.streaming_byte_budget_gb",
    "decode_threads": "--dataset.streaming_decode_threads",
    "decoded_queue_size": "--dataset.streaming_decoded_queue_size",
    "decoder_cache_size": "--dataset.video_decoder_cache_size",
    "decoded_cache_gb": "--dataset.streaming_decoded_cache_gb",
    "sidecar_lock_timeout_s": "--dataset.streaming_sidecar_lock_timeout_s",
    "max_num_shards": "--dataset.max_num_shards",
    "seed": "--seed",
    "num_workers": "--num_workers",
    "batch_size": "--batch_size",
}

# A keyword counts only as a whole name: not inside a longer identifier, a flag or a dotted path.
_KEYWORD = re.compile(
    r"(?<![\w.-])(" + "|".join(sorted(CLI_FLAGS, key=len, reverse=True)) + r")(?!\w)"
)


def cli_message(error: BaseException | str) -> str:
    """``error``'s message with every setting keyword replaced by its command-line flag."""
    return _KEYWORD.sub(lambda match: CLI_FLAGS[match.group(1)], str(error))
