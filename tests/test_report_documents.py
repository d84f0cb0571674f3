"""Report documents: write_table in every format, formula escaping, the validate report shapes."""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import openpyxl  # type: ignore[import-untyped]
import pytest

from payrun._models import LedgerRow, PaymentInstruction, RowProblem, RowStatus, RowVerdict
from payrun.errors import ConfigError
from payrun.report import RECONCILE_COLUMNS, REPORT_COLUMNS, SUMMARY_COLUMNS, write_report
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
    assert text.startswith("b.csv: 3 rows: 1 valid, 2 invalid, 1 warning\n")
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


def _sheet_widths(sheet: Any) -> dict[str, float]:
    return {letter: dimension.width for letter, dimension in sheet.column_dimensions.items()}


def test_an_xlsx_opens_ready_to_read(tmp_path: Path) -> None:
    """Header bold and frozen, an autofilter over the table, columns sized to their content,
    money a number in a £ format, and text starting = + - @ kept text with quotePrefix."""
    path = tmp_path / "out.xlsx"
    write_table(path, COLUMNS, ROWS)
    sheet = openpyxl.load_workbook(path).active
    assert sheet.freeze_panes == "A2" and sheet.auto_filter.ref == "A1:D4"
    assert all(cell.font.b for cell in sheet[1])
    widths = _sheet_widths(sheet)
    assert widths["B"] >= len('=HYPERLINK("http://evil")') and widths["A"] < widths["B"]
    assert [sheet.cell(n, 3).number_format for n in (2, 3, 4)] == ['"£"#,##0.00'] * 3
    assert sheet["C2"].data_type == "n" and sheet["C2"].value == 10.5
    assert [sheet[ref].quotePrefix for ref in ("B2", "D2", "D3", "B4")] == [True] * 4
    assert sheet["B3"].quotePrefix is False and sheet["B4"].data_type == "s"


def test_the_validation_report_xlsx_opens_ready_to_read(tmp_path: Path) -> None:
    """The validate report's .xlsx has the same frozen bold header, filter and sizes."""
    path = tmp_path / "problems.xlsx"
    write_validation_report(path, _summary())
    sheet = openpyxl.load_workbook(path).active
    assert sheet.freeze_panes == "A2" and sheet.auto_filter.ref.startswith("A1:D")
    assert all(cell.font.b for cell in sheet[1]) and sheet["D3"].quotePrefix is True
    assert _sheet_widths(sheet)["D"] > _sheet_widths(sheet)["A"]


def _ledger_row(number: int, status: RowStatus, **fields: object) -> LedgerRow:
    values: dict[str, object] = {
        "row": number,
        "row_id": f"E{number}",
        "payee_name": f"Payee {number}",
        "sort_code": "200000",
        "account_number": f"{number:08d}",
        "amount": Decimal("1234.50"),
        "reference": "SALARY",
        "source_account": "040004 30000001",
        "status": status,
        "updated_at": datetime(2026, 11, 27, 9, 30, tzinfo=UTC),
    }
    return LedgerRow(**{**values, **fields})  # type: ignore[arg-type]


def _run_rows() -> list[LedgerRow]:
    return [
        _ledger_row(2, RowStatus.SUBMITTED),
        _ledger_row(3, RowStatus.DELIVERED, source_account="040004 30000002"),
        _ledger_row(4, RowStatus.FAILED, error="-short of funds"),
        _ledger_row(5, RowStatus.INVALID, amount=Decimal(0), amount_text="12,34,5"),
    ]


def test_the_run_report_xlsx_has_statement_columns_and_a_summary(tmp_path: Path) -> None:
    """The .xlsx run report: the contract's columns, then sort code, account number, source
    account and when paid; a summary sheet per status and per source account, in £."""
    path = tmp_path / "report.xlsx"
    write_report(path, _run_rows())
    book = openpyxl.load_workbook(path)
    assert book.sheetnames == ["report", "summary"]
    sheet = book["report"]
    header = [cell.value for cell in sheet[1]]
    assert header == [*REPORT_COLUMNS, *RECONCILE_COLUMNS]
    line = dict(zip(header, (cell for cell in sheet[2]), strict=True))
    assert line["sort_code"].value == "200000" and line["account_number"].value == "00000002"
    assert line["paid_at_utc"].value == datetime(2026, 11, 27, 9, 30)
    assert line["paid_at_utc"].number_format == "yyyy-mm-dd hh:mm:ss"
    assert line["amount"].number_format == '"£"#,##0.00'
    assert sheet.cell(4, header.index("paid_at_utc") + 1).value is None
    assert sheet.cell(4, header.index("error") + 1).quotePrefix is True
    assert sheet.freeze_panes == "A2" and sheet.auto_filter.ref == "A1:M5"
    summary = [[cell.value for cell in row] for row in book["summary"].iter_rows()]
    assert summary[0] == list(SUMMARY_COLUMNS)
    assert ["all accounts", "invalid", 1, None] in summary
    assert ["all accounts", "total", 4, 3703.5] in summary
    assert ["040004 30000002", "delivered", 1, 1234.5] in summary
    assert book["summary"]["D2"].number_format == '"£"#,##0.00'


@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_the_run_report_csv_and_json_keep_the_contract_columns(tmp_path: Path, suffix: str) -> None:
    """CSV and JSON reports hold exactly the contract's columns, nothing added."""
    path = tmp_path / f"report{suffix}"
    write_report(path, _run_rows())
    if suffix == ".csv":
        header = path.read_text(encoding="utf-8-sig").splitlines()[0]
        assert header == ",".join(REPORT_COLUMNS)
    else:
        assert list(json.loads(path.read_text())[0]) == list(REPORT_COLUMNS)
