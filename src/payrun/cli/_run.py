"""`payrun run`: pay a batch file through the bank, exactly once.

Parses options into ``Settings``/``ValidationOptions``/``RunOptions``, runs
``payrun.run.run_batch`` (the one ``anyio.run``), prints the summary and writes the report.
With ``--sandbox`` the embedded sandbox bank serves the run and lives only as long as it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio

from payrun.cli._bank import add_bank_key_options, bank_settings
from payrun.cli._help import HelpFormatter, OptionGroup, group_options
from payrun.cli._input import add_input_options, pay_date_gate
from payrun.cli._output import file_path, ledger_arg, reader_may_leave
from payrun.cli._plan import add_plan_options, plan_gate
from payrun.config import (
    DEFAULT_DUPLICATE_WINDOW_DAYS,
    DEFAULT_MAX_AMOUNT,
    DEFAULT_MAX_ROWS,
    DEFAULT_SETTLE_WAIT,
    DEFAULT_WAIT_TIMEOUT,
    MAX_IN_FLIGHT_CAP,
    PER_ACCOUNT_SUBMITS_CAP,
    SHORT_SETTLE_WAIT,
    RunOptions,
    Secret,
    Settings,
    ValidationOptions,
    ledger_url_from_env,
    parse_settle_wait,
    settle_wait_from_env,
)
from payrun.errors import ConfigError, RefusedMidRunError, UsageError
from payrun.intake import extension_note, sheet_note

__all__ = [
    "RUN_HELP_GROUPS",
    "add_file_options",
    "bank_session",
    "count_arg",
    "days_arg",
    "execute",
    "money_arg",
    "register",
    "settle_wait_arg",
    "validation_options",
]

RUN_HELP_GROUPS: tuple[OptionGroup, ...] = (
    (
        "what to pay",
        "the batch file, how it is read, and which rows it may hold",
        (
            "--source-account",
            "--sheet",
            "--input-format",
            "--pay-date",
            "--plan",
            "--max-amount",
            "--max-rows",
            "--allow-duplicates",
        ),
    ),
    (
        "the bank",
        "which bank, its keys, and how hard to drive it",
        (
            "--sandbox",
            "--base-url",
            "--api-key-file",
            "--signing-key-file",
            "--signing-key-id",
            "--max-in-flight",
            "--per-account-submits",
            "--wait",
            "--wait-timeout",
            "--settle-wait",
        ),
    ),
    (
        "safety",
        "what is checked before money moves, and what is held rather than paid",
        (
            "--dry-run",
            "--expect-count",
            "--expect-total",
            "--yes",
            "--pay-now",
            "--create-only",
            "--confirm-payees",
            "--accept-close-match",
            "--accept-changed-details",
            "--duplicate-window",
            "--allow-repeat",
        ),
    ),
    (
        "output",
        "where the results go and how much the run says",
        ("--ledger", "--report", "--log-format", "--format", "--quiet"),
    ),
)
"""`payrun run --help`'s groups, in order: the one place an option is given its group (an
option no group names shows under "other options")."""

_EXAMPLES = """\
examples:
  # rehearse against the built-in sandbox bank: no real money, nothing created
  payrun run payroll.csv --sandbox --dry-run
  # pay, refusing a file that does not add up to what the payroll system said
  payrun run payroll.csv --expect-count 412 --expect-total 123456.78
  # a scheduled run: no question asked, JSON log; run it again after exit 3 to resume
  payrun run payroll.csv --yes --expect-count 412 --expect-total 123456.78 --log-format json"""


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the `run` subcommand."""
    parser = subparsers.add_parser(
        "run",
        allow_abbrev=False,
        usage="%(prog)s BATCH [options]",
        formatter_class=HelpFormatter,
        epilog=_EXAMPLES,
        help="create and submit one payment per valid row, exactly once",
        description="Pay every valid row of BATCH through the bank API. Running the same"
        " command again resumes: rows already paid are never paid again. Exit 0 when every"
        " valid row was submitted (delivered with --wait), 1 when some rows are invalid, held,"
        " failed, returned or rejected, 2 for a usage, configuration, authentication, ledger"
        " or control-total error (nothing more was sent), 3 when interrupted or incomplete:"
        " run the same command again.",
    )
    add_file_options(parser)
    _add_ledger_and_bank_options(parser)
    _add_payment_options(parser)
    _add_output_options(parser)
    add_plan_options(parser)
    group_options(parser, RUN_HELP_GROUPS)
    parser.set_defaults(handler=execute)


