"""Commands of the episodes part (``feedline build-sidecar``)."""

from __future__ import annotations

import argparse

from feedline.episodes.sidecar_cli import register_sidecar


def register(subparsers: argparse._SubParsersAction) -> None:
    register_sidecar(subparsers)
