"""Validation: one test per rule, warnings, duplicates, the summary and fingerprint."""

from __future__ import annotations

import dataclasses
import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import openpyxl  # type: ignore[import-untyped]
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from payrun._models import RowVerdict
from payrun.config import ValidationOptions
from payrun.intake import RawRow, read_batch
from payrun.intake._xlsx import cell_text
from payrun.validation import (
    COLUMNS,
    BatchSummary,
    normalize_source_account,
    validate_batch,
    validate_rows,
)
from payrun.validation._checker import RowChecker
from payrun.validation._seen import DigestTable

COLS = ["payee_name", "sort_code", "account_number", "amount", "reference", "source_account"]
BASE = {
    "payee_name": "Ada Lovelace",
    "sort_code": "12-34-56",
    "account_number": "12345678",
    "amount": "1000.50",
    "reference": "SALARY NOV",
    "source_account": "040004 30000001",
}


def _csv(path: Path, header: list[str], rows: list[dict[str, str]]) -> Path:
    def quote(cell: str) -> str:
        return '"' + cell.replace('"', '""') + '"'

    lines = [",".join(header)] + [",".join(quote(row.get(c, "")) for c in header) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def verdicts(
    tmp_path: Path, *rows: dict[str, str], header: list[str] | None = None, **options: Any
) -> list[RowVerdict]:
    """Validate rows (each BASE with changes) written as a CSV file."""
    path = _csv(tmp_path / "b.csv", header or COLS, [{**BASE, **row} for row in rows])
    with read_batch(path) as batch:
        return list(validate_rows(batch, ValidationOptions(**options)))


def only_error(tmp_path: Path, change: dict[str, str], **options: Any) -> tuple[str | None, str]:
    """The single error of one row: (column, message)."""
    (verdict,) = verdicts(tmp_path, change, **options)
    assert verdict.instruction is None
    assert len(verdict.errors) == 1, verdict.errors
    return verdict.errors[0].column, verdict.errors[0].message


def test_valid_row_becomes_an_instruction(tmp_path: Path) -> None:
    """A good row yields a normalised PaymentInstruction and no problems."""
    (verdict,) = verdicts(tmp_path, {"amount": "£1,000.50", "sort_code": "12 34 56"})
    assert verdict.valid and not verdict.errors and not verdict.warnings
    assert verdict.instruction is not None
    assert verdict.instruction.sort_code == "123456"
    assert verdict.instruction.amount == Decimal("1000.50")
    assert verdict.instruction.source_account == "040004 30000001"
    assert verdict.instruction.row == 2


@pytest.mark.parametrize(
    ("change", "column", "words"),
    [
        ({"payee_name": "  "}, "payee_name", "empty"),
        ({"payee_name": "x" * 141}, "payee_name", "at most 140"),
        ({"payee_name": "Ada\x07Lovelace"}, "payee_name", "control character"),
        ({"payee_name": "=HYPERLINK()"}, "payee_name", "spreadsheet damage"),
        ({"payee_name": "@SUM(A1)"}, "payee_name", "formula"),
        ({"sort_code": "1234"}, "sort_code", "6 digits"),
        ({"sort_code": "12-34-5a"}, "sort_code", "6 digits"),
        ({"sort_code": ""}, "sort_code", "empty"),
        ({"account_number": "1234567"}, "account_number", "add the leading 0"),
        ({"account_number": "123456789"}, "account_number", "8 digits"),
        ({"account_number": "1.2345678E+07"}, "account_number", "scientific notation"),
        ({"amount": "ten"}, "amount", "not a number"),
        ({"amount": "0"}, "amount", "zero"),
        ({"amount": "-5.00"}, "amount", "negative"),
        ({"amount": "5.001"}, "amount", "more than 2 decimal places"),
        ({"amount": "1.5E+03"}, "amount", "scientific notation"),
        ({"amount": "1000000.01"}, "amount", "limit per payment"),
        ({"amount": "1234,50"}, "amount", "not a number"),
        ({"amount": ""}, "amount", "empty"),
        ({"reference": "R" * 36}, "reference", "at most 35"),
        ({"reference": "NOV\x01"}, "reference", "control character"),
        ({"reference": "+44 CALL"}, "reference", "spreadsheet damage"),
        ({"source_account": "my account"}, "source_account", "neither an account URL"),
        ({"source_account": ""}, "source_account", "no source account"),
    ],
)
def test_error_rules(tmp_path: Path, change: dict[str, str], column: str, words: str) -> None:
    """Each broken value gives exactly one error on its column, with the words that explain it."""
    found_column, message = only_error(tmp_path, change)
    assert found_column == column
    assert words in message


def test_seven_digit_account_is_never_padded(tmp_path: Path) -> None:
    """A 7-digit account number is an error that shows the padded form to check."""
    message = only_error(tmp_path, {"account_number": "1234567"})[1]
    assert "01234567" in message and "add the leading 0" in message


def test_max_amount_option(tmp_path: Path) -> None:
    """--max-amount lowers the per-payment cap."""
    column, message = only_error(tmp_path, {"amount": "500.01"}, max_amount=Decimal(500))
    assert column == "amount" and "£500.00" in message


def test_trailing_zero_decimals_are_pence(tmp_path: Path) -> None:
    """12.500 is 12.50: only non-zero third decimals are an error."""
    (verdict,) = verdicts(tmp_path, {"amount": "12.500"})
    assert verdict.instruction is not None and verdict.instruction.amount == Decimal("12.50")


def test_currency_must_be_gbp(tmp_path: Path) -> None:
    """A currency column may say GBP (any case) or nothing; anything else is an error."""
    header = [*COLS, "currency"]
    good, blank, euro = verdicts(
        tmp_path,
        {"currency": "gbp"},
        {"currency": "", "amount": "2"},
        {"currency": "EUR", "amount": "3"},
        header=header,
    )
    assert good.valid and blank.valid
    assert [(e.column, "GBP" in e.message) for e in euro.errors] == [("currency", True)]


def test_source_account_from_the_command_line(tmp_path: Path) -> None:
    """A blank source_account cell falls back to --source-account, normalised."""
    (verdict,) = verdicts(tmp_path, {"source_account": ""}, source_account="04-00-04 30000002")
    assert verdict.instruction is not None
    assert verdict.instruction.source_account == "040004 30000002"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/v0/bank/accounts/ba.x", "/v0/bank/accounts/ba.x"),
        ("https://bank.example/v0/bank/accounts/ba.1/", "/v0/bank/accounts/ba.1"),
        ("040004 30000001", "040004 30000001"),
        ("04-00-04 30000001", "040004 30000001"),
        ("04000430000001", "040004 30000001"),
        ("040004", None),
        ("/v0/bank/accounts/", None),
    ],
)
def test_normalize_source_account(text: str, expected: str | None) -> None:
    """Source accounts normalise to an account path or 'SORTCODE ACCOUNTNUMBER'."""
    assert normalize_source_account(text) == expected