def add_file_options(parser: argparse.ArgumentParser) -> None:
    """The batch file and how to read and validate it."""
    parser.add_argument(
        "batch", type=file_path, metavar="BATCH", help="the CSV or .xlsx batch file"
    )
    parser.add_argument(
        "--source-account",
        metavar="ACCOUNT",
        help="account to pay from for rows without one (no source_account column, or a"
        " blank cell): an account URL or 'SORTCODE ACCOUNTNUMBER'",
    )
    parser.add_argument(
        "--sheet", metavar="NAME", help="the .xlsx sheet to read (default: the first)"
    )
    add_input_options(parser, run=True)
    parser.add_argument(
        "--max-amount",
        type=money_arg,
        metavar="AMOUNT",
        default=DEFAULT_MAX_AMOUNT,
        help="largest amount allowed per payment (default 1,000,000.00)",
    )
    parser.add_argument(
        "--max-rows",
        type=int,
        default=DEFAULT_MAX_ROWS,
        metavar="N",
        help=f"refuse files with more rows (default {DEFAULT_MAX_ROWS:,})",
    )
    parser.add_argument(
        "--allow-duplicates",
        action="store_true",
        help="allow the same payee, amount and reference twice in the file",
    )


def _add_ledger_and_bank_options(parser: argparse.ArgumentParser) -> None:
    """Where the ledger and report go, and which bank to pay through."""
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="check everything with the bank read-only; create nothing",
    )
    parser.add_argument(
        "--ledger",
        type=ledger_arg,
        metavar="PATH|URL",
        help="the result ledger: a file (default BATCH.ledger.sqlite), or a PostgreSQL"
        " database's postgresql:// URL (default PAYRUN_LEDGER_URL, if set)",
    )
    parser.add_argument(
        "--report", type=file_path, metavar="FILE", help="write a report: .csv, .xlsx or .json"
    )
    parser.add_argument(
        "--sandbox",
        action="store_true",
        help="run against the embedded sandbox bank (no real money)",
    )
    parser.add_argument(
        "--base-url", metavar="URL", help="bank API base address (default PAYRUN_BASE_URL)"
    )
    add_bank_key_options(parser)


def _add_payment_options(parser: argparse.ArgumentParser) -> None:
    """Limits, control totals and what to do about payees and repeats."""
    parser.add_argument(
        "--max-in-flight",
        type=int,
        metavar="N",
        default=MAX_IN_FLIGHT_CAP,
        help=f"requests in flight for the organization (1..{MAX_IN_FLIGHT_CAP})",
    )
    parser.add_argument(
        "--per-account-submits",
        type=int,
        metavar="N",
        default=PER_ACCOUNT_SUBMITS_CAP,
        help=f"concurrent submits per source account (1..{PER_ACCOUNT_SUBMITS_CAP})",
    )
    parser.add_argument(
        "--wait", action="store_true", help="follow submissions until delivered, failed or returned"
    )
    parser.add_argument(
        "--wait-timeout",
        type=_seconds,
        metavar="SECONDS",
        help="seconds --wait keeps following (default 600; only with --wait)",
    )
    parser.add_argument(
        "--settle-wait",
        type=settle_wait_arg,
        metavar="SECONDS",
        help="how long after a request whose answer was lost (a timeout, a crash) the bank"
        " may still carry it out: such a row is checked with the bank, and paid if the bank"
        " has nothing, only then (default PAYRUN_SETTLE_WAIT, else 60; --sandbox: the"
        " sandbox's own bound)",
    )
    parser.add_argument(
        "--expect-count", type=count_arg, metavar="N", help="control total: number of valid rows"
    )
    parser.add_argument(
        "--expect-total", type=money_arg, metavar="AMOUNT", help="control total: sum of valid rows"
    )
    parser.add_argument(
        "--create-only",
        action="store_true",
        help="create the payments but submit none (approve them in the bank's app)",
    )
    parser.add_argument(
        "--confirm-payees",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="check new payees with Confirmation of Payee (default on)",
    )
    parser.add_argument(
        "--accept-close-match",
        action="store_true",
        help="pay new payees that Confirmation of Payee calls a close match",
    )
    parser.add_argument(
        "--duplicate-window",
        type=days_arg,
        metavar="DAYS",
        default=DEFAULT_DUPLICATE_WINDOW_DAYS,
        help="days of the accounts' payments checked for repeats (default 3; 0: no check)",
    )
    parser.add_argument(
        "--allow-repeat",
        action="store_true",
        help="pay rows that match a recent payment made outside this ledger",
    )
    parser.add_argument(
        "--accept-changed-details",
        action="store_true",
        help="pay rows whose payee name an existing payee has with other bank details"
        " (after confirming the new details with the payee by phone)",
    )
    parser.add_argument(
        "--yes",
        action="store_true",
        help="a live-mode organization's run goes on without asking for a typed confirmation"
        " (for schedulers; add --expect-count and --expect-total)",
    )
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="text (a progress bar on a terminal) or json lines for schedulers",
    )


