"""What a sheet's XML says about its cells that calamine's values do not: the marks.

Input: the sheet's XML, read in chunks. Output: ``SheetMarks``: formula cells (calamine
hands back a formula's cached value as if typed in), cells showing an Excel error such as
#N/A (calamine hands back nothing), merged ranges (only their first cell holds a value),
and hidden rows and columns. The XML is scanned as bytes, not parsed (a 1,000,000-row
sheet is 250 MB): each mark is read from its own element's start tag, whatever the order
of its attributes or their quotes, with or without a namespace prefix. A marked cell or
row without its reference cannot be placed, so it raises ``ValueError`` (the caller turns
that into a file error): an unplaced mark must never be lost.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from payrun.intake._damage import Damage
from payrun.intake._formats import StyleDamage

__all__ = ["SheetMarks", "column_index", "scan_sheet"]

_FORMULA = re.compile(rb"<(?:\w+:)?f[\s>/]")
_ERROR_TYPE = re.compile(rb"\st\s*=\s*[\"']e[\"']")
_STYLE = re.compile(rb"\ss\s*=\s*[\"'](\d{1,6})[\"']")
_HIDDEN = re.compile(rb"\shidden\s*=\s*[\"'](?:1|true)[\"']")
_ZERO_SIZE = re.compile(rb"\s(?:ht|width)\s*=\s*[\"']0(?:\.0*)?[\"']")
_MERGED = re.compile(rb"<(?:\w+:)?mergeCell\b[^>]*>")
_CELL_START = re.compile(rb"<(?:\w+:)?c[\s>/]")
_PREFIXED_CELL = re.compile(rb"<\w+:c[\s>/]")
_AFTER_NAME = frozenset({b" ", b"\t", b"\r", b"\n", b">", b"/"})
_TAG_NAME = re.compile(rb"<(?:\w+:)?(\w+)")
_ATTRIBUTE = re.compile(rb"\s(\w+)\s*=\s*(?:\"([^\"]*)\"|'([^']*)')")
_CELL_REF = re.compile(rb"([A-Z]{1,3})([0-9]{1,7})")
_RANGE = re.compile(rb"([A-Z]{1,3})([0-9]{1,7})(?::([A-Z]{1,3})([0-9]{1,7}))?")
_MAX_MERGED = 100_000
# A number format ranks below both
_RANK = {Damage.ERROR: 2, Damage.FORMULA: 1}


@dataclass(slots=True)
class SheetMarks:
    """Formula and error cells, merged ranges, hidden rows and columns of one sheet."""

    cells: dict[int, dict[int, Damage]] = field(default_factory=dict)
    """Row number -> 0-based column index (from column A) -> formula or error."""
    hidden_rows: set[int] = field(default_factory=set)
    hidden_columns: set[int] = field(default_factory=set)
    """0-based column indexes (from column A)."""
    merged: list[tuple[int, int, int, int]] = field(default_factory=list)
    """(first row, last row, first column, last column), columns 0-based from column A."""

    def mark(self, row: int, column: int, kind: Damage) -> None:
        """Note one cell's kind; an error value outranks a formula."""
        in_row = self.cells.setdefault(row, {})
        current = in_row.get(column)
        if current is None or _RANK.get(kind, 0) > _RANK.get(current, 0):
            in_row[column] = kind

    def merged_rows(self, columns: Iterable[int]) -> Callable[[int], bool]:
        """A test: does a merged range cover this row in any of ``columns``?"""
        wanted = set(columns)
        spans = sorted(
            (first, last)
            for first, last, left, right in self.merged
            if any(left <= column <= right for column in wanted)
        )
        if not spans:
            return lambda _row: False
        starts = [first for first, _ in spans]
        # The furthest last row of the ranges starting so far
        reach: list[int] = []
        for _, last in spans:
            reach.append(max(last, reach[-1] if reach else last))

        def covered(row: int) -> bool:
            at = bisect.bisect_right(starts, row) - 1
            return at >= 0 and reach[at] >= row

        return covered

    def merged_columns(self, columns: Iterable[int]) -> Callable[[int], set[int]]:
        """A lookup: which of ``columns`` lie in merged ranges on this row.

        It sweeps the ranges in row order (rows are asked in order: each range is taken in
        and dropped once), and starts again if asked for an earlier row.
        """
        wanted = sorted(set(columns))
        spans = sorted(self.merged)
        active: list[tuple[int, int, int, int]] = []
        # The next span to take in, the last row asked
        state = [0, 0]

        def lookup(row: int) -> set[int]:
            if row < state[1]:
                state[0] = 0
                active.clear()
            state[1] = row
            while state[0] < len(spans) and spans[state[0]][0] <= row:
                active.append(spans[state[0]])
                state[0] += 1
            active[:] = [span for span in active if span[1] >= row]
            return {c for c in wanted if any(left <= c <= right for _, _, left, right in active)}

        return lookup


