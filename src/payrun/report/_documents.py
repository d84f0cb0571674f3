"""Reporting, the last stage: tables and summaries out, as CSV, .xlsx, JSON or text.

Input: column names and rows (``write_table``), or a validation ``BatchSummary``
(``validation_document``, ``render_validation``, ``write_validation_report``). Output: files
written atomically (a temporary file, then a rename) and text that reads well in 80
columns. A CSV cell that starts with ``=``, ``+``, ``-`` or ``@`` (and is not a plain
number) is written with a leading ``'`` so a spreadsheet shows it instead of running it
(formula injection); an .xlsx cell is typed text, which no spreadsheet runs, so it is exact,
and opens ready to read (``payrun.report._sheet``).
Raises ``ConfigError`` for an unsupported report extension or an unwritable path;
``check_report_path`` raises it up front, before the work whose report it is.
"""

from __future__ import annotations

import csv
import json
import os
import re
import tempfile
import textwrap
from collections.abc import Callable, Iterable, Sequence
from decimal import Decimal
from pathlib import Path
from typing import IO, Any

from payrun._models import RowProblem, format_money
from payrun.errors import ConfigError
from payrun.report._sheet import add_sheet
from payrun.validation import BatchSummary

__all__ = [
    "PROBLEM_COLUMNS",
    "atomic_write",
    "TABLE_FORMATS",
    "check_report_path",
    "csv_cell",
    "escape_cell",
    "file_error_document",
    "write_error_report",
    "render_validation",
    "validation_document",
    "write_table",
    "write_validation_report",
]

TABLE_FORMATS = (".csv", ".xlsx", ".json")
PROBLEM_COLUMNS = ("row", "column", "severity", "message")
"""The columns of a validation report written as a sheet."""
_DANGEROUS_STARTS = ("=", "+", "-", "@", "\t", "\r")
_PLAIN_NUMBER = re.compile(r"[+-]?[0-9]+(?:\.[0-9]+)?")
_WIDTH = 80
_ROW_WIDTH = 6
_COLUMN_WIDTH = 15
_NAME_WIDTH = 16
_MIN_PROBLEM_WIDTH = 30
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_TEXT_PROBLEM_LIMIT = 200
"""Text output lists this many problems; JSON and report files list them all."""


def escape_cell(value: object) -> object:
    """Prefix CSV text that a spreadsheet would run as a formula with ``'``; others pass.

    A plain signed number (``-7``, ``+100``) is not a formula to a spreadsheet, so it stays
    as it is; ``-BONUS`` or ``=HYPERLINK(...)`` is escaped. An .xlsx cell needs no escape:
    it is written as text, which a spreadsheet never runs.
    """
    if (
        isinstance(value, str)
        and value.startswith(_DANGEROUS_STARTS)
        and not _PLAIN_NUMBER.fullmatch(value)
    ):
        return "'" + value
    return value


