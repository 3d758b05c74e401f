"""The top-level command: every command is routed to the module that registers it."""

from __future__ import annotations

import argparse

from feedline.cli import COMMANDS, build_parser


def _commands(parser: argparse.ArgumentParser) -> set[str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return set(action.choices)
    return set()


def test_command_table_matches_registered_commands() -> None:
    assert _commands(build_parser()) == set(COMMANDS)


def test_one_command_builds_only_its_part() -> None:
    for command, module in COMMANDS.items():
        registered = _commands(build_parser(command))
        assert command in registered
        assert registered == {c for c, m in COMMANDS.items() if m == module}
