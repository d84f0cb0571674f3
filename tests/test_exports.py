"""Payroll exports read as they are: Bacs Standard 18, Bankline and Barclays CSVs, their
detection, their control totals, their refusals and their pay dates."""

from __future__ import annotations

import json
import re
from datetime import date
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _exports import (
    Credit,
    bacs18_contra,
    bacs18_data,
    bacs18_file,
    bankline_file,
    barclays_file,
)
from payrun.cli import main
from payrun.errors import BatchFileError, ControlTotalsError
from payrun.intake import read_batch

SOURCE = "040004 30000001"
PAYEES = [
    Credit("ADA LOVELACE", "200000", "55779911", 150000, "SALARY DEC"),
    Credit("GRACE HOPPER", "200000", "55779922", 123456, "SALARY DEC"),
    Credit("ALAN TURING", "309089", "00705473", 99, ""),
]

_BACS_TEXT = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.&/- ", max_size=18)
credits = st.builds(
    Credit,
    name=_BACS_TEXT.map(str.strip).filter(bool),
    sort_code=st.from_regex(r"[0-9]{6}", fullmatch=True),
    account=st.from_regex(r"[0-9]{8}", fullmatch=True),
    pence=st.integers(min_value=1, max_value=9_999_999_999),
    reference=_BACS_TEXT.map(str.strip),
)


def rows_of(path: Path, **kwargs: object) -> list[tuple[int, dict[str, str]]]:
    """Every row read back: (line number, values)."""
    with read_batch(path, **kwargs) as batch:  # type: ignore[arg-type]
        return [(row.row, row.values) for row in batch.rows]


def expected(credit: Credit, source: str = SOURCE) -> dict[str, str]:
    """The values payrun should read for ``credit``."""
    return {
        "payee_name": credit.name,
        "sort_code": credit.sort_code,
        "account_number": credit.account,
        "amount": f"{credit.pence // 100}.{credit.pence % 100:02d}",
        "reference": credit.reference,
        "source_account": source,
    }


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    batch=st.lists(credits, min_size=1, max_size=8),
    labels=st.booleans(),
    contra=st.booleans(),
    newline=st.sampled_from(["\r\n", "\n"]),
    strip=st.booleans(),
    hsbc=st.booleans(),
)
def test_standard_18_round_trip(
    tmp_path: Path,
    batch: list[Credit],
    labels: bool,
    contra: bool,
    newline: str,
    strip: bool,
    hsbc: bool,
) -> None:
    """Rows written as Standard 18 (full or data only, HSBC's flavour or not, CRLF or LF,
    trailing spaces stripped or not) read back as the same rows, numbered by their lines."""
    path = tmp_path / "pay.txt"
    text = bacs18_file(batch, labels=labels, contra=contra, newline=newline, strip=strip, hsbc=hsbc)
    path.write_text(text, newline="")
    first = 5 if labels else 1
    assert rows_of(path) == [(first + i, expected(c)) for i, c in enumerate(batch)]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batch=st.lists(credits, min_size=1, max_size=8), trim=st.booleans())
def test_bankline_round_trip(tmp_path: Path, batch: list[Credit], trim: bool) -> None:
    """Rows written as a Bankline standard domestic CSV (all 37 columns, or cut after the
    last value) read back as the same rows, the debit account as the source."""
    path = tmp_path / "pay.csv"
    path.write_text(bankline_file(batch, trim=trim), newline="")
    assert rows_of(path) == [(1 + i, expected(c)) for i, c in enumerate(batch)]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batch=st.lists(credits, min_size=1, max_size=8))
def test_barclays_round_trip(tmp_path: Path, batch: list[Credit]) -> None:
    """Rows written as a Barclays BACS CSV read back as the same rows (no source account
    in the file)."""
    path = tmp_path / "pay.csv"
    path.write_text(barclays_file(batch), newline="")
    assert rows_of(path) == [(1 + i, expected(c, "")) for i, c in enumerate(batch)]


def test_source_account_option_replaces_the_originator(tmp_path: Path) -> None:
    """With --source-account the file's originating account is not the rows' source."""
    path = tmp_path / "pay.txt"
    path.write_text(bacs18_file(PAYEES[:1]))
    (_, values), *_ = rows_of(path, file_source=False)
    assert "source_account" not in values


def write(tmp_path: Path, text: str, name: str = "pay.txt") -> Path:
    """Write ``text`` as the file ``name``."""
    path = tmp_path / name
    path.write_text(text, newline="")
    return path


def refusal(path: Path, **kwargs: object) -> str:
    """The message of the error reading ``path`` raises."""
    with pytest.raises((BatchFileError, ControlTotalsError)) as caught:
        rows_of(path, **kwargs)
    return str(caught.value)


