"""An .xlsx sheet that opens ready to read: bold frozen header, an autofilter, columns sized
to their content, money as numbers in a £ format, text kept text.

Input: a write-only openpyxl workbook, a sheet name, column names and rows. Output: the
sheet added to the workbook. A text cell that starts with ``=``, ``+``, ``-`` or ``@`` is
typed text with the cell style's ``quotePrefix``, so Excel keeps it text even when a person
edits the cell (F2, Enter), where it would otherwise become a formula. Control characters,
which XML cannot hold, are written as U+FFFD. openpyxl is imported by the caller's call.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

__all__ = ["MONEY_FORMAT", "TIME_FORMAT", "add_sheet"]

MONEY_FORMAT = '"£"#,##0.00'
TIME_FORMAT = "yyyy-mm-dd hh:mm:ss"
_FORMULA_STARTS = ("=", "+", "-", "@")
_MIN_WIDTH = 6
_MAX_WIDTH = 60
# Sizing looks at this many rows: a million-row report is sized by its first rows
_SIZED_ROWS = 5_000
_MONEY_EXTRA = 2
_TIME_WIDTH = 19


def add_sheet(
    book: Any,
    title: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[object]],
    *,
    filter_rows: int | None = None,
) -> Any:
    """Add sheet ``title`` to the write-only ``book`` holding ``columns`` and ``rows``.

    ``filter_rows``: how many rows under the header the autofilter covers (default all).
    """
    from openpyxl.cell import WriteOnlyCell  # type: ignore[import-untyped]
    from openpyxl.styles import Font  # type: ignore[import-untyped]
    from openpyxl.utils import get_column_letter  # type: ignore[import-untyped]

    sheet = book.create_sheet(title)
    sheet.freeze_panes = "A2"
    last = get_column_letter(max(len(columns), 1))
    covered = len(rows) if filter_rows is None else filter_rows
    sheet.auto_filter.ref = f"A1:{last}{covered + 1}"
    for index, width in enumerate(_widths(columns, rows), start=1):
        sheet.column_dimensions[get_column_letter(index)].width = width
    bold = Font(bold=True)
    header = []
    for column in columns:
        cell = WriteOnlyCell(sheet, value=column)
        cell.font = bold
        header.append(cell)
    sheet.append(header)
    for row in rows:
        sheet.append([_cell(sheet, value) for value in row])
    return sheet


def _cell(sheet: Any, value: object) -> object:
    """One cell: money a £ number, a time a date, text always text, others as they are."""
    from openpyxl.cell import WriteOnlyCell
    from openpyxl.cell.cell import ILLEGAL_CHARACTERS_RE  # type: ignore[import-untyped]

    if isinstance(value, Decimal):
        money = WriteOnlyCell(sheet, value=value)
        money.number_format = MONEY_FORMAT
        return money
    if isinstance(value, datetime):
        # Excel has no time zones: the column's name says UTC
        when = WriteOnlyCell(sheet, value=value.replace(tzinfo=None))
        when.number_format = TIME_FORMAT
        return when
    if isinstance(value, str):
        text = WriteOnlyCell(sheet, value=ILLEGAL_CHARACTERS_RE.sub("\ufffd", value))
        text.data_type = "s"
        if value.startswith(_FORMULA_STARTS):
            text.quotePrefix = True
        return text
    return value


def _widths(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> list[float]:
    """Each column's width in characters: its longest value (or header), within bounds."""
    widths = [len(str(column)) + 2 for column in columns]
    for row in rows[:_SIZED_ROWS]:
        for index, value in enumerate(row[: len(widths)]):
            widths[index] = max(widths[index], _shown_length(value))
    return [float(min(max(width, _MIN_WIDTH), _MAX_WIDTH)) for width in widths]


def _shown_length(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, Decimal):
        return len(f"£{value:,.2f}") + _MONEY_EXTRA
    if isinstance(value, datetime):
        return _TIME_WIDTH + 1
    return len(str(value)) + 1
