"""Spreadsheet damage, named as such with its fix: what intake saw in cell types.

Input: a row's damage markers (column -> ``Damage``) and its values. Output: errors on the
``Problems`` collector, and the columns whose ordinary rules should be skipped (their
damage message already says what is wrong).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

from payrun.intake import ROW, Damage
from payrun.validation._rules import Problems, scientific_damage

__all__ = ["damage_problems"]

_LABELS = {
    "payee_name": "payee name",
    "sort_code": "sort code",
    "account_number": "account number",
    "amount": "amount",
    "reference": "reference",
    "source_account": "source account",
    "row_id": "row_id",
    "currency": "currency",
    "source_currency": "source currency",
    "amount_currency": "amount currency",
    "country": "country",
}
_DIGITS = {"sort_code": (6,), "account_number": (8,), "source_account": (14,)}
_HIDDEN = (
    "this row is hidden or filtered out in the sheet, so it is not paid: unhide it and check"
    " it, or delete it"
)
_EXTRA_VALUES = (
    "this row has more values than the header has columns: a value holds an unquoted"
    " delimiter (quote it, or write 1234.50 without the thousands comma)"
)


def damage_problems(
    damage: Mapping[str, Damage], values: Mapping[str, str], problems: Problems
) -> frozenset[str]:
    """Add one error per damaged cell; return the columns already explained."""
    skip: set[str] = set()
    for column, kind in damage.items():
        if column == ROW:
            problems.error(None, _HIDDEN if kind is Damage.HIDDEN else _EXTRA_VALUES)
            # Shifted or unseen values: checking them would only mislead
            skip.update(_LABELS)
            continue
        text = values.get(column, "")
        if kind is Damage.NUMBER and len(text) in _DIGITS.get(column, (len(text),)):
            # A number with every digit intact: nothing was lost
            continue
        if kind in _FORMATS and not _format_misleads(kind, column, text):
            # Shown as it is (1500 as 1,500), or a column whose display is not money
            continue
        problems.error(column, _message(kind, _LABELS.get(column, column), text))
        skip.add(column)
    return frozenset(skip)


_FORMATS = {
    Damage.FORMAT_HIDES: -1,
    Damage.FORMAT_OTHER: -1,
    Damage.FORMAT_NO_PENCE: 0,
    Damage.FORMAT_ONE_PLACE: 1,
}
"""Number-format damage -> the decimals the format shows (-1: it shows another thing)."""


def _format_misleads(kind: Damage, column: str, text: str) -> bool:
    """Does the cell's number format show the person checking something else than is paid?"""
    if kind is Damage.FORMAT_HIDES:
        # Any payment cell that looks empty
        return True
    if column != "amount":
        return False
    shown = _FORMATS[kind]
    if shown < 0:
        return True
    _, _, decimals = text.strip().partition(".")
    return len(decimals.rstrip("0")) > shown


def _message(kind: Damage, label: str, text: str) -> str:
    fix = "format the column as Text and type it again"
    # Money is a number: the fix is a number format, not Text
    if label == "amount":
        fix = "format the column as Number with 2 decimal places and type the amount again"
        if kind is Damage.SCIENTIFIC:
            return f"amount {text} is in scientific notation: {fix}, like 1500.00"
    if kind is Damage.NUMBER:
        return (
            f"spreadsheet damage: the {label} was stored as a number and lost its leading"
            f" zeros ({text}); {fix}"
        )
    if kind is Damage.SCIENTIFIC:
        return scientific_damage(label, text)
    if kind is Damage.DATE:
        return f"spreadsheet damage: the spreadsheet turned the {label} into a date ({text}); {fix}"
    if kind in _FORMATS:
        return _format_message(kind, label, text)
    template = _TEMPLATES.get(kind, _FORMULA)
    return template.format(label=label, text=text, quoted=repr(text), whole=text.strip())


_FORMULA = (
    "spreadsheet damage: the {label} is a formula, not a typed value; copy the column and"
    " paste it back as values only"
)
_TEMPLATES = {
    Damage.ERROR: (
        "the {label} cell shows an Excel error (like #N/A), not a value; correct it in the"
        " spreadsheet"
    ),
    Damage.MERGED: (
        "the {label} cell is part of merged cells, which only the first row's value fills;"
        " unmerge them and give each row its own {label}"
    ),
    Damage.DECIMAL_COMMA: (
        "amount {quoted} is ambiguous in a semicolon-separated file, where a comma often"
        " marks pence and a point thousands (1,50 = 1.50; 2.500 = 2500); write it with a"
        " point for pence and no thousands separator, like 1500.00"
    ),
    Damage.SPLIT_AMOUNT: (
        "amount {text} looks cut at an unquoted comma, a thousands comma or a decimal one"
        " (the next column holds the rest of it); write the amount with a point for pence"
        " and no comma, like 1234.50, or in quotes (or {whole}.00 if that is the whole"
        " amount)"
    ),
}


def _format_message(kind: Damage, label: str, text: str) -> str:
    if kind is Damage.FORMAT_HIDES:
        return (
            f"the {label} cell's number format hides it or shows other text (like ;;; or"
            ' "TBC"); give the column a format that shows it'
        )
    if kind is Damage.FORMAT_OTHER:
        return (
            f"the amount {text} is shown as another number by its cell's format (a percent, a"
            " fraction, thousands or scientific notation); format the column as Number with"
            " 2 decimal places"
        )
    whole = kind is Damage.FORMAT_NO_PENCE
    try:
        shown = Decimal(text.strip()).quantize(Decimal(1 if whole else "0.1"), ROUND_HALF_UP)
        seen = f"the sheet shows {shown:,}"
    except (InvalidOperation, ValueError):
        seen = "the sheet shows another amount"
    rounded = "whole pounds" if whole else "one decimal"
    return (
        f"the amount is {text}, but {seen} (its cell's number format rounds to {rounded});"
        " format the column as Number with 2 decimal places and check it"
    )
