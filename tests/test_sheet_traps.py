"""What a clerk sees decides what is paid: hidden sheets and rows, Excel errors, merged
cells, float noise, and CSV amounts that a delimiter changed (real files, real parsing)."""

from __future__ import annotations

import datetime as dt
import io
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import openpyxl  # type: ignore[import-untyped]
import pytest

from _run_helpers import run, run_env
from payrun._models import RowVerdict
from payrun.cli import main
from payrun.config import ValidationOptions
from payrun.errors import BatchFileError
from payrun.intake import read_batch
from payrun.intake._extent import scan_extent
from payrun.sandbox import RunningSandbox
from payrun.validation import validate_rows

COLS = ["payee_name", "sort_code", "account_number", "amount", "reference", "source_account"]
SRC = "040004 30000001"


def _row(name: str, amount: Any, reference: Any = "SALARY", source: Any = SRC) -> list[Any]:
    return [name, "12-34-56", "12345678", amount, reference, source]


def _book(path: Path, *sheets: tuple[str, list[list[Any]]]) -> openpyxl.Workbook:
    book = openpyxl.Workbook()
    book.remove(book.active)
    for title, rows in sheets:
        sheet = book.create_sheet(title)
        sheet.append(COLS)
        for row in rows:
            sheet.append(row)
    return book


def _verdicts(path: Path, **options: Any) -> list[RowVerdict]:
    with read_batch(path, sheet=options.pop("sheet", None)) as batch:
        return list(validate_rows(batch, ValidationOptions(**options)))


def _errors(verdict: RowVerdict) -> list[tuple[str | None, str]]:
    return [(e.column, e.message) for e in verdict.errors]


def _rewrite_member(path: Path, member: str, *changes: tuple[str, str]) -> None:
    """Rewrite one part of an .xlsx as another program than openpyxl would write it."""
    with zipfile.ZipFile(path) as archive:
        members = {info.filename: archive.read(info) for info in archive.infolist()}
    text = members[member].decode()
    for old, new in changes:
        assert old in text, (old, text[:1500])
        text = text.replace(old, new)
    members[member] = text.encode()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)


def _rewrite(path: Path, *changes: tuple[str, str]) -> None:
    """Rewrite the first sheet's XML (Excel's full-precision floats, other writers' XML)."""
    _rewrite_member(path, "xl/worksheets/sheet1.xml", *changes)


def test_a_hidden_first_sheet_is_refused_and_can_be_named(tmp_path: Path) -> None:
    """The first sheet hidden (last month's, say): refused, naming the visible sheets;
    --sheet can still name it on purpose."""
    path = tmp_path / "pay.xlsx"
    book = _book(path, ("October", [_row("Old", 9999)]), ("November", [_row("New", 2150)]))
    book["October"].sheet_state = "hidden"
    book.active = 1
    book.save(path)
    with pytest.raises(BatchFileError, match=r"'October', is hidden.*--sheet.*'November'"):
        read_batch(path)
    (november,) = _verdicts(path, sheet="November")
    assert november.valid and november.instruction is not None
    assert november.instruction.amount == Decimal("2150.00")
    (october,) = _verdicts(path, sheet="October")
    assert october.valid


def test_hidden_or_filtered_rows_are_not_paid(tmp_path: Path) -> None:
    """A row hidden (or filtered out, which Excel saves as hidden) is an error; others pay."""
    path = tmp_path / "pay.xlsx"
    book = _book(path, ("Nov", [_row("Ada", 10), _row("Bob", 20), _row("Cy", 30)]))
    book["Nov"].row_dimensions[3].hidden = True  # Bob
    book.save(path)
    ada, bob, cy = _verdicts(path)
    assert ada.valid and cy.valid
    assert _errors(bob) == [(None, bob.errors[0].message)] and "hidden" in bob.errors[0].message


