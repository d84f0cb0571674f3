"""The .xlsx container, checked before any parser sees it: zip bomb guard, sheet marks.

Input: a path sniffed as a zip. ``check_workbook_zip`` raises ``BatchFileError`` when the
zip is corrupt, is not a workbook, or would inflate past ``MAX_UNCOMPRESSED_BYTES`` (the
sizes are read from the zip directory, before anything is inflated). ``sheet_marks``
finds what python-calamine cannot report about the chosen sheet's cells: formulas (it
hands back a formula's cached value, or nothing, as if typed in), Excel error values like
#N/A (it hands back nothing), merged cells (only the first holds the value) and rows
hidden or filtered out. ``sheet_states`` says which sheets are hidden.
"""

from __future__ import annotations

import posixpath
import re
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from xml.etree import ElementTree

from payrun.errors import BatchFileError
from payrun.intake._damage import Damage

__all__ = [
    "MAX_UNCOMPRESSED_BYTES",
    "SheetMarks",
    "check_workbook_zip",
    "sheet_marks",
    "sheet_states",
]

MAX_UNCOMPRESSED_BYTES = 512 * 1_048_576
"""A 1,000,000-row sheet inflates to about 250 MB; far more than that is a zip bomb."""
_CHUNK = 4 * 1_048_576
_FORMULA = re.compile(rb"<(?:\w+:)?f[\s>/]")
_ERROR_TYPE = re.compile(rb'\st="e"')
_HIDDEN = re.compile(rb'\shidden="(?:1|true)"')
_MERGED = re.compile(
    rb'<(?:\w+:)?mergeCell\s+ref="([A-Z]{1,3})([0-9]{1,7}):([A-Z]{1,3})([0-9]{1,7})"'
)
_CELL_REF = re.compile(rb' r="([A-Z]{1,3})([0-9]{1,7})"')
_ROW_REF = re.compile(rb'<(?:\w+:)?row\b[^>]*?\sr="([0-9]{1,7})"')
_MAX_MERGED_CELLS = 1_000_000
_RANK = {Damage.ERROR: 3, Damage.FORMULA: 2, Damage.MERGED: 1}
_MAIN_NS = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
_REL_NS = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}"
_PKG_NS = "{http://schemas.openxmlformats.org/package/2006/relationships}"


def check_workbook_zip(path: Path) -> None:
    """Refuse a corrupt zip, a zip that is not a workbook, or one that inflates too far."""
    try:
        with zipfile.ZipFile(path) as archive:
            entries = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError, OSError) as exc:
        msg = f"{path.name} is a corrupt .xlsx workbook (broken zip): save it again from Excel"
        raise BatchFileError(msg, path=path) from exc
    names = {entry.filename for entry in entries}
    if "xl/workbook.xml" not in names:
        msg = f"{path.name} is a zip archive, not an Excel .xlsx workbook"
        raise BatchFileError(msg, path=path)
    inflated = sum(entry.file_size for entry in entries)
    if inflated > MAX_UNCOMPRESSED_BYTES:
        msg = (
            f"{path.name} would inflate to {inflated // 1_048_576} MB, over the"
            f" {MAX_UNCOMPRESSED_BYTES // 1_048_576} MB limit (a zip bomb?); split the batch"
        )
        raise BatchFileError(msg, path=path)


@dataclass(slots=True)
class SheetMarks:
    """What the sheet's XML says about its cells that calamine's values do not."""

    cells: dict[int, dict[int, Damage]] = field(default_factory=dict)
    """Row number -> 0-based column index (from column A) -> formula, error or merged."""
    hidden_rows: set[int] = field(default_factory=set)

    def mark(self, row: int, column: int, kind: Damage) -> None:
        """Note one cell's kind; an error value outranks a formula, a formula a merge."""
        in_row = self.cells.setdefault(row, {})
        current = in_row.get(column)
        if current is None or _RANK[kind] > _RANK[current]:
            in_row[column] = kind


def sheet_marks(path: Path, sheet_index: int) -> SheetMarks:
    """Formula, error and merged cells, and hidden rows, of the n-th sheet."""
    try:
        with zipfile.ZipFile(path) as archive:
            member = _sheet_member(archive, sheet_index)
            if member is None:
                return SheetMarks()
            with archive.open(member) as stream:
                return _scan_sheet(stream.read, _CHUNK)
    except (zipfile.BadZipFile, ElementTree.ParseError, KeyError, ValueError, OSError) as exc:
        msg = f"{path.name} is a corrupt .xlsx workbook ({exc}): save it again from Excel"
        raise BatchFileError(msg, path=path) from exc


