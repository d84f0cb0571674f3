"""Progress for people (a bar) and for schedulers (text or JSON lines)."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from _run_helpers import account_urls
from payrun._models import LedgerRow, RowStatus
from payrun.cli._progress import BarObserver, LineObserver, make_observer
from payrun.sandbox import serve_in_thread
from payrun.sandbox.seed import load_directory


def _row(status: RowStatus, *, error: str | None = None, row: int = 2) -> LedgerRow:
    return LedgerRow(
        row=row,
        row_id=None,
        payee_name="Ada",
        sort_code="200000",
        account_number="12345678",
        amount=Decimal("1.00"),
        reference="R",
        source_account="040004 30000001",
        status=status,
        error=error,
    )


def test_bar_counts_done_rows_and_failures() -> None:
    """The bar advances on rows reaching a resting state and counts failures."""
    bar = BarObserver(create_only=False)
    bar.started(total=3, done=0)
    bar.row_changed(_row(RowStatus.PENDING), _row(RowStatus.CREATING))
    bar.row_changed(_row(RowStatus.SUBMITTING), _row(RowStatus.SUBMITTED))
    bar.row_changed(_row(RowStatus.CREATING), _row(RowStatus.FAILED, error="no"))
    task = bar._progress.tasks[0]  # noqa: SLF001 - the bar's own state is what is drawn
    bar.close()
    assert task.completed == 2 and task.total == 3
    assert task.fields["bad"] == "1"


def test_bar_counts_a_return_after_delivery_as_not_paid() -> None:
    """A delivered row returned later stays done and joins the rows not paid."""
    bar = BarObserver(create_only=False)
    bar.started(total=1, done=0)
    bar.row_changed(_row(RowStatus.SUBMITTING), _row(RowStatus.SUBMITTED))
    bar.row_changed(_row(RowStatus.SUBMITTED), _row(RowStatus.DELIVERED))
    bar.row_changed(_row(RowStatus.DELIVERED), _row(RowStatus.RETURNED, error="returned"))
    task = bar._progress.tasks[0]  # noqa: SLF001 - the bar's own state is what is drawn
    bar.close()
    assert task.completed == 1 and task.fields["bad"] == "1"


def test_a_resumed_run_rate_counts_only_this_runs_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """900 rows done by earlier runs: 10 rows in 2 s show 5 rows/s, not 455."""
    now = [100.0]
    monkeypatch.setattr("payrun.cli._progress.time.monotonic", lambda: now[0])
    bar = BarObserver(create_only=False)
    bar.started(total=1000, done=900)
    now[0] = 102.0
    for _ in range(10):
        bar.row_changed(_row(RowStatus.SUBMITTING), _row(RowStatus.SUBMITTED))
    task = bar._progress.tasks[0]  # noqa: SLF001 - the bar's own state is what is drawn
    bar.close()
    assert task.completed == 910 and task.fields["rate"] == "5"


def _bar_on_screen() -> tuple[BarObserver, io.StringIO]:
    """A bar drawing on a 100-column terminal held in memory."""
    from rich.console import Console  # noqa: PLC0415

    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=100, color_system=None)
    return BarObserver(create_only=False, console=console), screen


def test_not_paid_counts_rows_invalid_or_failed_before_paying() -> None:
    """Rows invalid or failed before paying began count as not paid from the start."""
    bar, _ = _bar_on_screen()
    bar.started(total=10, done=3, not_paid=3)
    task = bar._progress.tasks[0]  # noqa: SLF001 - the bar's own state is what is drawn
    bar.close()
    assert task.fields["bad"] == "3" and task.fields["label"] == "paying"


def test_a_run_that_paid_nothing_never_ends_green_under_paying() -> None:
    """Every row failed (an account short of funds): the bar says 'nothing paid' in red."""
    bar, screen = _bar_on_screen()
    for number in (2, 3, 4):
        short = _row(RowStatus.FAILED, error="balance short", row=number)
        bar.row_changed(_row(RowStatus.PENDING, row=number), short)
    bar.started(total=3, done=3, not_paid=3)
    task = bar._progress.tasks[0]  # noqa: SLF001 - the bar's own state is what is drawn
    bar.close()
    assert (task.fields["label"], task.fields["style"]) == ("nothing paid", "red")
    # The cause of the three rows is said once, before the bar
    assert screen.getvalue().count("balance short") == 1
    assert "3 rows failed: balance short (rows 2-4)" in screen.getvalue()


def test_the_bar_never_draws_a_frame_before_it_knows_the_total() -> None:
    """A row settled before paying began draws no '1/0' frame: nothing shows until started."""
    bar, screen = _bar_on_screen()
    bar.row_changed(_row(RowStatus.SUBMITTING), _row(RowStatus.SUBMITTED))
    bar.note("checking")
    bar.close()
    assert "/0" not in screen.getvalue() and "paying" not in screen.getvalue()


def test_a_resumed_run_says_so_and_labels_its_times() -> None:
    """A resume says how many rows were done before; the bar labels elapsed and left."""
    bar, screen = _bar_on_screen()
    bar.started(total=1500, done=815, not_paid=3)
    bar.row_changed(_row(RowStatus.CREATING), _row(RowStatus.HELD, error="close match"))
    bar.close()
    shown = screen.getvalue()
    assert "resuming: 812 of 1,500 already done" in shown
    assert "row 2 (Ada): held: close match" in shown
    assert "elapsed" in shown and "left" in shown and "816/1,500" in shown


def test_lines_name_failed_rows_and_progress() -> None:
    """Plain lines name each failed or held row and report progress."""
    stream = io.StringIO()
    lines = LineObserver(stream, json_lines=False, create_only=False)
    lines.note("checking")
    lines.started(total=1, done=0)
    lines.row_changed(_row(RowStatus.PENDING), _row(RowStatus.HELD, error="close match"))
    text = stream.getvalue()
    assert "checking" in text and "row 2: held: close match" in text and "1 of 1 rows done" in text


def test_json_lines_are_objects() -> None:
    """JSON lines carry an event name and the row's fields."""
    stream = io.StringIO()
    lines = LineObserver(stream, json_lines=True, create_only=True)
    lines.started(total=1, done=0)
    lines.row_changed(_row(RowStatus.CREATING), _row(RowStatus.CREATED))
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [e["event"] for e in events] == ["started", "progress"]
    assert events[-1]["done"] == 1


