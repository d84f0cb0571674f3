"""Intake: formats by content, encodings, delimiters, header matching, damage, bad files."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import zipfile
from pathlib import Path
from typing import Any

import openpyxl  # type: ignore[import-untyped]
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from payrun.errors import BatchFileError
from payrun.intake import ROW, Damage, RawRow, read_batch

HEADER = ["payee_name", "sort_code", "account_number", "amount", "reference"]
GOOD = ["Ada Lovelace", "12-34-56", "01234567", "1,000.50", "SALARY NOV"]


def write_csv(
    path: Path, rows: list[list[str]], *, encoding: str = "utf-8", sep: str = ","
) -> Path:
    """Write rows as CSV text (quoting every field) in the given encoding."""
    lines = [sep.join('"' + cell.replace('"', '""') + '"' for cell in row) for row in rows]
    path.write_bytes(("\r\n".join(lines) + "\r\n").encode(encoding))
    return path


def write_xlsx(path: Path, rows: list[list[Any]], *, title: str = "Sheet1") -> Path:
    """Write rows into the first sheet of a new workbook."""
    book = openpyxl.Workbook()
    book.active.title = title
    for row in rows:
        book.active.append(row)
    book.save(path)
    return path


def read_all(path: Path, **kwargs: Any) -> list[RawRow]:
    """Read every raw row of a batch file."""
    with read_batch(path, **kwargs) as batch:
        return list(batch.rows)


@pytest.mark.parametrize("encoding", ["utf-8", "utf-8-sig", "cp1252"])
@pytest.mark.parametrize("sep", [",", ";"])
def test_csv_encodings_and_delimiters(tmp_path: Path, encoding: str, sep: str) -> None:
    """UTF-8, UTF-8 with BOM and cp1252, comma or semicolon, all read the same text."""
    row = ["Zoë Brontë", "12-34-56", "01234567", "£1,000.50", "Café; bill, £"]
    path = write_csv(tmp_path / "b.csv", [HEADER, row], encoding=encoding, sep=sep)
    rows = read_all(path)
    assert [r.values for r in rows] == [dict(zip(HEADER, row, strict=True))]
    assert rows[0].row == 2


@pytest.mark.parametrize("text", ["Sort Code", "sortcode", "SORT-CODE", "sort_code", " Sort_Code "])
def test_header_matching_ignores_case_spaces_hyphens(tmp_path: Path, text: str) -> None:
    """Header cells match ignoring case, spaces, hyphens and underscores."""
    path = write_csv(tmp_path / "b.csv", [[HEADER[0], text, *HEADER[2:]], GOOD])
    with read_batch(path) as batch:
        assert "sort_code" in batch.columns


@pytest.mark.parametrize("alias", ["name", "Account Holder", "beneficiary"])
def test_payee_name_aliases(tmp_path: Path, alias: str) -> None:
    """name, account_holder and beneficiary all mean payee_name."""
    path = write_csv(tmp_path / "b.csv", [[alias, *HEADER[1:]], GOOD])
    assert read_all(path)[0].values["payee_name"] == "Ada Lovelace"


def test_unknown_columns_are_warnings(tmp_path: Path) -> None:
    """An unknown column is ignored with a row-1 warning naming it."""
    path = write_csv(tmp_path / "b.csv", [[*HEADER, "Notes"], [*GOOD, "hello"]])
    with read_batch(path) as batch:
        assert [(w.row, w.column) for w in batch.warnings] == [(1, "Notes")]
        assert "Notes" not in next(batch.rows).values


def test_blank_lines_keep_spreadsheet_row_numbers(tmp_path: Path) -> None:
    """Blank lines are skipped but still count, as in a spreadsheet."""
    path = tmp_path / "b.csv"
    path.write_text(
        ",".join(HEADER) + "\n\n" + ",".join(GOOD[:3]) + ",12,x\n,,,,\n" + "A,1,2,3,4\n"
    )
    assert [r.row for r in read_all(path)] == [3, 5]


def test_short_rows_are_padded_and_extra_values_flagged(tmp_path: Path) -> None:
    """Missing trailing cells read as blank; extra non-blank values mark the row."""
    path = tmp_path / "b.csv"
    path.write_text(",".join(HEADER) + "\nA,123456,12345678,5\nB,123456,12345678,1,500.00,REF\n")
    short, extra = read_all(path)
    assert short.values["reference"] == "" and not short.damage
    assert extra.damage == {ROW: Damage.EXTRA_VALUES}


def test_sha256_is_the_file_hash(tmp_path: Path) -> None:
    """Batch.sha256 is the sha256 of the file's bytes, for CSV and .xlsx alike."""
    for path in (
        write_csv(tmp_path / "b.csv", [HEADER, GOOD]),
        write_xlsx(tmp_path / "b.xlsx", [HEADER, GOOD]),
    ):
        with read_batch(path) as batch:
            assert batch.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def test_format_is_decided_by_content(tmp_path: Path) -> None:
    """A workbook named .csv and a CSV named .txt are both read for what they are."""
    book = write_xlsx(tmp_path / "really-xlsx.csv", [HEADER, GOOD])
    text = write_csv(tmp_path / "really-csv.txt", [HEADER, GOOD])
    with read_batch(book) as first, read_batch(text) as second:
        assert (first.format, second.format) == ("xlsx", "csv")


