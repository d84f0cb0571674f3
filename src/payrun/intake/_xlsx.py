"""Excel .xlsx batch files, read with python-calamine (about 14x faster than openpyxl).

Input: a path sniffed as a zip. Output: ``XlsxSource`` whose ``records()`` yields
``(row_number, cells)`` with calamine's typed cells, and ``cell_text`` turning one cell into
text plus the spreadsheet damage its type reveals (a sort code stored as a number, a date
where digits belong, a formula). Raises ``BatchFileError``; calamine's errors are translated
here and nowhere else.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

import python_calamine as calamine

from payrun.errors import BatchFileError
from payrun.intake._damage import Damage
from payrun.intake._extent import extent_problem
from payrun.intake._zip import (
    SheetMarks,
    check_workbook_zip,
    sheet_extent,
    sheet_marks,
    sheet_states,
)

__all__ = ["DIGIT_COLUMNS", "Cell", "XlsxSource", "cell_text", "open_xlsx"]

Cell = int | float | str | bool | dt.time | dt.date | dt.datetime | dt.timedelta
DIGIT_COLUMNS = frozenset({"sort_code", "account_number", "source_account"})
"""Columns of digits that a numeric cell damages by dropping leading zeros."""
_EXACT_FLOAT_LIMIT = 1e15
_EXCEL_DIGITS = 15
_CHUNK = 1_048_576
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class XlsxSource:
    """One sheet of a workbook, opened and checked."""

    path: Path
    sha256: str
    sheet_name: str
    marks: SheetMarks
    """Formula, error and merged cells and hidden rows, which calamine does not report."""
    first_column: int
    _sheet: calamine.CalamineSheet

    def records(self) -> Iterator[tuple[int, list[Cell]]]:
        """Yield ``(row_number, cells)`` from row 1; ``cells[0]`` is column ``first_column``."""
        rows = _guard(self.path, self._sheet.iter_rows)
        # One guard around the loop, not one call per row
        try:
            yield from enumerate(rows, start=1)
        except (KeyboardInterrupt, SystemExit, GeneratorExit):
            raise
        except BaseException as exc:
            raise _translated(self.path, exc) from exc


def open_xlsx(path: Path, *, sheet: str | None, max_rows: int) -> XlsxSource:
    """Check the zip, open the workbook and pick the first sheet or the one named.

    A sheet whose cells reach past ``max_rows`` payment rows (and the header), or too far
    to the right, is refused before calamine lays it out in one grid (it would abort the
    process asking for more memory than there is).
    """
    check_workbook_zip(path)
    book = _guard(path, lambda: calamine.CalamineWorkbook.from_path(str(path)))
    names = list(book.sheet_names)
    if not names:
        msg = f"{path.name} has no sheets"
        raise BatchFileError(msg, path=path)
    index = _sheet_index(path, names, sheet)
    if sheet is None:
        _check_first_sheet_visible(path, names)
    problem = extent_problem(sheet_extent(path, index), max_rows=max_rows)
    if problem is not None:
        msg = f"{path.name}: sheet {names[index]!r} {problem}"
        raise BatchFileError(msg, path=path)
    # calamine releases the GIL while it parses the sheet: scan its XML meanwhile.
    marks_found = _Background(lambda: sheet_marks(path, index))
    try:
        found = _guard(path, lambda: book.get_sheet_by_index(index))
    except BaseException:
        # The sheet's own error is the one to report
        marks_found.wait()
        raise
    marks = marks_found.result()
    start = found.start
    return XlsxSource(path, _sha256(path), names[index], marks, start[1] if start else 0, found)


def _check_first_sheet_visible(path: Path, names: list[str]) -> None:
    """Refuse to pay from a hidden first sheet: the person checking the file cannot see it."""
    states = sheet_states(path)
    if states and states[0] != "visible":
        shown = [name for name, state in zip(names, states, strict=False) if state == "visible"]
        listed = ", ".join(repr(name) for name in shown[:20]) or "none"
        msg = (
            f"the first sheet of {path.name}, {names[0]!r}, is hidden: name the sheet to pay"
            f" with --sheet (visible sheets: {listed})"
        )
        raise BatchFileError(msg, path=path)


def cell_text(column: str, value: Cell) -> tuple[str, Damage | None]:
    """Turn a typed cell into text, with the damage its type shows for ``column``."""
    if isinstance(value, str):
        return value, None
    if isinstance(value, bool):
        return ("TRUE" if value else "FALSE"), None
    if isinstance(value, int | float):
        return _number_text(column, value)
    if isinstance(value, dt.date | dt.time):
        return value.isoformat(), Damage.DATE
    return str(value), Damage.DATE


def _number_text(column: str, value: float) -> tuple[str, Damage | None]:
    digits = column in DIGIT_COLUMNS
    if float(value).is_integer() and abs(value) < _EXACT_FLOAT_LIMIT:
        return str(int(value)), (Damage.NUMBER if digits else None)
    # Excel keeps 15 significant digits and shows no more: 19.99+39.98 is stored as
    # 59.970000000000006, which Excel (and the person checking) sees as 59.97.
    text = f"{float(value):.{_EXCEL_DIGITS}g}"
    if "e" in text:
        return text.upper(), Damage.SCIENTIFIC
    return text, (Damage.NUMBER if digits else None)


def _sheet_index(path: Path, names: list[str], sheet: str | None) -> int:
    if sheet is None:
        return 0
    if sheet in names:
        return names.index(sheet)
    folded = [name.strip().casefold() for name in names]
    if sheet.strip().casefold() in folded:
        return folded.index(sheet.strip().casefold())
    listed = ", ".join(repr(name) for name in names[:20])
    msg = f"{path.name} has no sheet named {sheet!r}; its sheets are: {listed}"
    raise BatchFileError(msg, path=path)


class _Background(Generic[_T]):
    """One call run on a thread: ``result`` waits for it and returns (or raises) its outcome."""

    def __init__(self, call: Callable[[], _T]) -> None:
        self._call = call
        self._outcome: list[_T] = []
        self._failure: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, name="payrun-xlsx", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._outcome.append(self._call())
        except BaseException as exc:
            self._failure.append(exc)

    def wait(self) -> None:
        """Wait for the call to end, ignoring its outcome."""
        self._thread.join()

    def result(self) -> _T:
        """Wait for the call to end and return its value, or raise its exception."""
        self._thread.join()
        if self._failure:
            raise self._failure[0]
        return self._outcome[0]


def _guard(path: Path, call: Callable[[], _T]) -> _T:
    """Run one calamine call, turning anything it raises into ``BatchFileError``."""
    try:
        return call()
    except (KeyboardInterrupt, SystemExit, GeneratorExit):
        raise
    # calamine's Rust panics arrive as pyo3 PanicException, a BaseException: catch them too.
    except BaseException as exc:
        raise _translated(path, exc) from exc


def _translated(path: Path, exc: BaseException) -> BatchFileError:
    """The ``BatchFileError`` for whatever calamine raised."""
    if isinstance(exc, calamine.PasswordError):
        msg = f"{path.name} is password-protected: remove the password and save again"
        return BatchFileError(msg, path=path)
    detail = str(exc).splitlines()[0][:120] if str(exc) else ""
    # A lone word such as "t" tells nothing
    said = f" ({detail})" if " " in detail else ""
    msg = f"{path.name} is a corrupt .xlsx workbook{said}: open it in Excel and save again"
    return BatchFileError(msg, path=path)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
