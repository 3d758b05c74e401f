"""feedline: carry training data from remote storage into a training loop, curating it on the way."""

from __future__ import annotations

from feedline.errors import FeedlineError

__version__ = "0.1.0"

__all__ = ["FeedlineError", "__version__"]
