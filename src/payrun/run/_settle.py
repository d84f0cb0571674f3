"""Giving a slow bank time to finish before asking it what it did.

Input: a pass's ``ExecutionResult`` (``settle_at``: a request's answer timed out, or a
gateway answered 504, so the bank may still be working on it) and the ledger. Output: the
time until which that may be so, kept in the ledger's batch (``late_until``), and a wait
until then before rows left mid-create or mid-submit are checked with the bank, by this
run or the next one (a rerun right after Ctrl-C or SIGTERM would otherwise look too soon,
find no payment, and make a second one).

A run that was killed (kill -9, or a crash of the process: the ledger's commits survive
those, not a power cut) recorded no answers to the requests it had on the wire, and the
bank may still be making them. Its last sign of life is the latest of the batch's
``alive_at`` (committed every ``ALIVE_SECONDS`` while paying, and before any call once that
much time has passed) and its rows' intents, when later than the last normal end of a run
(``ended_at``). The next run gives the bank ``SETTLE_AFTER_CRASH_SECONDS`` from then (plus
``ALIVE_SECONDS``, as the run may have sent until its next sign was due) before it checks,
and keeps that time as ``late_until`` first: a rerun stopped during the wait does not end
the wait for the next.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta

import anyio

from payrun._models import BatchInfo, LedgerRow, RowStatus, utc_now
from payrun.ledger import LedgerLocation, LedgerStore, ledger_exists, open_ledger
from payrun.run import _book as records
from payrun.run._book import RowBook
from payrun.run._execute import ExecutionResult
from payrun.run._stop import StopSignal

__all__ = [
    "SETTLE_AFTER_CRASH_SECONDS",
    "bank_may_still_finish",
    "remember_late_answers",
    "wait_for_late_answers",
]

SETTLE_AFTER_CRASH_SECONDS = 60.0
"""How long after it was sent a killed run's request may still be finished by the bank: as
long as a live run allows (the 30 s it waits for an answer, then ``LATE_ANSWER_SECONDS``)."""
_MID_CALL = (RowStatus.CREATING, RowStatus.SUBMITTING)


def remember_late_answers(ledger: LedgerStore, result: ExecutionResult) -> None:
    """Keep in the ledger until when the bank may still finish a pass's late requests."""
    left = result.settle_at - anyio.current_time()
    batch = ledger.batch()
    until = utc_now() + timedelta(seconds=left)
    if left > 0 and batch is not None and (batch.late_until is None or batch.late_until < until):
        ledger.set_batch(late_until=until)


async def wait_for_late_answers(
    ledger: LedgerStore,
    book: RowBook,
    stop: StopSignal,
    note: Callable[[str], None],
    *,
    at_start: bool = False,
) -> bool:
    """Wait, if rows are left mid-call, until the bank has had time to finish late requests
    (``at_start``: also those of an earlier run that was killed while sending).

    True when the rows may be checked now; False when a stop came first (leave them).
    """
    batch = ledger.batch()
    mid_call = book.in_status(*_MID_CALL)
    if batch is None or not mid_call:
        return True
    now = utc_now()
    until = batch.late_until
    killed = _killed_run_settles(batch, mid_call, now) if at_start else None
    if killed is not None and (until is None or until < killed):
        # Kept before waiting: a stopped rerun ends normally (ended_at), and the next run must
        # still wait
        ledger.set_batch(late_until=killed)
        until = killed
    if until is None or until <= now:
        return True
    note(
        "the bank may still be making payments sent without their answer recorded (it"
        " answered too late, or a run was killed while sending): payrun checks what it did"
        f" at {until:%H:%M:%S} UTC, then goes on (nothing is paid twice)"
    )
    return await stop.wait_until(anyio.current_time() + (until - now).total_seconds())


def _killed_run_settles(
    batch: BatchInfo, mid_call: Iterable[LedgerRow], now: datetime
) -> datetime | None:
    """Until when the bank may still make what a killed run sent, if that is still ahead.

    The run's last sign of life is the latest ``alive_at`` or intent after the last normal
    end of a run. One in the future (the clock was set back) counts as now, so the wait is
    never longer than ``ALIVE_SECONDS`` + ``SETTLE_AFTER_CRASH_SECONDS``.
    """
    ended = batch.ended_at
    signs = [r.intent_at for r in mid_call if r.intent_at is not None]
    if batch.alive_at is not None:
        signs.append(batch.alive_at)
    last = max((t for t in signs if ended is None or t > ended), default=None)
    if last is None:
        return None
    settle = timedelta(seconds=records.ALIVE_SECONDS + SETTLE_AFTER_CRASH_SECONDS)
    until = min(last, now) + settle
    return until if until > now else None


def bank_may_still_finish(ledger_path: LedgerLocation) -> bool:
    """True while the bank may still finish a late request of this ledger, or one a killed
    run sent (read only): a dry run then leaves the rows mid-call as they are, as a run
    would first wait."""
    if not ledger_exists(ledger_path):
        return False
    with open_ledger(ledger_path, readonly=True) as ledger:
        batch = ledger.batch()
        mid_call = ledger.rows(_MID_CALL)
    if batch is None or not mid_call:
        return False
    now = utc_now()
    late = batch.late_until is not None and batch.late_until > now
    return late or _killed_run_settles(batch, mid_call, now) is not None
