"""Spreadsheet damage, named as such with its fix: what intake saw in cell types.

Input: a row's damage markers (column -> ``Damage``) and its values. Output: errors on the
``Problems`` collector, and the columns whose ordinary rules should be skipped (their
damage message already says what is wrong).
"""

from __future__ import annotations

from collections.abc import Mapping

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
            skip.update(_LABELS)  # shifted or unseen values: checking them would only mislead
            continue
        text = values.get(column, "")
        if kind is Damage.NUMBER and len(text) in _DIGITS.get(column, (len(text),)):
            continue  # a number with every digit intact: nothing was lost
        problems.error(column, _message(kind, _LABELS.get(column, column), text))
        skip.add(column)
    return frozenset(skip)


def _message(kind: Damage, label: str, text: str) -> str:
    fix = "format the column as Text and type it again"
    if label == "amount":  # money is a number: the fix is a number format, not Text
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
    if kind is Damage.ERROR:
        return (
            f"the {label} cell shows an Excel error (like #N/A), not a value; correct it in the"
            " spreadsheet"
        )
    if kind is Damage.MERGED:
        return (
            f"the {label} cell is part of merged cells, which only the first row's value fills;"
            f" unmerge them and give each row its own {label}"
        )
    if kind is Damage.DECIMAL_COMMA:
        return (
            f"amount {text!r} is ambiguous in a semicolon-separated file, where a comma often"
            " marks pence and a point thousands (1,50 = 1.50; 2.500 = 2500); write it with a"
            " point for pence and no thousands separator, like 1500.00"
        )
    if kind is Damage.SPLIT_AMOUNT:
        return (
            f"amount {text} looks cut at an unquoted comma, a thousands comma or a decimal one"
            " (the next column holds the rest of it); write the amount with a point for pence"
            f" and no comma, like 1234.50, or in quotes (or {text.strip()}.00 if that is the"
            " whole amount)"
        )
    return (
        f"spreadsheet damage: the {label} is a formula, not a typed value; copy the column"
        " and paste it back as values only"
    )
