"""`payrun validate BATCH`: check a batch file offline and say exactly what is wrong.

argv -> ``ValidationOptions`` -> ``read_batch`` + ``validate_batch`` -> text or JSON on
stdout (and ``--report FILE``) -> exit 0 (every row valid) or 1 (some rows invalid).
File-level problems raise ``BatchFileError`` and leave as exit 2 through ``cli.main``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from payrun.cli._input import add_input_options, pay_date_of
from payrun.cli._output import file_path, json_text, reader_may_leave
from payrun.config import DEFAULT_MAX_AMOUNT, DEFAULT_MAX_ROWS, ValidationOptions
from payrun.errors import ConfigError, UsageError
from payrun.intake import Batch, extension_note, open_batch, sheet_note, show_day
from payrun.report import (
    check_report_path,
    file_error_document,
    render_validation,
    validation_document,
    write_error_report,
    write_validation_report,
)
from payrun.validation import normalize_source_account, validate_batch

__all__ = ["execute", "parse_options", "register"]

_PIPE_WIDTH = 80
_MAX_AMOUNT_CEILING = Decimal("1000000000000")
"""--max-amount above a trillion pounds is a typo, not a limit."""


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the `validate` subcommand."""
    parser = subparsers.add_parser(
        "validate",
        allow_abbrev=False,
        help="check a batch file offline: every problem, by row and column",
        description=(
            "Check a CSV or .xlsx batch file without touching the bank. Exit 0 when every"
            " row is valid, 1 when some rows are invalid, 2 when the file cannot be used."
        ),
    )
    parser.add_argument(
        "batch", metavar="BATCH", type=file_path, help="the CSV or .xlsx batch file"
    )
    parser.add_argument(
        "--source-account",
        metavar="ACCOUNT",
        help="account to pay from when a row has none: /v0/bank/accounts/ba.x or"
        " 'SORTCODE ACCOUNTNUMBER'",
    )
    parser.add_argument("--sheet", metavar="NAME", help="the .xlsx sheet to read (default: first)")
    add_input_options(parser, run=False)
    parser.add_argument(
        "--max-amount",
        metavar="AMOUNT",
        default=str(DEFAULT_MAX_AMOUNT),
        help=f"largest amount allowed per payment (default {DEFAULT_MAX_AMOUNT:,})",
    )
    parser.add_argument(
        "--max-rows",
        metavar="N",
        type=int,
        default=DEFAULT_MAX_ROWS,
        help=f"refuse files with more rows than this (default {DEFAULT_MAX_ROWS:,})",
    )
    parser.add_argument(
        "--allow-duplicates",
        action="store_true",
        help="allow the same payee, amount and reference twice",
    )
    parser.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="stdout format: text, or json (one object, the same word in every command)",
    )
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="print only the first line of the text report (the counts); the exit code"
        " says the rest",
    )
    parser.add_argument(
        "--report",
        metavar="FILE",
        type=file_path,
        help="also write the problems to FILE (.json: the JSON object; .csv or .xlsx: a sheet)",
    )
    parser.set_defaults(handler=execute)


def parse_options(args: argparse.Namespace) -> ValidationOptions:
    """Build ``ValidationOptions`` from the parsed arguments; raise ``ConfigError`` if wrong."""
    try:
        max_amount = Decimal(str(args.max_amount).replace(",", "").lstrip("£"))
    except InvalidOperation:
        max_amount = Decimal(-1)
    if not max_amount.is_finite() or not 0 < max_amount <= _MAX_AMOUNT_CEILING:
        msg = f"--max-amount {args.max_amount!r} must be a positive amount, like 25000.00"
        raise ConfigError(msg)
    if args.max_rows < 1:
        msg = "--max-rows must be 1 or more"
        raise ConfigError(msg)
    source = args.source_account
    if source is not None and normalize_source_account(source) is None:
        msg = (
            f"--source-account {source!r} is neither an account URL (/v0/bank/accounts/ba.x)"
            " nor 'SORTCODE ACCOUNTNUMBER' (like '040004 30000001')"
        )
        raise ConfigError(msg)
    return ValidationOptions(
        max_amount=max_amount,
        allow_duplicates=args.allow_duplicates,
        source_account=source,
        max_rows=args.max_rows,
        sheet=args.sheet,
        input_format=args.input_format,
    )


def execute(args: argparse.Namespace) -> int:
    """Validate the batch, print the report, write ``--report``; 0 all valid, 1 otherwise."""
    report_ok = False
    try:
        options = parse_options(args)
        # Say so before reading what may be a million rows
        if args.report is not None:
            check_report_path(args.report, keep=[("the batch file", args.batch)])
            report_ok = True
        with open_batch(args.batch, options) as batch:
            summary = validate_batch(batch, options)
    except UsageError as error:
        # Exit 2: the JSON object and the report still say why
        document = file_error_document(str(error))
        if report_ok:
            write_error_report(args.report, document)
        if args.format == "json":
            with reader_may_leave():
                sys.stdout.write(json.dumps(document) + "\n")
        raise
    if args.report is not None:
        write_validation_report(args.report, summary)
    mismatch = extension_note(batch.path)
    if mismatch is not None:
        # A warning, not the command's output: stdout stays the report
        with reader_may_leave(sys.stderr):
            sys.stderr.write(f"payrun: warning: {mismatch}\n")
    # `payrun validate BATCH | head` ends quietly, same exit code
    with reader_may_leave():
        if args.format == "json":
            sys.stdout.write(json_text(_document(args, batch, summary)) + "\n")
        else:
            _print_text(args, batch.path, batch.sheet, summary, _read_as(args, batch))
    return 0 if summary.all_valid else 1


def _document(args: argparse.Namespace, batch: Batch, summary: Any) -> dict[str, Any]:
    """The validate JSON object, with how the file was read and its pay date."""
    pay_date = pay_date_of(batch.export, args.pay_date)
    return {
        **validation_document(summary),
        "input_format": batch.input_format,
        "pay_date": None if pay_date is None else pay_date.isoformat(),
    }


def _read_as(args: argparse.Namespace, batch: Batch) -> str | None:
    """The line that says how a payroll export was read (or the --pay-date given)."""
    if batch.export is not None:
        return batch.export.describe(args.pay_date)
    if args.pay_date is not None:
        return f"pay date {show_day(args.pay_date)} (--pay-date)"
    return None


def _print_text(
    args: argparse.Namespace, path: Path, sheet: str | None, summary: Any, read_as: str | None
) -> None:
    """The text report: as wide as the terminal and coloured there, plain on a pipe."""
    name = path.name
    # Which sheet was read: the clerk may expect another
    if sheet is not None:
        name = f"{name}, sheet {sheet!r}"
    terminal = sys.stdout.isatty()
    width = shutil.get_terminal_size().columns if terminal else _PIPE_WIDTH
    text = render_validation(summary, name=name, width=max(width, _PIPE_WIDTH))
    if args.quiet:
        text = text.splitlines()[0] + "\n"
    elif read_as is not None:
        text = read_as + "\n" + text
    note = sheet_note(path, args.sheet)
    # The sheet is named above already
    if note is not None and note[1] is not None and not args.quiet:
        text += note[1] + "\n"
    if not terminal:
        sys.stdout.write(text)
        return
    from rich.text import Text

    from payrun.cli._output import stream_console

    shown = Text(text.removesuffix("\n"))
    shown.highlight_regex(r"(?<= )error:", "bold red")
    shown.highlight_regex(r"(?<= )warning:", "yellow")
    stream_console(sys.stdout).print(shown, soft_wrap=True)
