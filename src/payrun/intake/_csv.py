"""CSV batch files: encoding and delimiter detection, then a stream of records.

Input: a path already sniffed as text. Output: ``CsvSource`` with the file's sha256, the
detected encoding (utf-8, utf-8-sig or cp1252) and delimiter (``,`` or ``;``), and
``records()``, a generator of ``(row_number, fields)`` that never holds the whole file.
Raises ``BatchFileError`` for undecodable text, NUL bytes, fields over 1 MB and, with a
``QuoteCheck``, a quote that swallows lines of the file;
``csv.Error`` and ``UnicodeDecodeError`` are translated here and nowhere else.
"""

from __future__ import annotations

import codecs
import csv
import hashlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from payrun._redaction import excerpt
from payrun.errors import BatchFileError
from payrun.intake._headers import HeaderMap

__all__ = ["MAX_FIELD_BYTES", "CsvSource", "QuoteCheck", "open_csv"]

MAX_FIELD_BYTES = 1_048_576
"""A field over 1 MB is a broken file (often an unclosed quote), not a payment."""
_CHUNK = 1_048_576
_CP1252_UNDEFINED = (b"\x81", b"\x8d", b"\x8f", b"\x90", b"\x9d")
_DELIMITERS = (",", ";")
_PAST_END = "\x00"


@dataclass(frozen=True, slots=True)
class CsvSource:
    """A CSV file whose encoding and delimiter are known."""

    path: Path
    sha256: str
    encoding: str
    delimiter: str

    def records(self, *, on_lines: QuoteCheck | None = None) -> Iterator[tuple[int, list[str]]]:
        """Yield ``(row_number, fields)``; the header is row 1, as in a spreadsheet.

        A row whose quoted fields ran across line breaks (it took several lines of the
        file) is given to ``on_lines`` before it is yielded, which may refuse the file.
        """
        # csv's field limit is process-wide; 1 MB is a bound every caller can live with.
        csv.field_size_limit(MAX_FIELD_BYTES)
        numbers = itertools.count(1)
        try:
            with self.path.open(encoding=self.encoding, newline="") as handle:
                # zip takes the row's number before reading it: the failing row is the
                # number before the next one (read below, after an error)
                if on_lines is None:
                    reader = csv.reader(handle, delimiter=self.delimiter, strict=False)
                    yield from zip(numbers, reader, strict=False)
                    return
                # One line past the end (the file holds no NUL): a quote never closed
                # swallows it too, which is how the reader's state at the end shows
                lines = itertools.chain(handle, [_PAST_END])
                reader = csv.reader(lines, delimiter=self.delimiter, strict=False)
                line = 0
                for number, fields in zip(numbers, reader, strict=False):
                    if fields == [_PAST_END]:
                        return
                    if fields and fields[-1].endswith(_PAST_END):
                        on_lines.never_closed(number, line + 1, reader.line_num - 1, fields)
                    if reader.line_num - line > 1:
                        on_lines(number, line + 1, reader.line_num, fields)
                    line = reader.line_num
                    yield number, fields
        except csv.Error as exc:
            row = next(numbers) - 1
            raise BatchFileError(_csv_message(self.path, row, exc), path=self.path) from exc
        except UnicodeDecodeError as exc:
            msg = f"{self.path.name}: row {next(numbers) - 1} is not valid {self.encoding} text"
            raise BatchFileError(msg, path=self.path) from exc
        except OSError as exc:
            msg = f"cannot read the batch file {self.path}: {exc.strerror or exc}"
            raise BatchFileError(msg, path=self.path) from exc


