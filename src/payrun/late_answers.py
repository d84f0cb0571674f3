"""Giving a slow bank time to finish before asking it what it did.

Input: a pass's ``ExecutionResult`` (``settle_at``: a request's answer timed out, or a
gateway answered 504, so the bank may still be working on it) and the ledger. Output: the
time until which that may be so, kept in the ledger's batch (``late_until``), and a wait
until then before rows left mid-create or mid-submit are checked with the bank, by this
run or the next one (a rerun right after Ctrl-C or SIGTERM would otherwise look too soon,
find no payment, and make a second one).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import anyio

from payrun.domain import RowStatus
from payrun.execution import ExecutionResult
from payrun.ledger import Ledger, utc_now
from payrun.records import RowBook
from payrun.stopping import StopSignal

__all__ = ["bank_may_still_finish", "remember_late_answers", "wait_for_late_answers"]


def remember_late_answers(ledger: Ledger, result: ExecutionResult) -> None:
    """Keep in the ledger until when the bank may still finish a pass's late requests."""
    left = result.settle_at - anyio.current_time()
    batch = ledger.batch()
    until = utc_now() + timedelta(seconds=left)
    if left > 0 and batch is not None and (batch.late_until is None or batch.late_until < until):
        ledger.set_batch(late_until=until)


async def wait_for_late_answers(
    ledger: Ledger, book: RowBook, stop: StopSignal, note: Callable[[str], None]
) -> bool:
    """Wait, if rows are left mid-call, until the bank has had time to finish late requests.

    True when the rows may be checked now; False when a stop came first (leave them).
    """
    batch = ledger.batch()
    until = None if batch is None else batch.late_until
    if until is None or not book.in_status(RowStatus.CREATING, RowStatus.SUBMITTING):
        return True
    left = (until - utc_now()).total_seconds()
    if left <= 0:
        return True
    note(
        "the bank did not answer some payments in time and may still be making them: payrun"
        f" checks what it did at {until:%H:%M:%S} UTC, then goes on (nothing is paid twice)"
    )
    return await stop.wait_until(anyio.current_time() + left)


def bank_may_still_finish(ledger_path: Path) -> bool:
    """True while the bank may still finish a late request of this ledger (read only): a dry
    run then leaves the rows mid-call as they are, as a run would first wait."""
    if not ledger_path.exists():
        return False
    with Ledger.open(ledger_path, readonly=True) as ledger:
        batch = ledger.batch()
    return batch is not None and batch.late_until is not None and batch.late_until > utc_now()
