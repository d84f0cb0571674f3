"""`--wait` (tracking) over real loopback HTTP against the sandbox bank: returns after
delivery, a role that cannot read events or submissions, and a wait that runs out."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from _run_helpers import (
    bank_problems,
    count_status,
    finish,
    ledger_rows,
    make_rows,
    refuse,
    return_submission,
    start_run,
    wait_until,
    write_batch,
)
from payrun.cli import main
from payrun.sandbox import RunningSandbox, serve_in_thread

StartBank = Callable[..., RunningSandbox]
SUMMARY_KEYS = {
    "event", "exit_code", "message", "interrupted", "rows", "accounts", "problems",
    "problems_not_listed", "attention", "ledger", "report",
}  # fmt: skip


@pytest.fixture
def start_bank(monkeypatch: pytest.MonkeyPatch) -> Iterator[StartBank]:
    """Start a fresh sandbox bank (a real uvicorn server) and point PAYRUN_* at it."""
    with ExitStack() as stack:

        def start(**options: Any) -> RunningSandbox:
            options.setdefault("deliver_after_ms", 20)
            running = stack.enter_context(serve_in_thread(**options))
            monkeypatch.setenv("PAYRUN_BASE_URL", running.base_url)
            monkeypatch.setenv("PAYRUN_API_KEY", running.api_key)
            return running

        yield start


def run(batch: Path, ledger: Path, *extra: str) -> int:
    """`payrun run` in-process (new payees are created without Confirmation of Payee)."""
    return main(["run", str(batch), "--ledger", str(ledger), "--no-confirm-payees", *extra])


def statuses(ledger: Path) -> list[str]:
    """Each row's status in the ledger, in row order."""
    return [r["status"] for r in ledger_rows(ledger)]


def test_a_return_after_delivery_during_the_wait_ends_the_row_returned(tmp_path: Path) -> None:
    """Delivered, then returned while `--wait` follows: the rows end returned, exit 1, each
    named with the bank's reason (`returned` can follow `delivered`)."""
    rows = make_rows(1, 3, tag="RET")
    batch = write_batch(tmp_path / "r3.csv", rows)
    ledger = tmp_path / "ret.sqlite"
    with serve_in_thread(deliver_after_ms=600_000) as bank:  # nothing delivers by itself
        process = start_run(bank, batch, ledger, "--wait", "--wait-timeout", "60")
        started = time.monotonic()
        wait_until(lambda: count_status(ledger, "submitted") == 3 or process.poll() is not None,
                   60, "3 rows submitted")
        for row in ledger_rows(ledger):
            return_submission(bank, row["submission_url"])  # events: delivered, then returned
        done = finish(process, started)
        assert bank_problems(bank, rows) == []
    assert done.returncode == 1, done.describe()
    assert statuses(ledger) == ["returned"] * 3, done.describe()
    assert all("returned: account-closed" in r["error"] for r in ledger_rows(ledger))
    assert done.stdout.count(": returned: the bank reports the payment returned") == 3
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("finished, but some rows were not paid") and "returned" in last, last


def test_a_rerun_with_wait_notices_a_return_of_a_delivered_row(
    start_bank: StartBank, tmp_path: Path
) -> None:
    """A row recorded delivered and returned afterwards: the next `--wait` run reads the
    events from the batch start and ends it returned (exit 1), paying nothing again; a
    later run leaves it returned."""
    bank = start_bank()
    rows = make_rows(2, 3, tag="RRN")
    batch = write_batch(tmp_path / "pay.csv", rows)
    ledger = tmp_path / "pay.sqlite"
    assert run(batch, ledger, "--wait") == 0
    assert statuses(ledger) == ["delivered"] * 3
    return_submission(bank, ledger_rows(ledger)[1]["submission_url"], "beneficiary-deceased")
    for _ in range(2):
        assert run(batch, ledger, "--wait") == 1
        assert statuses(ledger) == ["delivered", "returned", "delivered"]
    assert "beneficiary-deceased" in ledger_rows(ledger)[1]["error"]
    assert bank_problems(bank, rows) == []


