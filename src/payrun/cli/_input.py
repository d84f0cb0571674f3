"""The input options of `validate` and `run`: how the file is read, and when it may be paid.

``--input-format`` picks the reading (payrun's columns or a payroll export's profile);
``--pay-date`` sets or overrides the day the money should arrive, ``--pay-now`` (run
only) pays before it. ``pay_date_gate`` reads the file once before anything is sent: it
says what was read and refuses a run before its pay date (exit 2, nothing created).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import date

from payrun.errors import UsageError
from payrun.intake import INPUT_FORMATS, ExportReading, read_export, show_day

__all__ = ["add_input_options", "pay_date_gate", "pay_date_of"]


def _day(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        msg = f"{text!r} is not a date as YYYY-MM-DD"
        raise argparse.ArgumentTypeError(msg) from None


def add_input_options(parser: argparse.ArgumentParser, *, run: bool) -> None:
    """Add --input-format and --pay-date (and, for a run, --pay-now)."""
    parser.add_argument(
        "--input-format",
        choices=INPUT_FORMATS,
        default="auto",
        help="how to read the file: payrun's columns, or a payroll export (Bacs Standard 18,"
        " NatWest Bankline CSV, Barclays BACS CSV); default auto: decided by its content",
    )
    parser.add_argument(
        "--pay-date",
        type=_day,
        metavar="YYYY-MM-DD",
        help="the day the money should arrive (sets or overrides the file's own)",
    )
    if run:
        parser.add_argument(
            "--pay-now",
            action="store_true",
            help="pay now, before the file's pay date",
        )


def pay_date_of(export: ExportReading | None, given: date | None) -> date | None:
    """The pay date: ``--pay-date``, else the export's own, else None."""
    if given is not None:
        return given
    return export.pay_date if export is not None else None


def pay_date_gate(
    args: argparse.Namespace,
    note: Callable[[str], None],
    warn: Callable[[str], None],
    *,
    today: date | None = None,
) -> None:
    """Say what was read (``note``); refuse a run before its pay date unless --pay-now
    (``UsageError``), and ``warn`` when the pay date has passed."""
    export = read_export(args.batch, input_format=args.input_format)
    pay_date = pay_date_of(export, args.pay_date)
    if export is not None:
        note(export.describe(args.pay_date))
    elif pay_date is not None:
        note(f"pay date {show_day(pay_date)} (--pay-date)")
    if pay_date is None or args.pay_now:
        return
    today = today or date.today()  # noqa: DTZ011 - the clerk's own calendar day
    if today < pay_date:
        msg = (
            f"{args.batch.name} is to be paid on {show_day(pay_date)}, and today is"
            f" {show_day(today)}: Faster Payments arrive in seconds, so nothing was sent; run"
            " it again on that day, or add --pay-now to pay now"
        )
        if not args.dry_run:
            raise UsageError(msg)
        warn(f"warning: a run today would be refused: {msg}")
    if today > pay_date:
        warn(f"warning: the pay date {show_day(pay_date)} has passed: paying today")
