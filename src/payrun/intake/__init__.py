"""Intake, stage 1: a batch file -> its header and a stream of raw rows.

Input: a path to a CSV (UTF-8, UTF-8 with BOM or cp1252; ``,`` or ``;``) or .xlsx file;
the format is decided by content, never by extension. Output: a ``Batch`` whose ``rows``
iterator yields one ``RawRow`` per non-blank data row (row numbers are the spreadsheet's:
the header is row 1), with cell text keyed by canonical column and any spreadsheet damage
the cells' types reveal. CSV rows are streamed, never all held. Raises ``BatchFileError``
(exit 2) for every file that cannot be used, including while ``rows`` is being consumed
(a field over 1 MB, more than ``max_rows`` rows).

A payroll export (Bacs Standard 18, NatWest Bankline, Barclays BACS CSV: ``INPUT_FORMATS``,
detected by ``_detect`` unless named) is read by its profile (``_bacs18``, ``_bankline``,
``_barclays``) into the same ``Batch``: canonical columns, rows numbered by the file's
lines, and ``Batch.export`` with its totals, control-total verdict and pay date; its
control totals are checked before the first row is given (``ControlTotalsError``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import TYPE_CHECKING, Any, NamedTuple

from payrun._models import RowProblem
from payrun.config import DEFAULT_MAX_ROWS, ValidationOptions
from payrun.errors import BatchFileError
from payrun.intake._amounts import AmountSuspect, amount_suspect
from payrun.intake._csv import MAX_FIELD_BYTES, QuoteCheck, open_csv
from payrun.intake._damage import ROW, Damage
from payrun.intake._headers import COLUMNS, ColumnSpec, HeaderMap, map_header, normalize_header
from payrun.intake._profile import (
    EXPORT_COLUMNS,
    INPUT_FORMATS,
    TITLES,
    ExportReading,
    InputFormat,
    show_day,
)
from payrun.intake._sniff import BatchFormat, sniff_format

# The .xlsx reader is loaded only for a workbook (a CSV run starts faster)
if TYPE_CHECKING:
    from payrun.intake._xlsx import Cell, XlsxSource

__all__ = [
    "COLUMNS",
    "INPUT_FORMATS",
    "MAX_FIELD_BYTES",
    "MAX_UNCOMPRESSED_BYTES",
    "ROW",
    "Batch",
    "BatchFormat",
    "Cells",
    "ColumnSpec",
    "Damage",
    "ExportReading",
    "HeaderMap",
    "InputFormat",
    "RawRow",
    "normalize_header",
    "open_batch",
    "read_batch",
    "read_export",
    "show_day",
    "extension_note",
    "sheet_note",
]

_NO_DAMAGE: Mapping[str, Damage] = MappingProxyType({})
_FORMAT_DAMAGE = frozenset(
    {Damage.FORMAT_HIDES, Damage.FORMAT_OTHER, Damage.FORMAT_NO_PENCE, Damage.FORMAT_ONE_PLACE}
)


class RawRow(NamedTuple):
    """One data row as the file wrote it: text by canonical column, plus damage seen."""

    row: int
    values: dict[str, str]
    damage: Mapping[str, Damage] = _NO_DAMAGE
    """Canonical column (or ``ROW`` for the whole row) -> the damage intake detected."""


Cells = tuple[int, list[Any], bool]
"""A data row as the file holds it: ``(row_number, cells, usual)``.