def _add_output_options(parser: argparse.ArgumentParser) -> None:
    """How much the run says, and in which form (--format json as in every command)."""
    parser.add_argument(
        "--format",
        choices=("text", "json"),
        dest="log_format",
        default=argparse.SUPPRESS,
        help="the same as --log-format: json prints the summary as one JSON object on"
        " stdout and the log as JSON lines on stderr",
    )
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no progress bar or log lines; the summary's last line only (errors still show)",
    )


_AMOUNT = re.compile(r"[0-9]{1,3}(,[0-9]{3})*(\.[0-9]{1,2})?|[0-9]+(\.[0-9]{1,2})?")
_MAX_WINDOW_DAYS = 3650


def money_arg(text: str) -> Decimal:
    """A control total: pounds with at most 2 decimals, optional £ and thousands commas."""
    plain = text.strip().removeprefix("£")
    if not plain.isascii() or not _AMOUNT.fullmatch(plain):
        msg = (
            f"{text!r} is not an amount such as 1234.50 or 1,234.50"
            " (pounds, at most 2 decimal places, no sign)"
        )
        raise argparse.ArgumentTypeError(msg)
    return Decimal(plain.replace(",", ""))


def count_arg(text: str) -> int:
    """--expect-count: a whole number of rows, 0 or more."""
    if not text.strip().isdigit():
        msg = f"{text!r} is not a number of rows (a whole number, 0 or more)"
        raise argparse.ArgumentTypeError(msg)
    return int(text)


def days_arg(text: str) -> int:
    """--duplicate-window: whole days from 0 (no repeat check) to ten years."""
    if not text.strip().isdigit() or int(text) > _MAX_WINDOW_DAYS:
        msg = f"{text!r} is not a number of days from 0 to {_MAX_WINDOW_DAYS}"
        raise argparse.ArgumentTypeError(msg)
    return int(text)


