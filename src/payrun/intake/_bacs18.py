"""The Bacs Standard 18 profile: fixed-width records -> credits, checked against the controls.

Input: the file's lines (``export_lines``). A full file has VOL1, HDR1, HDR2 and UHL1 labels,
data records, contras, EOF1, EOF2 and UTL1 (a bureau file may repeat UHL1 ... UTL1); many
exporters write the data records only. Records are 100 characters (106 in multi-day files,
the record's processing day at 101-106); trailing spaces an editor stripped are put back.
Data record positions (1-based): destination sort code 1-6, account 7-14, transaction code
16-17, originating sort code 18-23 and account 24-31, amount in pence 36-46, reference
65-82, destination name 83-100. Output: an ``ExportReading`` of the credits (code 99).
Raises ``BatchFileError`` for a line that is not a record (naming the line and columns:
a file re-saved by a spreadsheet loses zeros and shifts them), a Direct Debit code, and
``ControlTotalsError`` when a contra or UTL1 disagrees with the credits.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import overload

from payrun._redaction import excerpt
from payrun.errors import BatchFileError, ControlTotalsError
from payrun.intake._detect import LABELS
from payrun.intake._profile import ExportReading, pounds, show_day

__all__ = ["DIRECT_DEBITS", "read_bacs18"]

_PLAIN_CREDIT = re.compile(r"\d{14}.99\d{14}.{4}\d{11}", re.ASCII).match
"""A credit record whose numbers are all digits: the usual line, read without more checks."""
_CREDIT = "99"
_CONTRA = "17"
DIRECT_DEBITS = frozenset({"01", "17", "18", "19", "0C", "0N", "0S"})
_BLANK = " \t\x1a"
"""What a line that holds no record may hold: spaces, and DOS's end-of-file mark (Ctrl-Z)."""
_RECORD = 100
_MULTI_DAY = 106
_AMOUNT_END = 46
_FIELDS = (
    (0, 6, "destination sort code"),
    (6, 14, "destination account number"),
    (17, 23, "originating sort code"),
    (23, 31, "originating account number"),
    (35, 46, "amount in pence"),
)
_EXCEL = (
    "a Standard 18 file opened and saved in a spreadsheet loses leading zeros and shifts"
    " the columns: use the file exactly as the payroll package exported it"
)


@dataclass(slots=True)
class _Section:
    """The records since the last UHL1 (or the file's start): what UTL1 must agree with."""

    credits: int = 0
    credit_pence: int = 0
    contras: int = 0
    contra_pence: int = 0


