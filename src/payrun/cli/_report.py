"""`payrun report`: one line per batch row from a ledger, at any time (even mid-run).

The ledger is a file (``payrun report LEDGER``, or ``payrun report BATCH`` for the
``BATCH.ledger.sqlite`` beside a batch file), or a batch in a PostgreSQL database
(``--ledger postgresql://...`` or ``PAYRUN_LEDGER_URL``), named by the batch file a run paid
or by the name it is stored under (the only batch there when none is named).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any

from payrun.cli._output import file_path, ledger_arg, reader_may_leave
from payrun.config import DatabaseURL, ledger_url_from_env
from payrun.errors import ConfigError, UsageError
from payrun.ledger import (
    LedgerLocation,
    batch_beside,
    database_ledger,
    ledger_files,
    ledger_named_by,
)
from payrun.report import (
    AUDIT_COLUMNS,
    RECONCILE_COLUMNS,
    REPORT_COLUMNS,
    audit_table,
    check_report_path,
    csv_cell,
    ledger_batch_file,
    read_audit_trail,
    read_ledger_rows,
    report_records,
    report_table,
    write_report,
    write_table,
)

__all__ = ["execute", "register"]

_FORMATS = ("csv", "xlsx", "json")


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the `report` subcommand."""
    parser = subparsers.add_parser(
        "report",
        allow_abbrev=False,
        help="write one line per batch row from a run's ledger",
        description="Read a run's ledger (it works mid-run too) and write one line per row:"
        " "
        + ", ".join(REPORT_COLUMNS)
        + ". An .xlsx adds "
        + ", ".join(RECONCILE_COLUMNS)
        + " and a summary sheet.",
    )
    parser.add_argument(
        "ledger",
        nargs="?",
        metavar="LEDGER|BATCH",
        help="the .ledger.sqlite file, or the batch file it sits beside; with a PostgreSQL"
        " --ledger: the batch file a run paid, or the batch's name in the database",
    )
    parser.add_argument(
        "--ledger",
        dest="location",
        type=ledger_arg,
        help="the ledger: a file, or a PostgreSQL database's postgresql:// URL (default"
        " PAYRUN_LEDGER_URL, if set)",
    )
    parser.add_argument(
        "--format",
        choices=_FORMATS,
        help="csv, xlsx or json (default: from -o's extension, else csv)",
    )
    parser.add_argument("-o", "--output", type=file_path, help="file to write (default: stdout)")
    parser.add_argument(
        "--audit",
        action="store_true",
        help="write the audit trail instead (every plan made, approved, rejected and run):"
        " at_utc, event, actor, plan_id, detail",
    )
    parser.set_defaults(handler=execute)


def execute(args: argparse.Namespace) -> int:
    """Write the report to a file or stdout."""
    ledger = _location(args.ledger, args.location or ledger_url_from_env())
    if args.audit:
        return _write_audit(ledger, args.output, args.format)
    rows = read_ledger_rows(ledger)
    output: Path | None = args.output
    fmt: str | None = args.format
    if output is not None:
        if fmt is not None and output.suffix.lower() != f".{fmt}":
            msg = f"-o {output} does not end in .{fmt}: name the file report.{fmt}"
            raise UsageError(msg)
        if output.suffix.lower() not in {f".{f}" for f in _FORMATS}:
            msg = f"cannot tell the format of {output}: end it in .csv, .xlsx or .json"
            raise UsageError(msg)
        # Where it was, and beside a default-named one (a folder moved or copied since)
        batches = [ledger_batch_file(ledger), batch_beside(ledger)]
        kept = [*ledger_files(ledger, lock=False), *(("the batch file", b) for b in batches if b)]
        # A folder, a missing folder, or what the report must never overwrite, said plainly
        check_report_path(output, keep=kept)
        write_report(output, rows, audit=read_audit_trail(ledger))
        # Said on stderr: stdout carries a report only when no -o is given
        with reader_may_leave(sys.stderr):
            print(f"wrote {output}: {_many_rows(len(rows))}", file=sys.stderr)  # noqa: T201
        return 0
    if fmt == "xlsx":
        msg = "an .xlsx report needs a file: add -o report.xlsx"
        raise UsageError(msg)
    try:
        # `payrun report LEDGER | head` ends quietly with exit 0
        with reader_may_leave():
            if fmt == "json":
                print(json.dumps(report_records(rows), indent=2))  # noqa: T201
            else:
                writer = csv.writer(sys.stdout, lineterminator="\n")
                writer.writerow(REPORT_COLUMNS)
                writer.writerows([csv_cell(c) for c in record] for record in report_table(rows))
            sys.stdout.flush()
    except OSError as exc:
        msg = (
            f"cannot write the report to standard output ({exc.strerror or exc}); send it"
            " elsewhere, or write it to a file with -o report.csv"
        )
        raise ConfigError(msg) from None
    return 0


def _many_rows(count: int) -> str:
    return "1 row" if count == 1 else f"{count:,} rows"


def _write_audit(ledger: LedgerLocation, output: Path | None, fmt: str | None) -> int:
    """The audit trail to a file (.csv, .xlsx, .json) or stdout (CSV, or JSON)."""
    table = audit_table(read_audit_trail(ledger))
    if output is None and fmt == "xlsx":
        msg = "an .xlsx audit trail needs a file: add -o audit.xlsx"
        raise UsageError(msg)
    if output is not None:
        check_report_path(output, keep=ledger_files(ledger, lock=False))
        write_table(output, AUDIT_COLUMNS, table)
        return 0
    with reader_may_leave():
        if fmt == "json":
            records = [dict(zip(AUDIT_COLUMNS, line, strict=True)) for line in table]
            print(json.dumps(records, indent=2))  # noqa: T201 - the command's output
        else:
            writer = csv.writer(sys.stdout, lineterminator="\n")
            writer.writerow(AUDIT_COLUMNS)
            writer.writerows([csv_cell(c) for c in line] for line in table)
    return 0


def _location(named: str | None, given: Path | DatabaseURL | None) -> LedgerLocation:
    """The ledger the command names: ``--ledger``'s (a database's batch by ``named``), else
    the file ``named``, or the ledger beside the batch file ``named``."""
    if isinstance(given, DatabaseURL):
        return database_ledger(given, named)
    if given is not None:
        return given
    if named is None:
        msg = "name the ledger: payrun report BATCH.ledger.sqlite (or the batch file)"
        raise UsageError(msg)
    path = _file_path(named)
    ledger, from_batch = ledger_named_by(path)
    if from_batch and not ledger.exists():
        msg = (
            f"{path} is a batch file, and no ledger is beside it ({ledger.name}): pay it"
            f" with `payrun run {path}` first, or name the ledger a run printed (a --sandbox"
            " run keeps its ledger in a temporary folder: see its 'ledger:' line)"
        )
        raise UsageError(msg)
    return ledger


def _file_path(text: str) -> Path:
    """``text`` as a file's path; ``UsageError`` for an empty one."""
    try:
        return file_path(text)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(str(exc)) from None