def test_repeated_row_id_second_is_invalid(tmp_path: Path) -> None:
    """The second and later rows with a row_id are invalid, with column null."""
    header = [*COLS, "row_id"]
    first, second, third = verdicts(
        tmp_path,
        {"row_id": "E1"},
        {"row_id": "E1", "amount": "2"},
        {"row_id": "E1", "amount": "3"},
        header=header,
    )
    assert first.valid and not second.valid and not third.valid
    assert [(e.column, "repeats row 2" in e.message) for e in second.errors] == [(None, True)]


def test_duplicate_payment_is_an_error_unless_allowed(tmp_path: Path) -> None:
    """Same payee, amount and reference twice: the second is an error, unless allowed."""
    first, second, other = verdicts(tmp_path, {}, {"payee_name": "A Lovelace"}, {"reference": "X"})
    assert first.valid and other.valid and not second.valid
    assert second.errors[0].column is None and "row 2" in second.errors[0].message
    assert all(v.valid for v in verdicts(tmp_path, {}, {}, allow_duplicates=True))


def test_invalid_rows_do_not_count_as_first_payments(tmp_path: Path) -> None:
    """A duplicate of an invalid row is not a duplicate: only valid rows are remembered."""
    bad, good = verdicts(tmp_path, {"payee_name": ""}, {})
    assert not bad.valid and good.valid


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"reference": "SALARY NOVEMBER 2026"}, "first 18"),
        ({"reference": "SALARY #11"}, "character set"),
        ({"payee_name": "Zoë Brontë"}, "some banks replace them"),
        ({"reference": ""}, "Sent from"),
    ],
)
def test_warnings_do_not_invalidate(tmp_path: Path, change: dict[str, str], words: str) -> None:
    """Long or unusual references, odd characters and blank references are warnings only."""
    (verdict,) = verdicts(tmp_path, change)
    assert verdict.valid
    assert [words in w.message for w in verdict.warnings] == [True]


