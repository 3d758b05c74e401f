"""docs/architecture.md stays the package map: every module listed once, no module missing."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "feedline"


def test_the_package_map_lists_every_module_once() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    listed = re.findall(r"^\| `([\w/]+\.py)` \|", text, flags=re.M)
    modules = sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py"))
    assert sorted(listed) == modules
    assert len(listed) == len(set(listed))
