"""Kinds of spreadsheet damage that intake sees in a cell's type or a row's shape.

Input: nothing (constants). Validation turns each kind into an error with its fix.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ROW", "Damage"]

ROW = ""
"""The damage key for a problem with the whole row rather than one column."""


class Damage(StrEnum):
    """What went wrong with a cell before payrun saw it."""

    NUMBER = "number"
    """A numeric cell where digits belong: leading zeros may be lost."""
    SCIENTIFIC = "scientific"
    """A number shown in scientific notation: digits are lost."""
    DATE = "date"
    """A date or time cell: Excel converted what was typed."""
    FORMULA = "formula"
    """A formula cell: the value is computed, not typed."""
    ERROR = "error"
    """An Excel error value such as #N/A: the cell shows an error, not a value."""
    MERGED = "merged"
    """Part of merged cells: only the first of them holds the value the others show."""
    FORMAT_HIDES = "format_hides"
    """A number format that hides the cell (``;;;``): it looks empty."""
    FORMAT_OTHER = "format_other"
    """A number format that shows another number: percent, fraction, thousands, scientific."""
    FORMAT_NO_PENCE = "format_no_pence"
    """A number format with no decimals: 1499.60 shows as 1,500."""
    FORMAT_ONE_PLACE = "format_one_place"
    """A number format with one decimal: 1499.65 shows as 1,499.7."""
    EXTRA_VALUES = "extra_values"
    """A row with more values than the header has columns (often an unquoted comma)."""
    HIDDEN = "hidden"
    """A row hidden or filtered out in the sheet: the person checking it cannot see it."""
    DECIMAL_COMMA = "decimal_comma"
    """An amount with a comma in a semicolon-separated file, where a comma marks decimals."""
    SPLIT_AMOUNT = "split_amount"
    """An amount cut at an unquoted thousands comma: ``1,234.50`` read as 1 and 234.50."""