def test_xlsx_reads_text_and_numbers(tmp_path: Path) -> None:
    """Text cells keep leading zeros; an amount cell may be a number."""
    path = write_xlsx(tmp_path / "b.xlsx", [HEADER, ["Ada", "012345", "01234567", 1234.5, "R"]])
    (row,) = read_all(path)
    assert row.values == dict(
        zip(HEADER, ["Ada", "012345", "01234567", "1234.5", "R"], strict=True)
    )
    assert not row.damage


def test_xlsx_damage_markers(tmp_path: Path) -> None:
    """Numeric digit cells, dates, formulas and scientific numbers are marked as damage."""
    rows: list[list[Any]] = [
        HEADER,
        ["Ada", 12345, 1234567, 10, "R"],
        ["Bob", dt.date(2045, 3, 12), "12345678", 10, "R"],
        ["=A1", "123456", 1.2345678e17, "=1+2", "R"],
    ]
    number, date, formula = read_all(write_xlsx(tmp_path / "b.xlsx", rows))
    assert number.damage == {"sort_code": Damage.NUMBER, "account_number": Damage.NUMBER}
    assert number.values["sort_code"] == "12345"
    assert date.damage == {"sort_code": Damage.DATE}
    assert formula.damage == {
        "payee_name": Damage.FORMULA,
        "account_number": Damage.SCIENTIFIC,
        "amount": Damage.FORMULA,
    }


def test_xlsx_named_sheet_and_offset_data(tmp_path: Path) -> None:
    """--sheet picks a sheet; data that starts lower or further right keeps its row numbers."""
    path = tmp_path / "b.xlsx"
    book = openpyxl.Workbook()
    book.active.title = "Notes"
    sheet = book.create_sheet("Pay")
    for offset, cells in enumerate([HEADER, GOOD]):
        for column, value in enumerate(cells, start=2):
            sheet.cell(row=1 + offset * 2, column=column, value=value)
    sheet["C3"] = "=B1"
    book.save(path)
    (found,) = read_all(path, sheet="Pay")
    assert found.row == 3
    assert found.damage == {"sort_code": Damage.FORMULA}


def _ole(tmp_path: Path, body: bytes) -> Path:
    path = tmp_path / "b.xlsx"
    path.write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 100 + body)
    return path