@dataclass(slots=True)
class _Reader:
    path: Path
    credits: list[int] = field(default_factory=list)
    """The line number of each credit record."""
    total: int = 0
    section: _Section = field(default_factory=_Section)
    by_source: defaultdict[str, int] = field(default_factory=lambda: defaultdict(int))
    contra_by_source: dict[str, tuple[int, int]] = field(default_factory=dict)
    processing: list[date] = field(default_factory=list)
    trailers: int = 0

    def fail(self, line: int, text: str) -> BatchFileError:
        return BatchFileError(f"{self.path.name} line {line}: {text}", path=self.path)

    def add_credits(self, count: int, pence: int) -> None:
        """Count credits the fast loop of ``read_bacs18`` read (rows already kept)."""
        self.section.credits += count
        self.section.credit_pence += pence
        self.total += pence

    def line(self, number: int, line: str) -> None:
        """Any line but a plain credit: a label, a contra, a blank line, or a refusal."""
        if line[:4] in LABELS:
            self.label(number, line)
        elif line.strip(_BLANK):
            self.record(number, line.rstrip())

    def day(self, number: int, line: str) -> None:
        """A multi-day record's own processing day (101-106), if it has one."""
        if line[100:106].strip():
            self.processing.append(
                self.julian(number, line[100:106], "the processing day (101-106)")
            )

    def label(self, number: int, line: str) -> None:
        kind = line[:4]
        if kind == "UHL1":
            self.processing.append(self.julian(number, line[4:10], "UHL1's processing day (6-10)"))
            self.section = _Section()
        elif kind == "UTL1":
            self.check_trailer(number, line)
            self.trailers += 1

    def julian(self, number: int, text: str, what: str) -> date:
        digits = text.strip()
        try:
            if len(digits) != len("YYDDD") or not (digits.isascii() and digits.isdigit()):
                raise ValueError(digits)
            return datetime.strptime(digits, "%y%j").date()  # noqa: DTZ007 - a calendar day
        except ValueError:
            msg = f"{what} reads {_quoted(text)}, not a day as YYDDD (year, day of the year)"
            raise self.fail(number, msg) from None

    def record(self, number: int, line: str) -> None:
        if len(line) > _MULTI_DAY:
            msg = (
                f"the record is {len(line)} characters long; Standard 18 records are"
                f" {_RECORD} ({_MULTI_DAY} in multi-day files)"
            )
            raise self.fail(number, msg)
        if len(line) < _AMOUNT_END:
            msg = (
                f"the record is only {len(line)} characters long (the amount ends at"
                f" {_AMOUNT_END} and a record is {_RECORD}): the line was cut; {_EXCEL}"
            )
            raise self.fail(number, msg)
        line = line.ljust(_RECORD)
        for start, end, what in _FIELDS:
            text = line[start:end]
            if not (text.isascii() and text.isdigit()):
                msg = (
                    f"columns {start + 1}-{end} ({what}) read {_quoted(text)}, not digits; {_EXCEL}"
                )
                raise self.fail(number, msg)
        self.transaction(number, line)

    def transaction(self, number: int, line: str) -> None:
        code, source = line[15:17], f"{line[17:23]} {line[23:31]}"
        pence = int(line[35:46])
        if code == _CONTRA and line[0:14] == line[17:31]:
            self.contra(number, source, pence)
            return
        if code in DIRECT_DEBITS:
            msg = (
                f"{self.path.name} is a Direct Debit (collection) file: line {number} has"
                f" transaction code {code} (columns 16-17); payrun pays credits (code 99) only"
            )
            raise BatchFileError(msg, path=self.path)
        if code != _CREDIT:
            msg = (
                f"transaction code {_quoted(code)} (columns 16-17) is not a credit (99), the only"
                f" records payrun pays; {_EXCEL}"
            )
            raise self.fail(number, msg)
        if len(line) > _RECORD:
            self.day(number, line)
        self.credits.append(number)
        self.by_source[source] += pence
        self.add_credits(1, pence)

    def contra(self, number: int, source: str, pence: int) -> None:
        lines, total = self.contra_by_source.get(source, (number, 0))
        self.contra_by_source[source] = (lines, total + pence)
        self.section.contras += 1
        self.section.contra_pence += pence

    def check_trailer(self, number: int, line: str) -> None:
        fields = (line[4:17], line[17:30], line[30:37], line[37:44])
        if not all(text.isascii() and text.isdigit() for text in fields):
            msg = "UTL1's totals (columns 5-44) are not all digits; " + _EXCEL
            raise self.fail(number, msg)
        debit, credit, debits, credits = (int(text) for text in fields)
        found, said = self.section, (credit, credits, debit, debits)
        if said != (found.credit_pence, found.credits, found.contra_pence, found.contras):
            msg = (
                f"{self.path.name}: UTL1 (line {number}) says credits"
                f" £{pounds(credit, grouped=True)}"
                f" in {credits:,} and debits £{pounds(debit, grouped=True)} in {debits:,}, but the"
                f" records above it are credits £{pounds(found.credit_pence, grouped=True)} in"
                f" {found.credits:,} and contras £{pounds(found.contra_pence, grouped=True)} in"
                f" {found.contras:,}: the file is not as the payroll made it; export it again"
            )
            raise ControlTotalsError(msg)

    def check_contras(self) -> None:
        if not self.contra_by_source:
            return
        for source in sorted(set(self.by_source) | set(self.contra_by_source)):
            line, contra = self.contra_by_source.get(source, (0, 0))
            credits = self.by_source.get(source, 0)
            if contra != credits:
                where = (
                    f"the contra for {source} (line {line}) says"
                    if line
                    else (f"there is no contra for {source}, so")
                )
                msg = (
                    f"{self.path.name}: {where} £{pounds(contra, grouped=True)}, but the credits"
                    f" from {source} total £{pounds(credits, grouped=True)}: the file is not as"
                    " the payroll made it; export it again"
                )
                raise ControlTotalsError(msg)

    def controls(self) -> str:
        contras = bool(self.contra_by_source)
        if contras and self.trailers:
            return "contras and UTL1 agree"
        if contras:
            return "contras agree (no UTL1)"
        if self.trailers:
            return "UTL1 agrees (no contras)"
        return "data records only (no contras or UTL1 to check)"