def _seconds(text: str) -> float:
    """--wait-timeout: a number of seconds, 0 or more (inf: no limit)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if math.isnan(value) or value < 0:
        msg = f"{text!r} is not a number of seconds, 0 or more"
        raise argparse.ArgumentTypeError(msg)
    return value


def settle_wait_arg(text: str) -> float:
    """--settle-wait: seconds from 0 to a day."""
    try:
        return parse_settle_wait(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--settle-wait ")) from None


def validation_options(args: argparse.Namespace) -> ValidationOptions:
    """How the batch is read and checked, from the options ``add_file_options`` added."""
    return ValidationOptions(
        max_amount=args.max_amount,
        allow_duplicates=args.allow_duplicates,
        source_account=args.source_account,
        max_rows=args.max_rows,
        sheet=args.sheet,
        input_format=args.input_format,
    )


def execute(args: argparse.Namespace) -> int:
    """Run the batch and print what happened."""
    # Rich loads only for runs; the summary's modules once the run is over
    from payrun.cli._confirm import TerminalConfirmer, stdin_is_terminal
    from payrun.cli._progress import finished_line
    from payrun.run import event_loop_options, run_batch

    if args.ledger is None:
        args.ledger = ledger_url_from_env()
    # An approved plan: checked before anything is read or sent; its options apply
    args.approved = plan_gate(args)
    _check_flags(args)
    validation = validation_options(args)
    as_json = args.log_format == "json"
    with bank_session(args) as (settings, folder, bound):
        # Before the bank is asked anything: what was read, and whether today is its pay date
        pay_date_gate(
            args,
            lambda text: None if args.quiet else _note(text, as_json=as_json),
            lambda text: _note(text, as_json=as_json),
        )
        options = _run_options(args, folder, bound)
        if folder is not None and not args.quiet:
            _say_where(options, as_json=args.log_format == "json")
        observer = _observer(args)
        chosen = _chosen_settle_wait(args, bound)
        if chosen is not None and options.settle_wait < SHORT_SETTLE_WAIT:
            observer = _ShortSettleWarning(observer, options.settle_wait, chosen)
        # Said, not silently ignored
        if args.dry_run and args.report is not None:
            observer.note(f"a dry run writes no report: {args.report} is left as it was")
        refusal = None
        # No one to ask (no terminal; a JSON log's stderr is JSON only): a live-mode run
        # without --yes is refused
        asks = stdin_is_terminal() and args.log_format == "text"
        confirmer = TerminalConfirmer(args.stop) if asks else None
        try:
            outcome = anyio.run(
                lambda: run_batch(
                    args.batch,
                    settings,
                    validation=validation,
                    options=options,
                    observer=observer,
                    stop=args.stop,
                    confirmer=confirmer,
                ),
                backend_options=event_loop_options(),
            )
        except RefusedMidRunError as refused:
            # Payments exist: summary and report still
            from payrun.cli._summary import refused_outcome

            outcome, refusal = refused_outcome(refused, args.batch, options), str(refused)
        finally:
            observer.close()
    from payrun.cli._summary import print_document, print_dry_run, show_run
    from payrun.report import dry_run_document

    # Stdout: one JSON object instead of the text
    as_json = args.log_format == "json"
    if outcome.dry_run:
        with reader_may_leave(run=True):
            if as_json:
                print_document(dry_run_document(outcome))
            else:
                print_dry_run(outcome, confirm_payees=options.confirm_payees)
        if as_json:
            finished_line(outcome, report=None)
        return outcome.exit_code
    show_run(outcome, options, as_json=as_json, refusal=refusal, quiet=args.quiet)
    return outcome.exit_code


def _check_flags(args: argparse.Namespace) -> None:
    """Usage errors that argparse cannot see, before anything is read or sent."""
    from payrun.report import check_report_path

    if args.create_only and args.wait:
        msg = "--wait follows submitted payments, and --create-only submits none: leave one out"
        raise UsageError(msg)
    if args.wait_timeout is not None and not args.wait:
        msg = (
            "--wait-timeout limits how long --wait follows the submitted payments, and"
            " there is no --wait: add --wait, or leave --wait-timeout out"
        )
        raise UsageError(msg)
    # Before any request: a report that cannot be written must not surface only after every
    # row is paid, nor overwrite the batch or the ledger
    if args.report is not None:
        check_report_path(args.report, keep=_kept_files(args))


def _kept_files(args: argparse.Namespace) -> list[tuple[str, Path]]:
    """The files a report must never overwrite: the batch file, the ledger and its parts."""
    from payrun.ledger import ledger_files, ledger_location

    return [
        ("the batch file", args.batch),
        *ledger_files(ledger_location(args.ledger, args.batch)),
    ]


def _observer(args: argparse.Namespace) -> Any:
    """The run's progress observer, which first says which sheet of an .xlsx is paid."""
    # Rich loads only for runs
    from payrun.cli._progress import make_observer

    observer = make_observer(
        log_format=args.log_format, create_only=args.create_only, quiet=args.quiet
    )
    note = sheet_note(args.batch, args.sheet)
    if note is not None:
        reading, warning = note
        observer.note(reading if warning is None else f"{reading}; {warning}")
    mismatch = extension_note(args.batch)
    if mismatch is not None:
        observer.note(mismatch)
    return observer


def _run_options(
    args: argparse.Namespace, folder: Path | None, sandbox_bound: float | None
) -> RunOptions:
    """The run's options; the settle wait is --settle-wait, else the embedded sandbox's own
    bound (``sandbox_bound``), else PAYRUN_SETTLE_WAIT, else the default."""
    from payrun.ledger import default_ledger_path

    ledger = args.ledger
    report = args.report
    if folder is not None:
        ledger = ledger or default_ledger_path(folder / args.batch.name)
        report = report or folder / "report.csv"
    return RunOptions(
        max_in_flight=args.max_in_flight,
        per_account_submits=args.per_account_submits,
        dry_run=args.dry_run,
        create_only=args.create_only,
        wait=args.wait,
        confirm_payees=args.confirm_payees,
        accept_close_match=args.accept_close_match,
        expect_count=args.expect_count,
        expect_total=args.expect_total,
        duplicate_window_days=args.duplicate_window,
        allow_repeat=args.allow_repeat,
        accept_changed_details=args.accept_changed_details,
        assume_yes=args.yes,
        ledger_path=ledger,
        report_path=report,
        wait_timeout=DEFAULT_WAIT_TIMEOUT if args.wait_timeout is None else args.wait_timeout,
        settle_wait=_settle_wait_of(args, sandbox_bound),
        plan=getattr(args, "approved", None),
    )