def test_a_short_line_is_refused_naming_it(tmp_path: Path) -> None:
    """A data record cut before its amount ends is refused, naming its line."""
    lines = bacs18_file(PAYEES).splitlines()
    lines[5] = lines[5][:40]
    message = refusal(write(tmp_path, "\n".join(lines)))
    assert "line 6: the record is only 40 characters long" in message, message


def test_a_line_excel_shifted_is_refused_naming_line_and_columns(tmp_path: Path) -> None:
    """A record that lost a leading zero (re-saved by a spreadsheet) names line and columns,
    never a guess at what was meant."""
    lines = bacs18_file(PAYEES, labels=False, contra=False).splitlines()
    lines[2] = lines[2].removeprefix("3")
    message = refusal(write(tmp_path, "\n".join(lines)))
    assert re.search(r"line 3: columns \d+-\d+ \(.*\) read", message), message
    assert "spreadsheet" in message


def test_a_wrong_utl1_is_refused(tmp_path: Path) -> None:
    """UTL1's credit total disagreeing with the records refuses the file, naming both."""
    total = sum(c.pence for c in PAYEES)
    text = bacs18_file(PAYEES, trailer=(total, total + 1, 1, 3))
    message = refusal(write(tmp_path, text))
    assert "UTL1 (line 11) says credits £2,735.56 in 3" in message, message
    assert "records above it are credits £2,735.55 in 3" in message, message


def test_a_wrong_utl1_count_is_refused(tmp_path: Path) -> None:
    """UTL1's credit count disagreeing with the records refuses the file."""
    total = sum(c.pence for c in PAYEES)
    message = refusal(write(tmp_path, bacs18_file(PAYEES, trailer=(total, total, 1, 4))))
    assert "in 4 and debits" in message, message


def test_a_contra_mismatch_is_refused(tmp_path: Path) -> None:
    """A contra that is not the total of its originator's credits refuses the file."""
    lines = [bacs18_data(c) for c in PAYEES] + [bacs18_contra(100)]
    message = refusal(write(tmp_path, "\n".join(lines) + "\n"))
    assert f"the contra for {SOURCE} (line 4) says £1.00" in message, message
    assert "total £2,735.55" in message, message


@pytest.mark.parametrize("code", ["01", "17", "18", "19", "0C", "0N", "0S"])
def test_direct_debit_codes_are_refused(tmp_path: Path, code: str) -> None:
    """A Direct Debit transaction code on a record means a collection file: refused."""
    lines = [bacs18_data(PAYEES[0]), bacs18_data(PAYEES[1], code=code)]
    message = refusal(write(tmp_path, "\n".join(lines)))
    assert "is a Direct Debit (collection) file: line 2 has transaction code" in message


@pytest.mark.parametrize(
    ("kind", "why"), [("02", "a CHAPS payment"), ("04", "an international payment")]
)
def test_bankline_chaps_and_international_rows_are_refused(
    tmp_path: Path, kind: str, why: str
) -> None:
    """Bankline record types 02 (CHAPS) and 04 (international) are refused, saying why."""
    text = bankline_file(PAYEES[:1]) + bankline_file(PAYEES[1:2], record_type=kind)
    message = refusal(write(tmp_path, text, "pay.csv"))
    assert f"line 2 is {why} (record type {kind})" in message, message


def test_bankline_credit_date_damaged_is_refused(tmp_path: Path) -> None:
    """A credit date that lost its leading zero names the line and column 19."""
    text = bankline_file(PAYEES[:1], credit_date=date(2025, 12, 1))
    text = text.replace(",01122025,", ",1122025,")
    message = refusal(write(tmp_path, text, "pay.csv"))
    assert "line 1, column 19 (credit date) reads '1122025'" in message, message


def test_barclays_last_field_not_99_is_refused(tmp_path: Path) -> None:
    """A 6-field file whose last field is not 99 is refused, naming the line."""
    text = barclays_file(PAYEES[:1]) + barclays_file(PAYEES[1:2], code="98")
    message = refusal(write(tmp_path, text, "pay.csv"))
    assert "line 2: field 6 reads '98', not 99" in message, message


def test_barclays_direct_debit_is_refused(tmp_path: Path) -> None:
    """A Barclays file with a Direct Debit code is a collection file: refused."""
    message = refusal(write(tmp_path, barclays_file(PAYEES[:1], code="17"), "pay.csv"))
    assert "a Direct Debit (collection) file" in message, message


def test_a_file_that_reads_two_ways_is_refused_naming_both(tmp_path: Path) -> None:
    """A first line that is a Standard 18 record and also a header naming payrun's columns
    is refused, naming both readings; --input-format settles it."""
    line = bacs18_data(PAYEES[0]) + ",amount"
    path = write(tmp_path, line + "\n")
    message = refusal(path)
    assert "reads both as Bacs Standard 18 and as a payrun batch file" in message, message
    assert "--input-format bacs18" in message


