"""Decide a batch file's format from its first bytes, never from its extension.

Input: a path. Output: ``"csv"`` or ``"xlsx"``. Raises ``BatchFileError`` for a missing
file, a directory, a pipe or device, an empty or binary file, a password-protected or
legacy .xls workbook.
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Literal

from payrun.errors import BatchFileError

__all__ = ["BatchFormat", "sniff_format"]

BatchFormat = Literal["csv", "xlsx"]

_ZIP_MAGIC = b"PK\x03\x04"
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_ENCRYPTED_STREAM = "EncryptedPackage".encode("utf-16-le")
_SNIFF_BYTES = 65_536
_OLE_SCAN_BYTES = 4 * 1_048_576
_BINARY_MAGICS = (b"%PDF", b"\x89PNG", b"\xff\xd8\xff", b"GIF8", b"\x1f\x8b", b"7z\xbc\xaf")
_TEXT_CONTROLS = frozenset(b"\t\n\r\x0c")
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
_SPACE = 0x20
_BINARY_SAMPLE = 4096
_BINARY_RATIO = 20
"""Text with more than 1 control character in 20 is binary."""


def sniff_format(path: Path) -> BatchFormat:
    """Return the file's format by content; raise ``BatchFileError`` when it is unusable."""
    head = _read_head(path)
    if not head.strip(b" \t\r\n\xef\xbb\xbf"):
        msg = f"{path.name} is empty: a batch file needs a header row and payment rows"
        raise BatchFileError(msg, path=path)
    if head.startswith(_ZIP_MAGIC):
        return "xlsx"
    if head.startswith(_OLE_MAGIC):
        _refuse_ole(path)
    if head.startswith(_UTF16_BOMS):
        msg = (
            f"{path.name} is UTF-16 text (Excel's 'Unicode Text'): save it as 'CSV UTF-8'"
            " and try again"
        )
        raise BatchFileError(msg, path=path)
    if head.startswith(_BINARY_MAGICS) or _looks_binary(head):
        msg = f"{path.name} is not a CSV or .xlsx batch file (it holds binary data)"
        raise BatchFileError(msg, path=path)
    return "csv"


def _read_head(path: Path) -> bytes:
    try:
        # Never opened: a pipe's bytes could be read only once, and a rerun needs the same file
        if not stat.S_ISREG(path.stat().st_mode) and not path.is_dir():
            msg = (
                f"{path} is not a regular file (a pipe or a device): save the batch to a file"
                " and give that file's path"
            )
            raise BatchFileError(msg, path=path)
        with path.open("rb") as handle:
            return handle.read(_SNIFF_BYTES)
    except FileNotFoundError:
        msg = f"cannot find the batch file {path}"
    except IsADirectoryError:
        # A Numbers document may be a folder (a macOS package)
        from payrun.intake._zip import other_spreadsheet

        msg = other_spreadsheet(path) or f"{path} is a directory, not a batch file"
    except OSError as exc:
        msg = f"cannot read the batch file {path}: {exc.strerror or exc}"
    raise BatchFileError(msg, path=path)


def _looks_binary(head: bytes) -> bool:
    """NUL bytes, or many control characters, mean this is not text."""
    if b"\x00" in head:
        return True
    sample = head[:_BINARY_SAMPLE]
    controls = sum(1 for byte in sample if byte < _SPACE and byte not in _TEXT_CONTROLS)
    return controls * _BINARY_RATIO > len(sample)


def _refuse_ole(path: Path) -> None:
    """An OLE file is either an encrypted .xlsx or an old .xls: say which, and the fix."""
    with path.open("rb") as handle:
        body = handle.read(_OLE_SCAN_BYTES)
    if _ENCRYPTED_STREAM in body:
        msg = f"{path.name} is password-protected: remove the password and save again"
    else:
        msg = f"{path.name} is an old Excel 97-2003 .xls workbook: save it as .xlsx or CSV"
    raise BatchFileError(msg, path=path)
