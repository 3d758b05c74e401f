"""Text splitting shared by taggers, with Dolma's exact definitions so offsets line up."""

from __future__ import annotations

import re

_PARAGRAPH = re.compile(r"[^\n]*\n|[^\n]+$")


def paragraphs(text: str, remove_empty: bool = True) -> list[tuple[int, int]]:
    """``(start, end)`` of each line including its newline (Dolma's ``split_paragraphs``)."""
    spans = [m.span() for m in _PARAGRAPH.finditer(text)]
    if remove_empty:
        return [(s, e) for s, e in spans if text[s:e].strip()]
    return spans
