"""The ``feedline`` command: thin argument parsing, one function per command.

Each part registers its own subcommands (``feedline.<part>.cli.register``); this module only
builds the parser, sets up logging, and turns a :class:`FeedlineError` into one line on stderr and
a non-zero exit code, so users see what to fix rather than a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from feedline import __version__
from feedline.errors import FeedlineError
from feedline.io.redact import install_log_redaction, redact_text

#: Modules whose ``register(subparsers)`` adds commands, in ``--help`` order.
COMMAND_MODULES = (
    "feedline.io.cli",
    "feedline.acquire.cli",
    "feedline.dedup.cli",
    "feedline.curate.cli",
    "feedline.text.cli",
    "feedline.episodes.cli",
    "feedline.episodes.doctor.cli",
    "feedline.episodes.forecast.cli",
    "feedline.episodes.train.cli",
    "feedline.episodes.synth.cli",
    "feedline.demo",
)


#: Which module registers each command, so running one command imports only its own part
#: (numpy, fsspec and friends cost ~0.3 s per start otherwise). ``--help`` imports them all;
#: tests check this table against what the modules register.
COMMANDS = {
    "stat": "feedline.io.cli",
    "cat": "feedline.io.cli",
    "download": "feedline.acquire.cli",
    "dedup": "feedline.dedup.cli",
    "tag": "feedline.curate.cli",
    "mix": "feedline.curate.cli",
    "list-taggers": "feedline.curate.cli",
    "tokenize": "feedline.text.cli",
    "build-sidecar": "feedline.episodes.cli",
    "doctor": "feedline.episodes.doctor.cli",
    "plan": "feedline.episodes.forecast.cli",
    "train": "feedline.episodes.train.cli",
    "synth": "feedline.episodes.synth.cli",
    "demo": "feedline.demo",
}


def _command_of(argv: Sequence[str]) -> str | None:
    for arg in argv:
        if not arg.startswith("-"):
            return arg
    return None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The full parser, or (given a known ``command``) one with just that command's part."""
    parser = argparse.ArgumentParser(
        prog="feedline",
        description="Carry training data from remote storage into a training loop, and curate it on the way.",
    )
    parser.add_argument("--version", action="version", version=f"feedline {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules = [COMMANDS[command]] if command in COMMANDS else COMMAND_MODULES
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        module.register(subparsers)
    return parser


def error_line(message: str, full: bool = False) -> str:
    """One line for a user error: a message carried up from a library (a tagger's exception, a
    Ray task's traceback) can span many lines, and a one-line error is what scripts and users
    grep. The rest is kept behind ``-v``, never dropped silently."""
    lines = [line.rstrip() for line in message.splitlines() if line.strip()]
    if len(lines) <= 1 or full:
        return "\n".join(lines) if full else (lines[0] if lines else message)
    more = len(lines) - 1
    return f"{lines[0]} (+{more} more line{'s' if more != 1 else ''}: rerun with -v to see them)"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_command_of(argv))
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=[logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose + 1, 2)],
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    install_log_redaction()  # no password or query token in any log line, urllib3's included
    if args.verbose == 0:  # a job without a terminal still says how far it is (feedline.run.progress)
        logging.getLogger("feedline.progress").setLevel(logging.INFO)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except FeedlineError as exc:
        print(f"feedline: error: {error_line(redact_text(str(exc)), full=args.verbose > 0)}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("feedline: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
