"""The .xlsx container, checked before any parser sees it: zip bomb guard, sheet marks.

Input: a path sniffed as a zip. ``check_workbook_zip`` raises ``BatchFileError`` when the
zip is corrupt, is not a workbook, or would inflate past ``MAX_UNCOMPRESSED_BYTES`` (the
sizes are read from the zip directory, before anything is inflated). ``sheet_marks``
finds what python-calamine cannot report about the chosen sheet's cells: formulas (it
hands back a formula's cached value, or nothing, as if typed in), Excel error values like
#N/A (it hands back nothing), merged cells (only the first holds the value) and rows
hidden or filtered out. ``sheet_extent`` says how far the sheet's cells reach, before
calamine lays them out in one grid. ``sheet_states`` says which sheets are hidden.
"""

from __future__ import annotations

import collections
import posixpath
import zipfile
import zlib
from collections.abc import Collection
from pathlib import Path
from xml.etree import ElementTree

from payrun.errors import BatchFileError
from payrun.intake._extent import Extent, scan_extent
from payrun.intake._formats import style_damage
from payrun.intake._marks import SheetMarks, scan_sheet

__all__ = [
    "MAX_UNCOMPRESSED_BYTES",
    "SheetMarks",
    "check_workbook_zip",
    "other_spreadsheet",
    "sheet_choice",
    "sheet_extent",
    "sheet_marks",
    "sheet_states",
]

MAX_UNCOMPRESSED_BYTES = 512 * 1_048_576
"""A 1,000,000-row sheet inflates to about 250 MB; far more than that is a zip bomb."""
_CHUNK = 4 * 1_048_576
_MIMETYPE_BYTES = 100
_BROKEN = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    zlib.error,
    # an encrypted member (RuntimeError) or an unknown compression method
    RuntimeError,
    NotImplementedError,
    ValueError,
    EOFError,
    OSError,
)
"""What reading a broken zip raises: a corrupt workbook, never an unexpected error."""
_STYLES = "xl/styles.xml"


def check_workbook_zip(path: Path) -> None:
    """Refuse a corrupt zip, one that inflates too far, a zip that is not a workbook, or
    one naming a part twice (a repeated member name or relationship Id)."""
    try:
        with zipfile.ZipFile(path) as archive:
            entries = archive.infolist()
            # Before anything is inflated: the sizes the zip's directory declares
            _check_inflated_size(path, entries)
            names = {entry.filename for entry in entries}
            kind = _mimetype(archive)
    except _BROKEN as exc:
        msg = f"{path.name} is a corrupt .xlsx workbook (broken zip): save it again from Excel"
        raise BatchFileError(msg, path=path) from exc
    if "xl/workbook.xml" not in names:
        msg = other_spreadsheet(path, names, kind) or (
            f"{path.name} is a zip archive, not an Excel .xlsx workbook"
        )
        raise BatchFileError(msg, path=path)
    # Readers disagree on which of two same-named parts counts: the checks could read one
    # and calamine lay out the other.
    if len(names) != len(entries):
        counted = collections.Counter(entry.filename for entry in entries)
        twice = [name for name, count in counted.items() if count > 1]
        msg = (
            f"{path.name} is a damaged .xlsx workbook: the zip holds {twice[0]!r} twice;"
            " save it again from Excel"
        )
        raise BatchFileError(msg, path=path)
    _check_relationship_ids(path)


def _check_inflated_size(path: Path, entries: list[zipfile.ZipInfo]) -> None:
    inflated = sum(entry.file_size for entry in entries)
    if inflated > MAX_UNCOMPRESSED_BYTES:
        msg = (
            f"{path.name} would inflate to {inflated // 1_048_576} MB, over the"
            f" {MAX_UNCOMPRESSED_BYTES // 1_048_576} MB limit (a zip bomb?); split the batch"
        )
        raise BatchFileError(msg, path=path)


