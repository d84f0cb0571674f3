"""Writers of the payroll exports payrun reads, written from the published layouts.

Bacs Standard 18 (labels 80 characters, data and contra records 100, 106 in multi-day
files), the NatWest Bankline standard domestic payment CSV (no header; positions per the
Bankline import guide) and the Barclays BACS CSV (no header, 6 quoted fields). The tests
write files with these and check that payrun reads back what was written.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date

ORIGIN = ("040004", "30000001")
"""The sandbox's first source account: the originator of the files written here."""
SUN = "123456"
"""A made-up Bacs service user number."""


@dataclass(frozen=True)
class Credit:
    """One payment as an export carries it."""

    name: str
    sort_code: str
    account: str
    pence: int
    reference: str = ""


def _label(text: str) -> str:
    return text.ljust(80)[:80]


def bacs18_data(credit: Credit, origin: tuple[str, str] = ORIGIN, code: str = "99") -> str:
    """A Standard 18 data record (100 characters)."""
    return (
        f"{credit.sort_code}{credit.account}0{code}{origin[0]}{origin[1]}    "
        f"{credit.pence:011d}{'PAYROLL LTD':18}{credit.reference:18}{credit.name:18}"
    )


def bacs18_contra(pence: int, origin: tuple[str, str] = ORIGIN) -> str:
    """The contra record: code 17 against the originator's own account, the credits' total."""
    own = f"{origin[0]}{origin[1]}"
    return f"{own}017{own}    {pence:011d}{'CONTRA':18}{'CONTRA':18}{'PAYROLL LTD':18}"


def bacs18_file(
    credits: Sequence[Credit],
    *,
    processing: date | None = date(2025, 12, 23),
    labels: bool = True,
    contra: bool = True,
    trailer: tuple[int, int, int, int] | None = None,
    newline: str = "\r\n",
    strip: bool = False,
    hsbc: bool = False,
) -> str:
    """A Standard 18 file; ``trailer`` overrides UTL1's (debits, credits, debit count,
    credit count) in pence and items; ``strip`` drops trailing spaces as an editor does;
    ``hsbc`` writes HSBC's flavour (``HSBC`` in VOL1's 32-37, no UTL1 after EOF2)."""
    total = sum(c.pence for c in credits)
    records = [bacs18_data(c) for c in credits]
    if contra:
        records.append(bacs18_contra(total))
    if not labels:
        lines = records
    else:
        day = processing.strftime(" %y%j") if processing else " 00000"
        contras = total if contra else 0
        debit, credit, debits, count = trailer or (contras, total, int(contra), len(credits))
        owner = "HSBC  " if hsbc else ""
        lines = [
            _label(f"VOL1000001{'':21}{owner:6}    {SUN}{'':32}1"),
            _label(f"HDR1A{SUN}S  1{SUN}00000100010001       {day} {day}"),
            _label("HDR2F0200000100"),
            _label(f"UHL1{day}999999    000000001 DAILY  001"),
            *records,
            _label(f"EOF1A{SUN}S  1{SUN}00000100010001       {day} {day}"),
            _label("EOF2F0200000100"),
            _label(f"UTL1{debit:013d}{credit:013d}{debits:07d}{count:07d}"),
        ]
        if hsbc:
            lines.pop()
    if strip:
        lines = [line.rstrip() for line in lines]
    return newline.join(lines) + newline


def bankline_file(
    credits: Sequence[Credit],
    *,
    debit: str = "".join(ORIGIN),
    credit_date: date = date(2025, 12, 24),
    record_type: str = "01",
    trim: bool = False,
) -> str:
    """A Bankline standard domestic CSV: 37 columns, or cut after the last value (``trim``)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    for c in credits:
        row = [""] * 37
        row[3], row[12] = record_type, debit
        row[16], row[18] = f"{c.pence // 100}.{c.pence % 100:02d}", credit_date.strftime("%d%m%Y")
        row[24], row[30], row[32], row[36] = c.sort_code, c.account, c.name, c.reference
        while trim and not row[-1]:
            row.pop()
        writer.writerow(row)
    return out.getvalue()


def barclays_file(credits: Sequence[Credit], *, code: str = "99") -> str:
    """A Barclays BACS CSV: every field quoted, the last 99."""
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\r\n")
    for c in credits:
        amount = f"{c.pence // 100}.{c.pence % 100:02d}"
        writer.writerow([c.sort_code, c.name, c.account, amount, c.reference, code])
    return out.getvalue()