def test_no_reference_column_is_one_header_warning(tmp_path: Path) -> None:
    """A file without a reference column gets one warning, not one per row."""
    path = _csv(tmp_path / "b.csv", COLS[:4] + COLS[5:], [BASE, {**BASE, "amount": "2"}])
    with read_batch(path) as batch:
        summary = validate_batch(batch, ValidationOptions())
    assert summary.valid == 2
    assert [(w.row, w.column) for w in summary.warnings] == [(1, "reference")]


def _xlsx(path: Path, rows: list[list[Any]]) -> Path:
    book = openpyxl.Workbook()
    for row in [COLS, *rows]:
        book.active.append(row)
    book.save(path)
    return path


def test_spreadsheet_damage_is_named_with_its_fix(tmp_path: Path) -> None:
    """Numbers that lost zeros, dates and formulas are 'spreadsheet damage' with a fix."""
    src = "040004 30000001"
    path = _xlsx(
        tmp_path / "b.xlsx",
        [
            ["Ada", 12345, "12345678", 10, "R1", src],
            ["Bob", dt.date(2045, 3, 12), "12345678", 11, "R2", src],
            ["Cy", "123456", 1234567, 12, "R3", src],
            ["=A1", "123456", "12345678", 13, "R4", src],
            ["Dee", 123456, 12345678, 14, "R5", src],
        ],
    )
    with read_batch(path) as batch:
        lost, date, short, formula, intact = validate_rows(batch, ValidationOptions())
    assert "lost its leading zeros" in lost.errors[0].message
    assert "Text" in lost.errors[0].message
    assert "into a date" in date.errors[0].message
    assert short.errors[0].column == "account_number" and "number" in short.errors[0].message
    assert "formula" in formula.errors[0].message and "values" in formula.errors[0].message
    assert intact.valid, intact.errors


def test_extra_values_are_one_row_error(tmp_path: Path) -> None:
    """A row with an unquoted thousands comma is one error, not a cascade."""
    path = tmp_path / "b.csv"
    path.write_text(",".join(COLS) + "\nAda,123456,12345678,1,000.50,R,040004 30000001\n")
    with read_batch(path) as batch:
        (verdict,) = validate_rows(batch, ValidationOptions())
    assert [(e.column, "unquoted" in e.message) for e in verdict.errors] == [(None, True)]


def test_summary_counts_totals_and_fingerprint(tmp_path: Path) -> None:
    """The summary counts rows, sums valid ones per account, and fingerprints them."""
    rows = [{}, {"amount": "2.25", "source_account": "040004 30000002"}, {"amount": "x"}]
    path = _csv(tmp_path / "b.csv", COLS, [{**BASE, **row} for row in rows])
    with read_batch(path) as batch:
        summary = validate_batch(batch, ValidationOptions())
    assert (summary.rows, summary.valid, summary.invalid) == (3, 2, 1)
    assert summary.total == Decimal("1002.75")
    assert {k: (v.count, v.total) for k, v in summary.accounts.items()} == {
        "040004 30000001": (1, Decimal("1000.50")),
        "040004 30000002": (1, Decimal("2.25")),
    }
    fingerprint = summary.fingerprint
    assert (fingerprint.count, fingerprint.total) == (2, Decimal("1002.75"))
    assert len(fingerprint.sha256) == 64