def test_a_terminal_gets_the_bar_with_rate_eta_and_failures(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a terminal the text format draws the bar: rows done of total, rate, time left
    (ETA) and rows not paid."""
    from rich.progress import TimeRemainingColumn  # noqa: PLC0415

    terminal = io.StringIO()
    monkeypatch.setattr(terminal, "isatty", lambda: True)
    monkeypatch.setattr("sys.stderr", terminal)
    observer = make_observer(log_format="text", create_only=False)
    assert isinstance(observer, BarObserver)
    columns = observer._progress.columns  # noqa: SLF001 - what the bar shows
    kinds = {type(c) for c in columns}
    assert TimeRemainingColumn in kinds, columns
    texts = " ".join(str(getattr(c, "text_format", "")) for c in columns)
    assert "rows/s" in texts and "not paid" in texts, texts
    assert "{task.completed" in texts and "{task.total" in texts, texts
    assert make_observer(log_format="json", create_only=False).__class__ is LineObserver


def test_no_terminal_means_log_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    """Off a terminal the text format writes log lines rather than a bar."""
    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert isinstance(make_observer(log_format="text", create_only=False), LineObserver)


def test_rows_in_doubt_are_said_with_their_time_and_shown_on_the_bar() -> None:
    """The log says how many rows are in doubt and until when (this machine's time), then
    that none is left; JSON lines carry the count and time; the bar shows them until then."""
    from datetime import UTC, datetime

    until = datetime(2026, 11, 21, 9, 14, 5, tzinfo=UTC)
    local = f"{until.astimezone():%H:%M:%S}"
    stream = io.StringIO()
    lines = LineObserver(stream, json_lines=False, create_only=False)
    lines.in_doubt(count=12, until=until)
    lines.in_doubt(count=0, until=None)
    first, second = stream.getvalue().splitlines()
    assert f"12 rows in doubt until {local}: payrun checks them with the bank then" in first
    assert "no row in doubt left" in second
    stream = io.StringIO()
    LineObserver(stream, json_lines=True, create_only=False).in_doubt(count=1, until=until)
    record = json.loads(stream.getvalue())
    assert record["event"] == "in_doubt" and record["count"] == 1
    assert record["until"] == until.isoformat()
    assert record["message"].startswith(f"1 row in doubt until {local}")
    bar = BarObserver(create_only=False)
    bar.started(total=10, done=2)
    bar.in_doubt(count=3, until=until)
    task = bar._progress.tasks[0]  # noqa: SLF001 - the bar's own state is what is drawn
    assert task.fields["doubt"] == f"in doubt 3 until {local}"
    bar.in_doubt(count=0, until=None)
    bar.close()
    assert task.fields["doubt"] == ""


def _two_accounts_file(path: Path) -> Path:
    """10 rows from the operational account to its 5 existing payees (paid as soon as its
    own checks pass), 10 from the client money account to new payees, one of them a close
    match (held)."""
    directory = {e["account-holder"]: e for e in load_directory()}
    with path.open("w", newline="", encoding="utf-8") as handle:
        out = csv.writer(handle)
        out.writerow(
            ["payee_name", "sort_code", "account_number", "amount", "reference"]
            + ["source_account"]
        )
        names = list(directory)
        for n, name in enumerate(names[:5] * 2):
            entry = directory[name]
            out.writerow(
                [
                    name,
                    entry["sort-code"],
                    entry["account-number"],
                    f"{10 + n}.00",
                    "PAY",
                    "040004 30000001",
                ]
            )
        for n, name in enumerate(names[5:15]):
            entry = directory[name]
            shown = name[:-1] + "x" if n == 0 else name
            out.writerow(
                [
                    shown,
                    entry["sort-code"],
                    entry["account-number"],
                    f"{30 + n}.00",
                    "PAY",
                    "040004 30000002",
                ]
            )
    return path


def test_the_last_frame_shows_the_end_of_a_run_whose_first_account_paid_early(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two accounts, one row held: the first account pays while the second is still checked
    (its reads answer 1 s late), before the bar shows; the bar's last frame still shows
    every row done, 20/20, and nothing left to pay."""
    import anyio  # noqa: PLC0415

    from payrun.config import RunOptions, Secret, Settings, ValidationOptions  # noqa: PLC0415
    from payrun.run import run_batch  # noqa: PLC0415

    with serve_in_thread(deliver_after_ms=20) as bank:
        slow = account_urls(bank)["040004 30000002"].rsplit("/", 1)[-1]
        serve_api = bank.app._serve_api  # noqa: SLF001 - the server's own request handler

        async def late(scope: Any, receive: Any, send: Any) -> None:
            if scope["method"] == "GET" and slow in scope["path"] + scope["query_string"].decode():
                await asyncio.sleep(1.0)
            await serve_api(scope, receive, send)

        monkeypatch.setattr(bank.app, "_serve_api", late)
        bar, screen = _bar_on_screen()
        batch = _two_accounts_file(tmp_path / "pay.csv")
        outcome = anyio.run(
            lambda: run_batch(
                batch,
                Settings(base_url=bank.base_url, api_key=Secret(bank.api_key)),
                validation=ValidationOptions(),
                options=RunOptions(ledger_path=tmp_path / "pay.sqlite", settle_wait=1),
                observer=bar,
            )
        )
        bar.close()
    assert outcome.exit_code == 1
    assert sum(r.status is RowStatus.HELD for r in outcome.rows) == 1
    frames = re.findall(r"(paying|paid|nothing paid) .*?([0-9,]+)/([0-9,]+)", screen.getvalue())
    assert frames, screen.getvalue()
    label, done, total = frames[-1]
    assert (label, done, total) == ("paid", "20", "20"), screen.getvalue()[-2000:]


def test_a_pipe_gets_an_account_short_of_funds_once_with_its_rows(tmp_path: Path) -> None:
    """Not on a terminal, the 15 rows each of two accounts cannot cover are one log line
    per account naming the reason and the rows, not 30 lines with the same reasons."""
    from _run_helpers import make_rows, run, write_batch  # noqa: PLC0415
    from payrun.sandbox import default_seed  # noqa: PLC0415

    seed = default_seed()
    for account in seed["accounts"]:
        account["balance"] = "10.00"
    with serve_in_thread(seed=seed) as bank:
        batch = write_batch(tmp_path / "pay.csv", make_rows(5, 30, tag="F"))
        done = run(bank, batch, tmp_path / "pay.sqlite")
    assert done.returncode == 1, done.describe()
    reasons = [line for line in done.stderr.splitlines() if "short of" in line]
    assert len(reasons) == 2, done.stderr
    assert all("15 rows failed: the available balance" in line for line in reasons), reasons
    assert "(rows 2, 4, 6," in reasons[0] and "(rows 3, 5, 7," in reasons[1], reasons


def test_json_lines_group_the_rows_the_checks_stopped() -> None:
    """JSON lines: rows stopped before paying with one reason are one "rows" event listing
    them, said before paying starts; a row not paid while paying is its own "row" event."""
    stream = io.StringIO()
    lines = LineObserver(stream, json_lines=True, create_only=False)
    for number in (2, 3):
        lines.row_changed(
            _row(RowStatus.PENDING, row=number),
            _row(RowStatus.FAILED, error="account frozen", row=number),
        )
    lines.started(total=3, done=2, not_paid=2)
    lines.row_changed(_row(RowStatus.CREATING, row=4), _row(RowStatus.FAILED, error="no", row=4))
    lines.close()
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [e["event"] for e in events] == ["rows", "started", "row", "progress"], events
    assert events[0]["rows"] == [2, 3] and events[0]["error"] == "account frozen"


def test_a_reason_repeated_while_paying_is_logged_once_then_its_rows_at_the_end() -> None:
    """While paying, the first row of a reason is logged as it happens; the others with the
    same reason are one line at the end naming their rows, not one line each."""
    stream = io.StringIO()
    lines = LineObserver(stream, json_lines=False, create_only=False)
    lines.started(total=31, done=0)
    for number in range(2, 32):
        lines.row_changed(
            _row(RowStatus.CREATING, row=number),
            _row(RowStatus.FAILED, error="insufficient funds", row=number),
        )
    lines.close()
    text = stream.getvalue()
    assert text.count("insufficient funds") == 2, text
    assert "row 2: failed: insufficient funds" in text, text
    assert "29 rows failed: insufficient funds (rows 3-31)" in text, text
