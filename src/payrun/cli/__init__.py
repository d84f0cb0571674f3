"""The command line: argv -> options -> one library call -> rendering -> exit code.

A thin shell. Each subcommand lives in its own ``_<command>.py`` module with
``register(subparsers)`` and ``execute(args) -> int``; this module assembles them and maps
``PayrunError`` branches to exit codes in one table. Users never see a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import itertools
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import NoReturn

from payrun import __version__
from payrun.cli._output import error_line
from payrun.errors import (
    AuthError,
    BankError,
    BankUnavailableError,
    InterruptedRunError,
    LedgerError,
    LedgerWriteError,
    PayrunError,
    UsageError,
)
from payrun.run import StopSignal

__all__ = ["EXIT_CODES", "build_parser", "exit_code_for", "main"]

EXIT_CODES: tuple[tuple[type[PayrunError], int], ...] = (
    (InterruptedRunError, 3),
    # The disk filled up mid-run: what was done is kept, run again
    (LedgerWriteError, 3),
    (AuthError, 2),
    (UsageError, 2),
    (LedgerError, 2),
    # The bank did not answer: nothing is lost, run again
    (BankError, 3),
    (PayrunError, 2),
)
"""The one place exceptions become exit codes: first matching class wins."""

_COMMANDS = ("validate", "run", "report", "template", "sandbox", "fleet")
"""Subcommand modules ``payrun.cli._<name>``, imported when the parser is built."""


class _Parser(argparse.ArgumentParser):
    """argparse, whose usage errors become one JSON object under ``--log-format json``."""

    # Set by ``main`` from the command line before parsing
    json_errors = False
    # A word like --api-key: its neighbour may be the key itself
    key_given = False

    def error(self, message: str) -> NoReturn:
        """Exit 2 with the usage error: argparse's text, or one JSON line for schedulers.

        A message that could quote a secret is replaced: with an --api-key-like word on
        the command line, or argparse quoting an unknown command.
        """
        if _Parser.key_given:
            message = _KEY_ON_COMMAND_LINE
        elif "invalid choice" in message and message.startswith("argument COMMAND"):
            message = f"unknown command (not shown); choose one of: {', '.join(_COMMANDS)}"
        if _Parser.json_errors:
            hint = "" if "--help" in message else f"; see {self.prog} --help"
            error_line(f"{message}{hint}", as_json=True, exit_code=2)
            raise SystemExit(2)
        super().error(message)


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
        importlib.import_module(f"payrun.cli._{name}").register(subparsers)
    return parser


def exit_code_for(error: PayrunError) -> int:
    """Map an error to its documented exit code."""
    for kind, code in EXIT_CODES:
        if isinstance(error, kind):
            return code
    return 2


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_KEY_ON_COMMAND_LINE = (
    "the API key is never taken on the command line (it would show in ps and shell"
    " history): set PAYRUN_API_KEY, or pass --api-key-file FILE naming a file that holds it"
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``payrun`` with ``argv`` (default: ``sys.argv[1:]``) and return the exit code.

    Ctrl-C and SIGTERM only *record* a stop request from the first instruction on, so a
    signal can never land as an exception inside an import or a ledger write: a run stops
    starting new work (a second signal cuts it off), other commands end with exit 3.
    """
    stop = StopSignal()
    previous = _catch_signals(stop)
    _standard_streams_open()
    _printable_anywhere()
    try:
        return _main(argv, stop, previous)
    except KeyboardInterrupt:
        error_line("interrupted; run the same command again to resume")
        return 3
    finally:
        # Stopping: a late Ctrl-C must not kill the exit with a traceback
        if stop.is_set():
            for number in previous:
                signal.signal(number, signal.SIG_IGN)
        else:
            _restore_signals(previous)


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


def _catch_signals(stop: StopSignal) -> dict[int, object]:
    previous: dict[int, object] = {}
    if threading.current_thread() is not threading.main_thread():
        # Signals reach the main thread only (tests call main() from threads)
        return previous
    for number in _STOP_SIGNALS:
        previous[number] = signal.getsignal(number)
        signal.signal(number, lambda *_: stop.request())
    return previous


def _restore_signals(previous: dict[int, object]) -> None:
    for number, handler in previous.items():
        signal.signal(number, handler)  # type: ignore[arg-type]


def _main(argv: Sequence[str] | None, stop: StopSignal, previous: dict[int, object]) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    _Parser.json_errors = "--log-format=json" in words or any(
        a == "--log-format" and b == "json" for a, b in itertools.pairwise(words)
    )
    _Parser.key_given = any(_looks_like_key_option(word) for word in words)
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:
        parser.error(_unrecognized(extras))
    if stop.is_set():
        error_line(
            "interrupted before anything was done; run the command again",
            as_json=getattr(args, "log_format", "text") == "json",
            exit_code=3,
        )
        return 3
    # Only a run and the fleet stop gracefully; the others stop at once
    if args.command not in ("run", "fleet"):
        _restore_signals(previous)
    args.stop = stop
    as_json = getattr(args, "log_format", "text") == "json"
    try:
        code: int = args.handler(args)
    except BaseExceptionGroup as group:
        # Errors raised inside a task group
        return _report_error(_first_payrun_error(group) or group, as_json=as_json)
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        return _report_error(exc, as_json=as_json)
    return code


def _unrecognized(extras: list[str]) -> str:
    """Name unknown options but never their values: a value may be a secret."""
    options = [arg.split("=", 1)[0] for arg in extras if arg.startswith("-")]
    if any(_looks_like_key_option(option) for option in options):
        return _KEY_ON_COMMAND_LINE
    if not options:
        return f"{len(extras)} unexpected argument(s) (not shown); see --help"
    return f"unrecognized options: {' '.join(options)} (values not shown); see --help"


def _looks_like_key_option(word: str) -> bool:
    return word.startswith(("--api-key", "--api_key", "--key")) and not word.startswith(
        "--api-key-file"
    )


def _report_error(error: BaseException, *, as_json: bool) -> int:
    if isinstance(error, PayrunError):
        code = exit_code_for(error)
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
        exit_code=3,
    )
    return 3


def _first_payrun_error(error: BaseException) -> PayrunError | None:
    if isinstance(error, PayrunError):
        return error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = _first_payrun_error(inner)
            if found is not None:
                return found
    return None
