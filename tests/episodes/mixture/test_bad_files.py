"""Malformed mixture files are one line naming the file and the value (they ended in
``ValueError``, ``OverflowError`` and ``TypeError`` tracebacks)."""

from __future__ import annotations

import numpy as np
import pytest

from feedline.episodes import StreamingEpisodeDataset
from feedline.episodes.mixture.sources import load_mixture
from feedline.streaming.errors import MixtureError
from tests.cli import run_feedline

ROOT = "data/a"
CASES = {
    "epoch_size: abc": ("sources:\n  - root: R\n    weight: 1\nepoch_size: abc\n", "epoch_size must be"),
    "epoch_size: .inf": ("sources:\n  - root: R\n    weight: 1\nepoch_size: .inf\n", "epoch_size must be"),
    "epoch_size: .nan": ("sources:\n  - root: R\n    weight: 1\nepoch_size: .nan\n", "epoch_size must be"),
    "epoch_size: [1]": ("sources:\n  - root: R\n    weight: 1\nepoch_size: [1]\n", "epoch_size must be"),
    "sources: empty": ("sources:\n", "must be a list of sources"),
    "sources: a string": ("sources: abc\n", "must be a list of sources"),
    "sources: a mapping": ("sources:\n  root: R\n", "must be a list of sources"),
    "root: 5": ("sources:\n  - root: 5\n", "root must be text"),
    "episodes: abc": ("sources:\n  - root: R\n    episodes: abc\n", "episodes must be a list"),
    "episodes: 5": ("sources:\n  - root: R\n    episodes: 5\n", "episodes must be a list"),
    "episodes: [-1]": ("sources:\n  - root: R\n    episodes: [-1]\n", "episodes must be a list"),
    "feature_map: 5": ("sources:\n  - root: R\n    feature_map: 5\n", "feature_map must be a mapping"),
    "storage_options: 5": ("sources:\n  - root: R\n    storage_options: 5\n", "storage_options must be a mapping"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_malformed_mixture_file_is_one_line_naming_it(tmp_path, case):
    text, match = CASES[case]
    path = tmp_path / "mixture.yaml"
    path.write_text(text.replace("R", ROOT))
    with pytest.raises(MixtureError, match=match) as err:
        load_mixture(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_feedline_plan_prints_it_as_one_line(tmp_path):
    path = tmp_path / "mixture.yaml"
    path.write_text(CASES["epoch_size: .nan"][0].replace("R", ROOT))
    run = run_feedline("plan", f"--dataset.mixture={path}", cwd=tmp_path, timeout=120)
    assert run.returncode == 1
    assert run.stderr.strip().splitlines() == [f"feedline: error: {path}: epoch_size must be a whole number >= 1, not nan"]


@pytest.mark.parametrize(("source", "says"), [
    ({"weight": np.float64("nan")}, "weight must be a finite number >= 0, not nan"),
    ({"repeat": np.float64("inf")}, "repeat must be a finite number >= 0, not inf"),
    ({"choose": np.float64(1.5)}, "choose is a number of frames, not 1.5"),
    ({"episodes": [np.int64(0), np.float64(1.5)]}, "not [0, 1.5]"),
])
def test_numpy_numbers_are_quoted_as_numbers(h264_dataset, source: dict, says: str) -> None:
    """Weights out of a numpy array: the message quotes ``nan``, never ``np.float64(nan)``."""
    with pytest.raises(MixtureError) as err:
        StreamingEpisodeDataset(sources=[{"root": str(h264_dataset.root), **source}])
    assert says in str(err.value) and "np." not in str(err.value), err.value
    with pytest.raises(MixtureError, match="epoch_size must be a whole number >= 1, not nan"):
        StreamingEpisodeDataset(sources=[str(h264_dataset.root)], epoch_size=np.float64("nan"))


def test_numpy_numbers_in_token_sources_are_quoted_as_numbers(tmp_path) -> None:
    from feedline.text import TokenSource

    with pytest.raises(MixtureError) as err:
        TokenSource(str(tmp_path), weight=np.float64("nan")).quota  # noqa: B018 (the check)
    assert "not nan" in str(err.value) and "np." not in str(err.value), err.value
