"""`payrun validate`: exit codes, text and JSON output, --report, options, bad files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _run_helpers import closed_pipe
from payrun.cli import main

REPO = Path(__file__).resolve().parents[1]
HEADER = "payee_name,sort_code,account_number,amount,reference,source_account\n"
GOOD = 'Ada Lovelace,12-34-56,12345678,"1,000.50",SALARY NOV,/v0/bank/accounts/ba.x\n'
BAD_SORT = "Bad Sort,1234,12345678,20,SALARY NOV,/v0/bank/accounts/ba.x\n"


@pytest.fixture
def batch_csv(tmp_path: Path) -> Path:
    """A batch file with one valid and one invalid row."""
    path = tmp_path / "batch.csv"
    path.write_text(HEADER + GOOD + BAD_SORT, encoding="utf-8")
    return path


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Call main in-process and return (exit code, stdout, stderr)."""
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("sample", ["payroll.csv", "suppliers.xlsx"])
def test_samples_are_valid(sample: str, samples: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The shipped samples validate with exit 0 and no errors."""
    code, out, _ = run(["validate", str(samples / sample)], capsys)
    assert code == 0
    assert " 0 invalid" in out and "fingerprint: count" in out


def test_samples_use_sandbox_directory_payees(samples: Path) -> None:
    """Every sample payee is in the sandbox directory (one deliberate close match aside)."""
    import csv

    from payrun.intake import read_batch

    text = (REPO / "src/payrun/sandbox/directory.csv").read_text(encoding="utf-8")
    directory = {
        (r["account_holder"], r["sort_code"], r["account_number"])
        for r in csv.DictReader(text.splitlines())
    }
    names = {(sort, account): name for name, sort, account in directory}
    for sample in ("payroll.csv", "suppliers.xlsx"):
        with read_batch(samples / sample) as batch:
            for row in batch.rows:
                key = (row.values["sort_code"].replace("-", ""), row.values["account_number"])
                assert key in names, (sample, row)
                if names[key] != row.values["payee_name"]:
                    assert row.values["payee_name"] == "Brightwater Cleaning Ltd"


def test_errors_sample_shows_each_kind_of_mistake(
    samples: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """payroll-with-errors.csv exits 1 and names many distinct problems."""
    code, out, _ = run(
        ["validate", str(samples / "payroll-with-errors.csv"), "--format", "json"], capsys
    )
    document = json.loads(out)
    assert code == 1
    assert document["invalid"] >= 15 and document["valid"] >= 1
    assert len({e["message"].split(":")[0] for e in document["errors"]}) >= 12


def test_text_output_and_exit_1(batch_csv: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Text output names the bad row and column; some invalid rows exit 1."""
    code, out, err = run(["validate", str(batch_csv)], capsys)
    assert code == 1 and err == ""
    assert "batch.csv: 2 rows: 1 valid, 1 invalid" in out
    assert "     3  Bad Sort         sort_code       error: sort code must be 6 digits" in out


def test_json_output_shape(batch_csv: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--format json prints exactly the contract's object."""
    code, out, _ = run(["validate", str(batch_csv), "--format", "json"], capsys)
    assert code == 1
    document = json.loads(out)
    assert document == {
        "rows": 2,
        "valid": 1,
        "invalid": 1,
        "total": "1000.50",
        "errors": [
            {
                "row": 3,
                "column": "sort_code",
                "message": "sort code must be 6 digits, like 12-34-56; got '1234'",
            }
        ],
        "warnings": [],
        "input_format": "payrun",
        "pay_date": None,
    }


@pytest.mark.parametrize("suffix", [".json", ".csv", ".xlsx"])
def test_report_file(
    batch_csv: Path, tmp_path: Path, suffix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--report FILE writes the report in the format its extension names."""
    report = tmp_path / f"report{suffix}"
    code, out, _ = run(["validate", str(batch_csv), "--report", str(report)], capsys)
    assert code == 1 and "invalid" in out
    assert report.exists() and report.stat().st_size > 0
    if suffix == ".json":
        assert json.loads(report.read_text())["errors"][0]["row"] == 3


@pytest.mark.parametrize("report", ["report.pdf", "missing/report.json", "folder.json"])
def test_a_report_that_cannot_be_written_exits_2_before_reading(
    batch_csv: Path, tmp_path: Path, report: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A --report with a wrong extension, a missing folder or a folder's name: exit 2, one line."""
    (tmp_path / "folder.json").mkdir()
    code, out, err = run(["validate", str(batch_csv), "--report", str(tmp_path / report)], capsys)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and err.startswith("payrun: error: cannot write")


def test_a_report_onto_the_batch_file_is_refused(
    batch_csv: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--report naming the batch file itself: exit 2, one line, the file as it was."""
    before = batch_csv.read_bytes()
    code, out, err = run(["validate", str(batch_csv), "--report", str(batch_csv)], capsys)
    assert (code, out) == (2, "")
    assert err == (
        f"payrun: error: the report {batch_csv} would overwrite the batch file"
        f" {batch_csv}: name another report file\n"
    )
    assert batch_csv.read_bytes() == before


def test_a_piped_batch_is_refused_with_what_to_do(
    batch_csv: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`payrun validate <(cat pay.csv)`: exit 2 and the JSON object saying to save the batch
    to a file (it crashed with exit 3: 'File or stream is not seekable')."""
    read, write = os.pipe()
    os.write(write, batch_csv.read_bytes())
    os.close(write)
    try:
        code, out, err = run(["validate", f"/dev/fd/{read}", "--format", "json"], capsys)
    finally:
        os.close(read)
    assert code == 2, err
    [error] = json.loads(out)["errors"]
    assert "is not a regular file (a pipe or a device)" in error["message"], error


def test_options_change_the_verdict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--source-account, --max-amount and --allow-duplicates are honoured."""
    path = tmp_path / "b.csv"
    path.write_text(
        "name,sort code,account number,amount\nAda,123456,12345678,600\nAda,123456,12345678,600\n",
        encoding="utf-8",
    )
    assert run(["validate", str(path)], capsys)[0] == 1
    base = ["validate", str(path), "--source-account", "040004 30000001"]
    assert run(base, capsys)[0] == 1
    assert run([*base, "--allow-duplicates"], capsys)[0] == 0
    code, out, _ = run(
        [*base, "--allow-duplicates", "--max-amount", "500", "--format", "json"], capsys
    )
    assert code == 1 and "£500.00" in out


@pytest.mark.parametrize(
    ("option", "value", "words"),
    [
        ("--max-amount", "lots", "--max-amount"),
        ("--max-amount", "0", "positive"),
        ("--max-rows", "0", "--max-rows"),
        ("--source-account", "mine", "--source-account"),
    ],
)
def test_bad_options_exit_2(
    batch_csv: Path, option: str, value: str, words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A wrong option value exits 2 with one line naming the option."""
    code, out, err = run(["validate", str(batch_csv), option, value], capsys)
    assert code == 2 and out == ""
    assert words in err and len(err.strip().splitlines()) == 1


def test_max_rows_exit_2(batch_csv: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """More rows than --max-rows exits 2, and prints no partial report."""
    code, out, err = run(["validate", str(batch_csv), "--max-rows", "1"], capsys)
    assert (code, out) == (2, "")
    assert "more than 1 payment rows" in err


def test_sheet_option(samples: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--sheet picks the sheet to read; a missing sheet, or --sheet on a CSV, exits 2."""
    path = samples / "suppliers.xlsx"
    assert run(["validate", str(path), "--sheet", "suppliers"], capsys)[0] == 0
    code, _, err = run(["validate", str(path), "--sheet", "Nope"], capsys)
    assert code == 2 and "no sheet named 'Nope'" in err
    code, _, err = run(["validate", str(samples / "payroll.csv"), "--sheet", "Nov"], capsys)
    assert code == 2 and "--sheet Nov is for .xlsx workbooks" in err, err


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (None, "cannot find"),
        (b"", "empty"),
        (HEADER.encode(), "no payment rows"),
        (b"\x00\x01\x02" * 50, "binary"),
        (b"PK\x03\x04garbage", "corrupt"),
        (b"a,b\n1,2\n", "not found"),
    ],
)
def test_bad_files_exit_2_with_one_line(
    tmp_path: Path, content: bytes | None, words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Unusable files exit 2 with one line on stderr and nothing on stdout."""
    path = tmp_path / "bad.csv"
    if content is not None:
        path.write_bytes(content)
    code, out, err = run(["validate", str(path)], capsys)
    assert (code, out) == (2, "")
    assert words in err and len(err.strip().splitlines()) == 1


def test_subprocess_exit_codes_and_json(batch_csv: Path, tmp_path: Path, samples: Path) -> None:
    """A real `python -m payrun validate` process: exit 0/1/2 and the JSON shape."""

    def payrun(*args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PAYRUN_")}
        return subprocess.run(
            [sys.executable, "-m", "payrun", *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            check=False,
        )

    invalid = payrun("validate", str(batch_csv), "--format", "json")
    assert invalid.returncode == 1
    assert set(json.loads(invalid.stdout)) == {
        "rows",
        "valid",
        "invalid",
        "total",
        "errors",
        "warnings",
        "input_format",
        "pay_date",
    }
    assert payrun("validate", str(samples / "payroll.csv")).returncode == 0
    missing = payrun("validate", str(tmp_path / "missing.csv"))
    assert missing.returncode == 2
    assert "Traceback" not in missing.stderr and len(missing.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_output_into_a_closed_pipe_ends_quietly_with_the_verdict(batch_csv: Path, fmt: str) -> None:
    """`payrun validate BATCH | head` with the reader gone: still exit 1, nothing on stderr."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    with closed_pipe() as gone:
        done = subprocess.run(
            [sys.executable, "-m", "payrun", "validate", str(batch_csv), "--format", fmt],
            env=env,
            stdout=gone,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    assert (done.returncode, done.stderr) == (1, "")


def _unclosed_quote(samples: Path) -> Path:
    """The 40-row sample with one quote opened before "George Taylor" (row 4) and never closed,
    beside the samples' copy."""
    text = (samples / "payroll.csv").read_text()
    path = samples.parent / "payroll.csv"
    path.write_text(text.replace(",George Taylor,", ',"George Taylor,', 1))
    return path


def test_an_unclosed_quote_refuses_the_file(
    samples: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One unclosed quote in row 4 of the 40-row sample: exit 2 naming the row, the column
    and the 37 lines it swallowed, not "3 rows: 2 valid"."""
    code, out, err = run(["validate", str(_unclosed_quote(samples))], capsys)
    assert code == 2, out + err
    assert "row 4 (line 4 of the file), column payee_name" in err
    assert "swallows the next 37 lines (to line 41)" in err and err.count("\n") == 1


def test_a_quote_closed_lines_later_in_an_amount_refuses_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A quote opened in an amount and closed by a stray quote two lines down: refused."""
    path = tmp_path / "pay.csv"
    path.write_text(
        "payee_name,sort_code,account_number,amount,reference\n"
        'Ada Lee,12-34-56,12345678,"10.00,SALARY\n'
        "Bob Ray,12-34-56,12345678,20.00,SALARY\n"
        'Cy Doe,12-34-56,12345678,30.00,SAL"ARY\n'
        "Di Fox,12-34-56,12345678,40.00,SALARY\n"
    )
    code, _, err = run(["validate", str(path)], capsys)
    assert code == 2 and "row 2 (line 2 of the file), column amount" in err, err
    assert "swallows the next 2 lines (to line 4)" in err


def test_notes_over_several_lines_in_an_ignored_column_are_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A notes column payrun ignores may hold a quoted note over two lines; a quote there
    that swallows whole rows of the file still refuses it."""
    header = "payee_name,sort_code,account_number,amount,reference,notes\n"
    fine = tmp_path / "notes.csv"
    fine.write_text(
        header + 'Ada Lee,12-34-56,12345678,10.00,SALARY,"first line\nsecond, line"\n'
        "Bob Ray,12-34-56,12345678,20.00,SALARY,\n"
    )
    code, out, err = run(["validate", str(fine), "--source-account", "040004 30000001"], capsys)
    assert code == 0 and "2 rows: 2 valid" in out, out + err
    broken = tmp_path / "broken.csv"
    broken.write_text(
        header + 'Ada Lee,12-34-56,12345678,10.00,SALARY,"no end\n'
        "Bob Ray,12-34-56,12345678,20.00,SALARY,\nCy Doe,12-34-56,12345678,30.00,SALARY,\n"
    )
    code, _, err = run(["validate", str(broken)], capsys)
    assert code == 2 and "row 2 (line 2 of the file), column 'notes'" in err, err


def test_an_unclosed_quote_in_an_ignored_column_of_short_rows_refuses_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rows without the trailing notes field, and row 4's note opened and never closed: the
    file is refused (not "4 rows valid"), naming row, line, column and lines swallowed."""
    header = "row_id,payee_name,sort_code,account_number,amount,reference,notes\n"
    rows = [f"R{n},Payee {n},200000,100000{n:02},{n}.00,REF{n}" for n in range(1, 41)]
    rows[3] += ',"call him first'
    path = tmp_path / "short.csv"
    path.write_text(header + "\n".join(rows) + "\n")
    args = ["validate", str(path), "--source-account", "040004 30000001"]
    code, out, err = run(args, capsys)
    assert code == 2, out + err
    assert "row 5 (line 5 of the file), column 'notes'" in err and err.count("\n") == 1, err
    assert "swallows the next 36 lines (to line 41" in err, err
    # Closed two lines on, the swallowed lines still read as rows with every paid column
    path.write_text(header + "\n".join(rows[:6]) + '"\n' + "\n".join(rows[6:]) + "\n")
    code, out, err = run(args, capsys)
    assert code == 2 and "swallows the next 2 lines (to line 7)" in err, out + err
    # The last line of the file opening a quote it never closes swallows nothing, still refused
    path.write_text(header + "\n".join(rows[:3]) + ',"call him\n')
    code, out, err = run(args, capsys)
    assert code == 2 and "row 4 (line 4 of the file), column 'notes'" in err, out + err
    assert "never closed" in err, err
    # A properly closed two-line note on short rows is text
    path.write_text(header + "\n".join(rows[:3]) + ',"call him\nfirst, then pay"\n' + rows[4])
    code, out, err = run(args, capsys)
    assert code == 0 and "4 rows: 4 valid" in out, out + err


def test_the_table_is_in_row_order_with_the_payee_and_never_cuts_an_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Problems come in row order, each beside its payee name; wrapped at 80 columns between
    words, so --allow-duplicates stays whole."""
    path = tmp_path / "batch.csv"
    blank_reference = GOOD.replace("SALARY NOV", "")
    path.write_text(
        HEADER + blank_reference + GOOD.replace("Ada", "=Ada") + BAD_SORT + GOOD + GOOD, "utf-8"
    )
    code, out, _ = run(["validate", str(path)], capsys)
    assert code == 1
    table = out[out.index("   row  payee") :].splitlines()
    rows = [int(line[:6]) for line in table[1:] if line[:6].strip()]
    assert rows == [2, 3, 4, 6], out
    assert "     4  Bad Sort         sort_code       error:" in out, out
    assert all(len(line) <= 80 for line in out.splitlines()), out
    assert "--allow-duplicates" in out and "--allow-\n" not in out, out


def test_one_warning_is_one_warning_and_quiet_prints_the_counts_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """'1 row', '1 warning' (never '1 rows'); -q prints the first line alone."""
    path = tmp_path / "batch.csv"
    path.write_text(
        HEADER.replace("reference,", "reference,notes,")
        + GOOD.replace("SALARY NOV,", "SALARY NOV,x,"),
        "utf-8",
    )
    code, out, _ = run(["validate", str(path)], capsys)
    assert code == 0 and out.startswith("batch.csv: 1 row: 1 valid, 0 invalid, 1 warning\n"), out
    code, out, _ = run(["validate", str(path), "-q"], capsys)
    assert (code, out) == (0, "batch.csv: 1 row: 1 valid, 0 invalid, 1 warning\n")


def test_csv_text_named_xlsx_is_read_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A text file named .xlsx is read as CSV by its content, and a warning says so."""
    path = tmp_path / "payments.xlsx"
    path.write_text(HEADER + GOOD, encoding="utf-8")
    code, out, err = run(["validate", str(path), "--format", "json"], capsys)
    assert code == 0 and json.loads(out)["valid"] == 1
    assert err == (
        "payrun: warning: payments.xlsx holds CSV text, not an Excel workbook: read as CSV\n"
    )
