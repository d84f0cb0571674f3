"""The bank's clock, not ours, for every time filter (issue 17, D8).

A bank whose clock is minutes behind payrun's stamps what a killed run made earlier than
the run's intents say. A rerun that filtered in its own time missed those payments: with
``--duplicate-window 0`` it made them again; with the default window it held the rows as
possible repeats made outside the ledger. ``BankClock`` measures the bank's clock from the
``Date`` header of its answers; these tests run the real CLI against a sandbox whose clock
is set 3 minutes behind.
"""

from __future__ import annotations

import signal
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime, parsedate_to_datetime
from pathlib import Path

import httpx
import pytest

from _run_helpers import (
    assert_exactly_once,
    count_status,
    finish,
    kill_group,
    ledger_rows,
    make_rows,
    run,
    start_run,
    stats,
    wait_until,
    write_batch,
)
from payrun.bank import BankClock
from payrun.bank.clock import parse_http_date
from payrun.sandbox import serve_in_thread

BEHIND_S = -180.0
"""The sandbox bank's clock: 3 minutes behind payrun's."""


def test_the_clock_reads_the_date_header() -> None:
    """A Date header 3 minutes behind gives an offset of about -3 minutes."""
    clock = BankClock()
    assert clock.offset == timedelta(0)
    clock.observe_date(format_datetime(datetime.now(UTC) - timedelta(minutes=3), usegmt=True))
    assert abs(clock.offset - timedelta(minutes=-3)) < timedelta(seconds=2)
    clock.observe_date("not a date")
    assert abs(clock.offset - timedelta(minutes=-3)) < timedelta(seconds=2)
    assert parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT") == datetime(
        1994, 11, 6, 8, 49, 37, tzinfo=UTC
    )
    assert parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT") is None


def test_a_created_payment_measures_the_clock_only_without_a_date_header() -> None:
    """created-at of a payment just made sets the offset until a Date header is read."""
    clock = BankClock()
    sent = datetime.now(UTC)
    clock.observe_created(sent - timedelta(minutes=2), sent=sent, received=sent)
    assert clock.offset == timedelta(minutes=-2)
    clock.observe_date(format_datetime(datetime.now(UTC), usegmt=True))
    clock.observe_created(sent - timedelta(minutes=2), sent=sent, received=sent)
    assert abs(clock.offset) < timedelta(seconds=2)


def test_the_sandbox_clock_offset_moves_timestamps_and_the_date_header() -> None:
    """clock_offset_s: the bank's Date header and the created-at of what it makes move too."""
    with serve_in_thread(clock_offset_s=BEHIND_S) as bank:
        answer = httpx.get(f"{bank.base_url}/v0/ping", timeout=30)
        date = parsedate_to_datetime(answer.headers["date"])
        behind = datetime.now(UTC) - date
        assert timedelta(seconds=178) < behind < timedelta(seconds=182)
        assert bank.state.now() < datetime.now(UTC) - timedelta(seconds=179)


@pytest.mark.slow
@pytest.mark.parametrize("window", [["--duplicate-window", "0"], []], ids=["window-0", "default"])
def test_kill_9_with_the_bank_clock_3_minutes_behind_pays_each_row_once(
    tmp_path: Path, window: list[str]
) -> None:
    """kill -9 while creates are in flight, the bank's clock 3 minutes behind: the rerun
    finds what the bank made as the ledger's own (no second payment, nothing held)."""
    # Enough rows that creates stay on the wire for seconds: a loaded machine still sees them
    rows = make_rows(3, 400, tag="K")
    batch = write_batch(tmp_path / "b.csv", rows)
    ledger = tmp_path / "b.ledger.sqlite"
    bank_options = {"latency_ms": 150, "jitter_ms": 50, "deliver_after_ms": 50}
    with serve_in_thread(**bank_options, rng_seed=3, clock_offset_s=BEHIND_S) as bank:
        started = time.monotonic()
        process = start_run(bank, batch, ledger, *window)
        try:  # creates on the wire: the bank makes their payments after the kill
            wait_until(
                lambda: count_status(ledger, "submitted") >= 3 and stats(bank)["in_flight"] >= 12,
                60,
                "3 submitted rows and 12 requests in flight",
            )
        finally:
            kill_group(process, signal.SIGKILL)
        killed = finish(process, started)
        assert killed.returncode == -signal.SIGKILL, killed.describe()
        left = count_status(ledger, "creating")
        assert left > 0, "the kill came with no create in flight"
        again = run(bank, batch, ledger, *window)
        held = [r for r in ledger_rows(ledger) if r["status"] == "held"]
        assert not held, held[:3]
        assert again.returncode == 0, again.describe()
        assert_exactly_once(bank, rows, ledger, f"{left} rows left creating\n{again.describe()}")