def _bad_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """Each kind of unusable file, with a word its one-line message must contain."""
    (tmp_path / "dir").mkdir()
    zipped = tmp_path / "notbook.xlsx"
    with zipfile.ZipFile(zipped, "w") as archive:
        archive.writestr("hello.txt", "hi")
    good = write_xlsx(tmp_path / "good.xlsx", [HEADER, GOOD])
    corrupt = tmp_path / "corrupt.xlsx"
    corrupt.write_bytes(good.read_bytes()[:400])
    (tmp_path / "empty.csv").write_bytes(b"")
    (tmp_path / "bom.csv").write_bytes(b"\xef\xbb\xbf\r\n")
    os.mkfifo(tmp_path / "pipe.csv")  # no writer: opening it would block for ever
    return {
        "missing": (tmp_path / "nope.csv", "cannot find"),
        "directory": (tmp_path / "dir", "directory"),
        "pipe": (tmp_path / "pipe.csv", "is not a regular file (a pipe or a device)"),
        "device": (Path("/dev/null"), "save the batch to a file"),
        "empty": (tmp_path / "empty.csv", "empty"),
        "bom only": (tmp_path / "bom.csv", "empty"),
        "header only": (write_csv(tmp_path / "h.csv", [HEADER]), "no payment rows"),
        "binary": (_write(tmp_path / "bin.csv", bytes(range(256)) * 4), "binary"),
        "zip not workbook": (zipped, "not an Excel"),
        "corrupt workbook": (corrupt, "corrupt"),
        "password": (_ole(tmp_path, "EncryptedPackage".encode("utf-16-le")), "password-protected"),
        "legacy xls": (_ole(tmp_path / "dir", b"Workbook"), ".xls"),
        "column absent": (write_csv(tmp_path / "c.csv", [HEADER[:3], GOOD[:3]]), "amount"),
        "repeated header": (write_csv(tmp_path / "r.csv", [[*HEADER, "Sort Code"], GOOD]), "twice"),
        "huge field": (
            write_csv(tmp_path / "f.csv", [HEADER, [*GOOD[:4], "x" * 1_100_000]]),
            "1 MB",
        ),
        "invalid text": (_write(tmp_path / "t.csv", b"\xef\xbb\xbfa,b\n\x81\x8d\n"), "UTF-8"),
        "utf-16": (
            _write(tmp_path / "u.csv", ",".join(HEADER).encode("utf-16")),
            "UTF-16 text (Excel's 'Unicode Text'): save it as 'CSV UTF-8'",
        ),
    }


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    "kind",
    [
        "missing",
        "directory",
        "pipe",
        "device",
        "empty",
        "bom only",
        "header only",
        "binary",
        "zip not workbook",
        "corrupt workbook",
        "password",
        "legacy xls",
        "column absent",
        "repeated header",
        "huge field",
        "invalid text",
        "utf-16",
    ],
)
def test_bad_files_raise_one_line(tmp_path: Path, kind: str) -> None:
    """Every unusable file raises BatchFileError with one line that says what is wrong."""
    path, word = _bad_files(tmp_path)[kind]
    with pytest.raises(BatchFileError) as info:
        read_all(path)
    message = str(info.value)
    assert word in message
    assert "\n" not in message
    assert info.value.path == path


def test_missing_column_message_lists_columns_found(tmp_path: Path) -> None:
    """The missing-column message names the column and lists the header it found."""
    path = write_csv(
        tmp_path / "b.csv", [["Name", "Sort", "Account", "Amount"], ["a", "b", "c", "d"]]
    )
    with pytest.raises(BatchFileError, match="sort_code, account_number not found") as info:
        read_all(path)
    assert "'Sort', 'Account'" in str(info.value)


def test_missing_sheet_lists_sheets(tmp_path: Path) -> None:
    """--sheet with an unknown name lists the sheets the workbook has."""
    path = write_xlsx(tmp_path / "b.xlsx", [HEADER, GOOD], title="Payments")
    with pytest.raises(BatchFileError, match="no sheet named 'Other'; its sheets are: 'Payments'"):
        read_all(path, sheet="Other")


def test_max_rows(tmp_path: Path) -> None:
    """More rows than --max-rows is a file error, raised while the rows stream."""
    path = write_csv(tmp_path / "b.csv", [HEADER, GOOD, GOOD, GOOD])
    assert len(read_all(path, max_rows=3)) == 3
    with pytest.raises(BatchFileError, match="more than 2 payment rows"):
        read_all(path, max_rows=2)