def test_fingerprint_depends_on_normalized_values_only(tmp_path: Path) -> None:
    """The same payments written differently share a fingerprint; a changed one does not."""

    def fingerprint(change: dict[str, str]) -> str:
        path = _csv(tmp_path / "b.csv", COLS, [{**BASE, **change}])
        with read_batch(path) as batch:
            return validate_batch(batch, ValidationOptions()).fingerprint.sha256

    plain = fingerprint({})
    assert fingerprint({"sort_code": "123456", "amount": "£1,000.5"}) == plain
    assert fingerprint({"amount": "1000.51"}) != plain


def test_empty_summary() -> None:
    """A summary with no rows is all valid with a zero total."""
    summary = BatchSummary()
    assert summary.all_valid and summary.total == 0 and summary.fingerprint.count == 0


@pytest.mark.parametrize(
    "change",
    [
        {},
        {"row_id": "E1"},
        {"row_id": " E1 ", "currency": "gbp"},
        {"row_id": "E\t1"},
        {"currency": "EUR"},
        {"reference": ""},
        {"reference": "A REFERENCE OF 20 CH"},
        {"payee_name": "  Ada  ", "account_number": " 12345678 "},
        {"payee_name": "Zoë"},
        {"sort_code": "12-34-56"},
        {"sort_code": "12-34-5x"},
        {"sort_code": "12 34 56"},
        {"sort_code": "12-3456-"},
        {"sort_code": "\uff11\uff12-34-56"},
        {"sort_code": "12-34-56 "},
        {"sort_code": " 123456"},
        {"amount": "1000.5"},
        {"amount": "0.00"},
        {"amount": "2000000.00"},
        {"source_account": ""},
        {"source_account": " 04-00-04 30000001 "},
        {"source_account": "nowhere"},
    ],
)
@pytest.mark.parametrize("options", [{}, {"source_account": "/v0/bank/accounts/ba.x"}])
def test_fast_path_gives_the_full_rules_verdict(
    tmp_path: Path, change: dict[str, str], options: dict[str, Any]
) -> None:
    """Every row, repeats included, gets the same verdict from the fast path and the rules."""
    header = [*COLS, "row_id", "currency"]
    plain = {**BASE, "sort_code": "123456", "row_id": "", "currency": ""}
    rows = [{**plain, **change}] * 3 + [{**plain, "amount": "7.00"}]
    path = _csv(tmp_path / "b.csv", header, rows)
    with read_batch(path) as batch:
        raws = list(batch.rows)
    cells = [list(raw.values.values()) for raw in raws]
    if not change or change == {"sort_code": "12-34-56"}:  # plain rows take the fast path
        assert type(RowChecker(tuple(header), ValidationOptions()).fast(2, cells[0])) is tuple
    fast = RowChecker(tuple(header), ValidationOptions(**options))
    full = RowChecker(tuple(header), ValidationOptions(**options))
    expected = [full.check(raw) for raw in raws]
    assert [fast.verdict(raw, row) for raw, row in zip(raws, cells, strict=True)] == expected
    assert list(validate_rows(read_batch(path), ValidationOptions(**options))) == expected
    summary = validate_batch(read_batch(path), ValidationOptions(**options))
    by_verdicts = BatchSummary(w for w in summary.warnings if w.row == 1)  # header warnings
    for verdict in expected:
        by_verdicts.add(verdict)
    assert summary.fingerprint == by_verdicts.fingerprint
    assert (summary.rows, summary.errors, summary.warnings, summary.accounts) == (
        by_verdicts.rows,
        by_verdicts.errors,
        by_verdicts.warnings,
        by_verdicts.accounts,
    )