class QuoteCheck:
    """Refuse a row whose quote swallowed lines of the file: an unclosed ``"`` makes the
    rest of the file one cell, and every row after it vanishes.

    A line break inside a column payrun reads (payee name, sort code, account number,
    amount, reference, source account, row id, currency) is always that: none of them
    holds one. A column payrun ignores (notes, say) may hold text over several lines, but
    not a line that reads as a row carrying every column payrun reads (as many delimiters
    as the last of them needs), and never a quote that is not closed before the file ends.
    ``header`` is set once the header row is read; rows before it are checked only for
    a quote never closed.
    """

    def __init__(self, path: Path, delimiter: str) -> None:
        self.path, self.delimiter = path, delimiter
        self.header: HeaderMap | None = None

    def __call__(self, row: int, first: int, last: int, fields: list[str]) -> None:
        """Check a row that took lines ``first`` to ``last`` of the file."""
        if self.header is None:
            return
        read = {index: name for name, index in self.header.positions}
        last_read = max(read, default=0)
        for index, text in enumerate(fields):
            if "\n" not in text and "\r" not in text:
                continue
            if index not in read and not self._holds_a_row(text, last_read):
                continue
            raise self._refusal(row, self._column(index), first, last)

    def never_closed(self, row: int, first: int, last: int, fields: list[str]) -> None:
        """Refuse a row whose last cell opens a quote that the file never closes."""
        raise self._refusal(row, self._column(len(fields) - 1), first, last, at_end=True)

    def _column(self, index: int) -> str:
        """The column's name as the messages give it: bare for columns payrun reads."""
        if self.header is None:
            return f"{index + 1}"
        name = {index: name for name, index in self.header.positions}.get(index)
        if name is not None:
            return name
        headers = self.header.headers
        return excerpt(headers[index], 40) if index < len(headers) else f"{index + 1}"

    def _holds_a_row(self, text: str, last_read: int) -> bool:
        """Whether a swallowed line reaches the last column payrun reads (short rows do)."""
        lines = text.splitlines()[1:]
        return any(line.count(self.delimiter) >= last_read for line in lines)

    def _refusal(
        self, row: int, column: str, first: int, last: int, *, at_end: bool = False
    ) -> BatchFileError:
        swallowed = last - first
        closed = " is never closed" if at_end else " is not closed on that line"
        rest = ", all the file has left" if at_end else ""
        msg = (
            f'{self.path.name}: a quote (") opens a cell in row {row} (line {first} of the'
            f" file), column {column}, and{closed}: it swallows the next"
            f" {swallowed} line{'s' if swallowed != 1 else ''} (to line {last}){rest}, so the rows"
            " there are not read; close or remove the quote, then run again"
        )
        return BatchFileError(msg, path=self.path)


def open_csv(path: Path) -> CsvSource:
    """Detect encoding and delimiter (one pass over the bytes that also hashes the file)."""
    sha256, encoding = _scan(path)
    try:
        with path.open(encoding=encoding, newline="") as handle:
            first = handle.readline(_CHUNK)
            # Blank lines above the header
            while first and not first.strip():
                first = handle.readline(_CHUNK)
    except (OSError, UnicodeDecodeError) as exc:
        msg = f"cannot read the batch file {path}: {exc}"
        raise BatchFileError(msg, path=path) from exc
    # Excel's own delimiter line
    if first.strip().lower() in {"sep=;", "sep=,"}:
        msg = (
            f"{path.name} starts with Excel's {first.strip()!r} line: delete that line (the"
            " header must be the first line) and run again"
        )
        raise BatchFileError(msg, path=path)
    delimiter = max(_DELIMITERS, key=first.count)
    return CsvSource(path, sha256, encoding, delimiter)


def _scan(path: Path) -> tuple[str, str]:
    """Hash the file and decide its encoding: UTF-8 (with or without BOM), else cp1252."""
    digest = hashlib.sha256()
    decoder = codecs.getincrementaldecoder("utf-8")()
    utf8 = cp1252 = True
    with path.open("rb") as handle:
        head = handle.read(len(codecs.BOM_UTF8))
        handle.seek(0)
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
            if b"\x00" in chunk:
                msg = f"{path.name} is not a CSV or .xlsx batch file (it holds NUL bytes)"
                raise BatchFileError(msg, path=path)
            cp1252 = cp1252 and not any(byte in chunk for byte in _CP1252_UNDEFINED)
            utf8 = utf8 and _still_utf8(decoder, chunk)
    utf8 = utf8 and _still_utf8(decoder, b"", final=True)
    bom = head == codecs.BOM_UTF8
    if utf8:
        return digest.hexdigest(), "utf-8-sig" if bom else "utf-8"
    if cp1252 and not bom:
        return digest.hexdigest(), "cp1252"
    msg = f"{path.name} is not UTF-8 or Windows-1252 text: save it as 'CSV UTF-8' and try again"
    raise BatchFileError(msg, path=path)


def _still_utf8(decoder: codecs.IncrementalDecoder, chunk: bytes, *, final: bool = False) -> bool:
    if chunk.isascii() and not decoder.getstate()[0] and not final:
        # ASCII is valid UTF-8: skip the decode on the common path
        return True
    try:
        decoder.decode(chunk, final=final)
    except UnicodeDecodeError:
        return False
    return True


def _csv_message(path: Path, row: int, exc: csv.Error) -> str:
    if "field larger than field limit" in str(exc):
        return (
            f'{path.name}: row {row} has a field over 1 MB; look for a quote (") that is'
            " never closed"
        )
    return f"{path.name}: row {row} cannot be read as CSV ({exc})"