def test_an_explicit_format_that_does_not_fit_says_so(tmp_path: Path) -> None:
    """--input-format bacs18 on a payrun CSV names the line that is not a record."""
    path = write(tmp_path, "payee_name,sort_code,account_number,amount\nA,1,2,3\n", "p.csv")
    assert "line 1" in refusal(path, input_format="bacs18")


def validate_json(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, object]:
    """`payrun validate --format json` of ``path``."""
    capsys.readouterr()
    main(["validate", str(path), "--format", "json", *extra])
    document: dict[str, object] = json.loads(capsys.readouterr().out)
    return document


def test_validate_json_says_input_format_and_pay_date(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """validate's JSON adds input_format and pay_date: Standard 18's is the working day
    after UHL1's processing day (Tue 23 Dec 2025 -> Wed 24 Dec; Wed 24 Dec -> Mon 29 Dec
    over Christmas), Bankline's its credit date, Barclays' none, --pay-date overrides."""
    bacs = write(tmp_path, bacs18_file(PAYEES))
    assert validate_json(bacs, capsys)["pay_date"] == "2025-12-24"
    late = write(tmp_path, bacs18_file(PAYEES, processing=date(2025, 12, 24)), "late.txt")
    document = validate_json(late, capsys)
    assert (document["input_format"], document["pay_date"]) == ("bacs18", "2025-12-29")
    bankline = write(tmp_path, bankline_file(PAYEES, credit_date=date(2026, 1, 30)), "b.csv")
    document = validate_json(bankline, capsys)
    assert (document["input_format"], document["pay_date"]) == ("bankline", "2026-01-30")
    barclays = write(tmp_path, barclays_file(PAYEES), "c.csv")
    document = validate_json(barclays, capsys, "--source-account", SOURCE)
    assert (document["input_format"], document["pay_date"], document["valid"]) == (
        "barclays",
        None,
        3,
    )
    document = validate_json(barclays, capsys, "--pay-date", "2026-02-02")
    assert document["pay_date"] == "2026-02-02"


def test_validate_refuses_control_totals_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A contra mismatch is exit 2 with one line on stderr."""
    lines = [bacs18_data(c) for c in PAYEES] + [bacs18_contra(100)]
    path = write(tmp_path, "\n".join(lines) + "\n")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "contra" in err, err


def test_validate_text_says_what_was_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The text report starts with the line saying how the file was read."""
    path = write(tmp_path, bacs18_file(PAYEES))
    capsys.readouterr()
    assert main(["validate", str(path)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == (
        "read as Bacs Standard 18: 3 credits, £2,735.55, contras and UTL1 agree,"
        " processing day Tue 23 Dec 2025 -> pay date Wed 24 Dec 2025"
    )


WISE = (
    "name,recipientEmail,paymentReference,receiverType,amountCurrency,amount,sourceCurrency,"
    "targetCurrency,sortCode,accountNumber\n"
    "Ada Lovelace,ada@example.com,DEC PAY,PRIVATE,GBP,1500.00,GBP,GBP,200000,55779911\n"
)
REVOLUT = (
    "Name,Recipient type,IBAN,BIC,Account number,Sort code,Recipient bank country,Currency,"
    "Amount,Payment reference\n"
    "Ada Lovelace,INDIVIDUAL,,,55779911,200000,GB,GBP,1500.00,DEC PAY\n"
)
TELLEROO = (
    "Name,Amount,Reference,Account Number,Sort Code,Email\n"
    "Ada Lovelace,1500.00,DEC PAY,55779911,20-00-00,ada@example.com\n"
)


@pytest.mark.parametrize("text", [WISE, REVOLUT, TELLEROO], ids=["wise", "revolut", "telleroo"])
def test_other_services_csvs_are_read_by_their_headers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    """Revolut Business, Wise and Telleroo CSVs are read as they are, reference included."""
    path = write(tmp_path, text, "bulk.csv")
    document = validate_json(path, capsys, "--source-account", SOURCE)
    assert (document["valid"], document["invalid"], document["input_format"]) == (
        1,
        0,
        "payrun",
    )
    assert not [w for w in document["warnings"] if "reference" in str(w)]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("old", "new", "column"),
    [
        (",GBP,1500.00,GBP,GBP,", ",GBP,1500.00,EUR,GBP,", "source_currency"),
        (",GBP,1500.00,GBP,GBP,", ",EUR,1500.00,GBP,GBP,", "amount_currency"),
        (",GBP,1500.00,GBP,GBP,", ",GBP,1500.00,GBP,USD,", "currency"),
    ],
)
def test_a_wise_row_in_another_currency_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str, column: str
) -> None:
    """Any of Wise's three currency columns other than GBP makes the row invalid."""
    path = write(tmp_path, WISE.replace(old, new), "wise.csv")
    document = validate_json(path, capsys, "--source-account", SOURCE)
    assert document["invalid"] == 1
    assert [e["column"] for e in document["errors"]] == [column]  # type: ignore[attr-defined]


def test_a_revolut_row_for_a_bank_abroad_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Revolut row whose recipient bank country is not GB is invalid, saying why."""
    path = write(tmp_path, REVOLUT.replace(",GB,GBP,", ",FR,GBP,"), "revolut.csv")
    document = validate_json(path, capsys, "--source-account", SOURCE)
    errors = document["errors"]
    assert [e["column"] for e in errors] == ["country"], errors  # type: ignore[attr-defined]
    assert "must be GB" in errors[0]["message"]  # type: ignore[index]


def test_hsbc_flavour_without_utl1_is_read_and_its_contra_checked(tmp_path: Path) -> None:
    """HSBC's flavour (VOL1 owned by HSBC, no UTL1 after EOF2) is read; its contra is still
    the control total."""
    path = write(tmp_path, bacs18_file(PAYEES, hsbc=True))
    with read_batch(path) as batch:
        assert batch.export is not None
        assert batch.export.controls == "contras agree (no UTL1)"
        assert [row.row for row in batch.rows] == [5, 6, 7]
    lines = bacs18_file(PAYEES, hsbc=True).splitlines()
    lines[7] = bacs18_contra(5)
    assert "the contra for" in refusal(write(tmp_path, "\n".join(lines), "bad.txt"))


def test_multi_day_records_take_the_latest_processing_day(tmp_path: Path) -> None:
    """106-character records carry their own processing day (101-106): the pay date is the
    working day after the latest (Fri 19 Dec 2025 -> Mon 22 Dec 2025)."""
    days = [" 25351", " 25353", ""]
    lines = [bacs18_data(c) + day for c, day in zip(PAYEES, days, strict=True)]
    path = write(tmp_path, "\n".join(lines) + "\n")
    with read_batch(path) as batch:
        assert batch.export is not None
        assert batch.export.pay_date == date(2025, 12, 22)
        assert len(list(batch.rows)) == 3


def test_the_fleet_manifest_takes_an_input_format_per_batch(tmp_path: Path) -> None:
    """A manifest batch's input_format reaches its validation options; another value is
    refused naming the field."""
    from payrun.errors import UsageError
    from payrun.fleet._manifest import load_manifest
    from payrun.fleet._submit import _validation

    manifest = tmp_path / "fleet.toml"
    batch = (
        '[[batch]]\nname = "acme"\nfile = "pay.txt"\nbase_url = "https://bank.example"\n'
        'key = "acme"\n'
    )
    manifest.write_text(batch + 'input_format = "bacs18"\n')
    (entry,) = load_manifest(manifest)
    assert _validation(entry).input_format == "bacs18"
    manifest.write_text(batch)
    assert _validation(load_manifest(manifest)[0]).input_format == "auto"
    manifest.write_text(batch + 'input_format = "sepa"\n')
    with pytest.raises(UsageError, match="input_format"):
        load_manifest(manifest)


def test_a_dos_end_of_file_mark_is_not_a_record(tmp_path: Path) -> None:
    """A Ctrl-Z (DOS's end of file) after the last record is ignored, not a short line."""
    path = write(tmp_path, bacs18_file(PAYEES) + "\x1a")
    assert [number for number, _ in rows_of(path)] == [5, 6, 7]


def test_sheet_is_refused_for_an_export(tmp_path: Path) -> None:
    """--sheet names a workbook's sheet: given for a text export, it is refused."""
    path = write(tmp_path, bacs18_file(PAYEES))
    message = refusal(path, sheet="Pay")
    assert "--sheet Pay is for .xlsx workbooks, and pay.txt is a Bacs Standard 18 file" in message


@pytest.mark.parametrize("profile", ["bankline", "barclays"])
def test_rows_are_numbered_by_the_line_they_start_on(tmp_path: Path, profile: str) -> None:
    """A quoted field spanning two lines: the rows after it, and a refusal, name the file's
    line (where the record starts), not the CSV record's count."""
    spanning = Credit("ADA\r\nLOVELACE", "200000", "55779911", 150000, "SALARY DEC")
    make = bankline_file if profile == "bankline" else barclays_file
    path = tmp_path / "pay.csv"
    path.write_text(make([spanning, PAYEES[1], PAYEES[2]]), newline="")
    assert [row for row, _ in rows_of(path, input_format=profile)] == [1, 3, 4]
    bad = make([spanning, PAYEES[1]]) + (
        bankline_file([PAYEES[2]], record_type="02")
        if profile == "bankline"
        else barclays_file([PAYEES[2]], code="17")
    )
    path.write_text(bad, newline="")
    with pytest.raises(BatchFileError, match=r"line 4"):
        rows_of(path, input_format=profile)