def _mimetype(archive: zipfile.ZipFile) -> bytes:
    """An OpenDocument file's kind, named in its ``mimetype`` member (a few bytes long);
    empty when there is none, or it is too long to be one (it is never inflated then)."""
    try:
        info = archive.getinfo("mimetype")
    except KeyError:
        return b""
    if info.file_size > _MIMETYPE_BYTES:
        return b""
    with archive.open(info) as member:
        return member.read(_MIMETYPE_BYTES)


def other_spreadsheet(path: Path, names: Collection[str] = (), kind: bytes = b"") -> str | None:
    """What to do with another program's spreadsheet (an OpenDocument .ods, an Apple
    Numbers document), by its content or else its name; None for anything else."""
    suffix = path.suffix.lower()
    if kind.startswith(b"application/vnd.oasis.opendocument.spreadsheet") or (
        suffix == ".ods" and not kind
    ):
        return (
            f"{path.name} is an OpenDocument spreadsheet (.ods), which payrun does not read:"
            " in LibreOffice Calc (or the program that made it) save a copy as Excel"
            " 2007-365 (.xlsx) or Text CSV, and give payrun that file"
        )
    if suffix == ".numbers" or any(n.startswith("Index/") and n.endswith(".iwa") for n in names):
        return (
            f"{path.name} is an Apple Numbers document, which payrun does not read: in"
            " Numbers choose File > Export To > Excel (.xlsx) or CSV, and give payrun that file"
        )
    return None


def _check_relationship_ids(path: Path) -> None:
    """Refuse a workbook whose relationships give one Id to two parts (which is the sheet?)."""
    try:
        with zipfile.ZipFile(path) as archive:
            rels = ElementTree.fromstring(archive.read("xl/_rels/workbook.xml.rels"))
    except KeyError:
        return
    except (*_BROKEN, ElementTree.ParseError) as exc:
        msg = f"{path.name} is a corrupt .xlsx workbook ({exc}): save it again from Excel"
        raise BatchFileError(msg, path=path) from exc
    seen: set[str] = set()
    for rel in rels.iter():
        if _local(rel.tag) != "Relationship":
            continue
        rel_id = rel.get("Id", "")
        if rel_id in seen:
            msg = (
                f"{path.name} is a damaged .xlsx workbook: relationship Id {rel_id!r} names"
                " two parts, so which is the sheet cannot be told; save it again from Excel"
            )
            raise BatchFileError(msg, path=path)
        seen.add(rel_id)


def sheet_marks(path: Path, sheet_index: int) -> SheetMarks:
    """Formula, error and merged cells, and hidden rows, of the n-th sheet."""
    try:
        with zipfile.ZipFile(path) as archive:
            member = _sheet_member(archive, sheet_index)
            names = set(archive.namelist())
            styles = style_damage(archive.read(_STYLES)) if _STYLES in names else {}
            with archive.open(member) as stream:
                return scan_sheet(stream.read, _CHUNK, styles)
    except (*_BROKEN, ElementTree.ParseError, KeyError) as exc:
        msg = f"{path.name} is a corrupt .xlsx workbook ({exc}): save it again from Excel"
        raise BatchFileError(msg, path=path) from exc


def sheet_extent(path: Path, sheet_index: int) -> Extent:
    """The last row and column the n-th sheet's cells reach (calamine's grid is that big)."""
    try:
        with (
            zipfile.ZipFile(path) as archive,
            archive.open(_sheet_member(archive, sheet_index)) as stream,
        ):
            return scan_extent(stream.read, _CHUNK)
    except (*_BROKEN, KeyError) as exc:
        msg = f"{path.name} is a corrupt .xlsx workbook ({exc}): save it again from Excel"
        raise BatchFileError(msg, path=path) from exc


