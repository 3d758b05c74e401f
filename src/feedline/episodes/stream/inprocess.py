"""Iterating the streaming reader in the training process (``num_workers=0``): one warning.

Why a module of its own: the reader's decode threads and torch's intra-op pool compete for the
same cores only in this case, and the warning must come once per process, not once per epoch.
"""

from __future__ import annotations

import logging

import torch

__all__ = ["warn_in_process_threads"]

log = logging.getLogger("feedline.episodes.stream.dataset")
_warned_in_process = False


def warn_in_process_threads() -> None:
    """Once per process: iterating in the training process with torch's intra-op pool of
    several threads. Its threads spin-wait after every parallel op (collate's stack among them)
    on the cores the decode threads need: measured 4x fewer samples/s at 96x128 on 2 cores than
    with ``torch.set_num_threads(1)``, which DataLoader workers set for themselves."""
    global _warned_in_process
    if _warned_in_process or torch.get_num_threads() <= 1:
        return
    _warned_in_process = True
    log.warning(
        "StreamingEpisodeDataset is iterated in the training process while torch uses %d "
        "intra-op threads, which compete with its decode threads: use DataLoader(num_workers>=1) "
        "(each worker runs torch with one thread) or torch.set_num_threads(1)",
        torch.get_num_threads(),
    )
