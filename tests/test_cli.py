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


def test_error_line_keeps_one_line_and_says_where_the_rest_is() -> None:
    from feedline.cli import error_line

    assert error_line("a.jsonl: no such file") == "a.jsonl: no such file"
    assert error_line("first\n\n  second\nthird\n") == "first (+2 more lines: rerun with -v to see them)"
    assert error_line("first\n  second") == "first (+1 more line: rerun with -v to see them)"
    assert error_line("first\n\n  second\n", full=True) == "first\n  second"
    assert error_line("") == ""
