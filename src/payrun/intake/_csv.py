"""CSV batch files: encoding and delimiter detection, then a stream of records.

Input: a path already sniffed as text. Output: ``CsvSource`` with the file's sha256, the
detected encoding (utf-8, utf-8-sig or cp1252) and delimiter (``,`` or ``;``), and
``records()``, a generator of ``(row_number, fields)`` that never holds the whole file.
Raises ``BatchFileError`` for undecodable text, NUL bytes and fields over 1 MB;
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

from payrun.errors import BatchFileError

__all__ = ["MAX_FIELD_BYTES", "CsvSource", "open_csv"]

MAX_FIELD_BYTES = 1_048_576
"""A field over 1 MB is a broken file (often an unclosed quote), not a payment."""
_CHUNK = 1_048_576
_CP1252_UNDEFINED = (b"\x81", b"\x8d", b"\x8f", b"\x90", b"\x9d")
_DELIMITERS = (",", ";")


@dataclass(frozen=True, slots=True)
class CsvSource:
    """A CSV file whose encoding and delimiter are known."""

    path: Path
    sha256: str
    encoding: str
    delimiter: str

    def records(self) -> Iterator[tuple[int, list[str]]]:
        """Yield ``(row_number, fields)``; the header is row 1, as in a spreadsheet."""
        # csv's field limit is process-wide; 1 MB is a bound every caller can live with.
        csv.field_size_limit(MAX_FIELD_BYTES)
        numbers = itertools.count(1)
        try:
            with self.path.open(encoding=self.encoding, newline="") as handle:
                reader = csv.reader(handle, delimiter=self.delimiter, strict=False)
                # zip takes the row's number before reading it: the failing row is the
                # number before the next one (read below, after an error)
                yield from zip(numbers, reader, strict=False)
        except csv.Error as exc:
            row = next(numbers) - 1
            raise BatchFileError(_csv_message(self.path, row, exc), path=self.path) from exc
        except UnicodeDecodeError as exc:
            msg = f"{self.path.name}: row {next(numbers) - 1} is not valid {self.encoding} text"
            raise BatchFileError(msg, path=self.path) from exc
        except OSError as exc:
            msg = f"cannot read the batch file {self.path}: {exc.strerror or exc}"
            raise BatchFileError(msg, path=self.path) from exc


def open_csv(path: Path) -> CsvSource:
    """Detect encoding and delimiter (one pass over the bytes that also hashes the file)."""
    sha256, encoding = _scan(path)
    try:
        with path.open(encoding=encoding, newline="") as handle:
            first = handle.readline(_CHUNK)
            while first and not first.strip():  # blank lines above the header
                first = handle.readline(_CHUNK)
    except (OSError, UnicodeDecodeError) as exc:
        msg = f"cannot read the batch file {path}: {exc}"
        raise BatchFileError(msg, path=path) from exc
    if first.strip().lower() in {"sep=;", "sep=,"}:  # Excel's own delimiter line
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
        return True  # ASCII is valid UTF-8: skip the decode on the common path
    try:
        decoder.decode(chunk, final=final)
    except UnicodeDecodeError:
        return False
    return True


def _csv_message(path: Path, row: int, exc: csv.Error) -> str:
    if "field larger than field limit" in str(exc):
        return (
            f"{path.name}: row {row} has a field over 1 MB; look for a quote (\") that is"
            " never closed"
        )
    return f"{path.name}: row {row} cannot be read as CSV ({exc})"