def sheet_states(path: Path) -> list[str]:
    """Each sheet's state in order: ``visible``, ``hidden`` or ``veryHidden``."""
    try:
        with zipfile.ZipFile(path) as archive:
            book = ElementTree.fromstring(archive.read("xl/workbook.xml"))
    except (zipfile.BadZipFile, ElementTree.ParseError, KeyError, ValueError, OSError) as exc:
        msg = f"{path.name} is a corrupt .xlsx workbook ({exc}): save it again from Excel"
        raise BatchFileError(msg, path=path) from exc
    return [sheet.get("state", "visible") for sheet in book.iter(f"{_MAIN_NS}sheet")]


def _sheet_member(archive: zipfile.ZipFile, sheet_index: int) -> str | None:
    """The zip member holding the n-th sheet, found through workbook.xml and its rels."""
    book = ElementTree.fromstring(archive.read("xl/workbook.xml"))
    sheets = list(book.iter(f"{_MAIN_NS}sheet"))
    if not 0 <= sheet_index < len(sheets):
        return None
    rel_id = sheets[sheet_index].get(f"{_REL_NS}id")
    rels = ElementTree.fromstring(archive.read("xl/_rels/workbook.xml.rels"))
    for rel in rels.iter(f"{_PKG_NS}Relationship"):
        if rel.get("Id") == rel_id:
            target = rel.get("Target", "")
            if target.startswith("/"):
                return target.lstrip("/")
            return posixpath.normpath(posixpath.join("xl", target))
    return None


def _scan_sheet(read: Callable[[int], bytes], chunk_size: int) -> SheetMarks:
    """Scan the sheet's XML chunk by chunk; a cell's start tag is never split from its parts.

    Each pass stops at the last ``<c `` in the buffer and carries the rest over, so a
    formula and the ``<c r="B5">`` before it, or a row's tag, always land in one pass.
    """
    marks = SheetMarks()
    carry = b""
    while chunk := read(chunk_size):
        buffer = carry + chunk
        cut = buffer.rfind(b"<c ")
        if cut <= 0:
            cut = buffer.rfind(b"<")
        if cut <= 0:
            cut = len(buffer)
        _collect(buffer[:cut], marks)
        carry = buffer[cut:]
    _collect(carry, marks)
    return marks


def _collect(region: bytes, marks: SheetMarks) -> None:
    if b"<f" in region or b":f" in region:  # a formula element (``<f``, ``<x:f``) may be here
        for match in _FORMULA.finditer(region):
            _mark_cell(region, match.start(), marks, Damage.FORMULA)
    if b't="e"' in region:
        for match in _ERROR_TYPE.finditer(region):
            _mark_cell(region, match.start(), marks, Damage.ERROR)
    if b"hidden=" in region:
        for match in _HIDDEN.finditer(region):
            tag = _ROW_REF.match(region, max(region.rfind(b"<", 0, match.start()), 0))
            if tag is not None:  # a hidden row (a hidden column's tag is ``<col``)
                marks.hidden_rows.add(int(tag.group(1)))
    if b"mergeCell" in region:
        for match in _MERGED.finditer(region):
            _mark_merged(match, marks)


def _mark_cell(region: bytes, at: int, marks: SheetMarks, kind: Damage) -> None:
    ref = _CELL_REF.match(region, max(region.rfind(b' r="', 0, at), 0))
    if ref is not None:
        marks.mark(int(ref.group(2)), _column_index(ref.group(1)), kind)


def _mark_merged(match: re.Match[bytes], marks: SheetMarks) -> None:
    first_column, last_column = _column_index(match.group(1)), _column_index(match.group(3))
    first_row, last_row = int(match.group(2)), int(match.group(4))
    size = (last_row - first_row + 1) * (last_column - first_column + 1)
    if size > _MAX_MERGED_CELLS:
        msg = f"merged cells over {size:,} cells: unmerge them"
        raise ValueError(msg)
    for row in range(first_row, last_row + 1):
        for column in range(first_column, last_column + 1):
            marks.mark(row, column, Damage.MERGED)


def _column_index(letters: bytes) -> int:
    index = 0
    for byte in letters:
        index = index * 26 + (byte - 64)
    return index - 1