def sheet_states(path: Path) -> list[str]:
    """Each sheet's state in order: ``visible``, ``hidden`` or ``veryHidden``."""
    try:
        with zipfile.ZipFile(path) as archive:
            book = ElementTree.fromstring(archive.read("xl/workbook.xml"))
    except (*_BROKEN, ElementTree.ParseError, KeyError) as exc:
        msg = f"{path.name} is a corrupt .xlsx workbook ({exc}): save it again from Excel"
        raise BatchFileError(msg, path=path) from exc
    return [sheet.get("state", "visible") for sheet in _sheets(book)]


def sheet_choice(path: Path, sheet: str | None) -> tuple[str, str] | None:
    """The sheet payrun reads and the sheet Excel opens the workbook on (its active tab),
    from workbook.xml alone; None when the workbook cannot tell (reading it will say why)."""
    try:
        with zipfile.ZipFile(path) as archive:
            book = ElementTree.fromstring(archive.read("xl/workbook.xml"))
    except (*_BROKEN, ElementTree.ParseError, KeyError):
        return None
    names = [element.get("name", "") for element in _sheets(book)]
    views = [e for e in book.iter() if _local(e.tag) == "workbookView"]
    active = views[0].get("activeTab", "0") if views else "0"
    folded = [name.strip().casefold() for name in names]
    key = "" if sheet is None else sheet.strip().casefold()
    if not names or (key and key not in folded) or not active.isdigit():
        return None
    wanted = folded.index(key) if key else 0
    return names[wanted], names[min(int(active), len(names) - 1)]


def _sheet_member(archive: zipfile.ZipFile, sheet_index: int) -> str:
    """The zip member holding the n-th sheet, found through workbook.xml and its rels.

    Elements and attributes are matched by local name, so a Strict Open XML workbook
    (purl.oclc.org namespaces) is read like a transitional one. A sheet that cannot be
    found raises ``KeyError``: its marks must never be silently skipped.
    """
    book = ElementTree.fromstring(archive.read("xl/workbook.xml"))
    sheets = _sheets(book)
    if not 0 <= sheet_index < len(sheets):
        msg = f"sheet {sheet_index + 1} is not listed in the workbook"
        raise KeyError(msg)
    rel_id = _local_attribute(sheets[sheet_index], "id")
    rels = ElementTree.fromstring(archive.read("xl/_rels/workbook.xml.rels"))
    for rel in rels.iter():
        if _local(rel.tag) == "Relationship" and rel.get("Id") == rel_id:
            return _one_place(archive, rel.get("Target", ""), sheet_index)
    msg = f"the workbook does not say where sheet {sheet_index + 1} is"
    raise KeyError(msg)


def _one_place(archive: zipfile.ZipFile, target: str, sheet_index: int) -> str:
    """The member a sheet's target names, by every reading of it other programs use.

    A target may be read relative to ``xl/`` or from the zip's root, normalized or not:
    when two readings name two members, calamine may lay out the one not checked.
    """
    stripped = target.lstrip("/")
    readings = [
        stripped if target.startswith("/") else posixpath.normpath(posixpath.join("xl", target)),
        stripped,
        posixpath.join("xl", stripped),
        posixpath.normpath(stripped),
    ]
    names = set(archive.namelist())
    found = list(dict.fromkeys(reading for reading in readings if reading in names))
    if len(found) > 1:
        msg = f"sheet {sheet_index + 1}'s location {target!r} names both {found[0]} and {found[1]}"
        raise ValueError(msg)
    return found[0] if found else readings[0]


def _sheets(book: ElementTree.Element) -> list[ElementTree.Element]:
    return [element for element in book.iter() if _local(element.tag) == "sheet"]


def _local(name: str) -> str:
    return name.rpartition("}")[2]


def _local_attribute(element: ElementTree.Element, name: str) -> str | None:
    """An attribute by its local name, in whatever namespace (``r:id`` is ``{...}id``)."""
    for key, value in element.attrib.items():
        if key != name and _local(key) == name:
            return value
    return None
