"""What every payroll-export profile shares: the rows it read, its totals, its pay date.

Input: a profile's parse of one export file (Bacs Standard 18, Bankline, Barclays). Output:
an ``ExportReading``: the credits as cells in ``EXPORT_COLUMNS`` order keyed by the file's
own line numbers, their count and total, what the file's control totals said, and the pay
date the file carries; ``describe`` is the one line a run prints before money moves. Also
the text reading the profiles share (``export_lines``): bytes hashed, decoded, split.
"""

from __future__ import annotations

import csv
import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Literal

from payrun.errors import BatchFileError

__all__ = [
    "EXPORT_COLUMNS",
    "INPUT_FORMATS",
    "TITLES",
    "ExportReading",
    "InputFormat",
    "csv_records",
    "export_lines",
    "pence_of",
    "pounds",
    "show_day",
]

InputFormat = Literal["payrun", "bacs18", "bankline", "barclays"]
INPUT_FORMATS: tuple[str, ...] = ("auto", "payrun", "bacs18", "bankline", "barclays")
"""The values of ``--input-format`` (``auto``: decided by the file's content)."""
TITLES: dict[str, str] = {
    "payrun": "a payrun batch file",
    "bacs18": "Bacs Standard 18",
    "bankline": "NatWest Bankline CSV",
    "barclays": "Barclays BACS CSV",
}
EXPORT_COLUMNS: tuple[str, ...] = (
    "payee_name",
    "sort_code",
    "account_number",
    "amount",
    "reference",
    "source_account",
)
"""The canonical columns an export's rows are given in (the source account last)."""


@dataclass(frozen=True, slots=True)
class ExportReading:
    """One export file as its profile read it (control totals already checked)."""

    input_format: InputFormat
    sha256: str
    rows: Sequence[tuple[int, list[str]]]
    """(line number in the file, cells in ``EXPORT_COLUMNS`` order) per credit."""
    total_pence: int
    controls: str
    """What the file's own control totals said, e.g. ``contras and UTL1 agree``."""
    pay_date: date | None = None
    dated: str | None = None
    """How the pay date came, e.g. ``processing day Tue 23 Dec 2025``; None without one."""

    def describe(self, pay_date: date | None = None) -> str:
        """The line a run prints before money moves (``pay_date`` overrides the file's)."""
        count = len(self.rows)
        parts = [
            f"read as {TITLES[self.input_format]}: {count:,} credit{'s' if count != 1 else ''}",
            f"£{pounds(self.total_pence, grouped=True)}",
            self.controls,
        ]
        chosen = pay_date or self.pay_date
        if chosen is not None and pay_date is not None and pay_date != self.pay_date:
            parts.append(f"pay date {show_day(chosen)} (--pay-date)")
        elif chosen is not None:
            parts.append(f"{self.dated} -> pay date {show_day(chosen)}")
        return ", ".join(parts)


def pounds(pence: int, *, grouped: bool = False) -> str:
    """Pence as pounds text: ``123456`` -> ``1234.56`` (``1,234.56`` grouped)."""
    whole, part = divmod(pence, 100)
    return f"{whole:,}.{part:02d}" if grouped else f"{whole}.{part:02d}"


_MOST_DIGITS = 30
"""More digits of pence than any amount has (validation refuses the row)."""


def pence_of(text: str) -> int:
    """Pounds text (``1234.50``, ``£1,234.50``) as pence, for the line that says what was
    read; 0 when it is not an amount (validation says what is wrong with the row)."""
    try:
        value = Decimal(text.strip().lstrip("£").replace(",", "")) * 100
        # 9e999999 overflows (decimal.Overflow, not InvalidOperation); 1e999990 would be
        # a million-digit int: neither is an amount
        if not value.is_finite() or value.adjusted() > _MOST_DIGITS:
            return 0
        return int(value) if value == value.to_integral_value() else 0
    except ArithmeticError:
        return 0


def show_day(day: date) -> str:
    """A day as people read it in a message: ``Tue 23 Dec 2025``."""
    return day.strftime("%a %d %b %Y")


_DECODE_HINT = "save it as the payroll package wrote it (plain text) and try again"


def export_lines(path: Path) -> tuple[str, list[str]]:
    """The file's sha256 and its lines (CRLF or LF; line ``n`` is ``lines[n - 1]``)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        msg = f"cannot read the batch file {path}: {exc.strerror or exc}"
        raise BatchFileError(msg, path=path) from exc
    sha256 = hashlib.sha256(data).hexdigest()
    if b"\x00" in data:
        msg = f"{path.name} is not a text file (it holds NUL bytes): {_DECODE_HINT}"
        raise BatchFileError(msg, path=path)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = data.decode("cp1252", errors="replace")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return sha256, [line.removesuffix("\r") for line in lines]


def csv_records(path: Path, lines: list[str]) -> Iterator[tuple[int, list[str]]]:
    """Each CSV record of ``lines`` with the file's line it starts on (a quoted field may
    span lines). Raises ``BatchFileError`` for a line the csv module cannot read."""
    reader = csv.reader(lines)
    start = 1
    try:
        for fields in reader:
            yield start, fields
            start = reader.line_num + 1
    except csv.Error as exc:
        # csv's own words for a lone CR would send the user looking for a setting
        why = "a carriage return (CR) inside the line" if "new-line" in str(exc) else exc
        msg = f"{path.name} line {reader.line_num} cannot be read as CSV ({why}): {_DECODE_HINT}"
        raise BatchFileError(msg, path=path) from None
