"""Which reading a text batch file takes: payrun's own columns or a payroll export's profile.

Input: a path already sniffed as text. Output: the ``InputFormat`` its first non-blank line
shows, deterministically: a Standard 18 label or data record, a Bankline row (two digits,
the record type, in column 4 of at least 19 columns), a Barclays row (6 fields, a sort code
first), or a header naming payrun's columns. A line that reads two ways is refused naming
both; a line that reads no way is a payrun file (whose reading says what its header lacks).
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

from payrun.errors import BatchFileError
from payrun.intake._headers import known_header
from payrun.intake._profile import TITLES, InputFormat

__all__ = ["BARCLAYS_FIELDS", "DATA_RECORD", "LABELS", "detect_input_format"]

DATA_RECORD = re.compile(r"\d{14}.[0-9A-Z]{2}\d{14}")
"""The start of a Standard 18 data record: sort code, account, type, code, originator."""
LABELS = ("VOL1", "HDR1", "HDR2", "UHL1", "EOF1", "EOF2", "UTL1")
"""Standard 18's label records."""
BARCLAYS_FIELDS = 6

_HEAD_BYTES = 65_536
_BANKLINE_DATE = 19
_SORT_CODE = re.compile(r"\d{2}-?\d{2}-?\d{2}")
_ACCOUNT = re.compile(r"\d{6,10}")
_RECORD_TYPE = re.compile(r"\d\d")
"""Bankline's record type (column 4): 01, 02 and 04 are known; the reader names others."""


def detect_input_format(path: Path) -> InputFormat:
    """The reading the file's first non-blank line shows (see the module docstring)."""
    line = _first_line(path)
    found: list[InputFormat] = []
    if line[:4] in LABELS or DATA_RECORD.match(line):
        found.append("bacs18")
    fields = next(csv.reader([line]), [])
    if len(fields) >= _BANKLINE_DATE and _RECORD_TYPE.fullmatch(fields[3].strip()):
        found.append("bankline")
    if len(fields) == BARCLAYS_FIELDS and _barclays_row(fields):
        found.append("barclays")
    if any(known_header(field) for field in fields) or any(
        known_header(field) for field in line.split(";")
    ):
        found.append("payrun")
    if len(found) > 1:
        first, second = TITLES[found[0]], TITLES[found[1]]
        msg = (
            f"{path.name} reads both as {first} and as {second}: say which with"
            f" --input-format {found[0]} or --input-format {found[1]}"
        )
        raise BatchFileError(msg, path=path)
    return found[0] if found else "payrun"


def _barclays_row(fields: list[str]) -> bool:
    sort_code, account = fields[0].strip(), fields[2].strip()
    return bool(_SORT_CODE.fullmatch(sort_code) and _ACCOUNT.fullmatch(account))


def _first_line(path: Path) -> str:
    with path.open("rb") as handle:
        head = handle.read(_HEAD_BYTES)
    text = head.decode("utf-8-sig", errors="replace")
    for line in text.splitlines():
        if line.strip():
            return line
    return ""
