"""The .xlsx container, checked before any parser sees it: zip bomb guard, formula cells.

Input: a path sniffed as a zip. ``check_workbook_zip`` raises ``BatchFileError`` when the
zip is corrupt, is not a workbook, or would inflate past ``MAX_UNCOMPRESSED_BYTES`` (the
sizes are read from the zip directory, before anything is inflated). ``formula_cells``
returns where the chosen sheet holds formulas, which python-calamine cannot report: it
hands back a formula's cached value (or nothing) as if it were typed in.
"""

from __future__ import annotations

import posixpath
import re
import zipfile
from collections.abc import Callable
from pathlib import Path
from xml.etree import ElementTree

from payrun.errors import BatchFileError

__all__ = ["MAX_UNCOMPRESSED_BYTES", "check_workbook_zip", "formula_cells"]

MAX_UNCOMPRESSED_BYTES = 512 * 1_048_576
"""A 1,000,000-row sheet inflates to about 250 MB; far more than that is a zip bomb."""
_CHUNK = 4 * 1_048_576
_FORMULA = re.compile(rb"<(?:\w+:)?f[\s>/]")
_CELL_REF = re.compile(rb' r="([A-Z]{1,3})([0-9]{1,7})"')
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


def formula_cells(path: Path, sheet_index: int) -> dict[int, set[int]]:
    """Map row number -> 0-based column indexes of the cells holding formulas."""
    try:
        with zipfile.ZipFile(path) as archive:
            member = _sheet_member(archive, sheet_index)
            if member is None:
                return {}
            with archive.open(member) as stream:
                return _scan_formulas(stream.read, _CHUNK)
    except (zipfile.BadZipFile, ElementTree.ParseError, KeyError, ValueError, OSError) as exc:
        msg = f"{path.name} is a corrupt .xlsx workbook ({exc}): save it again from Excel"
        raise BatchFileError(msg, path=path) from exc


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


def _scan_formulas(read: Callable[[int], bytes], chunk_size: int) -> dict[int, set[int]]:
    """Find ``<f>`` elements chunk by chunk; a cell's start tag is never split from its ``<f>``.

    Each pass stops at the last ``<c `` in the buffer and carries the rest over, so a
    formula and the ``<c r="B5">`` before it always land in the same pass.
    """
    found: dict[int, set[int]] = {}
    carry = b""
    while chunk := read(chunk_size):
        buffer = carry + chunk
        cut = buffer.rfind(b"<c ")
        if cut <= 0:
            cut = buffer.rfind(b"<")
        if cut <= 0:
            cut = len(buffer)
        _collect(buffer[:cut], found)
        carry = buffer[cut:]
    _collect(carry, found)
    return found


def _collect(region: bytes, found: dict[int, set[int]]) -> None:
    if b"<f" not in region and b":f" not in region:
        return  # no formula element (``<f``, ``<x:f``) here: skip the slower regex scan
    for match in _FORMULA.finditer(region):
        ref = _CELL_REF.match(region, max(region.rfind(b' r="', 0, match.start()), 0))
        if ref is not None:
            row, column = int(ref.group(2)), _column_index(ref.group(1))
            found.setdefault(row, set()).add(column)


def _column_index(letters: bytes) -> int:
    index = 0
    for byte in letters:
        index = index * 26 + (byte - 64)
    return index - 1
