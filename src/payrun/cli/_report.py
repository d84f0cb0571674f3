"""`payrun report`: one line per batch row from a ledger, at any time (even mid-run)."""

from __future__ import annotations

import argparse
import csv
import io
import json
from pathlib import Path
from typing import Any

from payrun.errors import UsageError
from payrun.ledger_report import REPORT_COLUMNS, read_ledger_rows, report_records
from payrun.reporting import write_table

__all__ = ["execute", "register"]

_FORMATS = ("csv", "xlsx", "json")


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the `report` subcommand."""
    parser = subparsers.add_parser(
        "report", help="write one line per batch row from a run's ledger",
        description="Read a run's ledger (it works mid-run too) and write one line per row:"
        " " + ", ".join(REPORT_COLUMNS) + ".")
    parser.add_argument("ledger", type=Path, metavar="LEDGER", help="the .ledger.sqlite file")
    parser.add_argument("--format", choices=_FORMATS,
                        help="csv, xlsx or json (default: from -o's extension, else csv)")
    parser.add_argument("-o", "--output", type=Path, help="file to write (default: stdout)")
    parser.set_defaults(handler=execute)


def execute(args: argparse.Namespace) -> int:
    """Write the report."""
    records = report_records(read_ledger_rows(args.ledger))
    fmt = args.format
    output: Path | None = args.output
    if output is not None:
        if fmt is not None and output.suffix.lower() != f".{fmt}":
            output = output.with_name(output.name + f".{fmt}") if not output.suffix else output
        write_table(output, REPORT_COLUMNS, records, format=fmt)
        return 0
    if fmt == "xlsx":
        msg = "an .xlsx report needs a file: add -o report.xlsx"
        raise UsageError(msg)
    if fmt == "json":
        print(json.dumps(records, indent=2))  # noqa: T201
        return 0
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=REPORT_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(records)
    print(buffer.getvalue(), end="")  # noqa: T201
    return 0