def test_excel_error_cells_are_errors_not_blanks(tmp_path: Path) -> None:
    """#N/A in the source account must not fall back to --source-account; in the reference
    it is not a blank reference; in the amount it is not 'empty'."""
    path = tmp_path / "pay.xlsx"
    rows = [
        _row("Ada", 10, source="#N/A"),
        _row("Bob", 20, reference="#REF!"),
        _row("Cy", "#DIV/0!"),
    ]
    _book(path, ("Nov", rows)).save(path)
    ada, bob, cy = _verdicts(path, source_account="040004 30000002")
    for verdict, column in ((ada, "source_account"), (bob, "reference"), (cy, "amount")):
        assert not verdict.valid, verdict
        assert [c for c, _ in _errors(verdict)] == [column]
        assert "Excel error" in verdict.errors[0].message


def test_merged_cells_never_fill_other_rows_from_the_default(tmp_path: Path) -> None:
    """A source account merged down four rows reads as one value and three blanks: each of
    those rows is an error, never paid from --source-account."""
    path = tmp_path / "pay.xlsx"
    book = _book(
        path,
        (
            "Nov",
            [
                _row("Ada", 10),
                _row("Bob", 20, source=None),
                _row("Cy", 30, source=None),
                _row("Dee", 40, source=None),
                _row("Eve", 50),
            ],
        ),
    )
    book["Nov"].merge_cells("F2:F5")
    book.save(path)
    *merged, eve = _verdicts(path, source_account="040004 30000002")
    assert eve.valid
    for verdict in merged:
        assert [c for c, _ in _errors(verdict)] == ["source_account"], verdict
        assert "merged" in verdict.errors[0].message


def test_float_noise_reads_as_excel_shows_it(tmp_path: Path) -> None:
    """19.99+39.98 is stored as 59.970000000000006; Excel shows 59.97, and so does payrun.
    A real third decimal is still refused."""
    path = tmp_path / "pay.xlsx"
    rows = [_row("Ada", 59.97), _row("Bob", 0.3), _row("Cy", 100.5), _row("Dee", 12.345)]
    _book(path, ("Nov", rows)).save(path)
    _rewrite(
        path,
        ("<v>59.97</v>", "<v>59.970000000000006</v>"),
        ("<v>0.3</v>", "<v>0.30000000000000004</v>"),
        ("<v>100.5</v>", "<v>100.49999999999999</v>"),
    )
    ada, bob, cy, dee = _verdicts(path)
    amounts = [v.instruction.amount for v in (ada, bob, cy) if v.instruction is not None]
    assert amounts == [Decimal("59.97"), Decimal("0.30"), Decimal("100.50")]
    assert not dee.valid and "2 decimal" in dee.errors[0].message


def test_an_amount_cut_at_an_unquoted_comma_is_refused(tmp_path: Path) -> None:
    """`1,234.50` unquoted in a comma CSV with the columns still lining up (the reference
    took the rest): refused, not paid £1.00; a real £1.00 written 1.00 is paid."""
    path = tmp_path / "pay.csv"
    path.write_text(
        "payee_name,sort_code,account_number,amount,reference\n"
        "Ada,12-34-56,12345678,2150.00,SALARY\n"
        "Bob,12-34-56,12345678,1,234.50\n"
        "Cy,12-34-56,12345678,1.00,234\n"
        "Dee,12-34-56,12345678,£12,345\n",
        encoding="utf-8",
    )
    ada, bob, cy, dee = _verdicts(path, source_account=SRC)
    assert ada.valid and cy.valid
    for verdict in (bob, dee):
        assert [c for c, _ in _errors(verdict)] == ["amount"], verdict
        assert "cut at an unquoted comma" in verdict.errors[0].message


