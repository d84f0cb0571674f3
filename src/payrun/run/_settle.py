"""Rows in doubt: when the bank may still carry out a request whose answer was lost.

A row is "in doubt" while it is ``creating`` or ``submitting``: its intent was committed, so
its request may have left, and no answer was recorded (it came too late, a gateway gave up,
or the run was killed). The bank has no idempotency key, so such a row is never sent again
before its settle time: ``settle_wait`` seconds (``RunOptions.settle_wait``) after the last
moment its request could have been sent. Until then payrun may only look: a row whose
payment or submission the bank already shows is recorded at once; the others are checked
again at their settle time and, if the bank still has nothing, sent then. Every other row
is paid meanwhile.

Input: a pass's ``ExecutionResult`` (``settle_at``: when the bank is done with its late
requests) and the ledger. Output: the time until which the bank may still act, kept in the
ledger's batch (``late_until``) so that a rerun started at once waits out the same time;
and (``_doubt.InDoubt``) which rows in doubt may be checked now and which pending rows
must wait with them.

A run that was killed (kill -9, or a crash of the process: the ledger's commits survive
those, not a power cut) recorded no answers to the requests it had on the wire. Its last
sign of life is the latest of the batch's ``alive_at`` (committed every ``ALIVE_SECONDS``
while paying, and checked before each request goes out) and its rows' intents, when later
than the last normal end of a run (``ended_at``); a request can have left up to
``ALIVE_SECONDS`` after it. The next run gives the bank ``settle_wait`` from then, and keeps
that time as ``late_until`` first: a rerun stopped during the wait does not end the wait for
the next.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

import anyio

from payrun._models import BatchInfo, LedgerRow, utc_now
from payrun.ledger import LedgerLocation, LedgerStore, ledger_exists, open_ledger
from payrun.run import _book as records
from payrun.run._doubt import IN_DOUBT
from payrun.run._execute import ExecutionResult

__all__ = [
    "bank_may_still_finish",
    "doubt_until",
    "pass_settles",
    "remember_late_answers",
]


def remember_late_answers(ledger: LedgerStore, result: ExecutionResult) -> datetime | None:
    """Keep in the ledger until when the bank may still finish a pass's late requests, and
    return it (None: the pass left no late request)."""
    until = pass_settles(result)
    batch = ledger.batch()
    if (
        until is not None
        and batch is not None
        and (batch.late_until is None or batch.late_until < until)
    ):
        ledger.set_batch(late_until=until)
    return until


def pass_settles(result: ExecutionResult) -> datetime | None:
    """Until when the bank may still finish a pass's late requests (None: no late request)."""
    left = result.settle_at - anyio.current_time()
    return utc_now() + timedelta(seconds=left) if left > 0 else None


def doubt_until(
    ledger: LedgerStore, rows: Sequence[LedgerRow], *, settle_wait: float
) -> datetime | None:
    """At a run's start: until when the bank may still carry out a request of the rows in
    doubt (``rows``), kept in the ledger before anything is sent; None when it can no longer.

    That is the later of the ledger's ``late_until`` (answers that came too late) and
    ``settle_wait`` after the last moment a killed run could have sent a request.
    """
    batch = ledger.batch()
    if batch is None or not rows:
        return None
    now = utc_now()
    until = batch.late_until
    killed = _killed_run_settles(batch, rows, now, settle_wait)
    if killed is not None and (until is None or until < killed):
        # Kept before waiting: a stopped rerun ends normally (ended_at), and the next run
        # must still wait
        ledger.set_batch(late_until=killed)
        until = killed
    return until if until is not None and until > now else None


def _killed_run_settles(
    batch: BatchInfo, in_doubt: Iterable[LedgerRow], now: datetime, settle_wait: float
) -> datetime | None:
    """Until when the bank may still make what a killed run sent, if that is still ahead.

    The run's last sign of life is the latest ``alive_at`` or intent after the last normal
    end of a run; it may have sent until ``ALIVE_SECONDS`` later. A sign in the future (the
    clock was set back) counts as now, so the wait is never longer than ``ALIVE_SECONDS`` +
    ``settle_wait``.
    """
    ended = batch.ended_at
    signs = [r.intent_at for r in in_doubt if r.intent_at is not None]
    if batch.alive_at is not None:
        signs.append(batch.alive_at)
    last = max((t for t in signs if ended is None or t > ended), default=None)
    if last is None:
        return None
    until = min(last, now) + timedelta(seconds=records.ALIVE_SECONDS + settle_wait)
    return until if until > now else None


def bank_may_still_finish(ledger_path: LedgerLocation, *, settle_wait: float) -> bool:
    """True while the bank may still finish a late request of this ledger, or one a killed
    run sent (read only): a dry run then leaves the rows in doubt as they are."""
    if not ledger_exists(ledger_path):
        return False
    with open_ledger(ledger_path, readonly=True) as ledger:
        batch = ledger.batch()
        in_doubt = ledger.rows(IN_DOUBT)
    if batch is None or not in_doubt:
        return False
    now = utc_now()
    late = batch.late_until is not None and batch.late_until > now
    return late or _killed_run_settles(batch, in_doubt, now, settle_wait) is not None
