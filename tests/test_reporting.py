"""Reporting: write_table in every format, formula escaping, the validate report shapes."""

from __future__ import annotations

import csv
import json
from decimal import Decimal
from pathlib import Path

import openpyxl  # type: ignore[import-untyped]
import pytest

from payrun._models import PaymentInstruction, RowProblem, RowVerdict
from payrun.errors import ConfigError
from payrun.report._documents import (
    escape_cell,
    render_validation,
    validation_document,
    write_table,
    write_validation_report,
)
from payrun.validation import BatchSummary

COLUMNS = ("row", "payee_name", "amount", "note")
ROWS = [
    (2, '=HYPERLINK("http://evil")', Decimal("10.5"), "+44 123"),
    (3, "Ada", Decimal("2.00"), "-x"),
    (4, "@SUM(A1)", Decimal("3.10"), None),
]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("=1+2", "'=1+2"),
        ("+1", "+1"),
        ("+1 555", "'+1 555"),
        ("-1", "-1"),
        ("@x", "'@x"),
        ("\tx", "'\tx"),
        ("Ada", "Ada"),
        (-5, -5),
        (None, None),
    ],
)
def test_escape_cell(value: object, expected: object) -> None:
    """Text a spreadsheet would run is prefixed with a quote; other values pass unchanged."""
    assert escape_cell(value) == expected


def test_write_table_csv_escapes_formulas(tmp_path: Path) -> None:
    """CSV output has the header, money as 1234.50, and escaped dangerous cells."""
    path = tmp_path / "out.csv"
    write_table(path, COLUMNS, ROWS)
    rows = list(csv.reader(path.read_text(encoding="utf-8-sig").splitlines()))
    assert rows[0] == list(COLUMNS)
    assert rows[1] == ["2", '\'=HYPERLINK("http://evil")', "10.50", "'+44 123"]
    assert rows[2][3] == "'-x" and rows[3][1] == "'@SUM(A1)" and rows[3][3] == ""


def test_write_table_xlsx_has_no_formulas(tmp_path: Path) -> None:
    """.xlsx output holds text exactly as given, as text cells: never formula cells."""
    path = tmp_path / "out.xlsx"
    write_table(path, COLUMNS, ROWS)
    sheet = openpyxl.load_workbook(path).active
    values = [[cell.value for cell in row] for row in sheet.iter_rows()]
    assert values[0] == list(COLUMNS)
    assert values[1][1] == '=HYPERLINK("http://evil")' and values[1][3] == "+44 123"
    assert values[3][1] == "@SUM(A1)" and sheet["B2"].data_type == "s"
    assert all(cell.data_type != "f" for row in sheet.iter_rows() for cell in row)