def test_a_comma_in_a_semicolon_file_amount_is_refused(tmp_path: Path) -> None:
    """In a semicolon file a comma may be the decimal mark: `1,500` could be £1.50 or
    £1,500.00, so it is refused instead of paid as £1,500.00; `1500.00` is paid."""
    path = tmp_path / "pay.csv"
    path.write_text(
        "payee_name;sort_code;account_number;amount;reference\n"
        "Ada;12-34-56;12345678;1,500;SALARY\n"
        "Bob;12-34-56;12345678;2,50;SALARY\n"
        "Cy;12-34-56;12345678;1500.00;SALARY\n",
        encoding="utf-8",
    )
    ada, bob, cy = _verdicts(path, source_account=SRC)
    assert cy.valid and cy.instruction is not None and cy.instruction.amount == Decimal("1500")
    for verdict in (ada, bob):
        assert [c for c, _ in _errors(verdict)] == ["amount"], verdict
        assert "semicolon" in verdict.errors[0].message


def test_validate_names_the_sheet_it_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The text report says which sheet was read (the clerk may have expected another)."""
    path = tmp_path / "pay.xlsx"
    _book(path, ("November", [_row("Ada", 10)]), ("December", [_row("Bob", 20)])).save(path)
    assert main(["validate", str(path)]) == 0
    assert capsys.readouterr().out.startswith("pay.xlsx, sheet 'November': 1 row:")
    assert main(["validate", str(path), "--sheet", "december"]) == 0
    assert capsys.readouterr().out.startswith("pay.xlsx, sheet 'December': 1 row:")


@pytest.mark.parametrize(
    ("column", "text", "words"),
    [
        ("amount", "\u22125.00", "negative"),
        ("amount", "1234.50-", "negative"),
        ("amount", "£ -", "zero in accounting format"),
        ("sort_code", '="309089"', 'wrapped in Excel\'s ="..."'),
        ("account_number", '="01234567"', 'wrapped in Excel\'s ="..."'),
    ],
)
def test_messages_say_what_the_cell_is(tmp_path: Path, column: str, text: str, words: str) -> None:
    """A minus sign, a trailing minus, accounting zero and Excel's text wrapper are named
    as what they are, not 'not a number' or 'must be 6 digits'."""
    values = {
        "payee_name": "Ada",
        "sort_code": "12-34-56",
        "account_number": "12345678",
        "amount": "10.00",
        "reference": "R",
        column: text,
    }
    path = tmp_path / "pay.csv"
    quoted = ",".join('"' + v.replace('"', '""') + '"' for v in values.values())
    path.write_text(",".join(values) + "\n" + quoted + "\n", encoding="utf-8")
    (verdict,) = _verdicts(path, source_account=SRC)
    assert [c for c, _ in _errors(verdict)] == [column]
    assert words in verdict.errors[0].message, verdict.errors[0].message


def test_file_level_messages_name_the_cause(tmp_path: Path) -> None:
    """A tab-separated file and an empty sheet say so; a date in the amount column gets a
    number format as its fix, not Text."""
    tabs = tmp_path / "tabs.csv"
    tabs.write_text("payee_name\tsort_code\taccount_number\tamount\nAda\t123456\t12345678\t1\n")
    with pytest.raises(BatchFileError, match="separated by tabs"):
        read_batch(tabs)
    path = tmp_path / "pay.xlsx"
    book = _book(path, ("Nov", [_row("Ada", dt.date(2026, 1, 5))]))
    book.create_sheet("Empty")
    book.save(path)
    with pytest.raises(BatchFileError, match="sheet 'Empty' of pay.xlsx is empty"):
        read_batch(path, sheet="Empty")
    (dated,) = _verdicts(path)
    assert "into a date" in dated.errors[0].message
    assert "Number with 2 decimal places" in dated.errors[0].message


def test_marks_are_read_whatever_the_attribute_order_and_quotes(tmp_path: Path) -> None:
    """`<c t="e" r="F2">` and `<row r='3' hidden='1'>` are what Excel means too: an error
    cell and a hidden row, never a blank that falls back to --source-account."""
    path = tmp_path / "pay.xlsx"
    _book(path, ("Nov", [_row("Ada", 10, source="#N/A"), _row("Bob", 20)])).save(path)
    _rewrite(
        path, ('<c r="F2" t="e">', '<c t="e" r="F2">'), ('<row r="3">', "<row r='3' hidden='1'>")
    )
    ada, bob = _verdicts(path, source_account="040004 30000002")
    assert [c for c, _ in _errors(ada)] == ["source_account"]
    assert [c for c, _ in _errors(bob)] == [None] and "hidden" in bob.errors[0].message


def test_a_mark_that_cannot_be_placed_refuses_the_file(tmp_path: Path) -> None:
    """A hidden row written without its row number cannot be placed: the file is refused
    rather than the row paid."""
    path = tmp_path / "pay.xlsx"
    _book(path, ("Nov", [_row("Ada", 10), _row("Bob", 20)])).save(path)
    _rewrite(path, ('<row r="3">', '<row hidden="1">'))
    with pytest.raises(BatchFileError, match="hidden row without its row number"):
        _verdicts(path)


def test_prefixed_formulas_are_found_across_chunk_boundaries() -> None:
    """`<x:c r="D5"><x:f>` cut anywhere by the chunked scan is still a formula cell."""
    from payrun.intake._marks import scan_sheet  # noqa: PLC0415

    rows = "".join(
        f'<x:row r="{n}"><x:c r="A{n}" t="s"><x:v>1</x:v></x:c>'
        f'<x:c r="D{n}"><x:f>B{n}*2</x:f><x:v>{n}</x:v></x:c></x:row>'
        for n in range(1, 400)
    )
    xml = f"<x:worksheet><x:sheetData>{rows}</x:sheetData></x:worksheet>".encode()
    for size in (64, 100, 333, 4096):
        parts = iter([xml[i : i + size] for i in range(0, len(xml), size)])

        def read(_size: int, parts: Iterator[bytes] = parts) -> bytes:
            return next(parts, b"")

        marks = scan_sheet(read, size)
        assert sorted(marks.cells) == list(range(1, 400)), size
        assert all(marks.cells[n] == {3: marks.cells[1][3]} for n in marks.cells)


def test_hidden_payment_columns_refuse_the_sheet_and_big_merges_are_cheap(
    tmp_path: Path,
) -> None:
    """A hidden source_account column is refused (the clerk cannot see where money comes
    from); merged ranges far from the data cost nothing, however large."""
    path = tmp_path / "pay.xlsx"
    book = _book(path, ("Nov", [_row("Ada", 10)]))
    book["Nov"].column_dimensions["F"].hidden = True
    book.save(path)
    with pytest.raises(BatchFileError, match="source_account column is hidden"):
        read_batch(path)
    path = tmp_path / "merged.xlsx"
    _book(path, ("Nov", [_row("Ada", 10)])).save(path)
    refs = "".join(
        f'<mergeCell ref="H{1 + k * 50_000}:BI{50_000 + k * 50_000}"/>' for k in range(20)
    )  # a billion cells in all, right of the data
    _rewrite(path, ("</sheetData>", f'</sheetData><mergeCells count="20">{refs}</mergeCells>'))
    (ada,) = _verdicts(path)
    assert ada.valid


def test_the_cut_amount_check_leaves_real_columns_alone(tmp_path: Path) -> None:
    """Whole pounds before a 3-digit row_id or cost centre are fine, and so is 1,234.50 in
    a semicolon file; a decimal comma cut in a row with one blank value too many is not."""
    path = tmp_path / "pay.csv"
    path.write_text(
        "payee_name,sort_code,account_number,amount,row_id,reference\n"
        "Ada,12-34-56,12345678,250,101,March pay\n"
        "Bob,12-34-56,12345678,12,50,March pay,\n",
        encoding="utf-8",
    )
    ada, bob = _verdicts(path, source_account=SRC)
    assert ada.valid and ada.instruction is not None
    assert ada.instruction.amount == Decimal("250")
    assert [c for c, _ in _errors(bob)] == ["amount"], bob
    semi = tmp_path / "semi.csv"
    semi.write_text(
        "payee_name;sort_code;account_number;amount\nAda;12-34-56;12345678;1,234.50\n",
        encoding="utf-8",
    )
    (ada,) = _verdicts(semi, source_account=SRC)
    assert ada.valid and ada.instruction is not None
    assert ada.instruction.amount == Decimal("1234.50")


def test_a_strict_open_xml_workbook_gets_the_same_checks(tmp_path: Path) -> None:
    """Saved as Strict Open XML (other namespaces), a hidden row is still a hidden row."""
    path = tmp_path / "pay.xlsx"
    book = _book(path, ("Nov", [_row("Ada", 10), _row("Bob", 20)]))
    book["Nov"].row_dimensions[3].hidden = True
    book.save(path)
    transitional = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
    strict = "http://purl.oclc.org/ooxml/officeDocument/relationships"
    _rewrite_member(path, "xl/workbook.xml", (transitional, strict))
    ada, bob = _verdicts(path)
    assert ada.valid and not bob.valid and "hidden" in bob.errors[0].message


def test_rows_and_columns_nobody_can_see(tmp_path: Path) -> None:
    """A hidden header row, a row zero high and a payment column zero wide are refused;
    a merge written in lower case is still a merge."""
    path = tmp_path / "pay.xlsx"
    book = _book(path, ("Nov", [_row("Ada", 10), _row("Bob", 20)]))
    book["Nov"].row_dimensions[1].hidden = True
    book.save(path)
    with pytest.raises(BatchFileError, match=r"header \(row 1\) is hidden"):
        read_batch(path)
    _book(path, ("Nov", [_row("Ada", 10), _row("Bob", 20)])).save(path)
    _rewrite(path, ('<row r="3">', '<row r="3" ht="0" customHeight="1">'))
    ada, bob = _verdicts(path)
    assert ada.valid and "hidden" in bob.errors[0].message
    book = _book(path, ("Nov", [_row("Ada", 10), _row("Bob", 20, source=None)]))
    book["Nov"].merge_cells("F2:F3")
    book.save(path)
    _rewrite(path, ('ref="F2:F3"', 'ref="f2:f3"'))
    _, bob = _verdicts(path, source_account="040004 30000002")
    assert "merged" in bob.errors[0].message


def test_more_csv_amounts_a_delimiter_changed(tmp_path: Path) -> None:
    """A point before 3 last digits in a semicolon file (2.500: £2.50 or £2,500?) and a
    cut `1,500.` with a blank value too many are refused; blank lines above the header are
    skipped when the delimiter is chosen; Excel's sep= line gets its own message."""
    semi = tmp_path / "semi.csv"
    semi.write_text(
        "\n\npayee_name;sort_code;account_number;amount\n"
        "Ada;12-34-56;12345678;2.500\nBob;12-34-56;12345678;2.50\n",
        encoding="utf-8",
    )
    ada, bob = _verdicts(semi, source_account=SRC)
    assert [c for c, _ in _errors(ada)] == ["amount"] and bob.valid
    assert ada.row == 4  # the sheet's own numbering: two blank lines, then the header
    cut = tmp_path / "cut.csv"
    cut.write_text(
        "payee_name,sort_code,account_number,amount,row_id,reference\n"
        "Ada,12-34-56,12345678,1,500.,SAL,\n",
        encoding="utf-8",
    )
    (ada,) = _verdicts(cut, source_account=SRC)
    assert [c for c, _ in _errors(ada)] == ["amount"]
    sep = tmp_path / "sep.csv"
    sep.write_text("sep=;\npayee_name;sort_code;account_number;amount\n", encoding="utf-8")
    with pytest.raises(BatchFileError, match="sep=;"):
        read_batch(sep)