def scan_sheet(
    read: Callable[[int], bytes], chunk_size: int, styles: StyleDamage | None = None
) -> SheetMarks:
    """Scan the sheet's XML chunk by chunk, each pass ending where a cell starts.

    The rest of a chunk after the last cell start is carried into the next pass, so a
    formula element and its cell's start tag, and every start tag, land in one pass.
    """
    marks = SheetMarks()
    carry = b""
    while chunk := read(chunk_size):
        buffer = carry + chunk
        cut = _last_cell_start(buffer, len(buffer))
        if cut <= 0:
            cut = buffer.rfind(b"<")
        if cut <= 0:
            cut = len(buffer)
        _collect(buffer[:cut], marks, styles or {})
        carry = buffer[cut:]
    _collect(carry, marks, styles or {})
    return marks


def _collect(region: bytes, marks: SheetMarks, styles: StyleDamage) -> None:
    # Cells whose number format shows something else: one pass over the styles
    if styles:
        for match in _STYLE.finditer(region):
            kinds = styles.get(int(match.group(1)))
            if kinds is None:
                continue
            name, values = _attributes(region, max(region.rfind(b"<", 0, match.start()), 0))
            if name != b"c":
                continue
            text = values.get(b"t") in (b"s", b"str", b"inlineStr")
            kind = kinds[1] if text else kinds[0]
            if kind is not None:
                row, column = _cell_reference((name, values))
                marks.mark(row, column, kind)
    _collect_marks(region, marks)


def _collect_marks(region: bytes, marks: SheetMarks) -> None:
    # A formula element (``<f``, ``<x:f``) may be here
    if b"<f" in region or b":f" in region:
        prefixed = _PREFIXED_CELL.search(region) is not None
        for match in _FORMULA.finditer(region):
            start = _last_cell_start(region, match.start(), prefixed=prefixed)
            if start < 0:
                msg = "a formula outside any cell"
                raise ValueError(msg)
            row, column = _cell_reference(_attributes(region, start))
            marks.mark(row, column, Damage.FORMULA)
    # A quick look first: most sheets have none of them
    errors = b'"e"' in region or b"'e'" in region
    zero = b'ht="0' in region or b"ht='0" in region or b'width="0' in region
    looks = ((errors, _ERROR_TYPE), (b"hidden" in region, _HIDDEN), (zero, _ZERO_SIZE))
    for found, pattern in looks:
        if found:
            for match in pattern.finditer(region):
                _mark_tag(region, region.rfind(b"<", 0, match.start()), marks)
    if b"mergeCell" in region:
        for match in _MERGED.finditer(region):
            _add_merged(_attributes(region, match.start()), marks)


