"""Giving a slow bank time to finish before asking it what it did.

Input: a pass's ``ExecutionResult`` (``settle_at``: a request's answer timed out, or a
gateway answered 504, so the bank may still be working on it) and the ledger. Output: the
time until which that may be so, kept in the ledger's batch (``late_until``), and a wait
until then before rows left mid-create or mid-submit are checked with the bank, by this
run or the next one (a rerun right after Ctrl-C or SIGTERM would otherwise look too soon,
find no payment, and make a second one).

A run that was killed (kill -9, a crash, a power cut) kept nothing: its rows left mid-call
after the last normal end of a run (``ended_at``) may have been on the wire when it died,
and the bank may still be making them. The next run gives those the time a live run would
have given them (``SETTLE_AFTER_CRASH_SECONDS`` from their intent) before it looks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from pathlib import Path

import anyio

from payrun.domain import RowStatus
from payrun.execution import ExecutionResult
from payrun.ledger import BatchInfo, Ledger, LedgerRow, utc_now
from payrun.records import RowBook
from payrun.stopping import StopSignal

__all__ = [
    "SETTLE_AFTER_CRASH_SECONDS",
    "bank_may_still_finish",
    "remember_late_answers",
    "wait_for_late_answers",
]

SETTLE_AFTER_CRASH_SECONDS = 60.0
"""How long after its intent a request of a killed run may still be finished by the bank:
what a live run allows (the 30 s it waits for an answer, then ``LATE_ANSWER_SECONDS``)."""
_MID_CALL = (RowStatus.CREATING, RowStatus.SUBMITTING)


def remember_late_answers(ledger: Ledger, result: ExecutionResult) -> None:
    """Keep in the ledger until when the bank may still finish a pass's late requests."""
    left = result.settle_at - anyio.current_time()
    batch = ledger.batch()
    until = utc_now() + timedelta(seconds=left)
    if left > 0 and batch is not None and (batch.late_until is None or batch.late_until < until):
        ledger.set_batch(late_until=until)


async def wait_for_late_answers(
    ledger: Ledger,
    book: RowBook,
    stop: StopSignal,
    note: Callable[[str], None],
    *,
    at_start: bool = False,
) -> bool:
    """Wait, if rows are left mid-call, until the bank has had time to finish late requests
    (``at_start``: also those of an earlier run that was killed).

    True when the rows may be checked now; False when a stop came first (leave them).
    """
    batch = ledger.batch()
    mid_call = book.in_status(*_MID_CALL)
    if batch is None or not mid_call:
        return True
    now = utc_now()
    late = batch.late_until if batch.late_until is not None and batch.late_until > now else None
    killed = _killed_run_settles(batch, mid_call, now) if at_start else None
    until = max((t for t in (late, killed) if t is not None), default=None)
    if until is None:
        return True
    if until == killed:
        note(
            "an earlier run of this ledger was cut off (killed or crashed) while sending"
            " payments, and the bank may still be making them: payrun checks what it did at"
            f" {until:%H:%M:%S} UTC, then goes on (nothing is paid twice)"
        )
    else:
        note(
            "the bank did not answer some payments in time and may still be making them:"
            f" payrun checks what it did at {until:%H:%M:%S} UTC, then goes on (nothing is"
            " paid twice)"
        )
    return await stop.wait_until(anyio.current_time() + (until - now).total_seconds())


def _killed_run_settles(
    batch: BatchInfo, mid_call: Iterable[LedgerRow], now: datetime
) -> datetime | None:
    """When the bank is done with what a killed run may have sent, if that is still ahead.

    Rows whose intent is later than the last normal end of a run were left by a run that
    ended without recording its outcomes. An intent in the future (the clock was set back)
    counts as now, so the wait is never longer than ``SETTLE_AFTER_CRASH_SECONDS``.
    """
    ended = batch.ended_at
    intents = [
        r.intent_at
        for r in mid_call
        if r.intent_at is not None and (ended is None or r.intent_at > ended)
    ]
    if not intents:
        return None
    until = min(max(intents), now) + timedelta(seconds=SETTLE_AFTER_CRASH_SECONDS)
    return until if until > now else None


def bank_may_still_finish(ledger_path: Path) -> bool:
    """True while the bank may still finish a late request of this ledger, or one a killed
    run sent (read only): a dry run then leaves the rows mid-call as they are, as a run
    would first wait."""
    if not ledger_path.exists():
        return False
    with Ledger.open(ledger_path, readonly=True) as ledger:
        batch = ledger.batch()
        mid_call = ledger.rows(_MID_CALL)
    if batch is None or not mid_call:
        return False
    now = utc_now()
    late = batch.late_until is not None and batch.late_until > now
    return late or _killed_run_settles(batch, mid_call, now) is not None