def test_number_formats_that_show_another_amount_are_refused(tmp_path: Path) -> None:
    """What the clerk sees is the formatted cell: 1499.60 shown as 1,500, 0.5 as 50%,
    12345.67 as 12.3k, or a source account hidden by ;;; is refused; formats that show the
    amount as paid (2 decimals, accounting, whole pounds on a whole amount, one decimal on
    12.50) pass."""
    path = tmp_path / "pay.xlsx"
    accounting = '_-"£"* #,##0.00_-;-"£"* #,##0.00_-;_-"£"* "-"??_-;_-@_-'
    cases = [  # (amount, its format, source account's format, refused column)
        (1499.6, "#,##0", None, "amount"),
        (0.5, "0%", None, "amount"),
        (12345.67, '#,##0.0,"k"', None, "amount"),
        (12.55, "0.0", None, "amount"),
        (10, "0.00", ";;;", "source_account"),
        (1500, "#,##0", None, None),
        (12.5, "0.0", None, None),
        (1234.56, accounting, None, None),
        (1234.57, "#,##0.00", "@", None),
        (12.7, "£General", None, None),
        (12.8, ";-0.00", None, "amount"),
        (12.9, '"TBC"', None, "amount"),
        ("12.60", "#,##0", None, None),  # a text cell: Excel shows number formats no text
        (13.5, "0.00", "0;0;0;", "source_account"),  # ...but a 4th section hides text
    ]
    book = _book(path, ("Nov", [_row(f"P{n}", amount) for n, (amount, *_) in enumerate(cases)]))
    sheet = book["Nov"]
    for n, (_, amount_format, source_format, _) in enumerate(cases, start=2):
        sheet.cell(row=n, column=4).number_format = amount_format
        if source_format:
            sheet.cell(row=n, column=6).number_format = source_format
    book.save(path)
    verdicts = _verdicts(path, source_account="040004 30000002")
    for verdict, (amount, amount_format, _, refused) in zip(verdicts, cases, strict=True):
        columns = [c for c, _ in _errors(verdict)]
        assert columns == ([refused] if refused else []), (amount, amount_format, verdict)
    assert "the sheet shows 1,500" in verdicts[0].errors[0].message  # what the clerk sees