def write_table(path: Path | str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Write rows under a header row, as CSV, .xlsx or JSON chosen by ``path``'s extension.

    CSV is UTF-8 with a BOM (so Excel reads £ and accents right); JSON is a list of objects
    keyed by column, with Decimal as text like ``"1234.50"``.
    """
    target = Path(path)
    suffix = target.suffix.lower()
    if suffix == ".csv":
        atomic_write(target, "w", lambda handle: _write_csv(handle, columns, rows))
    elif suffix == ".xlsx":
        atomic_write(target, "wb", lambda handle: _write_xlsx(handle, columns, rows))
    elif suffix == ".json":
        records = [dict(zip(columns, row, strict=True)) for row in rows]
        atomic_write(target, "w", lambda handle: _dump_json(records, handle))
    else:
        raise _unsupported(target)


def check_report_path(path: Path | str, *, keep: Sequence[tuple[str, Path]] = ()) -> None:
    """Raise ``ConfigError`` now if a report could not be written to ``path`` later, or
    would overwrite one of the files ``keep`` names (the batch file, the ledger).

    Checks the extension, that the folder exists and takes a new file (by creating and
    removing one), and that ``path`` is not a folder. A disk can still fill up later.
    """
    target = Path(path)
    for what, kept in keep:
        if _same_file(target, kept):
            msg = f"the report {target} would overwrite {what} {kept}: name another report file"
            raise ConfigError(msg)
    if target.suffix.lower() not in TABLE_FORMATS:
        raise _unsupported(target)
    if target.is_dir():
        msg = f"cannot write the report {target}: it is a folder; name a file such as report.csv"
        raise ConfigError(msg)
    if not target.parent.is_dir():
        msg = (
            f"cannot write the report {target}: the folder {target.parent} does not exist;"
            " create it first or name a report in an existing folder"
        )
        raise ConfigError(msg)
    fd, temp = _temp_beside(target)
    os.close(fd)
    Path(temp).unlink(missing_ok=True)


def _same_file(one: Path, other: Path) -> bool:
    """The same file: one path, or two names of it (a link), existing or not."""
    try:
        return os.path.samefile(one, other)
    except OSError:
        # One of them does not exist (yet): compare where the names point
        return one.resolve() == other.resolve()


def _unsupported(target: Path) -> ConfigError:
    msg = f"cannot write a report to {target.name}: use a .csv, .xlsx or .json file name"
    return ConfigError(msg)


def validation_document(summary: BatchSummary) -> dict[str, Any]:
    """The validate JSON object of the contract: rows, valid, invalid, total, errors, warnings."""
    return {
        "rows": summary.rows,
        "valid": summary.valid,
        "invalid": summary.invalid,
        "total": format_money(summary.total),
        "errors": [_problem_object(problem) for problem in summary.errors],
        "warnings": [_problem_object(problem) for problem in summary.warnings],
    }


def file_error_document(message: str) -> dict[str, Any]:
    """The validate JSON object for a file that cannot be used (exit 2): no rows, one error
    with neither row nor column, so a scheduler parsing stdout still gets the reason."""
    return {
        "rows": 0,
        "valid": 0,
        "invalid": 0,
        "total": "0.00",
        "errors": [{"row": None, "column": None, "message": message}],
        "warnings": [],
    }


def write_error_report(path: Path | str, document: dict[str, Any]) -> None:
    """The validate report of a file that cannot be used: ``file_error_document`` as JSON,
    or its one error as a problems sheet."""
    target = Path(path)
    if target.suffix.lower() == ".json":
        atomic_write(target, "w", lambda handle: _dump_json(document, handle))
        return
    rows = [("", "", "error", error["message"]) for error in document["errors"]]
    write_table(target, PROBLEM_COLUMNS, rows)


def write_validation_report(path: Path | str, summary: BatchSummary) -> None:
    """Write the validate report: the JSON object for ``.json``, a problems sheet otherwise."""
    target = Path(path)
    if target.suffix.lower() == ".json":
        document = validation_document(summary)
        atomic_write(target, "w", lambda handle: _dump_json(document, handle))
        return
    write_table(target, PROBLEM_COLUMNS, _problem_rows(summary))


def render_validation(summary: BatchSummary, *, name: str, width: int = _WIDTH) -> str:
    """The text report: summary, fingerprint, then a problems table in row order (a row's
    errors before its warnings), each problem beside its row number and payee name, its
    text wrapped between words to ``width`` (an option such as --allow-duplicates is never
    cut)."""
    lines = _summary_lines(summary, name)
    problems = sorted(
        [("error", p) for p in summary.errors] + [("warning", p) for p in summary.warnings],
        key=lambda item: (item[1].row or 0, item[0] != "error"),
    )
    if problems:
        lines.append("")
        lines.append(
            f"{'row':>{_ROW_WIDTH}}  {'payee':<{_NAME_WIDTH}} {'column':<{_COLUMN_WIDTH}} problem"
        )
        for severity, problem in problems[:_TEXT_PROBLEM_LIMIT]:
            payee = summary.names.get(problem.row or 0, "")
            lines.extend(_problem_lines(severity, problem, payee, width))
        hidden = len(problems) - _TEXT_PROBLEM_LIMIT
        if hidden > 0:
            lines.append(f"... and {hidden:,} more: use --format json or --report FILE.csv")
    return "\n".join(lines) + "\n"


def _summary_lines(summary: BatchSummary, name: str) -> list[str]:
    fingerprint = summary.fingerprint
    warnings = len(summary.warnings)
    lines = [
        f"{name}: {_many(summary.rows, 'row')}: {summary.valid:,} valid,"
        f" {summary.invalid:,} invalid, {_many(warnings, 'warning')}",
        f"total of the valid rows: £{summary.total:,.2f}",
    ]
    for account, totals in sorted(summary.accounts.items()):
        lines.append(f"  from {account}: {_many(totals.count, 'payment')}, £{totals.total:,.2f}")
    lines.append(f"fingerprint: count {fingerprint.count}, total {format_money(fingerprint.total)}")
    lines.append(f"  sha256 {fingerprint.sha256}")
    return lines


def _many(count: int, thing: str) -> str:
    """'1 row', '2 rows', '1,997 rows'."""
    return f"{count:,} {thing}" if count == 1 else f"{count:,} {thing}s"


def _problem_lines(severity: str, problem: RowProblem, payee: str, width: int) -> list[str]:
    indent = _ROW_WIDTH + 2 + _NAME_WIDTH + 1 + _COLUMN_WIDTH + 1
    wrapped = textwrap.wrap(
        f"{severity}: {problem.message}",
        width=max(width - indent, _MIN_PROBLEM_WIDTH),
        break_long_words=False,
        break_on_hyphens=False,
    ) or [severity]
    row = "" if problem.row is None else str(problem.row)
    column = problem.column or "-"
    shown = _fit(_CONTROL.sub("?", payee), _NAME_WIDTH)
    first = f"{row:>{_ROW_WIDTH}}  {shown:<{_NAME_WIDTH}} {column:<{_COLUMN_WIDTH}} {wrapped[0]}"
    return [first, *(" " * indent + more for more in wrapped[1:])]


def _fit(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, an ellipsis marking the cut."""
    return text if len(text) <= width else text[: width - 1] + "\u2026"


def _problem_object(problem: RowProblem) -> dict[str, Any]:
    return {"row": problem.row, "column": problem.column, "message": problem.message}


def _problem_rows(summary: BatchSummary) -> Iterable[Sequence[Any]]:
    for problem in summary.errors:
        yield (problem.row, problem.column or "", "error", problem.message)
    for problem in summary.warnings:
        yield (problem.row, problem.column or "", "warning", problem.message)


def _write_csv(handle: IO[Any], columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    writer = csv.writer(handle)
    writer.writerow([escape_cell(column) for column in columns])
    for row in rows:
        writer.writerow([csv_cell(value) for value in row])


def csv_cell(value: object) -> object:
    """A CSV cell: money as ``1234.50``, nothing as empty, formula-like text escaped."""
    if isinstance(value, Decimal):
        return format_money(value)
    return "" if value is None else escape_cell(value)


def _write_xlsx(handle: IO[Any], columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    # Only .xlsx needs it
    from openpyxl import Workbook  # type: ignore[import-untyped]

    book = Workbook(write_only=True)
    add_sheet(book, "report", columns, list(rows))
    book.save(handle)


def _dump_json(document: object, handle: IO[Any]) -> None:
    json.dump(document, handle, indent=2, ensure_ascii=False, default=_json_default)
    handle.write("\n")


def _json_default(value: object) -> object:
    if isinstance(value, Decimal):
        return format_money(value)
    msg = f"cannot write {type(value).__name__} to JSON"
    raise TypeError(msg)


def _temp_beside(target: Path) -> tuple[int, str]:
    try:
        return tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as exc:
        raise _unwritable(target, exc) from exc


def _unwritable(target: Path, exc: OSError) -> ConfigError:
    return ConfigError(f"cannot write the report {target}: {exc.strerror or exc}")


def atomic_write(target: Path, mode: str, write: Callable[[IO[Any]], None]) -> None:
    """Write beside ``target`` and rename over it, so a report is never half written."""
    fd, temp = _temp_beside(target)
    try:
        if mode == "w":
            encoding = "utf-8-sig" if target.suffix.lower() == ".csv" else "utf-8"
            with open(fd, "w", encoding=encoding, newline="") as handle:
                write(handle)
        else:
            with open(fd, "wb") as handle:
                write(handle)
        os.replace(temp, target)
    except BaseException as exc:
        Path(temp).unlink(missing_ok=True)
        # A full disk, a folder in the way: one line, not a trace
        if isinstance(exc, OSError):
            raise _unwritable(target, exc) from exc
        raise
