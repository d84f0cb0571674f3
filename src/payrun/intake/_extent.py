"""How far a sheet's cells reach, read from its XML before calamine builds the sheet.

calamine turns a sheet into one dense grid from its first to its last cell, 32 bytes a
cell: one cell at XFD1048576 asks for 512 GB and aborts the process. Input: the sheet's
XML, read in chunks. Output: ``Extent``, the last row and column any cell is placed in,
by its reference or, without one, by its place in its row (as calamine places it). The
``<dimension>`` a sheet declares is not read: it is only a claim (calamine reserves
memory from it only below 100,000 cells), and the cells are what calamine lays out.

Nearly every writer starts each cell ``<c r="A1"``: such chunks are checked with one
regular expression search; any other cell form (no reference, another attribute first,
a namespace prefix) is walked tag by tag.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["MAX_CELLS", "MAX_COLUMNS", "Extent", "extent_problem", "scan_extent"]

MAX_COLUMNS = 1_000
"""A batch needs about 8 columns; a sheet reaching past column ALL is not a list of payments."""
MAX_CELLS = 28_000_000
"""About 900 MB in calamine: every row Excel allows (1,048,576) by 26 columns, A to Z."""

_LETTERS = 26
_CELL = b'<c r="'
_LAST_REF = re.compile(rb'([A-Z]{1,3})(\d{1,7})"')
_PLAIN_REF = re.compile(rb'<c r="([A-Z]{1,3})(\d{1,7})"')
_PREFIXED_CELL = re.compile(rb"<\w+:c[\s>/]")
_TAG = re.compile(rb"<(?:\w+:)?(c|row)[\s>/]")
_R_ATTRIBUTE = re.compile(rb"""\sr\s*=\s*["']([^"']*)["']""")
_ANY_REF = re.compile(rb"([A-Za-z]{1,3})0*(\d{1,9})")
_ROW_NUMBER = re.compile(rb"0*(\d{1,9})")


@dataclass(slots=True)
class Extent:
    """The last row (1-based) and the last column (1-based) the sheet's cells reach."""

    rows: int = 0
    columns: int = 0

    def reach(self, row: int, column: int) -> None:
        """Note a cell placed at ``row`` and ``column``."""
        self.rows = max(self.rows, row)
        self.columns = max(self.columns, column)


@dataclass(slots=True)
class _Walk:
    """Where the tag-by-tag walk stands: the current row, and the next column in it."""

    row: int = 0
    column: int = 0


def extent_problem(extent: Extent, *, max_rows: int) -> str | None:
    """What is wrong with a sheet reaching ``extent``, or None when calamine may read it."""
    where = "delete what lies beyond the payments (Ctrl+End in Excel shows the last cell)"
    if extent.rows > max_rows + 1:
        return (
            f"reaches row {extent.rows:,}, more than a header and {max_rows:,} payment rows:"
            f" {where}, or split the batch (or raise --max-rows)"
        )
    if extent.columns > MAX_COLUMNS:
        return (
            f"reaches column {_column_letters(extent.columns)}, past the {MAX_COLUMNS:,}"
            f" columns payrun reads: {where}"
        )
    if extent.rows * extent.columns > MAX_CELLS:
        return (
            f"spans {extent.rows:,} rows by {extent.columns:,} columns, over the"
            f" {MAX_CELLS:,} cells payrun reads: {where}, or split the batch"
        )
    return None


def scan_extent(read: Callable[[int], bytes], chunk_size: int) -> Extent:
    """Read the sheet's XML chunk by chunk (each cut before a tag) and return its extent."""
    extent, walk = Extent(), _Walk()
    carry = b""
    while chunk := read(chunk_size):
        buffer = carry + chunk
        cut = buffer.rfind(b"<")
        if cut > 0:
            _scan_region(buffer[:cut], extent, walk)
            carry = buffer[cut:]
        else:
            carry = buffer
    _scan_region(carry, extent, walk)
    return extent


def _scan_region(region: bytes, extent: Extent, walk: _Walk) -> None:
    if not _plain_cells(region, extent, walk):
        _walk_tags(region, extent, walk)


def _plain_cells(region: bytes, extent: Extent, walk: _Walk) -> bool:
    """Measure a region whose every cell starts ``<c r="A1"``; False for any other region.

    The last cell's row is the region's last row unless a reference reaches further or
    past column Z (one search finds any such); then every reference is read. Cells all
    in columns A to Z count as reaching Z: finding the last letter would cost a pass.
    """
    if b":c" in region and _PREFIXED_CELL.search(region):
        return False
    last = region.rfind(_CELL)
    found = _LAST_REF.match(region, last + len(_CELL)) if last >= 0 else None
    if found is not None and _unusual_cell(int(found.group(2))).search(region) is None:
        extent.reach(int(found.group(2)), _LETTERS)
    elif _unusual_cell(None).search(region) is None:
        for letters, digits in _PLAIN_REF.findall(region):
            extent.reach(int(digits), _column_number(letters))
    else:
        return False
    # a cell without a reference after this region is placed after the furthest row
    walk.row = max(walk.row, extent.rows)
    return True


@functools.lru_cache(maxsize=64)
def _unusual_cell(row: int | None) -> re.Pattern[bytes]:
    """A cell tag other than ``<c r="A123"`` (one letter, a row up to ``row``); with
    ``row`` None, other than ``<c r="XFD1234567"``. Other ``<c...`` tags are no cells."""
    if row is None:
        plain = rb'[A-Z]{1,3}\d{1,7}"'
    else:
        plain = rb"[A-Z](?>0*)(?!(?:" + _above(row) + rb')")\d{1,7}"'
    # the cell test first, then the other tag names: most ``<c`` are cells
    return re.compile(rb'<c(?! r="' + plain + rb")(?![\w:.\-])")


def _above(number: int) -> bytes:
    """An alternation matching the decimal digits of any number above ``number``."""
    digits = str(number)
    parts = [rb"[1-9]\d{%d,}" % len(digits)]
    for at, digit in enumerate(digits):
        if digit != "9":
            rest = len(digits) - at - 1
            tail = rb"\d{%d}" % rest if rest else b""
            parts.append(digits[:at].encode() + b"[%d-9]" % (int(digit) + 1) + tail)
    return b"|".join(parts)


def _walk_tags(region: bytes, extent: Extent, walk: _Walk) -> None:
    """Place every row and cell as calamine does: by its reference, else after the last."""
    for match in _TAG.finditer(region):
        start = match.end() - 1
        end = region.find(b">", start)
        reference = _R_ATTRIBUTE.search(region, start, end if end >= 0 else len(region))
        value = reference.group(1).strip() if reference else b""
        if match.group(1) == b"row":
            number = _ROW_NUMBER.fullmatch(value)
            walk.row = int(number.group(1)) if number else walk.row + 1
            walk.column = 0
            continue
        cell = _ANY_REF.fullmatch(value)
        if cell is None:
            row, column = max(walk.row, 1), walk.column + 1
        else:
            row, column = int(cell.group(2)), _column_number(cell.group(1).upper())
        extent.reach(row, column)
        walk.column = max(walk.column + 1, column)


def _column_number(letters: bytes) -> int:
    """1-based number of a column's letters: A -> 1, Z -> 26, AA -> 27."""
    number = 0
    for byte in letters:
        number = number * _LETTERS + (byte - 64)
    return number


def _column_letters(number: int) -> str:
    """A column's letters from its 1-based number: 1 -> A, 27 -> AA."""
    letters = ""
    while number > 0:
        number, rest = divmod(number - 1, _LETTERS)
        letters = chr(65 + rest) + letters
    return letters