def test_the_sheet_paid_is_named_and_another_active_sheet_is_pointed_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Excel opens the workbook on 'Final' while payrun reads the first sheet, 'Draft':
    validate and run both say which sheet they read and how to pay the other one."""
    path = tmp_path / "pay.xlsx"
    book = _book(path, ("Draft", [_row("Ada", 10)]), ("Final", [_row("Ada", 12)]))
    book.active = 1
    book.save(path)
    assert main(["validate", str(path)]) == 0
    assert "Excel opens this workbook on sheet 'Final'" in capsys.readouterr().out
    assert main(["run", str(path), "--sandbox", "--dry-run", "--no-confirm-payees"]) in (0, 1)
    err = capsys.readouterr().err
    assert "reading sheet 'Draft' of pay.xlsx" in err and "--sheet 'Final'" in err, err
    assert main(["run", str(path), "--sandbox", "--dry-run", "--sheet", "Final"]) in (0, 1)
    err = capsys.readouterr().err
    assert "reading sheet 'Final' of pay.xlsx" in err and "Excel opens" not in err, err


def test_a_date_format_on_a_text_column_is_still_a_date(tmp_path: Path) -> None:
    """A reference typed as 01/03/2024 becomes a date cell: refused as a date (the format's
    slash is not a fraction), whatever number format the cell shows it with."""
    path = tmp_path / "pay.xlsx"
    book = _book(path, ("Nov", [_row("Ada", 10, reference=dt.date(2024, 3, 1))]))
    book["Nov"].cell(row=2, column=5).number_format = "dd/mm/yyyy"
    book.save(path)
    (ada,) = _verdicts(path)
    assert [c for c, _ in _errors(ada)] == ["reference"] and "date" in ada.errors[0].message


def _far_workbook(path: Path, far: str) -> Path:
    """A small valid sheet with one more cell at ``far`` (openpyxl declares the range too)."""
    book = _book(path, ("Pay", [_row("Ann Lee", "10.00")]))
    book["Pay"][far] = "x"
    book.save(path)
    return path


def _payrun(*args: str, sandbox: RunningSandbox | None = None) -> subprocess.CompletedProcess[str]:
    """payrun in a child process: a Rust abort there is exit 134, not a dead pytest."""
    env = run_env(sandbox) if sandbox is not None else dict(os.environ)
    return subprocess.run(
        [sys.executable, "-m", "payrun", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_a_cell_far_away_is_refused_before_calamine_lays_out_the_sheet(tmp_path: Path) -> None:
    """One cell at XFD1048576 (a 512 GB grid for calamine): validate says so in one line."""
    path = _far_workbook(tmp_path / "far.xlsx", "XFD1048576")
    done = _payrun("validate", str(path))
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.count("\n") == 1, done.stderr
    assert "reaches row 1,048,576" in done.stderr and "Ctrl+End" in done.stderr
    wide = _payrun("validate", str(_far_workbook(tmp_path / "wide.xlsx", "XFD5")))
    assert wide.returncode == 2 and "reaches column XFD" in wide.stderr, wide.stderr[-2000:]


def test_a_refused_sheet_leaves_no_ledger(tmp_path: Path, sandbox_server: RunningSandbox) -> None:
    """`run` on a workbook reaching XFD1048576: exit 2, and no half-made ledger."""
    path = _far_workbook(tmp_path / "far.xlsx", "XFD1048576")
    ledger = tmp_path / "far.ledger.sqlite"
    done = run(sandbox_server, path, ledger)
    assert done.returncode == 2, done.describe()
    assert "reaches row 1,048,576" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["far.xlsx"]


def test_cells_without_references_are_placed_as_calamine_places_them(tmp_path: Path) -> None:
    """Cells with no reference are placed after the last (10,000 in a row reach past ALL)."""
    path = _far_workbook(tmp_path / "norefs.xlsx", "F2")
    many = '<c t="inlineStr"><is><t>x</t></is></c>' * 10_000
    _rewrite(path, ("</sheetData>", f'<row r="3">{many}</row><row>{many}</row></sheetData>'))
    done = _payrun("validate", str(path))
    assert done.returncode == 2, done.stderr[-2000:]
    assert "reaches column NTP" in done.stderr  # column 10,000 of row 3
    with pytest.raises(BatchFileError, match="reaches row 4, more than a header and 2 payment"):
        read_batch(path, max_rows=2)


def test_a_declared_range_is_not_what_is_laid_out(tmp_path: Path) -> None:
    """A sheet declaring A1:XFD1048576 around two rows is read as the two rows it holds;
    --max-rows counts the rows the cells reach, blank or not."""
    path = tmp_path / "declared.xlsx"
    _book(path, ("Pay", [_row("Ann Lee", "10.00")])).save(path)
    _rewrite(path, ('<dimension ref="A1:F2"', '<dimension ref="A1:XFD1048576"'))
    (verdict,) = _verdicts(path)
    assert verdict.instruction is not None
    far = _far_workbook(tmp_path / "far.xlsx", "A40")
    with pytest.raises(BatchFileError, match="reaches row 40, more than a header and 10 payment"):
        read_batch(far, max_rows=10)
    with read_batch(far, max_rows=39) as batch:
        assert len(list(batch.rows)) == 2


@pytest.mark.parametrize(
    ("xml", "rows", "columns"),
    [
        (b'<row r="1"><c r="A1"/><c r="B1"/></row><row r="7"><c r="C7"/></row>', 7, 3),
        (b'<row r="9"><c r="A9"/></row><row r="2"><c r="B2"/></row>', 9, 2),
        (b'<row r="3"><c r="A003"/><c r="ZZ1"/></row>', 3, 702),
        (b"<row r='5'><c s='1' r='XFD12'/></row>", 12, 16_384),
        (b'<x:row r="2"><x:c r="D1048576"/></x:row>', 1_048_576, 4),
        (b'<row r="4"><c/><c/><c>' + b'<v>1</v></c></row><row><c r="B5"/><c/></row>', 5, 3),
        (b'<cols><col min="1" max="16384"/></cols><row r="2"><c r="A2"/></row>', 2, 1),
    ],
)
def test_the_extent_is_where_the_cells_are(xml: bytes, rows: int, columns: int) -> None:
    """Out of order, leading zeros, other quotes and attribute order, prefixes, no
    references, non-cell tags: the last row and column are bounded, in chunks of any size."""
    sheet = b"<worksheet><sheetData>" + xml + b"</sheetData></worksheet>"
    for size in (5, 17, len(sheet)):
        extent = scan_extent(io.BytesIO(sheet).read, size)
        # cells all within A to Z may count as reaching Z: the bound is what matters
        assert extent.rows == rows and columns <= extent.columns <= max(columns, 26), size


def _two_places_workbook(path: Path, rels: str, *extra: tuple[str, bytes]) -> Path:
    """A small valid workbook whose relationships and members are rewritten by hand."""
    _far_workbook(path, "F2")
    with zipfile.ZipFile(path) as archive:
        members = [(info.filename, archive.read(info)) for info in archive.infolist()]
    far = b'<row r="1048576"><c r="XFD1048576" t="inlineStr"><is><t>x</t></is></c></row>'
    sheet = dict(members)["xl/worksheets/sheet1.xml"].replace(
        b"</sheetData>", far + b"</sheetData>"
    )
    old = dict(members)["xl/_rels/workbook.xml.rels"].decode()
    new = old.replace('Id="rId1"', 'Id="rIdX"', 1).replace(
        "<Relationship ", rels + "<Relationship ", 1
    )
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members:
            archive.writestr(name, new.encode() if name == "xl/_rels/workbook.xml.rels" else data)
        archive.writestr("xl/worksheets/far.xml", sheet)
        for name, data in extra:
            archive.writestr(name, data)
    return path


def test_a_workbook_that_names_two_parts_for_one_sheet_is_refused(tmp_path: Path) -> None:
    """Two relationships with one Id, or one member name twice: exit 2 in one line, never
    an abort from calamine laying out a sheet the checks did not read."""
    kind = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet"
    twice = (
        f'<Relationship Id="rId1" Type="{kind}" Target="worksheets/sheet1.xml"/>'
        f'<Relationship Id="rId1" Type="{kind}" Target="worksheets/far.xml"/>'
    )
    path = _two_places_workbook(tmp_path / "duprel.xlsx", twice)
    done = _payrun("validate", str(path))
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.count("\n") == 1 and "relationship Id 'rId1'" in done.stderr, done.stderr
    one = f'<Relationship Id="rId1" Type="{kind}" Target="worksheets/sheet1.xml"/>'
    with pytest.warns(UserWarning, match="Duplicate name"):
        path = _two_places_workbook(
            tmp_path / "dupzip.xlsx", one, ("xl/worksheets/sheet1.xml", b"<worksheet/>")
        )
    done = _payrun("validate", str(path))
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.count("\n") == 1 and "holds 'xl/worksheets/sheet1.xml' twice" in done.stderr
    # A target read one way by payrun and another by calamine: both places are checked
    far = f'<Relationship Id="rId1" Type="{kind}" Target="xl/worksheets/far.xml"/>'
    harmless = ("xl/xl/worksheets/far.xml", b"<worksheet><sheetData/></worksheet>")
    path = _two_places_workbook(tmp_path / "prefix.xlsx", far, harmless)
    done = _payrun("validate", str(path))
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.count("\n") == 1, done.stderr
