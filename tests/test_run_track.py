"""`--wait` (tracking) over real loopback HTTP against the sandbox bank: returns after
delivery, a role that cannot read events or submissions, a wait that runs out; its pace
(reading submissions one by one is a paced fallback), Ctrl-C starting no new read, a bank
that stops answering ending the wait with one clear line, an unreachable bank not waited for."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from _run_helpers import (
    bank_problems,
    count_status,
    error_answer,
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
from payrun.run import _track as tracking
from payrun.sandbox import RunningSandbox, serve_in_thread

StartBank = Callable[..., RunningSandbox]
NEVER_DELIVERED = 600_000  # ms: the sandbox delivers nothing by itself within a test
SUMMARY_KEYS = {
    "event",
    "exit_code",
    "message",
    "interrupted",
    "rows",
    "accounts",
    "problems",
    "problems_not_listed",
    "attention",
    "ledger",
    "report",
}


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
        wait_until(
            lambda: count_status(ledger, "submitted") == 3 or process.poll() is not None,
            60,
            "3 rows submitted",
        )
        for row in ledger_rows(ledger):
            return_submission(bank, row["submission_url"])  # events: delivered, then returned
        done = finish(process, started)
        assert bank_problems(bank, rows) == []
    assert done.returncode == 1, done.describe()
    assert statuses(ledger) == ["returned"] * 3, done.describe()
    assert all("returned: account-closed" in r["error"] for r in ledger_rows(ledger))
    # One cause, said once for its three rows
    assert done.stdout.count("returned: the bank reports the payment returned") == 1
    assert "3 rows, returned: " in done.stdout, done.stdout
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
    refuse(
        bank,
        monkeypatch,
        403,
        "forbidden",
        lambda method, path: method == "GET" and path.endswith("/events"),
    )
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
    refuse(
        bank,
        monkeypatch,
        403,
        "forbidden",
        lambda method, path: method == "GET" and path.endswith("/events"),
    )
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
    refuse(
        bank,
        monkeypatch,
        403,
        "forbidden",
        lambda method, path: method == "GET" and path.endswith("/events"),
    )
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
    restore = refuse(
        bank,
        monkeypatch,
        403,
        "forbidden",
        lambda method, path: method == "POST" and path.endswith("/submissions"),
    )
    rows = make_rows(4, 3, tag="SBF")
    batch = write_batch(tmp_path / "pay.csv", rows)
    ledger, report = tmp_path / "pay.sqlite", tmp_path / "report.json"
    code = run(batch, ledger, "--report", str(report), "--log-format", log_format)
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    # The first refused submit stops the run: a create still waiting then is never sent
    found = statuses(ledger)
    created = found.count("created")
    assert created >= 1 and set(found) <= {"created", "pending"}, found
    assert [r["status"] for r in json.loads(report.read_text())] == found
    done = f"{created} payment{'s' if created > 1 else ''} created and not submitted"
    if log_format == "json":
        summary = json.loads(out)
        assert set(summary) == SUMMARY_KEYS, summary
        assert (summary["event"], summary["exit_code"]) == ("summary", 2)
        assert summary["rows"]["created"]["count"] == created
        assert done in summary["message"] and "approve" in summary["message"], summary
        assert summary["report"] == str(report)
        lines = [json.loads(line) for line in err.splitlines()]
        assert lines[-2]["event"] == "error" and done in lines[-2]["message"], lines[-2:]
        assert (lines[-1]["event"], lines[-1]["exit_code"]) == ("finished", 2), lines[-1]
    else:
        assert "rows by status" in out and f"report: {report}" in out, out
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
    refuse(
        bank,
        monkeypatch,
        403,
        "forbidden",
        lambda method, path: (
            method == "GET" and (path.endswith("/events") or path.startswith("/v0/submissions/"))
        ),
    )
    batch = write_batch(tmp_path / "pay.csv", make_rows(5, 2, tag="SRF"))
    ledger, report = tmp_path / "pay.sqlite", tmp_path / "report.csv"
    assert run(batch, ledger, "--wait", "--report", str(report)) == 2
    out, err = capsys.readouterr()
    assert "rows by status" in out and "2 payments submitted" in out, out
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


# ---- the wait's pace and its ends ----------------------------------------------------------


def submission_reads(
    bank: RunningSandbox,
    monkeypatch: pytest.MonkeyPatch,
    *,
    delay: float = 0.0,
    on_read: Callable[[int], None] | None = None,
) -> list[str]:
    """Record (and slow by ``delay``) every GET of a single submission the bank serves;
    ``on_read(n)`` is called at the n-th. Returns the list the paths are appended to."""
    serve = bank.app._serve_api  # noqa: SLF001 - the server's own request handler
    paths: list[str] = []

    async def spying(scope: Any, receive: Any, send: Any) -> None:
        if scope["method"] == "GET" and scope["path"].startswith("/v0/submissions/"):
            paths.append(scope["path"])
            if on_read is not None:
                on_read(len(paths))
            await anyio.sleep(delay)
        await serve(scope, receive, send)

    monkeypatch.setattr(bank.app, "_serve_api", spying)
    return paths


def _refuse_events(bank: RunningSandbox, monkeypatch: pytest.MonkeyPatch, status: int) -> None:
    refuse(
        bank,
        monkeypatch,
        status,
        "refused",
        lambda method, path: method == "GET" and path.endswith("/events"),
    )


def _quick_silence(monkeypatch: pytest.MonkeyPatch, attempts: int) -> None:
    """A second of no answer ends a wait (60 s for users), and each request gives up after
    ``attempts`` tries at once (not a minute of retries)."""
    from payrun.bank import BankClient, RetryPolicy  # noqa: PLC0415

    monkeypatch.setattr(tracking, "_NO_ANSWER_SECONDS", 1.0)
    defaults = BankClient.__init__.__kwdefaults__
    assert defaults is not None
    monkeypatch.setitem(defaults, "retry", RetryPolicy.no_wait(attempts))


@pytest.mark.parametrize("events", ["work", "404"])
def test_submissions_are_read_one_by_one_only_as_a_paced_fallback(
    start_bank: StartBank,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    events: str,
) -> None:
    """30 payments the bank never delivers, a 6 s wait. While the events can be read, no
    submission is read on its own (it was every one, every 5 s); when they cannot, each is
    read after 1 s, 3 s (doubling gaps), not once a second. The wait says how many and how
    long at the start, how it goes every few seconds (30 by default), and ends exit 3
    saying it ran out."""
    monkeypatch.setattr(tracking, "_PROGRESS_SECONDS", 2.0)
    bank = start_bank(deliver_after_ms=NEVER_DELIVERED)
    if events == "404":
        _refuse_events(bank, monkeypatch, 404)
    reads = submission_reads(bank, monkeypatch)
    batch, ledger = write_batch(tmp_path / "pay.csv", make_rows(1, 30, tag="PACE")), tmp_path / "l"
    assert run(batch, ledger, "--wait", "--wait-timeout", "6") == 3
    per_row = {path: reads.count(path) for path in set(reads)}
    if events == "work":
        assert reads == [], f"{len(reads)} submission reads while the events work"
    else:
        assert len(per_row) == 30 and set(per_row.values()) <= {2, 3}, sorted(per_row.values())
    err = capsys.readouterr().err
    assert "waiting up to 6 seconds (--wait-timeout) for the bank to deliver the 30" in err, err
    assert "the wait ran out after 6 seconds" in err, err
    progress = "still waiting for the bank: 0 delivered, 0 failed or returned, 30 payments not"
    assert err.count(progress) in (2, 3) and "seconds left)" in err, err


def test_a_busy_organization_gets_no_extra_reads(
    start_bank: StartBank, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The events answered 429 (retries spent at once): the wait reads no submission on its
    own (it switched to reading each one, more load on an organization that said it is
    busy), and it does not end as if the bank were silent."""
    _quick_silence(monkeypatch, 1)
    bank = start_bank(deliver_after_ms=NEVER_DELIVERED)
    _refuse_events(bank, monkeypatch, 429)
    reads = submission_reads(bank, monkeypatch)
    batch, ledger = write_batch(tmp_path / "pay.csv", make_rows(6, 5, tag="BUSY")), tmp_path / "l"
    assert run(batch, ledger, "--wait", "--wait-timeout", "4") == 3
    assert reads == [], f"{len(reads)} submission reads while the organization is busy"