def test_digest_table_grows_and_remembers_first_rows() -> None:
    """The digest table keeps every key's first row across growth."""
    table = DigestTable()
    for row in range(1, 5000):
        assert table.first_row(row * 7919, row) == 0
    assert len(table) == 4999
    assert all(table.first_row(row * 7919, 99999) == row for row in range(1, 5000))
    assert table.first_row(0, 1) == 0 and table.first_row(0, 2) == 1


def test_columns_spec_is_the_contract() -> None:
    """COLUMNS lists the contract's columns, the first four required."""
    assert [c.name for c in COLUMNS] == [
        "payee_name",
        "sort_code",
        "account_number",
        "amount",
        "reference",
        "source_account",
        "row_id",
        "currency",
    ]
    assert [c.name for c in COLUMNS if c.required] == COLS[:4]


def test_digest_table_moves_to_arrays(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the dict limit, keys move to the compact arrays and are still found."""
    monkeypatch.setattr("payrun.validation._seen._DICT_LIMIT", 100)
    monkeypatch.setattr("payrun.validation._seen._ARRAY_SLOTS", 512)  # then growth, twice
    table = DigestTable()
    for row in range(1, 1001):
        assert table.first_row(hash(("key", row)), row) == 0
    assert len(table) == 1000
    assert all(table.first_row(hash(("key", row)), 5000) == row for row in range(1, 1001))


def test_validated_instruction_is_a_frozen_value() -> None:
    """Validation's instruction equals one built from the same fields, and cannot change."""
    from payrun._models import PaymentInstruction

    values = BASE | {
        "payee_name": "Ada",
        "amount": "2.5",
        "source_account": "/v0/bank/accounts/ba.x",
    }
    built = RowChecker(tuple(COLS), ValidationOptions()).check(
        RawRow(9, values | {"reference": "R"})
    )
    made = PaymentInstruction(
        9, "Ada", "123456", "12345678", Decimal("2.50"), "R", "/v0/bank/accounts/ba.x", None
    )
    assert built.instruction == made and hash(built.instruction) == hash(made)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.row = 3  # type: ignore[misc]


@settings(max_examples=500)
@given(
    st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.integers(-10, 10**9).map(lambda cents: cents / 100),
        st.integers(0, 10**6).map(lambda cents: cents / 1000),
    )
)
def test_numeric_xlsx_amount_fast_path_agrees_with_the_rules(value: float) -> None:
    """A float amount cell takes the fast path only when the rules give it the same Decimal."""
    columns = ("payee_name", "sort_code", "account_number", "amount")
    cells: list[Any] = ["Ada", "123456", "12345678", value]
    text, damage = cell_text("amount", value)
    raw = RawRow(2, dict(zip(columns, [*cells[:3], text], strict=True)))
    verdict = RowChecker(columns, ValidationOptions(source_account="040004 30000001")).verdict
    fast, full = verdict(raw, cells), verdict(raw)
    assert damage is not None or fast == full
    plain = RowChecker(columns, ValidationOptions(source_account="040004 30000001")).fast(2, cells)
    if isinstance(plain, tuple):
        assert full.instruction is not None and str(full.instruction.amount) == plain[4]
    elif full.instruction is not None:  # valid, yet not taken fast: not in whole pence
        assert round(value * 100) / 100 != value


def test_digest_table_moves_to_arrays_keeping_first_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the dict's share the keys move to the arrays, which grow; first rows are kept."""
    monkeypatch.setattr("payrun.validation._seen._DICT_LIMIT", 100)
    monkeypatch.setattr("payrun.validation._seen._ARRAY_SLOTS", 512)  # then growth, twice
    table = DigestTable()
    digests = [hash(("k", n)) for n in range(1, 3000)] + [0, -1]
    for row, digest in enumerate(digests, start=1):
        if row % 2:
            assert table.first_row(digest, row) == 0
        else:
            assert table.remember(digest, row) == row
            table.tidy()
    assert len(table) == len(digests)
    assert all(table.first_row(d, 10**6) == r for r, d in enumerate(digests, start=1))
    assert table.remember(digests[5], 10**6 + 1) == 6 and table.remember(-1, 7) == len(digests)
