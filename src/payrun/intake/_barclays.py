"""The Barclays profile: the BACS payment CSV -> credits.

Input: the file's lines (``export_lines``): no header, 6 quoted fields per line: sort code,
account name, account number, amount (pounds), reference, and ``99`` (a credit). Output:
an ``ExportReading`` with no pay date (the file carries none) and no source account (the
file names none: ``--source-account``). Raises ``BatchFileError`` naming the line of a row
with another number of fields, or whose last field is not 99.
"""

from __future__ import annotations

from pathlib import Path

from payrun._redaction import excerpt
from payrun.errors import BatchFileError
from payrun.intake._bacs18 import DIRECT_DEBITS
from payrun.intake._detect import BARCLAYS_FIELDS
from payrun.intake._profile import ExportReading, csv_records, pence_of

__all__ = ["read_barclays"]

_CREDIT = "99"


def read_barclays(path: Path, sha256: str, lines: list[str]) -> ExportReading:
    """Read a Barclays BACS CSV's credits."""
    rows: list[tuple[int, list[str]]] = []
    total = 0
    for number, fields in csv_records(path, lines):
        if not any(field.strip() for field in fields):
            continue
        _check(path, number, fields)
        sort_code, name, account, amount, reference, _code = (f.strip() for f in fields)
        rows.append((number, [name, sort_code, account, amount, reference, ""]))
        total += pence_of(amount)
    if not rows:
        msg = f"{path.name} holds no payments"
        raise BatchFileError(msg, path=path)
    return ExportReading("barclays", sha256, rows, total, "no control totals in the file")


def _check(path: Path, number: int, fields: list[str]) -> None:
    if len(fields) != BARCLAYS_FIELDS:
        msg = (
            f"{path.name} line {number} has {len(fields)} fields; a Barclays BACS CSV line has"
            " 6 (sort code, account name, account number, amount, reference, 99)"
        )
        raise BatchFileError(msg, path=path)
    code = fields[5].strip()
    if code in DIRECT_DEBITS:
        msg = (
            f"{path.name} is a Direct Debit (collection) file: line {number} has transaction"
            f" code {code} in field 6; payrun pays credits (99) only"
        )
        raise BatchFileError(msg, path=path)
    if code != _CREDIT:
        msg = (
            f"{path.name} line {number}: field 6 reads {_quoted(code)}, not 99 (a credit): a"
            " Barclays BACS CSV pays credits only; check the file is the one the payroll exported"
        )
        raise BatchFileError(msg, path=path)


def _quoted(text: str) -> str:
    """The file's text as a message quotes it: 20 characters at most, escaped, a key never."""
    return excerpt(text, 20)
