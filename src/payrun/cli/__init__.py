"""The command line: argv -> options -> one library call -> rendering -> exit code.

A thin shell. Each subcommand lives in its own ``_<command>.py`` module with
``register(subparsers)`` and ``execute(args) -> int``; this module assembles them and ends
a ``PayrunError`` with one line and the error's own exit code (``payrun.errors``). Users
never see a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import itertools
import os
import re
import signal
import sys
from collections.abc import Sequence
from typing import NoReturn

from payrun import __version__
from payrun._signals import catch_stop_signals, restore_signals
from payrun.cli._output import error_line
from payrun.errors import (
    EXIT_REFUSED,
    EXIT_RUN_AGAIN,
    BankUnavailableError,
    PayrunError,
    first_payrun_error,
)
from payrun.run import StopSignal

__all__ = ["build_parser", "main"]

_COMMANDS = (
    "validate",
    "run",
    "check",
    "report",
    "template",
    "sandbox",
    "fleet",
    "plan",
    "serve",
    "approve",
    "approver-key",
)
"""Subcommand modules ``payrun.cli._<name>``, imported when the parser is built."""

# A word shown back as the unknown command it was taken for: letters, as a command is (one
# with digits, or longer, may be a pasted key: not shown)
_COMMAND_LIKE = re.compile(r"[A-Za-z][A-Za-z-]{0,19}")
# How alike a mistyped word must be to a command or option to be suggested (difflib's ratio)
_CLOSE_ENOUGH = 0.6


class _Parser(argparse.ArgumentParser):
    """argparse, whose usage errors become one JSON object under ``--log-format json``."""

    # Set by ``main`` from the command line before parsing
    json_errors = False
    # The subcommands' parsers by name (set on the top parser by ``build_parser``)
    commands: dict[str, argparse.ArgumentParser] = {}
    # A word like --api-key: its neighbour may be the key itself
    key_given = False

    def error(self, message: str) -> NoReturn:
        """Exit 2 with the usage error on one line (no usage dump), or one JSON line for
        schedulers; a typo gets the closest command, option or choice.

        A message that could quote a secret is replaced: with an --api-key-like word on
        the command line. An unknown command is named (a command's name is no secret),
        unless it does not look like a word someone meant as one.
        """
        if _Parser.key_given:
            message = _KEY_ON_COMMAND_LINE
        elif "invalid choice" in message and message.startswith("argument COMMAND"):
            word = _chosen(message)
            maybe = _did_you_mean(word, _COMMANDS)
            shown = f"'{word}'" if _COMMAND_LIKE.fullmatch(word) else "(not shown)"
            message = f"unknown command {shown}{maybe} (commands: {', '.join(_COMMANDS)})"
        elif "invalid choice" in message:
            choices = re.findall(r"'([^']*)'", message.partition("(choose from")[2])
            message += _did_you_mean(_chosen(message), choices)
        hint = "" if "--help" in message else f"; see {self.prog} --help"
        if _Parser.json_errors:
            error_line(f"{message}{hint}", as_json=True, exit_code=EXIT_REFUSED)
            raise SystemExit(EXIT_REFUSED)
        # A suggestion is enough: the help is one command away
        self.exit(
            EXIT_REFUSED,
            f"{self.prog}: error: {message}{'' if 'did you mean' in message else hint}\n",
        )


def _chosen(message: str) -> str:
    """The word argparse quotes in an 'invalid choice' message."""
    found = re.search(r"invalid choice: '([^']*)'", message)
    return "" if found is None else found.group(1)


def _did_you_mean(word: str, choices: Sequence[str]) -> str:
    """': did you mean X?' for the choice closest to a mistyped ``word``, else ''."""
    # Only a usage error needs it; payrun starts without it
    import difflib

    close = difflib.get_close_matches(word, choices, n=1, cutoff=_CLOSE_ENOUGH)
    return f": did you mean {close[0]}?" if close else ""


def build_parser() -> argparse.ArgumentParser:
    """Build the ``payrun`` parser with every subcommand registered."""
    parser = _Parser(
        prog="payrun",
        # `--api-key KEY` must not pass as an abbreviated --api-key-file
        allow_abbrev=False,
        description="Validate and pay a batch file of UK payments through the bank API,"
        " exactly once.",
    )
    parser.add_argument("--version", action="version", version=f"payrun {__version__}")
    subparsers = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=_Parser
    )
    for name in _COMMANDS:
        importlib.import_module(f"payrun.cli._{name.replace('-', '_')}").register(subparsers)
    parser.commands = dict(subparsers.choices)
    return parser


_KEY_ON_COMMAND_LINE = (
    "the API key is never taken on the command line (it would show in ps and shell"
    " history): set PAYRUN_API_KEY, or pass --api-key-file FILE naming a file that holds it"
)


def main(
    argv: Sequence[str] | None = None,
    *,
    stop: StopSignal | None = None,
    caught: dict[int, object] | None = None,
) -> int:
    """Run ``payrun`` with ``argv`` (default: ``sys.argv[1:]``) and return the exit code.

    Ctrl-C and SIGTERM only *record* a stop request from the first instruction on, so a
    signal can never land as an exception inside an import or a ledger write: a run stops
    starting new work (a second signal cuts it off), other commands end with exit 3.
    ``stop`` and ``caught``: the request and the handlers ``payrun.__main__`` installed
    before importing this module (else this call installs them).
    """
    if stop is None:
        stop = StopSignal()
        previous = catch_stop_signals(stop.request)
    else:
        previous = caught or {}
    _standard_streams_open()
    _printable_anywhere()
    try:
        return _main(argv, stop, previous)
    except KeyboardInterrupt:
        error_line("interrupted; run the same command again to resume")
        return EXIT_RUN_AGAIN
    finally:
        # Stopping: a late Ctrl-C must not kill the exit with a traceback
        if stop.is_set():
            for number in previous:
                signal.signal(number, signal.SIG_IGN)
        else:
            restore_signals(previous)


def _standard_streams_open() -> None:
    """A scheduler may start payrun with stdin, stdout or stderr closed: each closed one
    is opened on /dev/null, so that no file the run opens (a socket, the ledger) takes its
    number, and output meant for stderr never lands on stdout."""
    for number, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        try:
            os.fstat(number)
        except OSError:
            # The lowest free number: this one
            opened = os.open(os.devnull, os.O_RDWR)
            if opened != number:  # pragma: no cover - a lower one was free: leave it be
                os.close(opened)
                continue
        # Python starts with None for a closed stream
        if getattr(sys, name) is None:
            setattr(sys, name, open(number, "r" if number == 0 else "w", closefd=False))


def _printable_anywhere() -> None:
    """A payee name or '£' the terminal's encoding lacks prints as '?', never fails a run."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with contextlib.suppress(ValueError, OSError):
                reconfigure(errors="replace")


def _main(argv: Sequence[str] | None, stop: StopSignal, previous: dict[int, object]) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    # A run's JSON is asked for with --log-format json or --format json
    options = ("--log-format", "--format") if "run" in words else ("--log-format",)
    _Parser.json_errors = any(f"{o}=json" in words for o in options) or any(
        a in options and b == "json" for a, b in itertools.pairwise(words)
    )
    # approve's --key names an approver key file, not the API key
    _Parser.key_given = "approve" not in words and any(
        _looks_like_key_option(word) for word in words
    )
    parser = build_parser()
    # Imported once signals are caught: a Ctrl-C must never land inside an import
    from payrun.config import completion_requested

    if completion_requested():
        _complete(parser)
    if not words:
        _list_commands(parser)
        return EXIT_REFUSED
    args, extras = parser.parse_known_args(argv)
    if extras:
        # The usage shown is the subcommand's, whose options were mistyped
        commands: dict[str, argparse.ArgumentParser] = getattr(parser, "commands", {})
        command = commands.get(args.command, parser)
        command.error(_unrecognized(extras, command))
    if stop.is_set():
        error_line(
            "interrupted before anything was done; run the command again",
            as_json=getattr(args, "log_format", "text") == "json",
            exit_code=EXIT_RUN_AGAIN,
        )
        return EXIT_RUN_AGAIN
    # Only a run and the fleet stop gracefully; the others stop at once
    if args.command not in ("run", "fleet"):
        restore_signals(previous)
    args.stop = stop
    # The words as given (a fleet worker starts its --processes children with them)
    args.argv = words
    as_json = getattr(args, "log_format", "text") == "json"
    try:
        code: int = args.handler(args)
    except BaseExceptionGroup as group:
        # Errors raised inside a task group
        return _report_error(first_payrun_error(group) or group, as_json=as_json)
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        return _report_error(exc, as_json=as_json)
    return code


def _list_commands(parser: argparse.ArgumentParser) -> None:
    """`payrun` alone: the commands, one line each, and where to read more (as git does)."""
    helps = {
        action.dest: action.help or ""
        for group in parser._subparsers._group_actions  # type: ignore[union-attr]
        if isinstance(group, argparse._SubParsersAction)
        for action in group._choices_actions
    }
    width = max(len(name) for name in helps)
    lines = [
        "usage: payrun COMMAND [options]   (payrun COMMAND --help: a command's options)",
        "",
        "commands:",
        *(f"  {name:<{width}}  {text}" for name, text in helps.items()),
        "",
        "Start with: payrun run samples/payroll.csv --sandbox --dry-run",
    ]
    print("\n".join(lines))  # noqa: T201 - what a person typing `payrun` wants to see


def _complete(parser: argparse.ArgumentParser) -> None:
    """Answer the shell's tab completion (bash, zsh, fish) from the parser, then exit."""
    # Loaded only when a shell asks: no cost to a run
    import argcomplete

    argcomplete.autocomplete(parser)


def _unrecognized(extras: list[str], parser: argparse.ArgumentParser) -> str:
    """Name unknown options but never their values: a value may be a secret; suggest the
    option closest to each one mistyped."""
    options = [arg.split("=", 1)[0] for arg in extras if arg.startswith("-")]
    if any(_looks_like_key_option(option) for option in options):
        return _KEY_ON_COMMAND_LINE
    if not options:
        return f"{len(extras)} unexpected argument(s) (not shown)"
    known = [name for action in parser._actions for name in action.option_strings]
    maybe = _did_you_mean(options[0], known) if len(options) == 1 else ""
    if len(options) == 1:
        return f"unknown option {options[0]}{maybe}"
    return f"unknown options: {' '.join(options)}"


# The fleet worker's keys folder and key group are options of their own, not a key
_NOT_KEY_OPTIONS = frozenset({"--keys", "--key-group"})


def _looks_like_key_option(word: str) -> bool:
    if word.split("=", 1)[0] in _NOT_KEY_OPTIONS:
        return False
    return word.startswith(("--api-key", "--api_key", "--key")) and not word.startswith(
        "--api-key-file"
    )


def _report_error(error: BaseException, *, as_json: bool) -> int:
    if isinstance(error, PayrunError):
        code = error.exit_code
        message = str(error)
        # The bank was never reached
        if isinstance(error, BankUnavailableError):
            message += (
                "; check PAYRUN_BASE_URL (or --base-url) and the network, then run the same"
                " command again"
            )
        error_line(message, as_json=as_json, exit_code=code)
        return code
    error_line(
        f"unexpected {type(error).__name__}: {error}; the ledger keeps what was done,"
        " so running the same command again is safe (please report this)",
        as_json=as_json,
        exit_code=EXIT_RUN_AGAIN,
    )
    return EXIT_RUN_AGAIN