def read_bacs18(path: Path, sha256: str, lines: list[str]) -> ExportReading:
    """Read a Standard 18 file's credits, checking its contras and UTL1 against them."""
    reader = _Reader(path)
    keep, by_source, plain = reader.credits.append, reader.by_source, _PLAIN_CREDIT
    count = pence = 0
    for number, line in enumerate(lines, 1):
        if plain(line) and len(line) <= _MULTI_DAY:
            # The usual line: the match did the checks ``record`` does
            keep(number)
            count += 1
            pence += (value := int(line[35:46]))
            by_source[line[17:23] + " " + line[23:31]] += value
            if len(line) > _RECORD:
                reader.day(number, line)
            continue
        reader.add_credits(count, pence)
        count = pence = 0
        reader.line(number, line)
    reader.add_credits(count, pence)
    if not reader.credits:
        msg = f"{path.name} holds no credits (Standard 18 records with transaction code 99)"
        raise BatchFileError(msg, path=path)
    reader.check_contras()
    return _reading(reader, sha256, _Credits(lines, reader.credits))


def _reading(reader: _Reader, sha256: str, rows: _Credits) -> ExportReading:
    if not reader.processing:
        return ExportReading("bacs18", sha256, rows, reader.total, reader.controls())
    from payrun.intake._paydate import next_working_day

    day = max(reader.processing)
    return ExportReading(
        "bacs18",
        sha256,
        rows,
        reader.total,
        reader.controls(),
        next_working_day(day),
        f"processing day {show_day(day)}",
    )


class _Credits(Sequence[tuple[int, list[str]]]):
    """The credits' cells, cut from their lines when asked for (100,000 rows held as lists
    would cost 60 MB, and the collector's passes over them a third of the time)."""

    __slots__ = ("_lines", "_numbers")

    def __init__(self, lines: list[str], numbers: list[int]) -> None:
        self._lines, self._numbers = lines, numbers

    def __len__(self) -> int:
        return len(self._numbers)

    @overload
    def __getitem__(self, index: int) -> tuple[int, list[str]]: ...
    @overload
    def __getitem__(self, index: slice) -> list[tuple[int, list[str]]]: ...
    def __getitem__(
        self, index: int | slice
    ) -> tuple[int, list[str]] | list[tuple[int, list[str]]]:
        if isinstance(index, slice):
            return [(n, _cells(self._lines[n - 1])) for n in self._numbers[index]]
        number = self._numbers[index]
        return number, _cells(self._lines[number - 1])

    def __iter__(self) -> Iterator[tuple[int, list[str]]]:
        lines = self._lines
        for number in self._numbers:
            yield number, _cells(lines[number - 1])


def _cells(line: str) -> list[str]:
    """A credit record's cells, in ``EXPORT_COLUMNS`` order (the amount in pounds)."""
    amount = line[35:46]
    return [
        line[82:100].rstrip(),
        line[:6],
        line[6:14],
        (amount[:9].lstrip("0") or "0") + "." + amount[9:],
        line[64:82].rstrip(),
        line[17:23] + " " + line[23:31],
    ]


def _quoted(text: str) -> str:
    """The file's text as a message quotes it: 20 characters at most, escaped, a key never."""
    return excerpt(text, 20)