def _settle_wait_of(args: argparse.Namespace, sandbox_bound: float | None) -> float:
    """--settle-wait, else the embedded sandbox's bound, else PAYRUN_SETTLE_WAIT (checked even
    then: a wrong value is said, not ignored), else the default."""
    from_env = settle_wait_from_env()
    if args.settle_wait is not None:
        return float(args.settle_wait)
    if sandbox_bound is not None:
        return sandbox_bound
    return DEFAULT_SETTLE_WAIT if from_env is None else from_env


def _chosen_settle_wait(args: argparse.Namespace, sandbox_bound: float | None) -> str | None:
    """Where the run's settle wait was chosen by the user (the option or the variable);
    None when it is the embedded sandbox's own bound or the default."""
    if args.settle_wait is not None:
        return "--settle-wait"
    if sandbox_bound is None and settle_wait_from_env() is not None:
        return "PAYRUN_SETTLE_WAIT"
    return None


class _ShortSettleWarning:
    """The run's observer, which says once, when rows are in doubt, that a settle wait
    under ``SHORT_SETTLE_WAIT`` may pay them twice."""

    def __init__(self, observer: Any, settle_wait: float, source: str) -> None:
        self._observer = observer
        self._settle_wait = settle_wait
        self._source = source
        self._said = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._observer, name)

    def in_doubt(self, *, count: int, until: Any) -> None:
        """Warn (once) before the observer says how many rows are in doubt."""
        if count and not self._said:
            self._said = True
            rows = "1 row is" if count == 1 else f"{count:,} rows are"
            self._observer.note(
                f"warning: {self._source} is {self._settle_wait:g} s, under"
                f" {SHORT_SETTLE_WAIT:g} s, and {rows} in doubt: a bank that carries out a"
                " request later than that after its answer was lost would pay them twice"
                " (docs/exactly-once.md)"
            )
        self._observer.in_doubt(count=count, until=until)


def _say_where(options: RunOptions, *, as_json: bool) -> None:
    """A sandbox run puts what was given no place in a fresh folder: say where each goes."""
    message = (
        f"sandbox run: the ledger goes to {options.ledger_path};"
        f" the report goes to {options.report_path}"
    )
    _note(message, as_json=as_json)


def _note(message: str, *, as_json: bool) -> None:
    """One line on stderr before the run starts (a JSON record under --log-format json)."""
    # JSON logs stay JSON from the first line
    if as_json:
        record = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "event": "note"}
        message = json.dumps({**record, "message": message})
    with reader_may_leave(sys.stderr, run=True):
        print(message, file=sys.stderr)  # noqa: T201 - before the run's own log


@contextlib.contextmanager
def bank_session(args: argparse.Namespace) -> Iterator[tuple[Settings, Path | None, float | None]]:
    """The bank to pay through: the embedded sandbox, or the configured one; where a sandbox
    run puts its ledger and report; and the embedded sandbox's settle bound (None: a bank
    that states none)."""
    if not args.sandbox:
        stop = getattr(args, "stop", None)
        stopped = stop.is_set if stop is not None else lambda: False
        yield bank_settings(args, stopped=stopped), None, None
        return
    if args.base_url:
        msg = "--sandbox and --base-url cannot be used together: pick one bank"
        raise ConfigError(msg)
    # Only a sandbox run needs the server
    from payrun.sandbox import serve_in_thread

    folder = None
    if not args.dry_run and (not args.ledger or not args.report):
        folder = Path(tempfile.mkdtemp(prefix="payrun-sandbox-"))
    with serve_in_thread() as sandbox:
        settings = Settings(base_url=sandbox.base_url, api_key=Secret(sandbox.api_key))
        yield settings, folder, sandbox.app.settle_wait_s