def test_events_read_but_not_submissions_follow_the_events(
    start_bank: StartBank, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """403 on reading a submission after 1 s (events work, nothing delivered yet): the wait
    follows the events alone to delivered, exit 0 (it ended exit 2 at its first read)."""
    monkeypatch.setattr(tracking, "_FIRST_READ_SECONDS", 1.0)
    bank = start_bank(deliver_after_ms=3_500)
    refuse(
        bank,
        monkeypatch,
        403,
        "forbidden",
        lambda method, path: method == "GET" and path.startswith("/v0/submissions/"),
    )
    batch, ledger = write_batch(tmp_path / "pay.csv", make_rows(7, 2, tag="PLF")), tmp_path / "l"
    assert run(batch, ledger, "--wait") == 0
    assert [r["status"] for r in ledger_rows(ledger)] == ["delivered"] * 2


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_bank_that_stops_answering_ends_the_wait_with_one_clear_line(
    start_bank: StartBank,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    log_format: str,
) -> None:
    """Every read during the wait answered 503 (retries spent at once): after the bank has
    given no answer for the limit (1 s here, 60 by default), the wait ends long before
    --wait-timeout, exit 3, and the summary's last line says why and what to do."""
    _quick_silence(monkeypatch, 2)
    bank = start_bank(deliver_after_ms=NEVER_DELIVERED)
    refuse(
        bank,
        monkeypatch,
        503,
        "unavailable",
        lambda method, path: (
            method == "GET" and (path.endswith("/events") or path.startswith("/v0/submissions/"))
        ),
    )
    batch, ledger = write_batch(tmp_path / "pay.csv", make_rows(2, 4, tag="GONE")), tmp_path / "l"
    started = time.monotonic()
    code = run(batch, ledger, "--wait", "--wait-timeout", "120", "--log-format", log_format)
    out, err = capsys.readouterr()
    assert code == 3, (out, err)
    assert time.monotonic() - started < 30, "the wait did not end when the bank went quiet"
    said = "the bank gave no answer for"
    again = "4 payments submitted and not yet final"
    closing = json.loads(out)["message"] if log_format == "json" else out.splitlines()[-1]
    assert closing.startswith(f"incomplete: {said}") and again in closing, closing
    assert "HTTP 503" in closing and "run the same command again later" in closing, closing
    assert said in err and "Traceback" not in err, err


def test_a_long_events_read_failing_at_its_last_page_is_not_silence(
    start_bank: StartBank,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each read of the events takes 4 slow pages (2 events a page) and its last one fails
    (503): the bank answered the first three, so the wait goes on to its own end ('ran
    out'), not 'the bank gave no answer' (the silence was counted from the read's start)."""
    from payrun.bank import client  # noqa: PLC0415

    _quick_silence(monkeypatch, 1)
    monkeypatch.setattr(client, "PAGE_SIZE", 2)
    bank = start_bank(deliver_after_ms=NEVER_DELIVERED)
    batch, ledger = write_batch(tmp_path / "pay.csv", make_rows(5, 6, tag="LONG")), tmp_path / "l"
    assert run(batch, ledger) == 0
    for row in ledger_rows(ledger)[:4]:  # 8 submission-updated events: delivered, returned
        return_submission(bank, row["submission_url"])
    serve = bank.app._serve_api  # noqa: SLF001
    pages = [0]

    async def slow_events(scope: Any, receive: Any, send: Any) -> None:
        if scope["method"] == "GET" and scope["path"].endswith("/events"):
            later = (
                b"page%5Bafter%5D" in scope["query_string"]
                or b"page[after]" in scope["query_string"]
            )
            pages[0] = pages[0] + 1 if later else 0
            await anyio.sleep(0.5)
            if pages[0] >= 3:
                await refusing(scope, receive, send)
                return
        await serve(scope, receive, send)

    refusing = error_answer(503, "unavailable")
    monkeypatch.setattr(bank.app, "_serve_api", slow_events)
    assert run(batch, ledger, "--wait", "--wait-timeout", "5") == 3
    out = capsys.readouterr().out
    assert out.splitlines()[-1].startswith("incomplete: the wait ran out after 5 seconds"), out


def test_ctrl_c_while_reading_submissions_starts_no_new_read(
    start_bank: StartBank, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Events refused, 150 submissions read one by one, each read slow: SIGINT during that
    sweep starts no new read (at most the 20 in flight arrive after it: it was every one),
    and the run ends exit 3 with its summary, the rows still submitted."""
    bank = start_bank(deliver_after_ms=NEVER_DELIVERED)
    _refuse_events(bank, monkeypatch, 403)
    process: list[Any] = []
    signalled_at: list[int] = []

    def interrupt(count: int) -> None:
        if count == 30:
            signalled_at.append(count)
            os.kill(process[0].pid, signal.SIGINT)

    reads = submission_reads(bank, monkeypatch, delay=0.1, on_read=interrupt)
    rows = make_rows(3, 150, tag="CTRL")
    batch, ledger = write_batch(tmp_path / "pay.csv", rows), tmp_path / "pay.sqlite"
    started = time.monotonic()
    process.append(start_run(bank, batch, ledger, "--wait", "--wait-timeout", "120"))
    done = finish(process[0], started)
    assert signalled_at, done.describe()
    assert done.returncode == 3, done.describe()
    assert len(reads) - signalled_at[0] <= 20, f"{len(reads)} reads, SIGINT at the 30th"
    assert "rows by status" in done.stdout and "interrupted" in done.stdout, done.describe()
    assert "Traceback" not in done.stderr, done.describe()
    assert count_status(ledger, "submitted") == len(rows)


def test_a_bank_found_unreachable_while_paying_is_not_waited_for(tmp_path: Path) -> None:
    """The bank goes away mid-run: the run ends (exit 3, run the same command again) without
    starting the --wait, instead of waiting for a bank it cannot reach."""
    rows = make_rows(4, 300, tag="UNR")
    batch, ledger = write_batch(tmp_path / "pay.csv", rows), tmp_path / "pay.sqlite"
    with ExitStack() as stack:
        bank = stack.enter_context(serve_in_thread(latency_ms=20))
        started = time.monotonic()
        process = start_run(bank, batch, ledger, "--wait", "--wait-timeout", "300")
        wait_until(
            lambda: count_status(ledger, "submitted") >= 5 or process.poll() is not None,
            60,
            "5 rows submitted",
        )
    done = finish(process, started)
    assert done.returncode == 3, done.describe()
    assert "for the bank to deliver" not in done.stderr, done.describe()
    assert "Traceback" not in done.stderr, done.describe()