``cells`` is the reader's own list (file order, .xlsx cells still typed); ``usual`` says
every column of the header is there and nothing about the row's shape or cell kinds is
damaged (no missing or extra values, no formula cells), so ``cells[index]`` for an index
of ``HeaderMap.positions`` is the cell's value as written. ``Batch.raw_row`` turns any
such row (usual or not) into its ``RawRow``.
"""


@dataclass(slots=True)
class Batch:
    """An opened batch file: its identity, header, and the stream of its data rows.

    ``cells`` (and ``rows``, the same stream as ``RawRow`` values) can be consumed once.
    Use as a context manager (or call ``close``) to release the file early when not
    consuming every row.
    """

    path: Path
    format: BatchFormat
    sha256: str
    """sha256 of the file's bytes, hex: identifies the file content (e.g. for a ledger)."""
    header: HeaderMap
    cells: Iterator[Cells]
    """The data rows, unconverted: the fast way in for validation (see ``Cells``)."""
    raw_row: Callable[[int, list[Any]], RawRow]
    """``RawRow`` of one item of ``cells``: text by canonical column, plus damage seen."""
    sheet: str | None = None
    _source: Any = field(default=None, repr=False)
    input_format: InputFormat = "payrun"
    """How the file was read: payrun's own columns, or a payroll export's profile."""
    export: ExportReading | None = None
    """A payroll export's reading (its totals, controls and pay date); None for payrun's."""

    @property
    def rows(self) -> Iterator[RawRow]:
        """The data rows as ``RawRow`` values, streaming (consumes ``cells``)."""
        raw_row = self.raw_row
        return (raw_row(number, cells) for number, cells, _usual in self.cells)

    @property
    def columns(self) -> tuple[str, ...]:
        """The canonical columns the file has, in file order."""
        return self.header.columns

    @property
    def warnings(self) -> tuple[RowProblem, ...]:
        """Header-level warnings (row 1): unknown columns, which are ignored."""
        return self.header.warnings

    def close(self) -> None:
        """Release the file; ``rows`` yields nothing more."""
        close = getattr(self._source, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> Batch:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def read_batch(
    path: Path | str,
    *,
    sheet: str | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
    input_format: str = "auto",
    file_source: bool = True,
) -> Batch:
    """Open a batch file, read its header and first row, and return the row stream.

    ``input_format`` is one of ``INPUT_FORMATS`` (``auto``: decided by the content). A
    payroll export is read whole (its control totals are checked before any row is
    given); its rows take the originating account as their source unless ``file_source``
    is false (``--source-account`` given).
    """
    path = Path(path)
    kind = sniff_format(path)
    export = _export_reading(path, kind, input_format)
    # A sheet name the user expects to be used
    if kind == "csv" and sheet is not None:
        what = "a CSV" if export is None else f"a {TITLES[export.input_format]}"
        msg = (
            f"--sheet {sheet} is for .xlsx workbooks, and {path.name} is {what} file: leave it out"
        )
        raise BatchFileError(msg, path=path)
    if export is not None:
        return _export_batch(path, export, max_rows, file_source=file_source)
    if kind == "csv":
        return _csv_batch(path, max_rows)
    return _xlsx_batch(path, sheet, max_rows)


def _csv_batch(path: Path, max_rows: int) -> Batch:
    """A payrun CSV batch: its header read and its first row found (the rest streams)."""
    source = open_csv(path)
    quotes = QuoteCheck(path, source.delimiter)
    records: Iterator[tuple[int, list[Any]]] = source.records(on_lines=quotes)
    try:
        _header_row, names = _header_cells(records, path, None)
        header = map_header(names, path=path)
        quotes.header = header
        suspect = amount_suspect(header, source.delimiter)
        cells = _csv_cells(records, header, _RowLimit(max_rows, path), suspect)
        raw_row = _csv_raw_row(header, suspect)
        first = next(cells, None)
    except BaseException:
        records.close()  # type: ignore[attr-defined]
        raise
    return _started(Batch(path, "csv", source.sha256, header, cells, raw_row, None, records), first)


def _xlsx_batch(path: Path, sheet: str | None, max_rows: int) -> Batch:
    """A payrun .xlsx batch: its sheet's header read and its first row found."""
    from payrun.intake._xlsx import open_xlsx

    workbook = open_xlsx(path, sheet=sheet, max_rows=max_rows)
    name = workbook.sheet_name
    records = workbook.records()
    try:
        header_row, names = _header_cells(records, path, name)
        if header_row in workbook.marks.hidden_rows:
            msg = (
                f"{path.name}: the header (row {header_row}) is hidden in sheet"
                f" {name!r}: unhide it, so the columns read are the ones shown"
            )
            raise BatchFileError(msg, path=path)
        header = map_header(names, path=path)
        _check_hidden_columns(header, workbook)
        cells = _xlsx_cells(records, header, workbook, _RowLimit(max_rows, path))
        raw_row = _xlsx_raw_row(header, workbook)
        first = next(cells, None)
    except BaseException:
        records.close()  # type: ignore[attr-defined]
        raise
    batch = Batch(path, "xlsx", workbook.sha256, header, cells, raw_row, name, records)
    return _started(batch, first)


def _started(batch: Batch, first: Cells | None) -> Batch:
    """``batch`` with its first row put back in front of its stream; refused without one."""
    if first is None:
        batch.close()
        msg = f"{batch.path.name} has a header but no payment rows"
        raise BatchFileError(msg, path=batch.path)
    batch.cells = itertools.chain((first,), batch.cells)
    return batch


def open_batch(path: Path | str, validation: ValidationOptions) -> Batch:
    """``read_batch`` as the validation options say (sheet, rows, input format, source)."""
    return read_batch(
        path,
        sheet=validation.sheet,
        max_rows=validation.max_rows,
        input_format=validation.input_format,
        file_source=validation.source_account is None,
    )


def read_export(path: Path | str, *, input_format: str = "auto") -> ExportReading | None:
    """A payroll export's reading (totals, controls, pay date), or None for a payrun file."""
    path = Path(path)
    return _export_reading(path, sniff_format(path), input_format)


def _export_reading(path: Path, kind: BatchFormat, input_format: str) -> ExportReading | None:
    if input_format not in INPUT_FORMATS:
        msg = f"--input-format {input_format!r}: use one of {', '.join(INPUT_FORMATS)}"
        raise BatchFileError(msg, path=path)
    if input_format == "payrun" or (kind != "csv" and input_format == "auto"):
        return None
    if kind != "csv":
        msg = f"{path.name} is an .xlsx workbook, not a {TITLES[input_format]} file"
        raise BatchFileError(msg, path=path)
    from payrun.intake._detect import detect_input_format

    chosen = detect_input_format(path) if input_format == "auto" else input_format
    if chosen == "payrun":
        return None
    from payrun.intake._exports import read_profile

    return read_profile(path, chosen)


def _export_batch(path: Path, export: ExportReading, max_rows: int, *, file_source: bool) -> Batch:
    if len(export.rows) > max_rows:
        raise _RowLimit(max_rows, path).exceeded()
    columns = EXPORT_COLUMNS if file_source else EXPORT_COLUMNS[:-1]
    header = HeaderMap(tuple((name, index) for index, name in enumerate(columns)), columns, ())
    names = columns

    def raw_row(number: int, cells: list[Any]) -> RawRow:
        return RawRow(number, dict(zip(names, cells, strict=False)))

    cells: Iterator[Cells] = ((number, row, True) for number, row in export.rows)
    return Batch(
        path, "csv", export.sha256, header, cells, raw_row, None, None, export.input_format, export
    )


def _header_cells(
    records: Iterator[tuple[int, list[Any]]], path: Path, sheet: str | None
) -> tuple[int, list[str]]:
    for number, cells in records:
        texts = [cell if isinstance(cell, str) else _cell_text("", cell)[0] for cell in cells]
        if any(text.strip() for text in texts):
            # Leading blank rows are skipped; numbers stay the sheet's
            return number, texts
    if sheet is not None:
        msg = (
            f"sheet {sheet!r} of {path.name} is empty (or a chart): name the sheet that holds"
            " the payments with --sheet"
        )
    else:
        msg = f"{path.name} is empty: a batch file needs a header row and payment rows"
    raise BatchFileError(msg, path=path)


class _RowLimit:
    """The ``--max-rows`` bound and its error (the row streams count in a local)."""

    __slots__ = ("_path", "limit")

    def __init__(self, limit: int, path: Path) -> None:
        self.limit, self._path = limit, path

    def exceeded(self) -> BatchFileError:
        """The error for a file with too many rows."""
        msg = (
            f"{self._path.name} has more than {self.limit:,} payment rows; split it"
            " (or raise --max-rows)"
        )
        return BatchFileError(msg, path=self._path)


def _csv_cells(
    records: Iterator[tuple[int, list[str]]],
    header: HeaderMap,
    limit: _RowLimit,
    suspect: AmountSuspect | None,
) -> Iterator[Cells]:
    width = len(header.headers)
    count, most = 0, limit.limit
    for number, fields in records:
        if suspect is not None and suspect(fields) is not None:
            if any(fields):
                count += 1
                if count > most:
                    raise limit.exceeded()
                yield number, fields, False
            continue
        # The usual row: not blank, every column there
        if len(fields) == width and fields[0]:
            count += 1
            if count > most:
                raise limit.exceeded()
            yield number, fields, True
            continue
        if not any(fields):
            # A blank line: spreadsheets show it as an empty row
            continue
        count += 1
        if count > most:
            raise limit.exceeded()
        size = len(fields)
        yield number, fields, size == width or (size > width and not _extra_values(fields, width))


def _extra_values(fields: list[str], width: int) -> bool:
    return any(field.strip() for field in fields[width:])


def _csv_raw_row(
    header: HeaderMap, suspect: AmountSuspect | None
) -> Callable[[int, list[Any]], RawRow]:
    names = tuple(name for name, _ in header.positions)
    pick = itemgetter(*(index for _, index in header.positions))
    width = len(header.headers)
    pad = [""] * width
    extra: Mapping[str, Damage] = MappingProxyType({ROW: Damage.EXTRA_VALUES})

    def raw_row(number: int, fields: list[Any]) -> RawRow:
        size = len(fields)
        if size > width and _extra_values(fields, width):
            return RawRow(number, dict(zip(names, pick(fields), strict=False)), extra)
        values = dict(zip(names, pick(fields + pad if size < width else fields), strict=False))
        kind = suspect(fields) if suspect is not None else None
        return RawRow(number, values, {"amount": kind} if kind is not None else _NO_DAMAGE)

    return raw_row


def _xlsx_cells(
    records: Iterator[tuple[int, list[Cell]]],
    header: HeaderMap,
    book: XlsxSource,
    limit: _RowLimit,
) -> Iterator[Cells]:
    needed = max((index for _, index in header.positions), default=-1) + 1
    marked, hidden = book.marks.cells, book.marks.hidden_rows
    merged = book.marks.merged_rows(index + book.first_column for _, index in header.positions)
    count, most = 0, limit.limit
    for number, cells in records:
        if (not cells or cells[0] == "") and all(cell == "" for cell in cells):
            continue
        count += 1
        if count > most:
            raise limit.exceeded()
        usual = len(cells) >= needed and not (marked and number in marked)
        yield number, cells, usual and not (hidden and number in hidden) and not merged(number)


def _xlsx_raw_row(header: HeaderMap, book: XlsxSource) -> Callable[[int, list[Any]], RawRow]:
    offset, positions = book.first_column, header.positions
    marked, hidden = book.marks.cells, book.marks.hidden_rows
    merged = book.marks.merged_rows(index + offset for _, index in positions)
    merged_columns = book.marks.merged_columns(index + offset for _, index in positions)
    hidden_row: Mapping[str, Damage] = MappingProxyType({ROW: Damage.HIDDEN})
    names = tuple(name for name, _ in positions)
    indexes = tuple(index for _, index in positions)
    needed = max(indexes, default=-1) + 1
    pick = itemgetter(*indexes) if len(indexes) > 1 else (lambda cells: (cells[indexes[0]],))
    from payrun.intake._xlsx import cell_text

    def raw_row(number: int, cells: list[Any]) -> RawRow:
        if len(cells) >= needed:
            picked = pick(cells)
        else:
            picked = tuple(cells[i] if i < len(cells) else "" for i in indexes)
        values: dict[str, str] = dict(zip(names, picked, strict=True))
        damage = _typed_cells(values, number, book, cell_text)
        if hidden and number in hidden:
            return RawRow(number, values, hidden_row)
        in_row = marked.get(number) if marked else None
        in_merge = merged_columns(number) if merged(number) else None
        if in_row or in_merge:
            damage = damage or {}
            for name, index in positions:
                kind = in_row.get(index + offset) if in_row else None
                if kind in _FORMAT_DAMAGE and name in damage:
                    # A date or lost zeros says more than the format that shows it
                    continue
                if kind is None and in_merge and index + offset in in_merge:
                    # An error value or a formula says more
                    kind = Damage.MERGED
                if kind is not None:
                    damage[name] = kind
        return RawRow(number, values, damage or _NO_DAMAGE)

    return raw_row


def _check_hidden_columns(header: HeaderMap, book: XlsxSource) -> None:
    """Refuse a sheet whose payment columns are hidden: the person checking cannot see them."""
    hidden = book.marks.hidden_columns
    names = [name for name, index in header.positions if index + book.first_column in hidden]
    if names:
        msg = (
            f"{book.path.name}: the {', '.join(names)} column{'s are' if len(names) > 1 else ' is'}"
            f" hidden in sheet {book.sheet_name!r}: unhide {'them' if len(names) > 1 else 'it'}"
            " (the person checking the file must see what is paid), save, and run again"
        )
        raise BatchFileError(msg, path=book.path)


def _typed_cells(
    values: dict[str, Any],
    number: int,
    book: XlsxSource,
    cell_text: Callable[[str, Cell], tuple[str, Damage | None]],
) -> dict[str, Damage] | None:
    """Turn non-text cells into text in place; return the damage their types show."""
    damage: dict[str, Damage] | None = None
    for name, cell in values.items():
        # Text cells are most cells: no conversion, no damage
        if type(cell) is str:
            if len(cell) > MAX_FIELD_BYTES:
                msg = f"{book.path.name}: row {number} has a cell over 1 MB in {name}"
                raise BatchFileError(msg, path=book.path)
            continue
        text, kind = cell_text(name, cell)
        # Replacing a value while iterating keeps the keys: allowed
        values[name] = text
        if kind is not None:
            if damage is None:
                damage = {}
            damage[name] = kind
    return damage


_WORKBOOK_SUFFIXES = (".xlsx", ".xlsm", ".xls")


def extension_note(path: Path) -> str | None:
    """A warning when a file named like a workbook holds CSV text (it is read as CSV, by
    its content, as Excel warns when a file's extension and content differ); else None."""
    if path.suffix.lower() not in _WORKBOOK_SUFFIXES:
        return None
    try:
        kind = sniff_format(path)
    except BatchFileError:
        # Reading the file will say what is wrong with it
        return None
    if kind != "csv":
        return None
    return f"{path.name} holds CSV text, not an Excel workbook: read as CSV"


def sheet_note(path: Path, sheet: str | None) -> tuple[str, str | None] | None:
    """For an .xlsx: which sheet is read, and a warning when Excel opens the workbook on
    another one (the person checking may have looked at that one); None for a CSV."""
    try:
        if sniff_format(path) == "csv":
            return None
    except BatchFileError:
        # Reading the file will say what is wrong with it
        return None
    from payrun.intake._zip import sheet_choice

    choice = sheet_choice(path, sheet)
    if choice is None:
        return None
    chosen, active = choice
    warning = None
    if sheet is None and active != chosen:
        warning = (
            f"note: Excel opens this workbook on sheet {active!r}: if that is the sheet to"
            f" pay, name it with --sheet {active!r}"
        )
    return f"reading sheet {chosen!r} of {path.name}", warning


def _cell_text(name: str, cell: Cell) -> tuple[str, Damage | None]:
    """A header cell that is not text (only a workbook has such cells) as text."""
    from payrun.intake._xlsx import cell_text

    return cell_text(name, cell)


def __getattr__(name: str) -> Any:
    """``MAX_UNCOMPRESSED_BYTES`` comes from the .xlsx reader, loaded when first asked for."""
    if name == "MAX_UNCOMPRESSED_BYTES":
        from payrun.intake._zip import MAX_UNCOMPRESSED_BYTES

        return MAX_UNCOMPRESSED_BYTES
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)