def test_zip_bomb_guard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A workbook whose zip directory declares too large an inflated size is refused."""
    monkeypatch.setattr("payrun.intake._zip.MAX_UNCOMPRESSED_BYTES", 1000)
    path = write_xlsx(tmp_path / "b.xlsx", [HEADER, GOOD])
    with pytest.raises(BatchFileError, match="zip bomb"):
        read_all(path)


_TEXT = (
    st.text(
        alphabet=st.characters(codec="cp1252", exclude_categories=("Cc", "Cs", "Zl", "Zp")),
        min_size=1,
        max_size=30,
    )
    .map(str.strip)
    .filter(bool)
    .filter(lambda text: not text.startswith(("=", "+", "@")))  # invalid: formula starts
)
_ROW = st.tuples(
    _TEXT,
    st.from_regex(r"[0-9]{2}-[0-9]{2}-[0-9]{2}", fullmatch=True),
    st.from_regex(r"[0-9]{8}", fullmatch=True),
    st.decimals(min_value=1, max_value=999999, places=2).map(str),
    _TEXT,
)


def _is_utf8_too(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return not data.isascii()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    row=_ROW,
    encoding=st.sampled_from(["utf-8", "utf-8-sig", "cp1252"]),
    sep=st.sampled_from([",", ";"]),
)
def test_any_valid_row_reads_back_from_csv(
    tmp_path: Path, row: tuple[str, ...], encoding: str, sep: str
) -> None:
    """Any valid row written as CSV, in every encoding and delimiter, reads back identical."""
    if encoding == "cp1252":  # bytes that are also UTF-8 read as UTF-8, by design
        assume(not _is_utf8_too(";".join(row).encode("cp1252")))
    path = write_csv(tmp_path / "p.csv", [HEADER, list(row)], encoding=encoding, sep=sep)
    assert read_all(path)[0].values == dict(zip(HEADER, row, strict=True))


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(row=_ROW)
def test_any_valid_row_reads_back_from_xlsx(tmp_path: Path, row: tuple[str, ...]) -> None:
    """Any valid row written as text cells of an .xlsx reads back identical."""
    path = write_xlsx(tmp_path / "p.xlsx", [HEADER, list(row)])
    assert read_all(path)[0].values == dict(zip(HEADER, row, strict=True))


_HEADER_BYTES = ",".join(HEADER).encode() + b"\n"


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    data=st.one_of(
        st.binary(max_size=300),
        st.binary(max_size=300).map(lambda b: _HEADER_BYTES + b),
        st.binary(max_size=300).map(lambda b: b"PK\x03\x04" + b),
        st.binary(max_size=300).map(lambda b: b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b),
    )
)
def test_no_bytes_make_the_loader_raise_anything_else(tmp_path: Path, data: bytes) -> None:
    """Whatever the bytes, reading raises nothing but payrun's BatchFileError."""
    path = tmp_path / "fuzz.bin"
    path.write_bytes(data)
    try:
        read_all(path)
    except BatchFileError as exc:
        assert "\n" not in str(exc)