def _last_cell_start(region: bytes, end: int, *, prefixed: bool | None = None) -> int:
    """Where the last cell start tag (``<c ``, ``<c>``, ``<x:c ``) before ``end`` begins, or -1.

    ``prefixed`` says whether the region has namespace-prefixed cells at all (looked up
    when not given), so that unprefixed sheets, nearly all of them, never search for them.
    """
    if prefixed is None:
        prefixed = _PREFIXED_CELL.search(region) is not None
    found = _last_plain_cell(region, end)
    if prefixed:
        at = end
        while (at := region.rfind(b":c", 0, at)) > found:
            start = region.rfind(b"<", 0, at)
            if start >= 0 and _CELL_START.fullmatch(region, start, at + 3):
                return start
    return found


def _last_plain_cell(region: bytes, end: int) -> int:
    at = end
    while (at := region.rfind(b"<c", 0, at)) >= 0:
        if region[at + 2 : at + 3] in _AFTER_NAME:
            return at
    return -1


def _attributes(region: bytes, start: int) -> tuple[bytes, dict[bytes, bytes]]:
    """The element name and attributes of the start tag at ``start``."""
    end = region.find(b">", start)
    tag = region[start : end if end >= 0 else len(region)]
    name = _TAG_NAME.match(tag)
    values = {
        m.group(1): m.group(2) if m.group(2) is not None else m.group(3)
        for m in _ATTRIBUTE.finditer(tag)
    }
    return (name.group(1) if name else b""), values


def _mark_tag(region: bytes, start: int, marks: SheetMarks) -> None:
    """A hidden row, hidden columns, or a cell showing an error: by the tag's element."""
    name, values = _attributes(region, max(start, 0))
    if name == b"c" and values.get(b"t") == b"e":
        row, column = _cell_reference((name, values))
        marks.mark(row, column, Damage.ERROR)
    elif name == b"row" and _unseen(values, b"ht"):
        number = values.get(b"r", b"")
        if not number.isdigit():
            msg = "a hidden row without its row number"
            raise ValueError(msg)
        marks.hidden_rows.add(int(number))
    elif name == b"col" and _unseen(values, b"width"):
        first, last = values.get(b"min", b""), values.get(b"max", b"")
        if first.isdigit() and last.isdigit():
            marks.hidden_columns.update(range(int(first) - 1, min(int(last), 16_384)))


def _unseen(values: dict[bytes, bytes], size: bytes) -> bool:
    """Hidden, or zero high (a row) or zero wide (a column): nobody sees it either way."""
    if values.get(b"hidden") in (b"1", b"true"):
        return True
    try:
        return float(values.get(size, b"1")) == 0
    except ValueError:
        return False


def _cell_reference(tag: tuple[bytes, dict[bytes, bytes]]) -> tuple[int, int]:
    reference = _CELL_REF.fullmatch(tag[1].get(b"r", b""))
    if reference is None:
        msg = "a cell without its reference (saved by a program other than Excel?)"
        raise ValueError(msg)
    return int(reference.group(2)), column_index(reference.group(1))


def _add_merged(tag: tuple[bytes, dict[bytes, bytes]], marks: SheetMarks) -> None:
    reference = tag[1].get(b"ref", b"").replace(b"$", b"").upper()
    span = _RANGE.fullmatch(reference)
    if span is None:
        msg = f"a merged range payrun cannot read ({reference[:40]!r})"
        raise ValueError(msg)
    if len(marks.merged) >= _MAX_MERGED:
        msg = f"over {_MAX_MERGED:,} merged ranges"
        raise ValueError(msg)
    first_column = column_index(span.group(1))
    last_column = column_index(span.group(3)) if span.group(3) else first_column
    first_row = int(span.group(2))
    last_row = int(span.group(4)) if span.group(4) else first_row
    marks.merged.append((first_row, last_row, first_column, last_column))


def column_index(letters: bytes) -> int:
    """0-based index of a column's letters: A -> 0, Z -> 25, AA -> 26."""
    index = 0
    for byte in letters:
        index = index * 26 + (byte - 64)
    return index - 1