@pytest.mark.parametrize(
    ("text", "written"),
    [
        ("-7", "-7"),
        ("+100", "+100"),
        ("12.50", "12.50"),
        ("-BONUS", "'-BONUS"),
        ("=1+1", "'=1+1"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("-2+3+cmd|' /C calc'!A0", "'-2+3+cmd|' /C calc'!A0"),
    ],
)
def test_csv_escapes_only_what_a_spreadsheet_would_run(text: str, written: str) -> None:
    """A plain signed number (a row_id like -7) stays exact; formula-like text is escaped."""
    assert escape_cell(text) == written


def test_write_table_json(tmp_path: Path) -> None:
    """JSON output is a list of objects keyed by column, money as text."""
    path = tmp_path / "out.json"
    write_table(path, COLUMNS, ROWS[:1])
    assert json.loads(path.read_text()) == [
        {"row": 2, "payee_name": '=HYPERLINK("http://evil")', "amount": "10.50", "note": "+44 123"}
    ]


def test_write_table_refuses_unknown_extension(tmp_path: Path) -> None:
    """An unsupported extension is a ConfigError naming the supported ones."""
    with pytest.raises(ConfigError, match=r"\.csv, \.xlsx or \.json"):
        write_table(tmp_path / "out.txt", COLUMNS, ROWS)


def test_write_table_unwritable_directory(tmp_path: Path) -> None:
    """A report in a missing directory is a one-line ConfigError and leaves nothing behind."""
    with pytest.raises(ConfigError, match="cannot write"):
        write_table(tmp_path / "nope" / "out.csv", COLUMNS, ROWS)


def _summary() -> BatchSummary:
    summary = BatchSummary([RowProblem(1, "Notes", "unknown column 'Notes' is ignored")])
    instruction = PaymentInstruction(
        row=2,
        payee_name="Ada",
        sort_code="123456",
        account_number="12345678",
        amount=Decimal("1234.50"),
        reference="R",
        source_account="040004 30000001",
    )
    summary.add(RowVerdict(2, instruction, {}))
    long = "sort code must be 6 digits, like 12-34-56; got '1234' " * 3
    summary.add(RowVerdict(3, None, {}, (RowProblem(3, "sort_code", long.strip()),)))
    summary.add(RowVerdict(4, None, {}, (RowProblem(4, None, "=danger"),)))
    return summary


def test_validation_document_shape() -> None:
    """The JSON object has exactly the contract's keys and problem shape."""
    document = validation_document(_summary())
    assert list(document) == ["rows", "valid", "invalid", "total", "errors", "warnings"]
    assert (document["rows"], document["valid"], document["invalid"]) == (3, 1, 2)
    assert document["total"] == "1234.50"
    assert document["errors"][1] == {"row": 4, "column": None, "message": "=danger"}
    assert document["warnings"] == [
        {"row": 1, "column": "Notes", "message": "unknown column 'Notes' is ignored"}
    ]


def test_render_validation_fits_80_columns() -> None:
    """The text report has the summary, fingerprint and problems, no line over 80."""
    text = render_validation(_summary(), name="b.csv")
    assert text.startswith("b.csv: 3 rows: 1 valid, 2 invalid, 1 warnings")
    assert "£1,234.50" in text and "fingerprint: count 1, total 1234.50" in text
    assert "from 040004 30000001: 1 payment, £1,234.50" in text
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "error: sort code" in text and "warning: unknown column" in text


def test_render_validation_caps_the_problem_list() -> None:
    """Thousands of problems are cut short in text with a pointer to the full report."""
    summary = BatchSummary()
    for row in range(2, 1002):
        summary.add(RowVerdict(row, None, {}, (RowProblem(row, "amount", "amount is zero"),)))
    text = render_validation(summary, name="b.csv")
    assert "and 800 more" in text and text.count("amount is zero") == 200


@pytest.mark.parametrize("suffix", [".json", ".csv", ".xlsx"])
def test_write_validation_report(tmp_path: Path, suffix: str) -> None:
    """--report writes the JSON object for .json, and a problems sheet for .csv/.xlsx."""
    path = tmp_path / f"report{suffix}"
    write_validation_report(path, _summary())
    if suffix == ".json":
        assert json.loads(path.read_text()) == validation_document(_summary())
    elif suffix == ".csv":
        rows = list(csv.reader(path.read_text(encoding="utf-8-sig").splitlines()))
        assert rows[0] == ["row", "column", "severity", "message"]
        assert rows[2] == ["4", "", "error", "'=danger"]
    else:
        sheet = openpyxl.load_workbook(path).active
        assert [c.value for c in sheet[3]] == [4, None, "error", "=danger"]
        assert sheet["D3"].data_type == "s"


def test_xlsx_text_with_a_control_character_is_written(tmp_path: Path) -> None:
    """A name holding a control character (an invalid row keeps the file's text) does not
    break an .xlsx report: XML cannot hold it, so it shows as U+FFFD."""
    path = tmp_path / "out.xlsx"
    write_table(path, COLUMNS, [(2, "Bob\x07Smith", "10", None)])
    sheet = openpyxl.load_workbook(path).active
    assert sheet["B2"].value == "Bob\ufffdSmith"