def test_mutated_workbooks_raise_only_batch_file_errors(tmp_path: Path) -> None:
    """A real workbook with bytes flipped anywhere raises nothing but BatchFileError."""
    good = write_xlsx(tmp_path / "g.xlsx", [HEADER, GOOD]).read_bytes()
    path = tmp_path / "m.xlsx"
    for position in range(30, len(good), max(len(good) // 60, 1)):
        path.write_bytes(good[:position] + bytes([good[position] ^ 0xFF]) + good[position + 1 :])
        try:
            read_all(path)
        except BatchFileError:
            pass


def _ods(path: Path) -> Path:
    """An OpenDocument spreadsheet's container: the mimetype member first, stored."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("mimetype", "application/vnd.oasis.opendocument.spreadsheet")
        archive.writestr("content.xml", "<office:document-content/>", zipfile.ZIP_DEFLATED)
    return path


def _numbers(path: Path) -> Path:
    """An Apple Numbers document as one file: a zip of .iwa parts."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("Index/Document.iwa", b"\x00\x01")
        archive.writestr("Metadata/Properties.plist", "<plist/>")
    return path


@pytest.mark.parametrize(
    ("make", "name", "said"),
    [
        (_ods, "pay.ods", "save a copy as Excel 2007-365 (.xlsx) or Text CSV"),
        # Renamed, still told by its content
        (_ods, "pay.xlsx", "is an OpenDocument spreadsheet (.ods)"),
        (_numbers, "pay.numbers", "File > Export To > Excel (.xlsx) or CSV"),
        (lambda p: (p.mkdir(), p)[1], "pay.numbers", "File > Export To > Excel (.xlsx) or CSV"),
    ],
    ids=["ods", "ods-renamed", "numbers", "numbers-package"],
)
def test_other_spreadsheets_say_how_to_export_from_their_program(
    tmp_path: Path, make: Any, name: str, said: str
) -> None:
    """An .ods or .numbers file (a Numbers package is a folder) says to export it as .xlsx
    or CSV from the program that made it, not 'a zip archive'."""
    path = make(tmp_path / name)
    with pytest.raises(BatchFileError) as info:
        read_batch(path)
    assert said in str(info.value) and "zip archive" not in str(info.value), info.value


def _with_mimetype(path: Path, data: bytes, compress: int = zipfile.ZIP_DEFLATED) -> Path:
    """A real workbook with a ``mimetype`` member holding ``data`` added to its zip."""
    write_xlsx(path, [HEADER, GOOD])
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr("mimetype", data, compress)
    return path


def _member_data_at(path: Path, name: str) -> int:
    """Where the member ``name``'s compressed bytes start in the zip file."""
    with zipfile.ZipFile(path) as archive:
        offset = archive.getinfo(name).header_offset
    raw = path.read_bytes()
    name_length = int.from_bytes(raw[offset + 26 : offset + 28], "little")
    extra_length = int.from_bytes(raw[offset + 28 : offset + 30], "little")
    return offset + 30 + name_length + extra_length


def test_the_zip_bomb_guard_comes_before_any_member_is_inflated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``mimetype`` member that inflates past the limit is never opened: the size guard
    refuses first; a long (over 100 bytes) mimetype is never inflated at all."""
    opened: list[str] = []
    real_open = zipfile.ZipFile.open

    def spy(self: zipfile.ZipFile, name: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(name if isinstance(name, str) else name.filename)
        return real_open(self, name, *args, **kwargs)

    bomb = _with_mimetype(tmp_path / "bomb.xlsx", b"\0" * 3_000_000)
    long = _with_mimetype(tmp_path / "long.xlsx", b"x" * 5_000)
    monkeypatch.setattr(zipfile.ZipFile, "open", spy)
    monkeypatch.setattr("payrun.intake._zip.MAX_UNCOMPRESSED_BYTES", 2_000_000)
    with pytest.raises(BatchFileError, match="zip bomb"):
        read_all(bomb)
    assert "mimetype" not in opened
    monkeypatch.undo()
    monkeypatch.setattr(zipfile.ZipFile, "open", spy)
    assert len(read_all(long)) == 1
    assert "mimetype" not in opened


def test_a_broken_or_encrypted_member_is_a_corrupt_workbook(tmp_path: Path) -> None:
    """A ``mimetype`` whose deflate stream is broken, or which is marked encrypted, or
    compressed by an unknown method: one line, "corrupt" (exit 2), not "unexpected"."""
    broken = _with_mimetype(tmp_path / "broken.xlsx", b"application/vnd.oasis.x" * 3)
    at = _member_data_at(broken, "mimetype")
    raw = bytearray(broken.read_bytes())
    raw[at : at + 4] = b"\xff\xff\xff\xff"
    broken.write_bytes(bytes(raw))
    locked = _with_mimetype(tmp_path / "locked.xlsx", b"application/x", zipfile.ZIP_STORED)
    unknown = _with_mimetype(tmp_path / "unknown.xlsx", b"application/x", zipfile.ZIP_STORED)
    for path, flag, method in ((locked, 0x1, None), (unknown, 0, 97)):
        raw = bytearray(path.read_bytes())
        with zipfile.ZipFile(path) as archive:
            local = archive.getinfo("mimetype").header_offset
        central = raw.rindex(b"PK\x01\x02")
        raw[local + 6] |= flag
        raw[central + 8] |= flag
        if method is not None:
            raw[local + 8 : local + 10] = method.to_bytes(2, "little")
            raw[central + 10 : central + 12] = method.to_bytes(2, "little")
        path.write_bytes(bytes(raw))
    for path in (broken, locked, unknown):
        with pytest.raises(BatchFileError, match="corrupt") as caught:
            read_all(path)
        assert "\n" not in str(caught.value)
