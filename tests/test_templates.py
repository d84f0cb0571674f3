"""Templates: generated from COLUMNS, committed copies equal to what the command writes."""

from __future__ import annotations

import io
from pathlib import Path

import openpyxl  # type: ignore[import-untyped]
import pytest

from payrun.errors import BatchFileError, ConfigError
from payrun.intake import read_batch
from payrun.templates import TEMPLATES, render_template
from payrun.validation import COLUMNS

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("file", "name", "fmt"),
    [
        ("payroll.csv", "payroll", "csv"),
        ("suppliers.csv", "suppliers", "csv"),
        ("payroll.xlsx", "payroll", "xlsx"),
    ],
)
def test_committed_templates_are_current(file: str, name: str, fmt: str) -> None:
    """templates/ holds exactly what `payrun template` writes (bytes, xlsx included)."""
    assert (REPO / "templates" / file).read_bytes() == render_template(name, fmt)


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_xlsx_is_deterministic(name: str) -> None:
    """Two renders of an .xlsx template are byte-identical (fixed timestamps)."""
    assert render_template(name, "xlsx") == render_template(name, "xlsx")


def test_template_columns_come_from_the_spec() -> None:
    """Every template column is a COLUMNS name, and every required column is present."""
    names = {column.name for column in COLUMNS}
    required = {column.name for column in COLUMNS if column.required}
    for columns in TEMPLATES.values():
        assert set(columns) <= names and required <= set(columns)


def test_every_template_has_its_columns_in_the_one_order() -> None:
    """Templates list their columns in COLUMNS order, so columns they share line up alike."""
    order = [column.name for column in COLUMNS]
    for columns in TEMPLATES.values():
        assert list(columns) == sorted(columns, key=order.index), columns
    payroll, suppliers = TEMPLATES["payroll"], TEMPLATES["suppliers"]
    assert [c for c in suppliers if c in payroll] == list(payroll)


def test_xlsx_formats_digit_columns_as_text_and_amount_as_money() -> None:
    """Sort code and account number columns are Text; amount is a money format."""
    book = openpyxl.load_workbook(io.BytesIO(render_template("payroll", "xlsx")))
    sheet = book.worksheets[0]
    header = [cell.value for cell in sheet[1]]
    formats = {
        name: sheet.column_dimensions[openpyxl.utils.get_column_letter(index)].number_format
        for index, name in enumerate(header, start=1)
    }
    assert formats["sort_code"] == "@" and formats["account_number"] == "@"
    assert formats["amount"] == "#,##0.00"


@pytest.mark.parametrize(("name", "fmt"), [("payroll", "csv"), ("suppliers", "xlsx")])
def test_blank_template_reads_as_header_without_rows(tmp_path: Path, name: str, fmt: str) -> None:
    """A blank template is a valid header: reading it says only 'no payment rows'."""
    path = tmp_path / f"t.{fmt}"
    path.write_bytes(render_template(name, fmt))
    with pytest.raises(BatchFileError, match="no payment rows"):
        read_batch(path)


def test_unknown_template_and_format() -> None:
    """Unknown names and formats are ConfigErrors that list the choices."""
    with pytest.raises(ConfigError, match="payroll, suppliers"):
        render_template("invoices")
    with pytest.raises(ConfigError, match="csv, xlsx"):
        render_template("payroll", "ods")
