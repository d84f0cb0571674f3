"""`payrun run` scenarios over real loopback HTTP against the sandbox bank."""

from __future__ import annotations

import contextlib
import csv
import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import openpyxl  # type: ignore[import-untyped]
import pytest

from _run_helpers import (
    RUN_TIMEOUT_S,
    closed_pipe,
    count_status,
    finish,
    kill_group,
    ledger_rows,
    make_rows,
    refuse,
    run_args,
    run_env,
    start_run,
    wait_until,
)
from _run_helpers import write_batch as write_trial_batch
from payrun.cli import main
from payrun.sandbox import RunningSandbox, default_seed, serve_in_thread

EMPLOYEES = [  # in the sandbox's directory of true names; the first two are existing payees
    ("Oliver Smith", "309089", "00705473"),
    ("Amelia Jones", "601613", "37704964"),
    ("Mia Davies", "110001", "22039287"),
    ("Jack Patel", "609242", "48863219"),
]
SOURCE = "040004 30000001"

StartBank = Callable[..., RunningSandbox]


@pytest.fixture
def start_bank(monkeypatch: pytest.MonkeyPatch) -> Iterator[StartBank]:
    """Start a fresh sandbox bank (a real uvicorn server) and point PAYRUN_* at it."""
    with ExitStack() as stack:

        def start(seed: dict[str, Any] | None = None, **options: Any) -> RunningSandbox:
            options.setdefault("deliver_after_ms", 20)
            running = stack.enter_context(serve_in_thread(seed=seed, **options))
            monkeypatch.setenv("PAYRUN_BASE_URL", running.base_url)
            monkeypatch.setenv("PAYRUN_API_KEY", running.api_key)
            return running

        yield start


def write_batch(
    path: Path,
    rows: list[tuple[str, str, str]],
    *,
    amount: str = "100.00",
    reference: str = "NOV PAY",
    source: str = SOURCE,
) -> Path:
    """Write a batch CSV paying each (name, sort code, account number) once."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            ["payee_name", "sort_code", "account_number", "amount", "reference", "source_account"]
        )
        for name, sort_code, number in rows:
            writer.writerow([name, sort_code, number, amount, reference, source])
    return path


def stats(bank: RunningSandbox) -> dict[str, Any]:
    """The sandbox's inspection document."""
    result: dict[str, Any] = httpx.get(f"{bank.base_url}/__sandbox/stats").json()
    return result


def payment_groups(bank: RunningSandbox) -> list[dict[str, Any]]:
    """Payments at the bank grouped per creditor, amount and reference."""
    groups: list[dict[str, Any]] = stats(bank)["payments"]
    return groups


