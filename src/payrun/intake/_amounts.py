"""CSV amounts that the delimiter may have changed: a comma inside an unquoted amount.

Input: the header's columns and the file's delimiter. Output: a check of one row's fields
that names the damage, if any (``Damage.DECIMAL_COMMA`` in a semicolon file, where a
comma often marks pence and a point thousands; ``Damage.SPLIT_AMOUNT`` in a comma file,
where an unquoted ``1,234.50`` becomes an amount of 1 and a next column of 234.50).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from payrun.intake._damage import Damage
from payrun.intake._headers import HeaderMap

__all__ = ["AmountSuspect", "amount_suspect"]

AmountSuspect = Callable[[list[str]], Damage | None]
"""A CSV row's fields -> the damage its amount shows, if any."""

_AMOUNT_START = re.compile(r"\s*£?\s*\d{1,3}\s*")
_SHORT_AMOUNT = 8
# The 234.50 of a cut 1,234.50
_AMOUNT_PENCE = re.compile(r"\s*\d{3}\.\d{1,2}\s*")
_AMOUNT_TAIL = re.compile(r"\s*\d{1,3}(?:\.\d*)?\s*")
_POINT_THOUSANDS = re.compile(r".*\d\.\d{3}\s*")
_THREE = 3


def amount_suspect(header: HeaderMap, delimiter: str) -> AmountSuspect | None:
    """How to see a CSV amount that the delimiter may have changed, or None (no amount)."""
    at = dict(header.positions).get("amount")
    if at is None:
        return None
    if delimiter == ";":
        return _decimal_comma(at)
    if at + 1 >= len(header.headers):
        # A cut amount in the last column spills into an extra value: caught
        return None
    return _split_amount(header, at)


def _decimal_comma(at: int) -> AmountSuspect:
    def check(fields: list[str]) -> Damage | None:
        amount = fields[at] if at < len(fields) else ""
        # a comma after the last point (1,500; 1.234,50) may mark pence, and a point
        # before 3 last digits (2.500) thousands; 1,234.50 can be neither
        if amount.rfind(",") > amount.rfind(".") or _POINT_THOUSANDS.fullmatch(amount):
            return Damage.DECIMAL_COMMA
        return None

    return check


def _split_amount(header: HeaderMap, at: int) -> AmountSuspect:
    """1-3 digits, then the rest of an amount in the next column: with its pence (the
    234.50 of 1,234.50), or 3 digits in the reference column, or in a row with one blank
    value too many (the shift a cut makes: 1,234, or 12,50 with a decimal comma)."""
    after, width = at + 1, len(header.headers)
    # digits alone may be a real row_id or cost centre, but hardly a whole reference
    into_reference = any(name == "reference" and i == after for name, i in header.positions)

    def check(fields: list[str]) -> Damage | None:
        if after >= len(fields):
            return None
        amount = fields[at]
        if "." in amount or len(amount) > _SHORT_AMOUNT or not _AMOUNT_START.fullmatch(amount):
            # Most amounts: no regex needed
            return None
        rest = fields[after]
        shifted = len(fields) == width + 1 and not fields[-1].strip()
        spill = shifted or (into_reference and len(rest.strip()) == _THREE)
        if _AMOUNT_PENCE.fullmatch(rest) or (spill and _AMOUNT_TAIL.fullmatch(rest)):
            return Damage.SPLIT_AMOUNT
        return None

    return check
