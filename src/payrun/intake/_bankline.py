"""The NatWest Bankline profile: the standard domestic payment import CSV -> credits.

Input: the file's lines (``export_lines``): no header, up to 85 columns, positions per the
Bankline import guide (1-based): record type 4 (``01`` standard domestic; ``02`` is CHAPS
and ``04`` international, refused), debit account 13 (sort code and account, 14 digits),
amount 17 (pounds), credit date 19 (DDMMYYYY), beneficiary sort code 25, account 31, name
33, reference 37. Missing trailing columns are tolerated. Output: an ``ExportReading``
whose pay date is the latest credit date. Raises ``BatchFileError`` naming the line and
column of what cannot be read.
"""

from __future__ import annotations

from datetime import date, datetime
from pathlib import Path

from payrun._redaction import excerpt
from payrun.errors import BatchFileError
from payrun.intake._profile import ExportReading, csv_records, pence_of, show_day

__all__ = ["read_bankline"]

_DOMESTIC = "01"
_REFUSED = {
    "02": "a CHAPS payment (record type 02): payrun pays by Faster Payments only; pay it"
    " in Bankline, or export it as a standard domestic payment (01)",
    "04": "an international payment (record type 04): payrun pays UK accounts in pounds only;"
    " pay it in Bankline",
}
_WIDTH = 37
_TYPE, _DEBIT, _AMOUNT, _DATE, _SORT, _ACCOUNT, _NAME, _REFERENCE = 3, 12, 16, 18, 24, 30, 32, 36
_DEBIT_DIGITS = 14
_SORT_DIGITS = 6


def read_bankline(path: Path, sha256: str, lines: list[str]) -> ExportReading:
    """Read a Bankline standard domestic CSV's payments, with the latest credit date."""
    rows: list[tuple[int, list[str]]] = []
    days: set[date] = set()
    total = 0
    for number, fields in csv_records(path, lines):
        if not any(field.strip() for field in fields):
            continue
        cells, day = _row(path, number, fields + [""] * (_WIDTH - len(fields)))
        rows.append((number, cells))
        days.add(day)
        total += pence_of(cells[3])
    if not rows:
        msg = f"{path.name} holds no payments"
        raise BatchFileError(msg, path=path)
    latest = max(days)
    dated = (
        f"credit date {show_day(latest)}"
        if len(days) == 1
        else (f"credit dates {show_day(min(days))} to {show_day(latest)}")
    )
    return ExportReading(
        "bankline", sha256, rows, total, "no control totals in the file", latest, dated
    )


def _row(path: Path, number: int, fields: list[str]) -> tuple[list[str], date]:
    kind = fields[_TYPE].strip()
    if kind != _DOMESTIC:
        why = _REFUSED.get(kind) or (
            f"record type {_quoted(kind)} in column 4 is not a standard domestic payment (01)"
        )
        msg = (
            f"{path.name} line {number} is {why}"
            if kind in _REFUSED
            else f"{path.name} line {number}: {why}"
        )
        raise BatchFileError(msg, path=path)
    debit = fields[_DEBIT].strip()
    source = ""
    if debit:
        if len(debit) != _DEBIT_DIGITS or not (debit.isascii() and debit.isdigit()):
            msg = (
                f"{path.name} line {number}, column 13 (debit account) reads {_quoted(debit)},"
                " not 14 digits (sort code and account number); a spreadsheet drops leading zeros:"
                " use the file as Bankline's import expects it"
            )
            raise BatchFileError(msg, path=path)
        source = f"{debit[:_SORT_DIGITS]} {debit[_SORT_DIGITS:]}"
    cells = [
        fields[_NAME].strip(),
        fields[_SORT].strip(),
        fields[_ACCOUNT].strip(),
        fields[_AMOUNT].strip(),
        fields[_REFERENCE].strip(),
        source,
    ]
    return cells, _credit_date(path, number, fields[_DATE].strip())


def _credit_date(path: Path, number: int, text: str) -> date:
    try:
        if len(text) != len("DDMMYYYY") or not (text.isascii() and text.isdigit()):
            raise ValueError(text)
        return datetime.strptime(text, "%d%m%Y").date()  # noqa: DTZ007 - a calendar day
    except ValueError:
        msg = (
            f"{path.name} line {number}, column 19 (credit date) reads {_quoted(text)}, not a"
            " date as DDMMYYYY; a spreadsheet drops the leading zero of 01122025: use the file"
            " as exported"
        )
        raise BatchFileError(msg, path=path) from None


def _quoted(text: str) -> str:
    """The file's text as a message quotes it: 20 characters at most, escaped, a key never."""
    return excerpt(text, 20)
