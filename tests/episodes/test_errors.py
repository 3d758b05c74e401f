"""Error messages of the episode reader: the byte-budget error in units that fit the sizes."""

from __future__ import annotations

import re

import pytest

from feedline.episodes.errors import EpisodeTooLargeError


@pytest.mark.parametrize(
    ("episode_bytes", "budget_bytes", "workers", "size"),
    [
        (100, 10, 1, "100 B"),
        (12_345, 10_000, 1, "12.056 KiB"),
        (3 * 2**20 + 5, 2**20, 2, "3.000 MiB"),
        (5 * 2**30, 4 * 2**30, 2, "5.000 GiB"),
    ],
)
def test_byte_budget_error_uses_fitting_units(episode_bytes, budget_bytes, workers, size):
    message = str(
        EpisodeTooLargeError(
            7, episode_bytes, budget_bytes, rank_budget_bytes=budget_bytes * workers, parts=workers
        )
    )
    assert f"episode 7 needs {size} of MP4+Parquet payload" in message
    assert "0.000 GiB" not in message and "=0.000;" not in message and "=0.000)" not in message
    shown = re.search(r"byte_budget_gb=([0-9.]+)", message)
    assert shown is not None and float(shown.group(1)) > 0  # the setting, never shown as zero
    at_least = re.search(r"raise byte_budget_gb to at least ([0-9.]+),", message)
    assert at_least is not None
    value = float(at_least.group(1))
    assert value * 2**30 >= episode_bytes * workers  # enough
    slack = 0.01 if value >= 1 else 0.0  # two decimals of a GiB, else three significant digits
    assert value <= episode_bytes * workers / 2**30 * 1.01 + slack  # and not much more
