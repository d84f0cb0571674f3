"""The rows in doubt a run holds back: which may be checked with the bank now, and which
pending rows must wait with them.

A row is "in doubt" while it is ``creating`` or ``submitting`` (``IN_DOUBT``): its request
may have left without its answer recorded. ``InDoubt`` keeps each such row's settle time
(``_settle`` says when that is) and lets it go once that time is past. A neutral helper: the
run's state holds one, and the phases and their schedule read it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from payrun._models import LedgerRow, RowStatus

__all__ = ["IN_DOUBT", "InDoubt"]

IN_DOUBT = (RowStatus.CREATING, RowStatus.SUBMITTING)
"""The statuses of a row whose request may have left without its answer recorded."""

_ConflictKey = tuple[str | None, str, str, Decimal]
"""Source account, creditor sort code and account number, amount: what a payment found at the
bank is matched on, besides its reference (which the bank may rewrite)."""


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
