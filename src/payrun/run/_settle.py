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
and ``InDoubt``, which tells the run which rows in doubt may be checked now and which
pending rows must wait with them.

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
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

import anyio

from payrun._models import BatchInfo, LedgerRow, RowStatus, utc_now
from payrun.ledger import LedgerLocation, LedgerStore, ledger_exists, open_ledger
from payrun.run import _book as records
from payrun.run._execute import ExecutionResult

__all__ = [
    "IN_DOUBT",
    "InDoubt",
    "bank_may_still_finish",
    "doubt_until",
    "pass_settles",
    "remember_late_answers",
]

IN_DOUBT = (RowStatus.CREATING, RowStatus.SUBMITTING)
"""The statuses of a row whose request may have left without its answer recorded."""

_ConflictKey = tuple[str | None, str, str, Decimal]
"""Source account, creditor sort code and account number, amount: what a payment found at the
bank is matched on, besides its reference (which the bank may rewrite)."""


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


def _conflict_key(row: LedgerRow) -> _ConflictKey:
    return (row.account_url, row.sort_code, row.account_number, row.amount)


@dataclass(slots=True)
class InDoubt:
    """The rows in doubt whose settle time is still ahead, and when each comes.

    A row in doubt not held here may be checked with the bank now. Rows that could be taken
    for one another at the bank (``creating`` rows with the same source account, creditor and
    amount) are checked together, once the last of them may be; and a pending row that could
    be taken for one of them is not created before then either: a payment it made meanwhile
    would be found and recorded as theirs.
    """

    _due: dict[int, datetime] = field(default_factory=dict)
    _keys: dict[int, _ConflictKey] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self._due)

    def add(self, rows: Iterable[LedgerRow], until: datetime) -> None:
        """Hold ``rows`` (in doubt) until ``until``; a row held until later keeps its time."""
        for row in rows:
            if row.status not in IN_DOUBT:
                continue
            if row.row not in self._due or self._due[row.row] < until:
                self._due[row.row] = until
            if row.status is RowStatus.CREATING:
                self._keys[row.row] = _conflict_key(row)

    def __contains__(self, row: object) -> bool:
        return row in self._due

    def waiting(self, now: datetime) -> dict[int, datetime]:
        """Row number -> its settle time, for rows whose settle time is still ahead."""
        return {n: t for n, t in self._due.items() if t > now}

    def next_due(self, now: datetime) -> datetime | None:
        """The earliest settle time still ahead (None: no row waits)."""
        return min((t for t in self._due.values() if t > now), default=None)

    def last_due(self, now: datetime) -> datetime | None:
        """The latest settle time still ahead (None: no row waits)."""
        return max((t for t in self._due.values() if t > now), default=None)

    def ready(self, in_doubt: Iterable[LedgerRow], now: datetime) -> list[LedgerRow]:
        """Of ``in_doubt`` (the book's rows in doubt), those that may be checked with the bank
        now: not held, or held until a time now past, and no row they could be taken for
        still held. Those are let go: the caller checks them."""
        blocked = self._blocked_keys(now)
        ready = [
            row
            for row in in_doubt
            if self._due.get(row.row, now) <= now
            and not (row.status is RowStatus.CREATING and _conflict_key(row) in blocked)
        ]
        for row in ready:
            self._due.pop(row.row, None)
            self._keys.pop(row.row, None)
        return ready

    def may_create(self, rows: Iterable[LedgerRow], now: datetime) -> list[LedgerRow]:
        """Of pending ``rows``, those that may be created now: not those whose payment could
        be taken for that of a row in doubt whose settle time is still ahead."""
        blocked = self._blocked_keys(now)
        if not blocked:
            return list(rows)
        return [row for row in rows if _conflict_key(row) not in blocked]

    def _blocked_keys(self, now: datetime) -> set[_ConflictKey]:
        return {key for n, key in self._keys.items() if self._due[n] > now}