def test_a_role_that_cannot_read_events_falls_back_to_reading_the_submissions(
    start_bank: StartBank, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """403 on the events (a role that may pay but not read events): `--wait` reads each
    submission instead and ends delivered, exit 0 (it ended exit 2 after paying)."""
    bank = start_bank()
    refuse(bank, monkeypatch, 403, "forbidden",
           lambda method, path: method == "GET" and path.endswith("/events"))
    rows = make_rows(3, 3, tag="EVF")
    ledger = tmp_path / "pay.sqlite"
    assert run(write_batch(tmp_path / "pay.csv", rows), ledger, "--wait") == 0
    assert statuses(ledger) == ["delivered"] * 3


def test_a_return_read_from_the_submission_keeps_the_bank_reason(
    start_bank: StartBank, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Events refused: a return is read from the submission itself, with its reason."""
    bank = start_bank(deliver_after_ms=600_000)
    rows = make_rows(8, 1, tag="PRR")
    batch, ledger = write_batch(tmp_path / "pay.csv", rows), tmp_path / "pay.sqlite"
    assert run(batch, ledger) == 0
    return_submission(bank, ledger_rows(ledger)[0]["submission_url"], "account-closed")
    refuse(bank, monkeypatch, 403, "forbidden",
           lambda method, path: method == "GET" and path.endswith("/events"))
    assert run(batch, ledger, "--wait") == 1
    [row] = ledger_rows(ledger)
    assert row["status"] == "returned" and "returned: account-closed" in row["error"], row


def test_a_return_after_delivery_is_seen_on_a_rerun_when_events_are_refused(
    start_bank: StartBank, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Events refused to this role: a `--wait` rerun reads each delivered row's submission
    once, so a return after delivery ends the row returned (exit 1), not 'done'."""
    bank = start_bank()
    rows = make_rows(9, 2, tag="RNE")
    batch, ledger = write_batch(tmp_path / "pay.csv", rows), tmp_path / "pay.sqlite"
    assert run(batch, ledger, "--wait") == 0
    assert statuses(ledger) == ["delivered"] * 2
    return_submission(bank, ledger_rows(ledger)[1]["submission_url"], "account-closed")
    refuse(bank, monkeypatch, 403, "forbidden",
           lambda method, path: method == "GET" and path.endswith("/events"))
    assert run(batch, ledger, "--wait") == 1
    assert statuses(ledger) == ["delivered", "returned"]


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_403_on_submit_after_creating_still_gives_the_summary_and_report(
    start_bank: StartBank,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    log_format: str,
) -> None:
    """The role may create payments but not submit them: exit 2 (an authentication or role
    refusal), and still the summary, the report and what was done and what to do; a rerun
    with a role that may submit pays each payment once."""
    bank = start_bank()
    restore = refuse(bank, monkeypatch, 403, "forbidden",
                     lambda method, path: method == "POST" and path.endswith("/submissions"))
    rows = make_rows(4, 3, tag="SBF")
    batch = write_batch(tmp_path / "pay.csv", rows)
    ledger, report = tmp_path / "pay.sqlite", tmp_path / "report.json"
    code = run(batch, ledger, "--report", str(report), "--log-format", log_format)
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert statuses(ledger) == ["created"] * 3
    assert [r["status"] for r in json.loads(report.read_text())] == ["created"] * 3
    done = "3 payments created and not submitted"
    if log_format == "json":
        summary = json.loads(out)
        assert set(summary) == SUMMARY_KEYS, summary
        assert (summary["event"], summary["exit_code"]) == ("summary", 2)
        assert summary["rows"]["created"]["count"] == 3
        assert done in summary["message"] and "approve" in summary["message"], summary
        assert summary["report"] == str(report)
        lines = [json.loads(line) for line in err.splitlines()]
        assert lines[-2]["event"] == "error" and done in lines[-2]["message"], lines[-2:]
        assert (lines[-1]["event"], lines[-1]["exit_code"]) == ("finished", 2), lines[-1]
    else:
        assert "rows by status:" in out and f"report: {report}" in out, out
        assert done in out and "HTTP 403" in out, out
        assert err.splitlines()[-1].startswith("payrun: error: the bank refused this API key's")
        assert done in err and "Traceback" not in err, err
    restore()
    assert run(batch, ledger) == 0
    assert statuses(ledger) == ["submitted"] * 3
    assert bank_problems(bank, rows) == []


def test_a_role_that_cannot_read_submissions_ends_with_the_summary(
    start_bank: StartBank,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """403 on the events and on reading each submission: exit 2 with the summary and the
    report, saying the payments were submitted and stand."""
    bank = start_bank(deliver_after_ms=600_000)
    refuse(bank, monkeypatch, 403, "forbidden",
           lambda method, path: method == "GET"
           and (path.endswith("/events") or path.startswith("/v0/submissions/")))
    batch = write_batch(tmp_path / "pay.csv", make_rows(5, 2, tag="SRF"))
    ledger, report = tmp_path / "pay.sqlite", tmp_path / "report.csv"
    assert run(batch, ledger, "--wait", "--report", str(report)) == 2
    out, err = capsys.readouterr()
    assert "rows by status:" in out and "2 payments submitted" in out, out
    assert "The payments stand" in out and "Traceback" not in err, err
    assert report.exists() and statuses(ledger) == ["submitted"] * 2


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_wait_that_runs_out_says_so(
    start_bank: StartBank,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    log_format: str,
) -> None:
    """--wait-timeout runs out: the run says after how long, how many payments are submitted
    and not final, and that running the same command again keeps following them (exit 3);
    the JSON summary keeps its keys. The rerun follows them to delivered."""
    bank = start_bank(deliver_after_ms=600_000)
    batch = write_batch(tmp_path / "pay.csv", make_rows(6, 3, tag="WTO"))
    ledger = tmp_path / "pay.sqlite"
    code = run(batch, ledger, "--wait", "--wait-timeout", "1", "--log-format", log_format)
    out, err = capsys.readouterr()
    assert code == 3, (out, err)
    said = "the wait ran out after 1 second (--wait-timeout) with 3 payments submitted and not"
    again = "run the same command again to keep following them"
    if log_format == "json":
        summary = json.loads(out)
        assert set(summary) == SUMMARY_KEYS, summary
        assert said in summary["message"] and again in summary["message"], summary
        lines = [json.loads(line) for line in err.splitlines()]
        notes = [r for r in lines if r["event"] == "note" and said in r["message"]]
        assert len(notes) == 1 and set(notes[0]) == {"time", "event", "message"}, lines
        assert (lines[-1]["event"], lines[-1]["exit_code"]) == ("finished", 3)
    else:
        last = out.strip().splitlines()[-1]
        assert last.startswith(f"incomplete: {said}") and again in last, out
        assert said in err, err
    httpx.post(f"{bank.base_url}/__sandbox/settle").raise_for_status()
    assert run(batch, ledger, "--wait") == 0
    assert statuses(ledger) == ["delivered"] * 3