def report(ledger: Path, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    """The ledger's rows through `payrun report --format json`."""
    capsys.readouterr()
    assert main(["report", str(ledger), "--format", "json"]) == 0
    rows: list[dict[str, Any]] = json.loads(capsys.readouterr().out)
    return rows


def test_run_pays_every_row_once_and_rerun_pays_nothing(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run submits every row; the same command again exits 0 and sends no new payment.
    The summary counts and totals per status and per account; the ledger (WAL mode) keeps
    the batch's file, control totals, start and end; the report has every column."""
    import sqlite3

    bank = start_bank()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES)
    ledger = tmp_path / "pay.csv.ledger.sqlite"
    assert main(["run", str(batch), "--expect-count", "4", "--expect-total", "400.00"]) == 0
    out = capsys.readouterr().out
    assert re.search(
        r"rows by status +rows +amount\n.*\nall accounts *\n  submitted +4 +£400\.00\n", out
    ), out
    assert f"every valid row is from {SOURCE}" in out, out
    with sqlite3.connect(ledger) as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        recorded = db.execute(
            "SELECT file_path, expect_count, expect_total, started_at, ended_at FROM batch"
        ).fetchone()
    assert recorded[:3] == (str(batch.resolve()), 4, "400.00") and all(recorded[3:]), recorded
    assert main(["report", str(ledger)]) == 0
    assert capsys.readouterr().out.lstrip("\ufeff").splitlines()[0] == (
        "row,row_id,payee_name,amount,reference,status,payment_url,submission_url,error"
    )
    rows = report(tmp_path / "pay.csv.ledger.sqlite", capsys)
    assert [r["status"] for r in rows] == ["submitted"] * 4
    # The batch file names the ledger beside it
    assert report(batch, capsys) == rows
    assert all(r["payment_url"] and r["submission_url"] for r in rows)
    assert main(["run", str(batch)]) == 0
    groups = payment_groups(bank)
    assert len(groups) == 4
    assert all(g["payments"] == 1 and g["submissions"] == 1 for g in groups)


def test_a_rerun_that_pays_nothing_says_so(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The first run ends 'done'; the same command again pays nothing and says that every
    row was already submitted, not 'done' a second time; `report -o` says what it wrote."""
    start_bank()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES)
    assert main(["run", str(batch)]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("done: every valid row")
    assert main(["run", str(batch)]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == "nothing to pay: all 4 rows were already submitted", last
    assert main(["report", str(batch), "-o", str(tmp_path / "r.xlsx")]) == 0
    said = capsys.readouterr()
    assert said.out == "" and said.err == f"wrote {tmp_path / 'r.xlsx'}: 4 rows\n", said


def test_dry_run_creates_nothing(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dry run reads only: no payee, CoP request or payment is created, and no ledger."""
    bank = start_bank()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES)
    payees_before, cop_before = len(bank.state.payees), len(bank.state.cop_requests)
    assert main(["run", str(batch), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would pay 4 rows" in out and "2 new payees to check and create" in out
    assert re.search(r"\(/v0/bank/accounts/ba\.[\w-]+\), available £[\d,]+\.\d\d", out), out
    assert main(["run", str(batch), "--dry-run", "--no-confirm-payees"]) == 0
    assert "2 new payees to create" in capsys.readouterr().out
    assert payment_groups(bank) == []
    assert len(bank.state.payees) == payees_before
    assert len(bank.state.cop_requests) == cop_before  # no Confirmation of Payee asked
    assert not (tmp_path / "pay.csv.ledger.sqlite").exists()
    report_path = tmp_path / "r.csv"
    assert main(["run", str(batch), "--dry-run", "--report", str(report_path)]) == 0
    assert f"a dry run writes no report: {report_path} is left as it was" in (
        capsys.readouterr().err
    )
    assert not report_path.exists()


def test_dry_run_reports_unpayable_rows(start_bank: StartBank, tmp_path: Path) -> None:
    """A dry run exits 1 when a row would not be paid (balance short)."""
    start_bank()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES, amount="999999.00")
    assert main(["run", str(batch), "--dry-run"]) == 1


def test_control_totals_refuse_before_any_request(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Control totals that differ exit 2 and no request reaches the bank."""
    bank = start_bank()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES)
    assert main(["run", str(batch), "--expect-count", "5"]) == 2
    assert "control totals differ" in capsys.readouterr().err
    assert main(["run", str(batch), "--expect-total", "400.01"]) == 2
    assert stats(bank)["requests"] == 0
    assert main(["run", str(batch), "--expect-count", "4", "--expect-total", "400.00"]) == 0


@pytest.mark.parametrize(
    ("option", "value", "said"),
    [
        ("--expect-total", "400.001", "at most 2 decimal places"),
        ("--expect-total", "-400.00", "no sign"),
        ("--expect-total", "4.0E+2", "such as 1234.50"),
        ("--expect-total", "４００", "such as 1234.50"),
        ("--expect-total", "4,00.00", "such as 1234.50"),
        ("--duplicate-window", "740000", "from 0 to 3650"),
        ("--duplicate-window", "-1", "from 0 to 3650"),
    ],
)
def test_option_values_out_of_shape_are_usage_errors_before_any_request(
    start_bank: StartBank,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    option: str,
    value: str,
    said: str,
) -> None:
    """A control total or window that is not what it should be: exit 2, nothing sent."""
    bank = start_bank()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES)
    with pytest.raises(SystemExit) as info:
        main(["run", str(batch), f"{option}={value}"])
    assert info.value.code == 2
    assert said in capsys.readouterr().err
    assert stats(bank)["requests"] == 0


def test_control_totals_accept_pounds_and_thousands_commas(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """'£1,000.5' and '1000.50' are amounts; a dry run checks them and goes ahead."""
    start_bank()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES[:2], amount="500.25")
    assert main(["run", str(batch), "--dry-run", "--expect-total", "£1,000.5"]) == 0
    assert main(["run", str(batch), "--dry-run", "--expect-total", "1000.50"]) == 0


def test_a_terminal_without_pound_signs_gets_question_marks_not_a_crash(
    start_bank: StartBank, tmp_path: Path
) -> None:
    """An ASCII-only stdout (PYTHONIOENCODING=ascii): the summary's '£' and a Chinese payee
    name print as '?', the run pays every row and exits 0."""
    start_bank()
    chinese = ("李小龙 Ltd", "601613", "37704964")
    batch = write_batch(tmp_path / "pay.csv", [*EMPLOYEES[:1], chinese])
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    done = subprocess.run(
        [sys.executable, "-m", "payrun", "run", str(batch), "--no-confirm-payees"],
        capture_output=True,
        text=True,
        encoding="ascii",
        errors="strict",
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "?" in done.stdout and "Traceback" not in done.stderr, done.stdout + done.stderr
    assert "done: every valid row was submitted (not yet delivered" in done.stdout


@pytest.mark.parametrize("bad", [["--duplicate-window", "x"], ["--bogus"], ["--expect-count=x"]])
def test_json_logs_get_usage_errors_as_one_json_object(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: list[str]
) -> None:
    """With --log-format json even argparse's usage errors are JSON: the error, then the
    `finished` line every run ends with (exit 2)."""
    with pytest.raises(SystemExit) as info:
        main(["run", str(tmp_path / "pay.csv"), "--log-format", "json", *bad])
    assert info.value.code == 2
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 2, err
    record, finished = (json.loads(line) for line in lines)
    assert record["event"] == "error" and "--help" in record["message"], record
    assert (finished["event"], finished["exit_code"]) == ("finished", 2), finished


def test_run_help_states_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    """Schedulers read the exit codes in `payrun run --help`, as the README gives them."""
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for words in (
        "Exit 0 when every valid row was submitted",
        "1 when some rows are invalid, held, failed, returned or rejected",
        "2 for a usage",
        "3 when interrupted or incomplete",
    ):
        assert words in out, out


@pytest.mark.parametrize("report", ["out.pdf", "missing/r.csv", "folder.csv"])
def test_a_report_that_cannot_be_written_is_refused_before_any_request(
    start_bank: StartBank, tmp_path: Path, report: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A --report with a wrong extension, a missing folder or a folder's name exits 2 at once."""
    bank = start_bank()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES)
    (tmp_path / "folder.csv").mkdir()
    assert main(["run", str(batch), "--report", str(tmp_path / report)]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and "cannot write" in captured.err
    assert stats(bank)["requests"] == 0
    assert not (tmp_path / "pay.csv.ledger.sqlite").exists()


@pytest.mark.parametrize("report", ["pay.csv", "pay.csv.ledger.sqlite", "l.json", "l.json-wal"])
def test_a_report_that_would_overwrite_the_batch_or_the_ledger_is_refused(
    start_bank: StartBank, tmp_path: Path, report: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--report naming the batch file, the ledger or one of its files: exit 2 before any
    request, every file as it was (the ledger is the record that keeps reruns exactly once)."""
    bank = start_bank()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES)
    assert main(["run", str(batch), "--create-only"]) == 0  # the default ledger exists now
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    requests = stats(bank)["requests"]
    ledger = ["--ledger", str(tmp_path / "l.json")] if report.startswith("l.json") else []
    capsys.readouterr()
    assert main(["run", str(batch), *ledger, "--report", str(tmp_path / report)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"the report {tmp_path / report} would overwrite" in err, err
    assert "name another report file" in err, err
    assert stats(bank)["requests"] == requests
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_payrun_report_onto_its_own_ledger_is_refused(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`payrun report L -o L` (a ledger named l.json, say), or -o naming the ledger's batch
    file: exit 2, both files as they were."""
    start_bank()
    ledger = tmp_path / "l.json"
    assert (
        main(
            [
                "run",
                str(write_batch(tmp_path / "pay.csv", EMPLOYEES)),
                "--ledger",
                str(ledger),
                "--create-only",
            ]
        )
        == 0
    )
    before = ledger.read_bytes()
    capsys.readouterr()
    assert main(["report", str(ledger), "-o", str(ledger)]) == 2
    assert f"would overwrite the ledger {ledger}" in capsys.readouterr().err
    assert ledger.read_bytes() == before
    batch = tmp_path / "pay.csv"
    paid = batch.read_bytes()
    assert main(["report", str(ledger), "-o", str(batch)]) == 2  # the ledger knows its batch
    assert f"would overwrite the batch file {batch}" in capsys.readouterr().err
    assert batch.read_bytes() == paid
    copied = tmp_path / "copy" / "pay.csv"  # a folder copied: its ledger names the first
    copied.parent.mkdir()  # batch; BATCH.ledger.sqlite guards the BATCH beside it too
    shutil.copy(batch, copied)
    shutil.copy(ledger, copied.with_name("pay.csv.ledger.sqlite"))
    assert main(["report", str(copied) + ".ledger.sqlite", "-o", str(copied)]) == 2
    assert copied.read_bytes() == paid


def test_a_report_failing_after_payment_keeps_the_summary_and_exit_code(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A report folder removed mid-run: summary, then one error line with the fix; exit 0."""
    bank = start_bank(latency_ms=100)
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES)
    ledger, folder = tmp_path / "pay.sqlite", tmp_path / "out"
    folder.mkdir()
    # The run cannot pay (and reach its report) before the folder is gone, however slow
    # the machine: the bank holds its payments until then
    with bank.app.hold_payments(longest_s=60):
        process = start_run(bank, batch, ledger, "--report", str(folder / "r.csv"))
        started = time.monotonic()
        while not ledger.exists() and process.poll() is None:  # the report was checked by now
            time.sleep(0.01)
        folder.rmdir()
    done = finish(process, started)
    assert done.returncode == 0, done.describe()
    assert "rows by status" in done.stdout and "report:" not in done.stdout
    err = done.stderr.splitlines()[-1]
    assert err.startswith("payrun: error: cannot write the report") and "not written" in err
    assert f"payrun report {ledger} -o {folder / 'r.csv'}" in err
    folder.mkdir()
    assert main(["report", str(ledger), "-o", str(folder / "r.csv")]) == 0
    assert len((folder / "r.csv").read_text(encoding="utf-8-sig").splitlines()) == 5


@pytest.mark.parametrize("closed", [("stdout",), ("stdout", "stderr")])
def test_a_closed_output_pipe_never_stops_a_run(
    start_bank: StartBank, tmp_path: Path, closed: tuple[str, ...]
) -> None:
    """stdout (and stderr) read by a pipe already closed: every row paid once, exit 0, quiet."""
    bank = start_bank()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES)
    ledger = tmp_path / "pay.sqlite"
    with closed_pipe() as gone:
        stdout, stderr = (
            gone if name in closed else subprocess.PIPE for name in ("stdout", "stderr")
        )
        done = subprocess.run(
            run_args(batch, ledger),
            env=run_env(bank),
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            text=True,
            timeout=RUN_TIMEOUT_S,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    assert "stderr" in closed or ("Broken" not in done.stderr and "error" not in done.stderr)
    assert [r["status"] for r in ledger_rows(ledger)] == ["submitted"] * 4
    assert [(g["payments"], g["submissions"]) for g in payment_groups(bank)] == [(1, 1)] * 4


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_report_into_a_closed_pipe_ends_quietly(
    start_bank: StartBank, tmp_path: Path, fmt: str
) -> None:
    """`payrun report LEDGER | head` with the reader gone: exit 0 and nothing on stderr."""
    start_bank()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES)
    assert main(["run", str(batch)]) == 0
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # a shell's buffering
    with closed_pipe() as gone:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "payrun",
                "report",
                str(tmp_path / "pay.csv.ledger.sqlite"),
                "--format",
                fmt,
            ],
            env=env,
            stdout=gone,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    assert (done.returncode, done.stderr) == (0, "")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_report_onto_a_full_disk_or_into_a_folder_says_so(
    start_bank: StartBank, tmp_path: Path
) -> None:
    """`payrun report` onto a full device, or -o naming a folder: exit 2 with one line that
    says what went wrong and what to do (not 'run the same command again')."""
    start_bank()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES)
    assert main(["run", str(batch)]) == 0
    ledger = str(tmp_path / "pay.csv.ledger.sqlite")
    (tmp_path / "out.csv").mkdir()
    for extra, full, said in (
        ([], True, "cannot write the report to standard output"),
        (["-o", str(tmp_path / "out.csv")], False, "it is a folder"),
    ):
        with Path("/dev/full" if full else os.devnull).open("wb") as stdout:
            done = subprocess.run(
                [sys.executable, "-m", "payrun", "report", ledger, *extra],
                stdout=stdout,
                stderr=subprocess.PIPE,
                text=True,
                timeout=60,
                check=False,
            )
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and said in lines[0], done.stderr
        assert "run the same command again" not in lines[0]


class _QuietFiles(http.server.SimpleHTTPRequestHandler):
    """Serves files (an HTML 404 page for anything missing), logging nothing."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        """Keep the test's stderr for payrun's own output."""


@pytest.fixture
def web_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A plain web server on loopback (not a bank): its base URL and the folder it serves."""
    folder = tmp_path / "www"
    folder.mkdir()
    handler = functools.partial(_QuietFiles, directory=str(folder))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield f"http://127.0.0.1:{server.server_address[1]}", folder
        server.shutdown()
        thread.join()


@pytest.mark.parametrize(
    ("index", "said"),
    [
        (None, "the bank refused GET /v0/index (HTTP 404): Error response Error code: 404"),
        ("<html>\n<p>Welcome</p>\n</html>\n", "the bank's answer to GET /v0/index was not JSON"),
    ],
)
def test_a_web_page_instead_of_the_bank_is_one_plain_line(
    web_server: tuple[str, Path],
    tmp_path: Path,
    index: str | None,
    said: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A base URL serving HTML (a 404 page, or a 200 page): one plain line, exit 2 (a setting)."""
    base_url, folder = web_server
    if index is not None:
        (folder / "v0").mkdir()
        (folder / "v0" / "index").write_text(index, encoding="utf-8")
    monkeypatch.setenv("PAYRUN_BASE_URL", base_url)
    monkeypatch.setenv("PAYRUN_API_KEY", "k-web")
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES)
    assert main(["run", str(batch)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) < 400, err
    assert said in err and "JSONDecodeError" not in err and "<" not in err
    assert "PAYRUN_BASE_URL" in err and base_url in err, err


def test_deactivated_payee_fails_the_row(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A row matching only a deactivated payee fails, saying reactivation is impossible."""
    start_bank()
    batch = write_batch(
        tmp_path / "pay.csv", [("Dormant Supplies Ltd", "401276", "11110000"), EMPLOYEES[0]]
    )
    assert main(["run", str(batch)]) == 1
    rows = report(tmp_path / "pay.csv.ledger.sqlite", capsys)
    assert rows[0]["status"] == "failed"
    assert "cannot be reactivated" in rows[0]["error"]
    assert rows[1]["status"] == "submitted"


def test_a_closed_account_fails_its_rows_and_one_named_by_url_pays(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Step 3: a source account that is not open fails its rows with the reason, nothing
    created; a source account given by its URL (not sort code and number) is found and pays."""
    seed = default_seed()
    seed["accounts"][1]["account-status"] = "closed"
    bank = start_bank(seed=seed)
    batch = write_batch(tmp_path / "closed.csv", EMPLOYEES[:1], source="040004 30000002")
    assert main(["run", str(batch)]) == 1
    [row] = report(tmp_path / "closed.csv.ledger.sqlite", capsys)
    assert row["status"] == "failed" and "closed" in row["error"], row
    assert payment_groups(bank) == []
    address = bank.state.account_by_address[("040004", "30000001")]
    url = f"/v0/bank/accounts/{address.rsplit('/', 1)[-1]}"
    batch = write_batch(tmp_path / "by-url.csv", EMPLOYEES[1:2], source=url)
    assert main(["run", str(batch)]) == 0
    assert [(g["account_url"], g["payments"]) for g in payment_groups(bank)] == [(url, 1)]


def test_frozen_account_fails_its_rows_before_anything_is_created(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rows of a frozen account fail with the reason; nothing is created for them."""
    seed = default_seed()
    seed["accounts"][1]["restrictions"] = [
        {
            "restriction-type": "freeze",
            "restriction-reason-code": "fraud-3rd-party",
            "restriction-legal-status": "not-applicable",
        }
    ]
    bank = start_bank(seed=seed)
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES[:2], source="040004 30000002")
    assert main(["run", str(batch)]) == 1
    rows = report(tmp_path / "pay.csv.ledger.sqlite", capsys)
    assert {r["status"] for r in rows} == {"failed"}
    assert "frozen" in rows[0]["error"]
    assert payment_groups(bank) == []


def test_insufficient_funds_fails_rows_before_anything_is_created(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An account whose available balance cannot cover its rows pays none of them."""
    bank = start_bank()
    account = next(iter(bank.state.accounts))
    httpx.post(
        f"{bank.base_url}/__sandbox/accounts/{account.rsplit('/', 1)[-1]}/balance",
        json={"value": "250.00"},
    ).raise_for_status()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES)
    assert main(["run", str(batch)]) == 1
    rows = report(tmp_path / "pay.csv.ledger.sqlite", capsys)
    assert {r["status"] for r in rows} == {"failed"}
    assert "available balance" in rows[0]["error"] and "250.00" in rows[0]["error"]
    assert payment_groups(bank) == []


def test_cop_close_match_is_held_then_paid_when_accepted(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A close match holds the row with the bank's name; --accept-close-match pays it."""
    bank = start_bank()
    batch = write_batch(tmp_path / "pay.csv", [("Mia Davis", "110001", "22039287")])
    assert main(["run", str(batch)]) == 1
    rows = report(tmp_path / "pay.csv.ledger.sqlite", capsys)
    assert rows[0]["status"] == "held" and "Mia Davies" in rows[0]["error"]
    assert payment_groups(bank) == []
    assert main(["run", str(batch), "--accept-close-match"]) == 0
    assert [g["payments"] for g in payment_groups(bank)] == [1]


def test_another_batch_files_ledger_is_refused_naming_that_file(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--ledger naming the ledger of another batch file: exit 2 naming the file it belongs
    to and the way out (it said this file had changed, and to restore an 'original')."""
    bank = start_bank()
    first = write_batch(tmp_path / "october.csv", EMPLOYEES[:1])
    assert main(["run", str(first)]) == 0
    ledger = tmp_path / "october.csv.ledger.sqlite"
    second = write_batch(tmp_path / "november.csv", EMPLOYEES[1:2])
    capsys.readouterr()
    assert main(["run", str(second), "--ledger", str(ledger)]) == 2
    err = capsys.readouterr().err
    assert f"belongs to another batch file, {first.resolve()}, not {second}" in err, err
    assert "leave out --ledger" in err and "restore" not in err, err
    assert [g["payments"] for g in payment_groups(bank)] == [1]


def test_a_changed_batch_reached_through_a_symlink_is_called_changed(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """current.csv -> payroll-nov.csv, edited after a --create-only run: the refusal says
    the file changed and that its created payments wait for that run (it called the ledger
    another batch's and advised leaving out --ledger, which was not given)."""
    start_bank()
    target = write_batch(tmp_path / "payroll-nov.csv", EMPLOYEES[:2])
    link = tmp_path / "current.csv"
    link.symlink_to(target.name)
    assert main(["run", str(link), "--create-only"]) == 0
    write_batch(target, [EMPLOYEES[0], EMPLOYEES[2]])
    capsys.readouterr()
    assert main(["run", str(link)]) == 2
    err = capsys.readouterr().err
    assert "was made for a different content of current.csv" in err, err
    assert "2 of its payments are created at the bank but not submitted yet" in err, err


def test_a_symlink_pointed_at_another_batch_is_not_called_changed(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """current.csv -> november.csv paid, then pointed at december.csv: the ledger belongs
    to november.csv (named), and the way out is a new ledger, not 'restore the original'."""
    start_bank()
    november = write_batch(tmp_path / "november.csv", EMPLOYEES[:1])
    december = write_batch(tmp_path / "december.csv", EMPLOYEES[1:2])
    link = tmp_path / "current.csv"
    link.symlink_to(november.name)
    assert main(["run", str(link)]) == 0
    link.unlink()
    link.symlink_to(december.name)
    capsys.readouterr()
    assert main(["run", str(link)]) == 2
    err = capsys.readouterr().err
    assert f"belongs to another batch file, {november.resolve()}" in err, err
    assert "name a new one with --ledger" in err and "restore" not in err, err


def test_an_older_ledger_keeping_a_password_in_its_bank_address_is_resumed_and_cleaned(
    start_bank: StartBank,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A ledger an older payrun bound to http://ops:hunter2@host (accepted then, refused
    now): the same bank without the password resumes it, never echoing the password, and
    the ledger no longer keeps it."""
    import sqlite3

    bank = start_bank()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES[:1])
    ledger = tmp_path / "pay.csv.ledger.sqlite"
    assert main(["run", str(batch), "--create-only"]) == 0
    with sqlite3.connect(ledger) as db:
        db.execute("UPDATE batch SET base_url=?", [bank.base_url.replace("//", "//ops:hunter2@")])
    capsys.readouterr()
    assert main(["run", str(batch)]) == 0
    out, err = capsys.readouterr()
    assert "hunter2" not in out + err
    with sqlite3.connect(ledger) as db:
        [(kept,)] = db.execute("SELECT base_url FROM batch").fetchall()
    assert kept == bank.base_url


def test_following_the_advice_for_a_held_row_pays_it_once_and_nothing_twice(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A close match is held with advice that works: the corrected whole file is refused on
    the old ledger with advice naming the trap; the corrected row in a file of its own is
    paid; the whole corrected file on a fresh ledger holds both paid rows as repeats, with
    a warning that --allow-repeat would pay them twice."""
    bank = start_bank()
    rows = [("Oliver Smith", "309089", "00705473"), ("Mia Davis", "110001", "22039287")]
    batch = write_batch(tmp_path / "pay.csv", rows)
    assert main(["run", str(batch)]) == 1
    held = report(tmp_path / "pay.csv.ledger.sqlite", capsys)[1]
    assert held["status"] == "held" and "new file of its own" in held["error"], held
    corrected = write_batch(tmp_path / "pay.csv", [rows[0], ("Mia Davies", *rows[1][1:])])
    assert main(["run", str(corrected)]) == 2
    refused = capsys.readouterr().err
    assert "first restore the original file" in refused and "possible repeats" in refused, refused
    alone = write_batch(tmp_path / "mia.csv", [("Mia Davies", *rows[1][1:])])
    assert main(["run", str(alone)]) == 0
    fresh = tmp_path / "fresh.ledger.sqlite"
    assert main(["run", str(corrected), "--ledger", str(fresh)]) == 1
    statuses = [(r["status"], r["error"]) for r in report(fresh, capsys)]
    assert [s for s, _ in statuses] == ["held", "held"], statuses
    assert all("paid twice" in error for _, error in statuses), statuses
    assert sorted(g["payments"] for g in payment_groups(bank)) == [1, 1]


def test_a_business_payee_without_business_words_is_confirmed_as_business_and_paid(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """'Bluebell Florists' holds a business account, but its name reads as a person's: the
    bank says the name matches, not the account type, so payrun asks again as business and
    pays (no hold); an unknown account is held saying to check the account details."""
    bank = start_bank()
    batch = write_batch(
        tmp_path / "pay.csv",
        [("Bluebell Florists", "400530", "98409753"), ("Unknown Person", "112233", "99999999")],
    )
    assert main(["run", str(batch)]) == 1
    rows = report(tmp_path / "pay.csv.ledger.sqlite", capsys)
    assert rows[0]["status"] == "submitted", rows[0]
    assert rows[1]["status"] == "held" and "could not check this account" in rows[1]["error"]
    assert [g["payments"] for g in payment_groups(bank)] == [1]


def test_the_summary_lists_unpaid_rows_apart_and_shows_a_tab_escaped(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An invalid row whose name holds a tab is listed under its own heading, not under the
    last account's table, with the tab shown as \\t (one line per row)."""
    start_bank()
    batch = write_batch(
        tmp_path / "pay.csv", [("Charlie\tWood", "309089", "00705473"), EMPLOYEES[0]]
    )
    assert main(["run", str(batch)]) == 1
    lines = capsys.readouterr().out.splitlines()
    heading = lines.index("rows to look at (all accounts):")
    assert lines[heading + 1].startswith("  row 2 (Charlie\\tWood): invalid: ")
    assert "\t" not in "".join(lines)


def test_cop_no_match_holds_the_row(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A name that does not match the account holder is held, even with close matches allowed."""
    start_bank()
    batch = write_batch(tmp_path / "pay.csv", [("Someone Else", "110001", "22039287")])
    assert main(["run", str(batch), "--accept-close-match"]) == 1
    rows = report(tmp_path / "pay.csv.ledger.sqlite", capsys)
    assert rows[0]["status"] == "held" and "no-match" in rows[0]["error"]


def test_bad_api_key_exits_2_without_showing_it(
    start_bank: StartBank,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A refused API key exits 2 with a clear line, and the key appears nowhere. In JSON:
    stdout's one object is the error, stderr ends with `error` then `finished` (exit 2)."""
    start_bank()
    monkeypatch.setenv("PAYRUN_API_KEY", "sandbox-WRONG-secret-123")
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES)
    assert main(["run", str(batch), "--log-format", "json"]) == 2
    captured = capsys.readouterr()
    (ended,) = _json_lines(captured.out)
    assert (ended["event"], ended["exit_code"]) == ("error", 2) and "API key" in ended["message"]
    *_, error, finished = _json_lines(captured.err)
    assert error["event"] == "error" and "API key" in error["message"]
    assert (finished["event"], finished["exit_code"]) == ("finished", 2)
    assert "API key" in captured.err
    assert "WRONG-secret" not in captured.err + captured.out
    ledger = tmp_path / "pay.csv.ledger.sqlite"
    assert not ledger.exists() or b"WRONG-secret" not in ledger.read_bytes()


def test_a_new_ledger_refused_before_any_payment_is_not_left_behind(
    start_bank: StartBank,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A first run refused before anything was sent (here a wrong key) leaves no ledger
    beside the file; a ledger that has paid is kept whatever a later run meets."""
    bank = start_bank()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES)
    ledger = tmp_path / "pay.csv.ledger.sqlite"
    monkeypatch.setenv("PAYRUN_API_KEY", "sandbox-WRONG-secret-123")
    assert main(["run", str(batch)]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pay.csv"]
    monkeypatch.setenv("PAYRUN_API_KEY", bank.api_key)
    assert main(["run", str(batch)]) == 0
    monkeypatch.setenv("PAYRUN_API_KEY", "sandbox-WRONG-secret-123")
    assert main(["run", str(batch)]) == 2
    capsys.readouterr()
    assert {row["status"] for row in report(ledger, capsys)} == {"submitted"}


def test_secret_never_written(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The API key is not in the output, the logs, the ledger or the report."""
    bank = start_bank()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES)
    out_report = tmp_path / "report.json"
    assert main(["run", str(batch), "--report", str(out_report), "--log-format", "json"]) == 0
    captured = capsys.readouterr()
    secret = bank.api_key
    assert secret not in captured.out + captured.err
    for suffix in ("", "-wal"):
        path = tmp_path / f"pay.csv.ledger.sqlite{suffix}"
        if path.exists():
            assert secret.encode() not in path.read_bytes()
    assert secret not in out_report.read_text()
    assert len(json.loads(out_report.read_text())) == 4


def test_create_only_creates_without_submitting(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--create-only leaves every row created, unsubmitted, and its last line says so."""
    bank = start_bank()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES)
    assert main(["run", str(batch), "--create-only"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert "was paid" not in last
    assert last.startswith("done: every valid row was created") and "approve" in last
    rows = report(tmp_path / "pay.csv.ledger.sqlite", capsys)
    assert {r["status"] for r in rows} == {"created"}
    assert all(g["payments"] == 1 and g["submissions"] == 0 for g in payment_groups(bank))


def test_a_bank_busy_creating_payees_leaves_rows_to_run_again_not_failed(
    start_bank: StartBank,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every payee create answered 429 (retries spent): rows stay pending, exit 3 (run
    again), not failed; once the bank lets payees in, the same command pays them once."""
    bank = start_bank()
    restore = refuse(
        bank,
        monkeypatch,
        429,
        "too-many-requests",
        lambda method, path: method == "POST" and path.endswith("/payees"),
    )
    new_payees = EMPLOYEES[2:]  # not payees yet: each needs a create
    batch = write_batch(tmp_path / "pay.csv", new_payees)
    ledger = tmp_path / "pay.csv.ledger.sqlite"
    assert main(["run", str(batch), "--no-confirm-payees"]) == 3
    rows = report(ledger, capsys)
    assert {r["status"] for r in rows} == {"pending"}, rows
    assert all("run the same command again" in r["error"] for r in rows), rows
    assert not payment_groups(bank)

    restore()
    assert main(["run", str(batch), "--no-confirm-payees"]) == 0
    groups = payment_groups(bank)
    assert len(groups) == len(new_payees)
    assert all(g["payments"] == 1 and g["submissions"] == 1 for g in groups), groups


def test_payments_approved_in_the_bank_app_are_recorded_not_submitted_again(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--create-only, then a person submits two payments in the bank's app: the next run
    records those submissions (no second submit, no 'failed'), submits the others, exit 0."""
    bank = start_bank()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES)
    ledger = tmp_path / "pay.csv.ledger.sqlite"
    assert main(["run", str(batch), "--create-only"]) == 0
    created = report(ledger, capsys)
    headers = {"Authorization": f"ServiceAPIKey {bank.api_key}"}
    approved = {}
    for row in created[:2]:  # what the second person does in the bank's app
        answer = httpx.post(
            f"{bank.base_url}{row['payment_url']}/submissions",
            json={"payment-scheme": "fps"},
            headers=headers,
        )
        answer.raise_for_status()
        approved[row["row"]] = answer.json()["submission-url"]

    assert main(["run", str(batch), "--wait"]) == 0, capsys.readouterr()
    rows = report(ledger, capsys)
    assert {r["status"] for r in rows} == {"delivered"}, rows
    for row in rows:
        if row["row"] in approved:
            assert row["submission_url"] == approved[row["row"]], row
    groups = payment_groups(bank)
    assert len(groups) == len(EMPLOYEES)
    assert all(g["payments"] == 1 and g["submissions"] == 1 for g in groups), groups


def test_a_payment_whose_submissions_cannot_be_read_does_not_stop_the_rerun(
    start_bank: StartBank,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After --create-only, reading one payment's submissions fails (404): the rerun still
    submits every row (that one too: it was not approved), exit 0, one submission each."""
    bank = start_bank()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES)
    ledger = tmp_path / "pay.csv.ledger.sqlite"
    assert main(["run", str(batch), "--create-only"]) == 0
    unreadable = report(ledger, capsys)[0]["payment_url"] + "/submissions"
    refuse(
        bank,
        monkeypatch,
        404,
        "not-found",
        lambda method, path: method == "GET" and path == unreadable,
    )
    assert main(["run", str(batch)]) == 0, capsys.readouterr()
    assert {r["status"] for r in report(ledger, capsys)} == {"submitted"}
    assert all(g["payments"] == 1 and g["submissions"] == 1 for g in payment_groups(bank))


def test_a_create_refused_for_funds_says_what_to_do_and_the_rerun_tries_the_row_again(
    start_bank: StartBank,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The bank refuses one create with insufficient-funds (the balance fell meanwhile): the
    row fails saying to add funds and run again (exit 1); the rerun pays it, once."""
    bank = start_bank()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES)
    ledger = tmp_path / "pay.csv.ledger.sqlite"
    first = [True]

    def once(method: str, path: str) -> bool:
        hit = first[0] and method == "POST" and path.endswith("/payments")
        first[0] = first[0] and not hit
        return hit

    stop = refuse(bank, monkeypatch, 422, "insufficient-funds", once)
    assert main(["run", str(batch)]) == 1
    failed = [r for r in report(ledger, capsys) if r["status"] == "failed"]
    assert len(failed) == 1 and "insufficient-funds" in failed[0]["error"]
    assert "add funds to the source account, then run the same command again" in failed[0]["error"]
    stop()
    assert main(["run", str(batch)]) == 0, capsys.readouterr()
    assert {r["status"] for r in report(ledger, capsys)} == {"submitted"}
    assert all(g["payments"] == 1 and g["submissions"] == 1 for g in payment_groups(bank))


def test_an_approval_is_found_through_the_payment_when_its_submissions_cannot_be_read(
    start_bank: StartBank,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After --create-only, one payment is approved in the app and its submissions list
    answers 404: the rerun reads the payment's latest submission and records it, sending no
    second submit (the bank does not promise to refuse one); exit 0."""
    bank = start_bank()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES)
    ledger = tmp_path / "pay.csv.ledger.sqlite"
    assert main(["run", str(batch), "--create-only"]) == 0
    payment_url = report(ledger, capsys)[0]["payment_url"]
    headers = {"Authorization": f"ServiceAPIKey {bank.api_key}"}
    approved = httpx.post(
        f"{bank.base_url}{payment_url}/submissions", json={"payment-scheme": "fps"}, headers=headers
    )
    approved.raise_for_status()
    refuse(
        bank,
        monkeypatch,
        404,
        "not-found",
        lambda method, path: method == "GET" and path == payment_url + "/submissions",
    )
    assert main(["run", str(batch)]) == 0, capsys.readouterr()
    rows = report(ledger, capsys)
    assert rows[0]["submission_url"] == approved.json()["submission-url"]
    assert rows[0]["status"] in {"submitted", "delivered"}  # the approval may be settled by now
    assert {r["status"] for r in rows[1:]} == {"submitted"}
    assert all(g["payments"] == 1 and g["submissions"] == 1 for g in payment_groups(bank))


def test_a_payment_rejected_in_the_bank_app_ends_rejected_and_is_left_alone(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--create-only, the approver rejects one payment: the next run ends that row
    'rejected' (exit 1) and submits the others; a further run sends nothing for it."""
    bank = start_bank()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES)
    ledger = tmp_path / "pay.csv.ledger.sqlite"
    assert main(["run", str(batch), "--create-only"]) == 0
    first = report(ledger, capsys)[0]
    headers = {"Authorization": f"ServiceAPIKey {bank.api_key}"}
    httpx.patch(
        f"{bank.base_url}{first['payment_url']}",
        json={"rejection-reason": "wrong"},
        headers=headers,
    ).raise_for_status()

    for _ in range(2):
        assert main(["run", str(batch)]) == 1
        rows = report(ledger, capsys)
        assert rows[0]["status"] == "rejected" and "rejected" in rows[0]["error"], rows[0]
        assert {r["status"] for r in rows[1:]} == {"submitted"}, rows
    requests = stats(bank)["requests"]
    assert main(["run", str(batch)]) == 1
    assert stats(bank)["requests"] - requests < 10, "a rerun kept trying the rejected row"
    assert sorted(g["submissions"] for g in payment_groups(bank)) == [0, 1, 1, 1]


def test_a_create_only_rerun_records_approvals_and_rejections_and_submits_nothing(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """After --create-only, the approver rejects one payment and submits another in the
    bank's app: a --create-only rerun records both (rejected, submitted with the app's
    submission), exit 1, submits nothing, and its last line asks to approve only the one
    payment still waiting; a --create-only rerun of a delivered batch says it is paid."""
    bank = start_bank()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES[:3])
    ledger = tmp_path / "pay.csv.ledger.sqlite"
    assert main(["run", str(batch), "--create-only"]) == 0
    created = report(ledger, capsys)
    headers = {"Authorization": f"ServiceAPIKey {bank.api_key}"}
    httpx.patch(
        f"{bank.base_url}{created[1]['payment_url']}",
        json={"rejection-reason": "no"},
        headers=headers,
    ).raise_for_status()
    answer = httpx.post(
        f"{bank.base_url}{created[2]['payment_url']}/submissions",
        json={"payment-scheme": "fps"},
        headers=headers,
    )
    answer.raise_for_status()

    assert main(["run", str(batch), "--dry-run"]) == 1  # the dry run sees both, as a run will
    planned = capsys.readouterr().out
    assert f"row 3 ({EMPLOYEES[1][0]}): rejected: " in planned, planned
    assert "1 row was started by an earlier run" in planned, planned  # row 2: still waiting
    assert "1 row already paid by this ledger's earlier runs" in planned, planned  # approved

    for _ in range(2):
        assert main(["run", str(batch), "--create-only"]) == 1
        last = capsys.readouterr().out.splitlines()[-1]
        assert "none submitted" not in last and "rejected" in last, last
        assert "approve the 1 created payment in the bank's app" in last, last
        rows = report(ledger, capsys)
        assert [r["status"] for r in rows[:2]] == ["created", "rejected"], rows
        assert rows[2]["status"] in {"submitted", "delivered"}, rows  # approved in the app
        assert "rejected" in rows[1]["error"], rows[1]
        assert rows[2]["submission_url"] == answer.json()["submission-url"], rows[2]
    assert sorted(g["submissions"] for g in payment_groups(bank)) == [0, 0, 1]
    assert main(["run", str(batch), "--create-only", "--log-format", "json"]) == 1
    message = _json_lines(capsys.readouterr().out)[0]["message"]
    assert "approve the 1 created payment" in message, message

    paid = write_batch(tmp_path / "paid.csv", EMPLOYEES[3:])
    assert main(["run", str(paid), "--wait"]) == 0
    capsys.readouterr()
    assert main(["run", str(paid), "--create-only"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("done: every valid row was") and "approve" not in last, last


def test_wait_follows_submissions_to_delivered(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--wait ends with every row delivered, and only then says every row was paid."""
    start_bank(deliver_after_ms=100)
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES)
    assert main(["run", str(batch), "--wait"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "done: every valid row was paid"
    rows = report(tmp_path / "pay.csv.ledger.sqlite", capsys)
    assert {r["status"] for r in rows} == {"delivered"}


def test_wait_on_a_rerun_reads_the_events_since_the_batch_began(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Submitted by one run, delivered before the next: `--wait` on the rerun finds the
    deliveries among the events since the batch's first run, without polling each one."""
    import dataclasses
    import sqlite3
    from datetime import UTC, datetime, timedelta

    bank = start_bank(deliver_after_ms=20)
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES)
    ledger = tmp_path / "pay.csv.ledger.sqlite"
    assert main(["run", str(batch)]) == 0
    time.sleep(0.1)
    headers = {"Authorization": f"ServiceAPIKey {bank.api_key}"}
    httpx.get(f"{bank.base_url}/v0/index", headers=headers).raise_for_status()  # settles
    # As if the first run was 15 minutes ago and the payments were delivered 10 minutes ago.
    events = bank.state.events
    for key, event in list(events.items()):
        earlier = event.created_at - timedelta(minutes=10)
        events[key] = dataclasses.replace(event, created_at=earlier)
    with sqlite3.connect(ledger) as db:
        db.execute(
            "UPDATE batch SET started_at = ?",
            ((datetime.now(UTC) - timedelta(minutes=15)).isoformat(),),
        )
    before = len(events)
    started = time.monotonic()
    assert main(["run", str(batch), "--wait"]) == 0
    took = time.monotonic() - started
    rows = report(ledger, capsys)
    assert {r["status"] for r in rows} == {"delivered"}
    assert len(bank.state.events) == before, "the deliveries happened during the rerun"
    assert took < 3, f"--wait took {took:.1f}s: it polled instead of reading the events"


def test_repeat_guard_holds_a_rerun_with_a_fresh_ledger(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same file run again with a new ledger is held as a possible repeat."""
    bank = start_bank()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES[:2])
    assert main(["run", str(batch)]) == 0
    assert main(["run", str(batch), "--ledger", str(tmp_path / "second.sqlite")]) == 1
    rows = report(tmp_path / "second.sqlite", capsys)
    assert {r["status"] for r in rows} == {"held"}
    assert "possible repeat" in rows[0]["error"]
    assert all(g["payments"] == 1 for g in payment_groups(bank))
    assert (
        main(["run", str(batch), "--ledger", str(tmp_path / "second.sqlite"), "--allow-repeat"])
        == 0
    )
    assert all(g["payments"] == 2 for g in payment_groups(bank))


def test_the_repeat_guard_looks_back_duplicate_window_days_3_by_default(
    start_bank: StartBank, tmp_path: Path
) -> None:
    """A payment made 4 days ago is outside the default 3-day window (the file is paid on a
    fresh ledger), and inside `--duplicate-window 5` (held as a possible repeat)."""
    from datetime import timedelta

    bank = start_bank()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES[:1])
    assert main(["run", str(batch)]) == 0
    for payment in bank.state.payments.values():  # as if paid 4 days ago
        payment.created_at -= timedelta(days=4)
    fresh = ["--ledger", str(tmp_path / "fresh.sqlite"), "--dry-run"]
    assert main(["run", str(batch), *fresh, "--duplicate-window", "5"]) == 1
    assert main(["run", str(batch), *fresh]) == 0
    assert main(["run", str(batch), *fresh, "--duplicate-window", "3"]) == 0


def test_ledger_of_another_bank_is_refused(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ledger used with one bank is refused against another, with the way out."""
    start_bank()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES[:1])
    assert main(["run", str(batch)]) == 0
    start_bank()  # a second bank: a different base URL
    assert main(["run", str(batch)]) == 2
    assert "--ledger" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("command", "said"),
    [
        (["run", "{batch}", "--ledger", "{url}"], "cannot reach the ledger database"),
        (["run", "{batch}", "--ledger", "{url}", "--dry-run"], "cannot reach the ledger database"),
        (["report", "{batch}", "--ledger", "{url}"], "cannot reach the ledger database"),
        (["report", "{url}"], "is a PostgreSQL database, not a file"),
    ],
    ids=["run", "dry-run", "report", "report-positional"],
)
def test_an_unreachable_postgresql_ledger_is_refused_in_one_line_without_its_password(
    start_bank: StartBank,
    tmp_path: Path,
    command: list[str],
    said: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--ledger postgresql://USER:PASSWORD@HOST/DB with no server there: exit 2 in one line
    that masks the password, before any request or file is made."""
    bank = start_bank()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES[:1])
    url = "postgresql://payrun:pg-s3cret@127.0.0.1:1/payrun"
    requests = stats(bank)["requests"]
    capsys.readouterr()
    argv = [word.format(batch=batch, url=url) for word in command]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err, err
    assert "pg-s3cret" not in err
    assert stats(bank)["requests"] == requests
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pay.csv"]


def test_a_ledger_named_memory_is_refused_before_anything_is_paid(
    start_bank: StartBank,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--ledger :memory: (SQLite's in-memory name): exit 2 in one line, nothing sent, no file
    made; a ledger lost at the run's end would let a rerun pay again."""
    bank = start_bank()
    monkeypatch.chdir(tmp_path)
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES[:1])
    capsys.readouterr()
    assert main(["run", str(batch), "--ledger", ":memory:"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "lost when the run ends" in err, err
    assert stats(bank)["requests"] == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pay.csv"]


def test_invalid_rows_are_reported_not_paid(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Invalid rows end invalid (exit 1) while the valid rows are paid; not added up as £0."""
    bank = start_bank()
    batch = write_batch(tmp_path / "pay.csv", [*EMPLOYEES[:2], ("Bad Sort", "1234", "12345678")])
    assert main(["run", str(batch)]) == 1
    summary = capsys.readouterr().out
    assert "row 4 (Bad Sort): invalid:" in summary and "sort code" in summary, summary
    invalid_line = next(line for line in summary.splitlines() if "invalid" in line)
    assert re.fullmatch(r"  invalid +1 +\(not added up\)", invalid_line), summary
    assert "£" not in invalid_line, summary
    rows = report(tmp_path / "pay.csv.ledger.sqlite", capsys)
    assert [r["status"] for r in rows] == ["submitted", "submitted", "invalid"]
    assert "sort code" in rows[2]["error"]
    assert len(payment_groups(bank)) == 2
    sheet_path = tmp_path / "report.xlsx"
    assert main(["report", str(tmp_path / "pay.csv.ledger.sqlite"), "-o", str(sheet_path)]) == 0
    sheet = openpyxl.load_workbook(sheet_path).active
    amounts = [row[3] for row in sheet.iter_rows(min_row=2)]
    assert [(c.data_type, c.number_format) for c in amounts[:2]] == [("n", '"£"#,##0.00')] * 2
    assert [Decimal(str(c.value)) for c in amounts[:2]] == [Decimal(r["amount"]) for r in rows[:2]]
    assert amounts[2].data_type == "s" and amounts[2].value == rows[2]["amount"]


def test_payrun_report_takes_the_batch_file_and_finds_its_ledger(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`payrun report pay.csv` reads pay.csv.ledger.sqlite beside it, as `run` writes it; a
    batch never paid is one clear line, exit 2."""
    start_bank()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES[:2])
    assert main(["run", str(batch)]) == 0
    by_ledger = report(tmp_path / "pay.csv.ledger.sqlite", capsys)
    assert main(["report", str(batch), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == by_ledger
    unpaid = write_batch(tmp_path / "other.csv", EMPLOYEES[:1])
    assert main(["report", str(unpaid)]) == 2
    err = capsys.readouterr().err
    assert "other.csv is a batch file, and no ledger is beside it" in err, err
    assert not (tmp_path / "other.csv.ledger.sqlite").exists()


def test_quiet_says_only_how_it_ended_and_format_json_is_the_json_summary(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """-q: no log lines, the summary's last line alone; --format json asks for the JSON
    summary as in every other command (the same object as --log-format json)."""
    start_bank()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES[:2])
    assert main(["run", str(batch), "-q"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and out == (
        "done: every valid row was submitted (not yet delivered; add --wait to follow them)\n"
    )
    assert main(["run", str(batch), "--format", "json"]) == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[0])
    assert summary["event"] == "summary" and summary["rows"]["submitted"]["count"] == 2


def test_plain_http_to_a_remote_host_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """http:// is refused unless the host is loopback (the key would travel in clear)."""
    monkeypatch.setenv("PAYRUN_BASE_URL", "http://bank.example.com")
    monkeypatch.setenv("PAYRUN_API_KEY", "k")
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES[:1])
    assert main(["run", str(batch)]) == 2
    assert "https" in capsys.readouterr().err


def test_limits_over_the_caps_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--max-in-flight above 50 and --per-account-submits above 3 are usage errors."""
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES[:1])
    assert main(["run", str(batch), "--sandbox", "--max-in-flight", "51"]) == 2
    assert main(["run", str(batch), "--sandbox", "--per-account-submits", "4"]) == 2
    assert "between 1 and 3" in capsys.readouterr().err


def test_sandbox_mode_runs_the_sample(
    tmp_path: Path, samples: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`payrun run samples/payroll.csv --sandbox` pays the sample and says where the ledger is."""
    sample = samples / "payroll.csv"
    ledger = tmp_path / "l.sqlite"
    assert (
        main(
            [
                "run",
                str(sample),
                "--sandbox",
                "--ledger",
                str(ledger),
                "--report",
                str(tmp_path / "r.csv"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert f"ledger: {ledger}" in out
    assert (tmp_path / "r.csv").read_text(encoding="utf-8-sig").startswith("row,row_id,payee_name")


def test_several_matching_payments_need_attention_and_nothing_is_guessed(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A row left 'creating' that matches two bank payments exits 3 naming it; none is added."""
    import sqlite3
    from datetime import UTC, datetime, timedelta

    bank = start_bank()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES[:1])
    ledger = tmp_path / "pay.csv.ledger.sqlite"
    assert main(["run", str(batch), "--create-only"]) == 0
    row = report(ledger, capsys)[0]
    headers = {"Authorization": f"ServiceAPIKey {bank.api_key}"}
    payment = httpx.get(bank.base_url + row["payment_url"], headers=headers).json()
    account_url = (
        payment.get("account-url") or f"/v0/bank/accounts/{next(iter(bank.state.accounts))}"
    )
    body = {
        "creditor": {
            k: v for k, v in payment["creditor"].items() if k in ("creditor-type", "payee-url")
        },
        "payment-amount": payment["payment-amount"],
        "payment-reference": payment["payment-reference"],
    }
    httpx.post(
        f"{bank.base_url}{account_url}/payments", json=body, headers=headers
    ).raise_for_status()
    earlier = (datetime.now(UTC) - timedelta(seconds=30)).isoformat()
    with sqlite3.connect(ledger) as db:  # as if killed after the intent, before the answer
        db.execute("UPDATE rows SET status='creating', payment_url=NULL, intent_at=?", (earlier,))
    assert main(["run", str(batch), "--dry-run"]) == 1  # the dry run finds it as a run would
    out = capsys.readouterr().out
    assert ": needs attention: several bank payments match" in out, out
    assert "started by an earlier run" not in out and "would pay 0 rows" in out, out
    assert out.splitlines()[-1] == "some rows would not be paid: see above"
    assert main(["run", str(batch), "--dry-run", "--log-format", "json"]) == 1
    plan = _json_lines(capsys.readouterr().out)[-1]
    assert plan["attention"] == [2] and plan["problems"][0]["row"] == 2, plan
    assert main(["run", str(batch)]) == 3
    out = capsys.readouterr().out
    assert "needs attention: row 2: a person must look" in out
    assert ": pending: several bank payments match" in out, out  # the contract's word
    assert "a person must look at the rows above in the bank's app first" in out.splitlines()[-1]
    assert main(["run", str(batch), "--log-format", "json"]) == 3  # the scheduler's message too
    summary = _json_lines(capsys.readouterr().out)[0]
    assert "a person must look at the rows under attention" in summary["message"], summary
    assert summary["attention"] == [2], summary
    assert [g["payments"] for g in payment_groups(bank)] == [2]  # nothing new was created
    assert all(g["submissions"] == 0 for g in payment_groups(bank))  # and nothing submitted


def test_dry_run_checks_rows_cut_off_mid_create_with_the_bank(
    start_bank: StartBank,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rows left 'creating' by a killed run: the dry run looks at the bank's payments as the
    run would. One whose payment exists is started (the run submits it); one whose payment
    was never made would be paid. Nothing is created or submitted. While the bank may still
    be finishing a late create, or a create a run sent just before it was killed (intents
    after the last normal end, under a minute old), a run would wait before it looks: the
    dry run leaves those rows started."""
    import sqlite3
    from datetime import UTC, datetime, timedelta

    bank = start_bank()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES[:2])
    ledger = tmp_path / "pay.csv.ledger.sqlite"
    creates: list[str] = []

    def second_create(method: str, path: str) -> bool:
        if method == "POST" and path.endswith("/payments"):
            creates.append(path)
            return len(creates) > 1
        return False

    stop_refusing = refuse(bank, monkeypatch, 422, "insufficient-funds", second_create)
    assert main(["run", str(batch), "--create-only"]) == 1  # one made, one refused
    stop_refusing()
    made = {r["row"]: r["payment_url"] for r in report(ledger, capsys)}
    unmade = next(row for row, url in made.items() if not url)
    earlier = (datetime.now(UTC) - timedelta(seconds=30)).isoformat()
    with sqlite3.connect(ledger) as db:  # as if killed after both intents
        db.execute(
            "UPDATE rows SET status='creating', payment_url=NULL, error=NULL, intent_at=?",
            (earlier,),
        )
    assert main(["run", str(batch), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would pay 1 row," in out, out
    assert f"row {unmade} " not in out  # not listed as a problem: it is simply paid
    assert "1 row was started by an earlier run" in out, out
    assert out.splitlines()[-1] == "everything would be paid"
    assert [g["payments"] for g in payment_groups(bank)] == [1]  # nothing new
    assert all(g["submissions"] == 0 for g in payment_groups(bank))
    assert {r["status"] for r in report(ledger, capsys)} == {"pending"}  # the ledger untouched
    later = (datetime.now(UTC) + timedelta(minutes=1)).isoformat()
    with sqlite3.connect(ledger) as db:  # the bank may still be finishing a late create
        db.execute("UPDATE batch SET late_until=?", (later,))
    assert main(["run", str(batch), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would pay 0 rows" in out, out  # a run would wait, then look: not "would pay"
    assert "2 rows were started by an earlier run" in out, out
    before = (datetime.now(UTC) - timedelta(minutes=5)).isoformat()
    with sqlite3.connect(ledger) as db:  # killed: the intents are after the last normal end
        db.execute("UPDATE batch SET late_until=NULL, ended_at=?", (before,))
    assert main(["run", str(batch), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would pay 0 rows" in out, out
    assert "2 rows were started by an earlier run" in out, out
    long_ago = (datetime.now(UTC) - timedelta(minutes=2)).isoformat()
    with sqlite3.connect(ledger) as db:  # killed two minutes ago: the bank is done by now
        db.execute("UPDATE rows SET intent_at=?", (long_ago,))
        db.execute("UPDATE batch SET alive_at=?", (long_ago,))
    assert main(["run", str(batch), "--dry-run"]) == 0
    assert "would pay 1 row," in capsys.readouterr().out


def _first_create_slow(
    bank: RunningSandbox, monkeypatch: pytest.MonkeyPatch, delay: float, *, every: bool = False
) -> list[str]:
    """The bank receives the first create (``every`` create) whole, then makes the payment
    ``delay`` s later (payrun may have stopped waiting by then). The list gets "started"
    when a slow create arrives and "made" once its payment is made."""
    import anyio

    serve_api = bank.app._serve_api  # noqa: SLF001 - the server's own request handler
    slow: list[str] = []

    async def first_create_slow(scope: Any, receive: Any, send: Any) -> None:
        is_create = scope["method"] == "POST" and scope["path"].endswith("/payments")
        if not is_create or (slow and not every):
            await serve_api(scope, receive, send)
            return
        slow.append("started")
        messages = [await receive()]  # the bank has the whole request...
        while messages[-1].get("more_body"):
            messages.append(await receive())
        await anyio.sleep(delay)  # ...and makes the payment later

        async def replay() -> Any:
            return messages.pop(0) if messages else {"type": "http.disconnect"}

        await serve_api(scope, replay, send)
        slow.append("made")

    monkeypatch.setattr(bank.app, "_serve_api", first_create_slow)
    return slow


def test_a_create_the_bank_finishes_after_the_timeout_is_found_not_made_again(
    start_bank: StartBank,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The bank takes longer than payrun waits for a create, and makes the payment after
    payrun gave up. payrun looks at the account's payments only once the bank has had the
    settle wait more, so it finds that payment instead of creating another."""
    import payrun.bank._transport

    bank = start_bank()
    monkeypatch.setattr(payrun.bank._transport, "REQUEST_TIMEOUT", 0.5)
    monkeypatch.setenv("PAYRUN_SETTLE_WAIT", "2")
    slow = _first_create_slow(bank, monkeypatch, 1.2)
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES[:1])
    assert main(["run", str(batch)]) == 0, capsys.readouterr()
    wait_until(lambda: "made" in slow, 10, "the slow create to finish at the bank")
    assert [g["payments"] for g in payment_groups(bank)] == [1]  # found, not made again
    assert [g["submissions"] for g in payment_groups(bank)] == [1]
    assert report(tmp_path / "pay.csv.ledger.sqlite", capsys)[0]["status"] == "submitted"


def test_a_rerun_right_after_ctrl_c_in_the_late_wait_still_waits_for_the_bank(
    start_bank: StartBank,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C while payrun gives a late create time ends the run (exit 3); the same command
    run again at once waits out the rest of that time (the ledger keeps it), then finds the
    payment the bank made meanwhile: one payment, not two."""
    import os
    import signal
    import threading

    import payrun.bank._transport

    bank = start_bank()
    monkeypatch.setattr(payrun.bank._transport, "REQUEST_TIMEOUT", 0.5)
    monkeypatch.setenv("PAYRUN_SETTLE_WAIT", "4")
    slow = _first_create_slow(bank, monkeypatch, 2.5)  # made 2 s after payrun's timeout
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES[:1])
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()  # in the wait
    assert main(["run", str(batch)]) == 3
    capsys.readouterr()
    assert main(["run", str(batch)]) == 0  # at once, as the summary says
    err = capsys.readouterr().err
    assert "1 row in doubt until" in err, err
    wait_until(lambda: "made" in slow, 10, "the slow create to finish at the bank")
    assert [g["payments"] for g in payment_groups(bank)] == [1]
    assert [g["submissions"] for g in payment_groups(bank)] == [1]


def _short_settle(monkeypatch: pytest.MonkeyPatch, *, settle: float, alive: float) -> None:
    """This process gives a killed run's requests ``settle`` s after its last sign of life
    (``PAYRUN_SETTLE_WAIT``), a sign it commits every ``alive`` s (60 and 5 for users)."""
    import payrun.run._book

    monkeypatch.setenv("PAYRUN_SETTLE_WAIT", str(settle))
    monkeypatch.setattr(payrun.run._book, "ALIVE_SECONDS", alive)


def _kill_while_creating(
    bank: RunningSandbox, batch: Path, ledger: Path, slow: list[str], creates: int, *extra: str
) -> None:
    """Run `payrun run` in a process of its own (``_payrun_after_kill.py``: a sign of life
    every 0.5 s) and kill -9 it once the bank has the ``creates``-th slow create in hand."""
    import signal

    started = time.monotonic()
    process = start_run(bank, batch, ledger, *extra)
    try:
        wait_until(
            lambda: slow.count("started") >= creates,
            RUN_TIMEOUT_S,
            f"create {creates} to reach the bank",
        )
    finally:
        kill_group(process, signal.SIGKILL)
    killed = finish(process, started)
    assert killed.returncode == -signal.SIGKILL, killed.describe()


@pytest.mark.parametrize("interrupted", [False, True], ids=["rerun", "ctrl-c-then-rerun"])
def test_a_rerun_right_after_kill_9_waits_for_a_create_the_bank_is_still_making(
    start_bank: StartBank,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    interrupted: bool,  # noqa: FBT001
) -> None:
    """kill -9 while the bank has a create in hand: nothing recorded that the request was
    on the wire. The same command run again at once gives the bank the time a live run
    would (after the killed run's last sign of life) before it lists the payments, so it
    finds the payment the bank made meanwhile: one payment, not two. Ctrl-C during that
    wait ends the rerun normally (exit 3) without starting anything more, and the run
    after it still waits out the rest."""
    import os
    import signal
    import threading

    bank = start_bank()
    _short_settle(monkeypatch, settle=4.0, alive=0.5)
    slow = _first_create_slow(bank, monkeypatch, 2.5)  # made 2.5 s after it arrived
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES[:1])
    ledger = tmp_path / "pay.ledger.sqlite"
    _kill_while_creating(bank, batch, ledger, slow, 1)
    assert "made" not in slow  # the rerun starts while the bank is still making it
    if interrupted:
        threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()  # in the wait
        assert main(run_args(batch, ledger)[2:]) == 3
        err = capsys.readouterr().err
        assert "1 row in doubt until" in err, err
        assert slow.count("started") == 1  # stopped in the wait: nothing more was sent
        assert "made" not in slow
    assert main(run_args(batch, ledger)[2:]) == 0
    err = capsys.readouterr().err
    assert "1 row in doubt until" in err, err
    wait_until(lambda: "made" in slow, 10, "the slow create to finish at the bank")
    assert [g["payments"] for g in payment_groups(bank)] == [1]  # found, not made again
    assert [g["submissions"] for g in payment_groups(bank)] == [1]


def test_after_kill_9_the_wait_counts_from_the_last_sign_of_life_not_from_the_intent(
    start_bank: StartBank,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Intents are committed ahead (the next rows' share one commit and one time) and each
    row is sent when its turn comes, here seconds later: one create in flight, each taking
    the bank 1 s. Killed during the fourth, the run left intents 3 s old; the rerun waits
    from the run's last sign of life instead, and finds that fourth payment made."""
    bank = start_bank()
    _short_settle(monkeypatch, settle=2.5, alive=0.5)
    slow = _first_create_slow(bank, monkeypatch, 1.0, every=True)
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES)
    ledger = tmp_path / "pay.ledger.sqlite"
    extra = ("--create-only", "--max-in-flight", "1")
    _kill_while_creating(bank, batch, ledger, slow, 4, *extra)
    assert slow.count("made") == 3
    assert main([*run_args(batch, ledger, *extra)[2:]]) == 0
    wait_until(
        lambda: slow.count("made") == slow.count("started"),
        10,
        "every create to finish at the bank",
    )
    assert [g["payments"] for g in payment_groups(bank)] == [1, 1, 1, 1]


def _ledger_until(ledger: Path) -> datetime:
    """The batch's late_until: until when the rows in doubt were held."""
    import sqlite3

    with contextlib.closing(sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)) as db:
        (text,) = db.execute("SELECT late_until FROM batch").fetchone()
    return datetime.fromisoformat(text)


def test_after_kill_9_rows_never_sent_are_paid_at_once_and_rows_in_doubt_wait(
    start_bank: StartBank,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Killed while creating one row at a time (the next 32 rows' intents committed ahead):
    the rerun pays the rows whose intent was never committed before the settle time of the
    rows in doubt, records at once the rows the bank already made, and creates the other
    rows in doubt only from their settle time on; one payment per row. (The sandbox's
    creation times against the ledger's late_until, not the wall clock of this test.)"""
    bank = start_bank()
    _short_settle(monkeypatch, settle=4.0, alive=0.5)
    quick = bank.app._serve_api  # noqa: SLF001 - the server's own request handler
    slow = _first_create_slow(bank, monkeypatch, 1.0, every=True)
    people = [(f"Payee {i:02d}", "200000", f"{70000000 + i}") for i in range(45)]
    batch = write_batch(tmp_path / "pay.csv", people)
    ledger = tmp_path / "pay.ledger.sqlite"
    _kill_while_creating(bank, batch, ledger, slow, 4, "--max-in-flight", "1")
    monkeypatch.setattr(bank.app, "_serve_api", quick)
    wait_until(
        lambda: slow.count("made") == slow.count("started"), 10, "the creates in hand to finish"
    )
    account_of = {r["row"]: r["account_number"] for r in ledger_rows(ledger)}
    status = {r["row"]: r["status"] for r in ledger_rows(ledger)}
    made = {p.creditor_account_number for p in bank.state.payments.values()}
    never_sent = [n for n, s in status.items() if s == "pending"]
    in_doubt = [n for n, s in status.items() if s == "creating"]
    assert len(never_sent) >= 10 and len(in_doubt) >= 20, status
    assert main(run_args(batch, ledger)[2:]) == 0
    err = capsys.readouterr().err
    assert "resuming: " in err and " of 45 already done" in err, err
    assert re.search(r"\d+ rows in doubt until \d\d:\d\d:\d\d: payrun checks them", err), err
    until = _ledger_until(ledger)
    payments = {p.creditor_account_number: p for p in bank.state.payments.values()}
    submitted = {s.payment_id: s.created_at for s in bank.state.submissions.values()}
    assert [g["payments"] for g in payment_groups(bank)] == [1] * 45
    for number in never_sent:
        assert payments[account_of[number]].created_at < until, number
    for number in in_doubt:
        payment = payments[account_of[number]]
        if account_of[number] in made:
            # Found at the start: recorded, and submitted, at once
            assert submitted[payment.id] < until, number
        else:
            assert payment.created_at >= until, number


@pytest.mark.parametrize("value", ["-1", "soon"])
def test_a_settle_wait_that_is_not_seconds_is_a_usage_error(
    start_bank: StartBank,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    value: str,
) -> None:
    """--settle-wait or PAYRUN_SETTLE_WAIT negative or not a number: exit 2 with a line
    naming it, before anything is sent."""
    bank = start_bank()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES[:1])
    with pytest.raises(SystemExit) as info:
        main(["run", str(batch), f"--settle-wait={value}"])
    assert info.value.code == 2
    assert "--settle-wait: must be a number of seconds from 0 to" in capsys.readouterr().err
    monkeypatch.setenv("PAYRUN_SETTLE_WAIT", value)
    assert main(["run", str(batch)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "PAYRUN_SETTLE_WAIT must be a number of seconds" in err, err
    assert stats(bank)["requests"] == 0


def test_ledger_of_another_organization_is_refused(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ledger bound to another organization at the same address is refused (exit 2)."""
    import sqlite3

    start_bank()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES[:1])
    ledger = tmp_path / "pay.csv.ledger.sqlite"
    assert main(["run", str(batch)]) == 0
    with sqlite3.connect(ledger) as db:
        db.execute("UPDATE batch SET organization_url='/v0/organizations/og.someone-else'")
    assert main(["run", str(batch)]) == 2
    assert "organization" in capsys.readouterr().err


def test_report_works_while_a_run_holds_the_ledger(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`payrun report` reads a ledger whose lock another run holds."""
    from payrun.ledger import Ledger

    start_bank()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES[:2])
    ledger = tmp_path / "pay.csv.ledger.sqlite"
    assert main(["run", str(batch)]) == 0
    with Ledger.open(ledger):  # the writer's lock is held
        rows = report(ledger, capsys)
    assert [r["status"] for r in rows] == ["submitted", "submitted"]


def test_json_logs_are_one_object_per_line(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--log-format json writes only JSON objects on stderr, each with an event; the last
    one says how the run ended (exit code, rows per status, the ledger)."""
    start_bank()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES)
    assert main(["run", str(batch), "--log-format", "json"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    events = [json.loads(line) for line in lines]
    assert {"started", "progress"} <= {e["event"] for e in events}
    assert events[-2]["done"] == 4
    last = events[-1]
    assert last["event"] == "finished" and last["exit_code"] == 0, last
    assert last["rows"] == {"submitted": 4} and last["interrupted"] is False, last
    assert last["ledger"] == str(tmp_path / "pay.csv.ledger.sqlite"), last


def test_json_logs_end_a_failed_run_with_a_json_error(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--log-format json: a fatal error is one more JSON object on stderr, event "error",
    then the `finished` line with the exit code."""
    start_bank()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES)
    assert main(["run", str(batch), "--log-format", "json", "--expect-count", "5"]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    *_, error, finished = [json.loads(line) for line in lines]
    assert error["event"] == "error" and "control totals differ" in error["message"]
    assert (finished["event"], finished["exit_code"]) == ("finished", 2)


def test_sandbox_mode_says_where_the_ledger_goes(
    samples: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --ledger, a sandbox run keeps its ledger and report in a fresh temp folder."""
    sample = samples / "payroll.csv"
    assert main(["run", str(sample), "--sandbox"]) == 0
    ledger, report = _sandbox_places(capsys.readouterr().err)
    assert ledger.parent == report.parent and ledger.parent.name.startswith("payrun-sandbox-")
    assert ledger.name == "payroll.csv.ledger.sqlite" and ledger.exists()
    assert report.name == "report.csv" and report.exists()
    assert not (sample.parent / "payroll.csv.ledger.sqlite").exists()


def test_sandbox_mode_says_where_each_goes_when_one_is_given(
    tmp_path: Path, samples: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With --report r.json given, the sandbox message names it, and only the ledger is temp."""
    sample = samples / "payroll.csv"
    given = tmp_path / "r.json"
    assert main(["run", str(sample), "--sandbox", "--report", str(given)]) == 0
    ledger, report = _sandbox_places(capsys.readouterr().err)
    assert report == given and given.exists()
    assert ledger.exists() and ledger.parent.name.startswith("payrun-sandbox-")
    assert sorted(p.name for p in ledger.parent.iterdir() if "sqlite" not in p.name) == []


def _sandbox_places(err: str) -> tuple[Path, Path]:
    """The ledger and report paths named by the `sandbox run:` line on stderr."""
    line = next(line for line in err.splitlines() if line.startswith("sandbox run:"))
    found = re.fullmatch(r"sandbox run: the ledger goes to (.+); the report goes to (.+)", line)
    assert found, line
    return Path(found[1]), Path(found[2])


def test_unloadable_ca_certificates_exit_2_before_anything_is_sent(
    start_bank: StartBank,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CA certificates that cannot be loaded: exit 2, one line naming the cause, no request."""
    bank = start_bank()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES)
    with monkeypatch.context() as env:
        env.setenv("SSL_CERT_FILE", str(tmp_path / "no-such-ca.pem"))
        env.setenv("SSL_CERT_DIR", str(tmp_path / "no-such-dir"))
        assert main(["run", str(batch)]) == 2
    err = capsys.readouterr().err
    assert "cannot set up the HTTP client" in err
    assert "SSL_CERT_FILE" in err
    assert "Traceback" not in err
    assert stats(bank)["requests"] == 0


def _json_lines(text: str) -> list[dict[str, Any]]:
    """Every line parsed as JSON (a line that is not JSON fails the test)."""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_log_format_json_is_json_on_stdout_and_stderr_to_the_last_line(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With --log-format json, stdout is one summary object (invalid rows listed with their
    reasons) and stderr JSON lines ending with `finished`; a dry run likewise."""
    start_bank()
    batch = write_batch(tmp_path / "pay.csv", [*EMPLOYEES[:2], ("Bad Sort", "1234", "12345678")])
    assert main(["run", str(batch), "--log-format", "json"]) == 1
    captured = capsys.readouterr()
    (summary,) = _json_lines(captured.out)
    assert summary["event"] == "summary" and summary["exit_code"] == 1
    assert summary["message"].endswith("see problems"), summary  # nothing is 'above' in JSON
    assert summary["rows"]["submitted"] == {"count": 2, "total": "200.00"}
    assert summary["rows"]["invalid"] == {"count": 1, "total": None}
    (problem,) = summary["problems"]
    assert (problem["row"], problem["status"]) == (4, "invalid")
    assert "sort code" in problem["error"]
    events = _json_lines(captured.err)
    assert events[-1]["event"] == "finished" and events[-1]["exit_code"] == 1
    assert main(["run", str(batch), "--dry-run", "--log-format", "json"]) == 1
    captured = capsys.readouterr()
    (plan,) = _json_lines(captured.out)
    assert plan["event"] == "dry_run" and plan["already_paid"] == 2
    assert [p["row"] for p in plan["problems"]] == [4]
    finished = _json_lines(captured.err)[-1]
    assert finished["event"] == "finished" and finished["ledger"] is None, finished


def test_dry_run_after_create_only_names_started_rows_without_internal_words(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rows an earlier run created are 'started by an earlier run', not 'created: None'."""
    start_bank()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES[:2])
    assert main(["run", str(batch), "--create-only"]) == 0
    capsys.readouterr()
    assert main(["run", str(batch), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "2 rows were started by an earlier run" in out, out
    assert "None" not in out, out


def test_wait_with_create_only_and_a_bad_base_url_flag_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--create-only --wait is a usage error; a bad --base-url is named as the flag."""
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES[:1])
    assert main(["run", str(batch), "--sandbox", "--create-only", "--wait"]) == 2
    assert "--create-only submits none" in capsys.readouterr().err
    monkeypatch.delenv("PAYRUN_BASE_URL", raising=False)
    monkeypatch.setenv("PAYRUN_API_KEY", "k")
    assert main(["run", str(batch), "--base-url", "ftp://bank.example"]) == 2
    err = capsys.readouterr().err
    assert "--base-url 'ftp://bank.example' is not an http(s) address" in err, err
    assert not (tmp_path / "pay.csv.ledger.sqlite").exists()


def test_validate_json_says_why_a_file_cannot_be_used(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 2 with --format json still prints the contract's object, the reason as its error."""
    report_path = tmp_path / "v.json"
    args = ["validate", str(tmp_path / "missing.csv"), "--format", "json"]
    assert main([*args, "--report", str(report_path)]) == 2
    (document,) = _json_lines(capsys.readouterr().out)
    assert (document["rows"], document["valid"], document["invalid"]) == (0, 0, 0)
    (error,) = document["errors"]
    assert error["row"] is None and error["column"] is None and "missing.csv" in error["message"]
    assert json.loads(report_path.read_text()) == document  # the contract: --report writes it
    assert main([*args, "--max-rows", "0"]) == 2  # an option error: the same object
    (document,) = _json_lines(capsys.readouterr().out)
    assert "--max-rows" in document["errors"][0]["message"]


def test_a_bank_name_that_does_not_resolve_is_a_setting_not_a_rerun(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mistyped bank host (.invalid never resolves) is exit 2 naming the address, not
    exit 3 'run again' (a scheduler would retry forever), and leaves no ledger behind; a
    bank refusing connections is exit 3, and the run's ledger stays for the rerun."""
    monkeypatch.setenv("PAYRUN_API_KEY", "k")
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES[:1])
    assert main(["run", str(batch), "--base-url", "https://bank.nonexistent.invalid"]) == 2
    err = capsys.readouterr().err
    assert "no such host" in err and "bank.nonexistent.invalid" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pay.csv"]
    # A bank that refuses connections may be down for a while: exit 3, the ledger kept.
    assert main(["run", str(batch), "--base-url", "http://127.0.0.1:9"]) == 3
    assert (tmp_path / "pay.csv.ledger.sqlite").exists()
    err = capsys.readouterr().err
    assert "check PAYRUN_BASE_URL (or --base-url) and the network" in err, err


def _creates_refused_429(bank: RunningSandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every payment create answered 429, and retries spent at once (not a minute of waits)."""
    from payrun.bank import BankClient, RetryPolicy  # noqa: PLC0415

    refuse(
        bank,
        monkeypatch,
        429,
        "too-many-requests",
        lambda method, path: method == "POST" and path.endswith("/payments"),
    )
    defaults = BankClient.__init__.__kwdefaults__
    assert defaults is not None
    monkeypatch.setitem(defaults, "retry", RetryPolicy.no_wait(2))


def test_rows_left_unfinished_for_a_reason_are_named_in_the_summary(
    start_bank: StartBank,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Creates refused with 429 past the retries: exit 3, and the summary names the rows
    left pending with why (not only 'run the same command again')."""
    bank = start_bank()
    _creates_refused_429(bank, monkeypatch)
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES[:2])
    assert main(["run", str(batch)]) == 3
    out = capsys.readouterr().out
    assert "rows to look at (all accounts):" in out, out
    # One cause, said once for both rows
    assert "2 rows from 040004 30000001, pending: create not sent yet: the bank was busy" in out


def test_dry_run_counts_payees_an_earlier_run_made(
    start_bank: StartBank,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rows whose payees an earlier run created (payments refused with 429 since) are
    'rows to existing payees' in the dry run, not missing from the plan's payee count."""
    bank = start_bank()
    _creates_refused_429(bank, monkeypatch)
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES[2:])
    assert main(["run", str(batch), "--no-confirm-payees"]) == 3
    capsys.readouterr()
    assert main(["run", str(batch), "--dry-run", "--no-confirm-payees"]) == 0
    out = capsys.readouterr().out
    assert "payees: 2 rows to existing payees, 0 new payees to create" in out, out


def test_dry_run_agrees_with_the_run_on_a_ledger_of_another_bank_and_on_create_only(
    start_bank: StartBank,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Dry runs the real run then contradicted: on a ledger bound to the bank written
    another way, the dry run said 'everything would be paid' (exit 0) and the run refused
    (exit 2); now both refuse. After --create-only, with the balance short of the created
    payments, `--dry-run --create-only` failed them (exit 1) while the --create-only run
    leaves them created (exit 0); now both exit 0."""
    bank = start_bank(deliver_after_ms=20)
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES[:2])
    assert main(["run", str(batch), "--create-only"]) == 0
    monkeypatch.setenv("PAYRUN_BASE_URL", bank.base_url.replace("127.0.0.1", "localhost"))
    capsys.readouterr()
    assert main(["run", str(batch), "--dry-run"]) == 2
    assert "was used with bank" in capsys.readouterr().err
    assert main(["run", str(batch)]) == 2
    monkeypatch.setenv("PAYRUN_BASE_URL", bank.base_url)
    account = next(iter(bank.state.accounts))
    httpx.post(
        f"{bank.base_url}/__sandbox/accounts/{account.rsplit('/', 1)[-1]}/balance",
        json={"value": "1.00"},
    ).raise_for_status()
    assert main(["run", str(batch), "--dry-run", "--create-only"]) == 0
    assert main(["run", str(batch), "--create-only"]) == 0
    assert main(["run", str(batch), "--dry-run"]) == 1  # submitting them would fail: short


def test_a_dry_run_with_new_payees_says_confirmation_of_payee_may_still_hold(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dry run asks Confirmation of Payee nothing, so with new payees its last line says
    the rows are paid if the names match (a close match like 'Mia Davis' is then held)."""
    start_bank()
    batch = write_batch(tmp_path / "pay.csv", [("Mia Davis", "110001", "22039287")])
    assert main(["run", str(batch), "--dry-run"]) == 0
    said = (
        "everything would be paid if Confirmation of Payee matches the 1 new payee (a"
        " close match or no match is held, not paid)"
    )
    assert capsys.readouterr().out.splitlines()[-1] == said
    assert main(["run", str(batch), "--dry-run", "--no-confirm-payees"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "everything would be paid"


def test_dry_run_checks_held_rows_again_as_a_run_would(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """After a close match was held, `--dry-run --accept-close-match` says it would be
    paid (as the real run then does), and the dry run leaves the ledger as it was."""
    start_bank()
    batch = write_batch(tmp_path / "pay.csv", [("Mia Davis", "110001", "22039287")])
    ledger = tmp_path / "pay.csv.ledger.sqlite"
    assert main(["run", str(batch)]) == 1
    assert main(["run", str(batch), "--dry-run", "--accept-close-match"]) == 0
    assert "everything would be paid" in capsys.readouterr().out
    assert [r["status"] for r in report(ledger, capsys)] == ["held"]
    assert main(["run", str(batch), "--accept-close-match"]) == 0


def test_dry_run_shows_rows_cop_would_hold_again_as_the_real_run_holds_them(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rows Confirmation of Payee held are held again by a rerun asking the same name: the
    dry run says so with the bank's last answer, exit 1; it says 'would be paid' only when
    the real run then pays (--accept-close-match for a close match, --no-confirm-payees)."""
    start_bank()
    close, other = ("Mia Davis", "110001", "22039287"), ("Someone Else", "601613", "37704964")
    batch = write_batch(tmp_path / "pay.csv", [close, other])
    ledger = tmp_path / "pay.csv.ledger.sqlite"
    assert main(["run", str(batch)]) == 1
    capsys.readouterr()

    def dry(*options: str) -> tuple[int, str]:
        code = main(["run", str(batch), "--dry-run", *options])
        return code, capsys.readouterr().out

    code, out = dry()
    assert code == 1 and "everything would be paid" not in out, out
    assert "would pay 0 rows" in out and "0 new payees" in out, out
    assert re.search(r"row 2 \(Mia Davis\): held: .*close match.*'Mia Davies'", out), out
    assert re.search(r"row 3 \(Someone Else\): held: .*no-match", out), out
    assert main(["run", str(batch), "--dry-run", "--log-format", "json"]) == 1
    document = _json_lines(capsys.readouterr().out)[0]
    assert [(p["row"], p["status"]) for p in document["problems"]] == [(2, "held"), (3, "held")]
    assert main(["run", str(batch)]) == 1  # the real rerun agrees: both held again
    assert [r["status"] for r in report(ledger, capsys)] == ["held", "held"]

    code, out = dry("--accept-close-match")  # a close match would be paid, a no-match not
    assert code == 1 and "would pay 1 row," in out and "1 new payee to check" in out, out
    assert "row 2 (" not in out and "row 3 (Someone Else): held" in out, out
    code, out = dry("--no-confirm-payees")
    assert code == 0 and "would pay 2 rows" in out and "everything would be paid" in out, out
    assert main(["run", str(batch), "--accept-close-match"]) == 1
    assert [r["status"] for r in report(ledger, capsys)] == ["submitted", "held"]
    assert main(["run", str(batch), "--no-confirm-payees"]) == 0


@pytest.mark.parametrize("closed", ["stdin", "stdout", "stderr", "stdout and stderr", "full"])
def test_a_scheduler_closing_or_filling_a_standard_stream_changes_nothing_paid(
    tmp_path: Path, closed: str
) -> None:
    """Started with stdin, stdout or stderr closed (as some schedulers do), or stdout on a
    full disk: the run pays, exits with its own code (it aborted with 134 in uvloop, or
    exited 1 with a traceback), and JSON log lines never land on stdout."""
    from _run_helpers import assert_exactly_once, make_rows  # noqa: PLC0415
    from _run_helpers import write_batch as write_rows  # noqa: PLC0415

    with serve_in_thread() as bank:
        rows = make_rows(12, 6, tag="FD" + closed[:3].upper())
        batch, ledger = write_rows(tmp_path / "pay.csv", rows), tmp_path / "pay.sqlite"
        shut = {"stdin": [0], "stdout": [1], "stderr": [2], "stdout and stderr": [1, 2]}
        numbers = shut.get(closed, [])

        def close_them() -> None:
            for number in numbers:
                os.close(number)

        full = Path("/dev/full") if closed == "full" else tmp_path / "out"
        with full.open("w") as out, (tmp_path / "err").open("w") as err:
            (tmp_path / "out").touch()
            done = subprocess.run(
                run_args(batch, ledger, "--log-format", "json"),
                env=run_env(bank),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                timeout=RUN_TIMEOUT_S,
                check=False,
                preexec_fn=close_them,  # noqa: PLW1509
            )
        assert done.returncode == 0, (tmp_path / "err").read_text()
        assert_exactly_once(bank, rows, ledger, f"with {closed} closed")
    out_lines = (tmp_path / "out").read_text().splitlines()
    assert all(json.loads(line)["event"] == "summary" for line in out_lines), out_lines
    if closed in ("stdin", "full"):
        assert json.loads((tmp_path / "err").read_text().splitlines()[-1])["event"] == "finished"


def test_validate_json_keeps_names_under_an_ascii_locale(tmp_path: Path) -> None:
    """LC_ALL=C and PYTHONIOENCODING=ascii: `validate --format json` escapes non-ASCII
    text as JSON does (\\u00eb), not as '?' (the data was lost)."""
    batch = write_batch(tmp_path / "pay.csv", [("Zoë Müller", "309089", "00705473")])
    env = {**os.environ, "LC_ALL": "C", "PYTHONIOENCODING": "ascii"}
    command = [sys.executable, "-m", "payrun", "validate", str(batch), "--format", "json"]
    done = subprocess.run(command, env=env, capture_output=True, timeout=60, check=False)
    assert done.returncode in (0, 1), done.stderr
    assert b"set ('\\u00eb\\u00fc')" in done.stdout, done.stdout  # it was '??'


def test_a_sandbox_run_logs_json_from_its_first_line(
    samples: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--sandbox --log-format json: where the ledger goes is a JSON note like the rest."""
    sample = samples / "payroll.csv"
    assert main(["run", str(sample), "--sandbox", "--log-format", "json"]) == 0
    events = _json_lines(capsys.readouterr().err)
    assert events[0]["event"] == "note" and "the ledger goes to" in events[0]["message"]
    assert events[-1]["event"] == "finished"


def test_payments_created_but_not_submitted_are_named_in_every_way_out(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rows an earlier run created but did not submit: a changed file is refused saying only
    that run submits them; the file on a fresh ledger holds them saying the payment exists
    unsubmitted and another ledger would still pay it (no advice that pays twice)."""
    bank = start_bank()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES[:2])
    assert main(["run", str(batch), "--create-only"]) == 0
    write_batch(tmp_path / "pay.csv", EMPLOYEES[:2], reference="NOV PAY 2")
    capsys.readouterr()
    assert main(["run", str(batch)]) == 2
    refused = capsys.readouterr().err
    assert "2 of its payments are created at the bank but not submitted yet" in refused, refused
    write_batch(tmp_path / "pay.csv", EMPLOYEES[:2])
    fresh = tmp_path / "fresh.ledger.sqlite"
    assert main(["run", str(batch), "--ledger", str(fresh)]) == 1
    errors = [r["error"] for r in report(fresh, capsys)]
    assert all("created and not submitted yet" in e and "paid twice" in e for e in errors), errors
    assert main(["run", str(batch)]) == 0  # the first ledger finishes its own payments
    assert [g["payments"] for g in payment_groups(bank)] == [1, 1]


@pytest.mark.parametrize("value", ["nan", "-1", "soon"])
def test_a_wait_timeout_that_is_not_seconds_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    """--wait-timeout nan crashed after paying (and on every rerun): now exit 2 up front."""
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES[:1])
    with pytest.raises(SystemExit) as info:
        main(["run", str(batch), "--sandbox", "--wait", f"--wait-timeout={value}"])
    assert info.value.code == 2
    assert "not a number of seconds, 0 or more" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["", "--dry-run"], "argument BATCH: an empty path: give a file's name"),
        (["pay.csv", "--ledger", ""], "argument --ledger: an empty path"),
        (["pay.csv", "--report="], "argument --report: an empty path"),
        (["pay.csv", "--api-key-file="], "argument --api-key-file: an empty path"),
        (["pay.csv", "--expect-count", "-1"], "'-1' is not a number of rows"),
    ],
)
def test_an_empty_path_or_a_negative_count_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    """An empty path (it crashed: 'PosixPath('.') has an empty name') or a negative
    --expect-count: exit 2 with the option named, before anything is read or sent."""
    write_batch(tmp_path / "pay.csv", EMPLOYEES[:1])
    args = [str(tmp_path / a) if a == "pay.csv" else a for a in args]
    with pytest.raises(SystemExit) as info:
        main(["run", *args, "--sandbox"])
    assert info.value.code == 2
    assert said in capsys.readouterr().err


@pytest.mark.parametrize("others", [[], ["--create-only"], ["--log-format", "json"]])
def test_a_wait_timeout_without_wait_is_a_usage_error(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str], others: list[str]
) -> None:
    """--wait-timeout without --wait was silently ignored: now exit 2 before any request,
    one line saying to add --wait or leave --wait-timeout out (JSON: the error object)."""
    bank = start_bank()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES[:1])
    assert main(["run", str(batch), "--wait-timeout", "30", *others]) == 2
    out, err = capsys.readouterr()
    if "json" in others:
        error = json.loads(out)
        assert (error["event"], error["exit_code"]) == ("error", 2), error
        assert "add --wait, or leave --wait-timeout out" in error["message"], error
    else:
        assert err.count("\n") == 1 and "add --wait, or leave --wait-timeout out" in err, err
    assert stats(bank)["requests"] == 0
    assert not (tmp_path / "pay.csv.ledger.sqlite").exists()


def test_https_to_a_plain_http_port_is_a_setting(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """https:// to the sandbox's plain-http port fails its TLS handshake: exit 2 naming the
    address, not exit 3 (a scheduler would retry forever)."""
    bank = start_bank()
    batch = write_batch(tmp_path / "pay.csv", EMPLOYEES[:1])
    https = bank.base_url.replace("http://", "https://")
    assert main(["run", str(batch), "--base-url", https]) == 2
    err = capsys.readouterr().err
    assert "cannot talk https with" in err and "Traceback" not in err, err
    assert payment_groups(bank) == []


def test_run_refuses_a_csv_whose_quote_swallows_rows(
    tmp_path: Path, samples: Path, sandbox_server: RunningSandbox
) -> None:
    """An unclosed quote in row 4 of the 40-row sample: run pays nothing (not 2 rows),
    exits 2 naming the row and column, and leaves no ledger."""
    text = (samples / "payroll.csv").read_text()
    folder = tmp_path / "run"
    folder.mkdir()
    batch = folder / "payroll.csv"
    batch.write_text(text.replace(",George Taylor,", ',"George Taylor,', 1))
    ledger = folder / "payroll.csv.ledger.sqlite"
    done = finish(start_run(sandbox_server, batch, ledger), time.monotonic())
    assert done.returncode == 2, done.describe()
    assert "row 4 (line 4 of the file), column payee_name" in done.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["payroll.csv"]


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_ledger_deleted_or_replaced_mid_run_stops_it_with_exit_3(
    start_bank: StartBank, tmp_path: Path, how: str
) -> None:
    """The ledger removed (or swapped for another file) while paying: the run notices the
    file is no longer the one it writes and stops with exit 3, never "done"."""
    bank = start_bank(latency_ms=150)
    batch = write_trial_batch(tmp_path / "pay.csv", make_rows(71, 40, tag="G"))
    ledger = tmp_path / "pay.ledger.sqlite"
    started = time.monotonic()
    process = start_run(bank, batch, ledger, "--max-in-flight", "2")
    wait_until(lambda: count_status(ledger, "submitted") >= 1, RUN_TIMEOUT_S, "a payment")
    for suffix in ("", "-wal", "-shm"):
        Path(f"{ledger}{suffix}").unlink()
    if how == "replaced":
        ledger.write_bytes(b"")
    done = finish(process, started)
    assert done.returncode == 3, done.describe()
    assert f"the ledger {ledger} was {how}" in done.stderr, done.describe()
    assert "done" not in done.stdout.splitlines()[-1:], done.describe()


def test_a_settle_wait_under_five_seconds_warns_once_when_rows_are_in_doubt(
    tmp_path: Path,
) -> None:
    """Rows in doubt (dropped answers) with a settle wait of 1 s: one warning line that they
    may be paid twice; 5 s (SHORT_SETTLE_WAIT) says nothing; every row is still paid once."""
    from _run_helpers import assert_exactly_once, run

    warning = "s, under 5 s, and"
    rows = make_rows(27, 8, tag="W")
    with serve_in_thread(fault_rate=0.5, fault_kinds=("drop",), rng_seed=7) as bank:
        short = write_trial_batch(tmp_path / "short.csv", rows[:4])
        done = run(bank, short, tmp_path / "short.sqlite")
        assert done.returncode == 0, done.describe()
        assert bank.state.stats.faults_injected["drop"] > 0
        said = [line for line in done.stderr.splitlines() if warning in line]
        assert len(said) == 1, done.describe()
        assert "warning: PAYRUN_SETTLE_WAIT is 1 s, under 5 s, and" in said[0]
        assert "would pay them twice" in said[0]
        assert_exactly_once(bank, rows[:4], tmp_path / "short.sqlite", done.describe())
        drops = bank.state.stats.faults_injected["drop"]
        safe = write_trial_batch(tmp_path / "safe.csv", rows[4:])
        done = run(bank, safe, tmp_path / "safe.sqlite", "--settle-wait", "5")
        assert done.returncode == 0, done.describe()
        assert bank.state.stats.faults_injected["drop"] > drops
        assert warning not in done.stderr, done.describe()
        assert "in doubt" in done.stderr, done.describe()
