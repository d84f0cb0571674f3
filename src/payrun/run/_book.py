"""The rows of one run in memory, written through to the ledger.

Input: the ledger's rows at the start of a run. Output: the current state of every row,
readable without a query. ``set`` commits a change before it returns. The execution stage
uses the pair ``intent``/``record``: an intent is committed before ``intent`` returns (the
call may be made once it has), while an outcome is held back and goes to disk in the
same transaction as the next intent (or at ``flush``), so a payment costs at most two
commits instead of four. Intents staged by several workers in the same turn of the event
loop share one commit (a group commit): the first waits one turn, then commits them all.
An outcome lost to a crash in that short window leaves the row in its intent state, which
reconciliation settles with the bank.

An intent can also carry the intents of the next few rows of the same queue (``ahead``):
they are committed with it, and when their turn comes ``intent`` returns at once, with no
commit of its own. One account's submits come one at a time, so this is what keeps a commit
from costing every payment (about a fifth of the client's CPU at one account's pace, by
benchmarks/bench_run.py). Intents committed ahead and never used are put back by
``withdraw_unused`` at the end of the pass; after a crash such a row is in its intent state
without having been sent, which reconciliation settles like any other (the bank shows no
payment, or no submission, so it is sent once). A dry run uses a book with no ledger: it
changes nothing on disk.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Unpack

import anyio
import anyio.lowlevel

from payrun._models import LedgerRow, RowStatus, RowUpdate, utc_now
from payrun.errors import LedgerError, LedgerWriteError
from payrun.ledger import LedgerStore

__all__ = ["ALIVE_SECONDS", "RowBook"]

ALIVE_SECONDS = 5.0
"""How often a paying run commits that it is alive (``tick``): after a kill, the next run
knows the latest a request can have left it."""


class _GroupCommit:
    """One shared commit of staged intents: set when it is on disk (or failed)."""

    __slots__ = ("done", "error")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.error: BaseException | None = None


class _Ahead:
    """An intent committed ahead of its row's turn: what it set, and what it replaced."""

    __slots__ = ("group", "number", "restore", "status", "values")

    def __init__(
        self,
        status: RowStatus,
        values: RowUpdate,
        restore: RowUpdate,
        number: int,
        group: _GroupCommit,
    ) -> None:
        self.status = status
        self.values = values
        self.restore = restore
        self.number = number
        self.group = group


class RowBook:
    """Row number -> ``LedgerRow``, with every change written through to the ledger."""

    def __init__(
        self,
        rows: Iterable[LedgerRow],
        *,
        ledger: LedgerStore | None = None,
        on_change: Callable[[LedgerRow, LedgerRow], None] | None = None,
    ) -> None:
        self._rows = {row.row: row for row in rows}
        # Which row holds each payment and submission: an answer naming one is checked here.
        self._payments = {r.payment_url: r.row for r in self._rows.values() if r.payment_url}
        self._submissions = {
            r.submission_url: r.row for r in self._rows.values() if r.submission_url
        }
        self._ledger = ledger
        self._on_change = on_change
        self._held: list[tuple[int, RowUpdate]] = []
        # The commit intents are gathering for
        self._group: _GroupCommit | None = None
        # Intents staged so far (each intent's sequence number)
        self._staged = 0
        # Every intent up to this number is on disk
        self._durable = 0
        # A failed write: nothing more is committed
        self._broken: BaseException | None = None
        # Intents committed before their row's turn
        self._ahead: dict[int, _Ahead] = {}
        # ``tick`` commits the batch's alive_at again from then
        self._next_alive = 0.0

    def __len__(self) -> int:
        return len(self._rows)

    def get(self, row: int) -> LedgerRow:
        """The row's current state."""
        return self._rows[row]

    def all(self) -> list[LedgerRow]:
        """Every row, in the order the book was given them (the ledger's row order)."""
        return list(self._rows.values())

    def in_status(self, *statuses: RowStatus) -> list[LedgerRow]:
        """Rows currently in any of ``statuses``, in row order."""
        wanted = set(statuses)
        return [row for row in self._rows.values() if row.status in wanted]

    def by_account(self, *statuses: RowStatus) -> dict[str, list[LedgerRow]]:
        """Rows in any of ``statuses`` grouped by their bank account URL (unbound rows left out)."""
        groups: dict[str, list[LedgerRow]] = {}
        for row in self.in_status(*statuses):
            if row.account_url:
                groups.setdefault(row.account_url, []).append(row)
        return groups

    def known_payment_urls(self) -> set[str]:
        """Every payment URL this ledger has recorded."""
        return set(self._payments)

    def payment_holder(self, payment_url: str) -> int | None:
        """The row recorded with this payment, if any."""
        return self._payments.get(payment_url)

    def submission_holder(self, submission_url: str) -> int | None:
        """The row recorded with this submission, if any."""
        return self._submissions.get(submission_url)

    def set(self, row: int, **values: Unpack[RowUpdate]) -> LedgerRow:
        """Commit new values for one row (with any held outcomes), then return its new state."""
        self._ahead.pop(row, None)
        if self._ledger is not None:
            self._held.append((row, values))
            self.flush()
        return self._apply(row, values)

    def set_each(self, changes: dict[int, RowUpdate]) -> None:
        """Commit each row's own new values, all in one transaction."""
        if not changes:
            return
        for number in changes:
            self._ahead.pop(number, None)
        if self._ledger is not None:
            self._held.extend(changes.items())
            self.flush()
        for number, values in changes.items():
            self._apply(number, values)

    def record(self, row: int, **values: Unpack[RowUpdate]) -> LedgerRow:
        """Note an outcome now; it is committed with the next intent or ``flush``."""
        self._ahead.pop(row, None)
        if self._ledger is not None:
            self._held.append((row, values))
        return self._apply(row, values)

    def flush(self) -> None:
        """Commit every held change in one transaction.

        After a failed write the book is broken: held changes are never dropped silently
        and committed later out of order; every later flush raises ``LedgerError``.
        """
        if self._ledger is not None and self._held:
            self._ensure_writable()
            # Every intent staged so far is in ``held``
            staged = self._staged
            held, self._held = self._held, []
            try:
                self._ledger.update_each(held)
            except LedgerError as exc:
                self._broken = exc
                raise LedgerWriteError(self._rerun(exc)) from exc
            except BaseException as exc:
                self._broken = exc
                raise
            self._durable = staged

    def tick(self) -> None:
        """``flush``, then ``alive``: the engine ticks before its first request and a few
        times a second while it runs."""
        self.flush()
        self.alive()

    def alive(self) -> None:
        """Commit the time as the batch's ``alive_at``, if ``ALIVE_SECONDS`` have passed,
        once the ledger file is found still in place (not deleted or replaced).

        Besides each ``tick``, every intent checks it just before its call goes out: a run
        killed while sending leaves a time at most ``ALIVE_SECONDS`` before its last request,
        even after the event loop stalled (an intent can be much older: committed ahead of
        its turn, or retried for a minute).
        """
        now = time.monotonic()
        if self._ledger is None or now < self._next_alive:
            return
        self._next_alive = now + ALIVE_SECONDS
        self._ensure_writable()
        try:
            self._ledger.check_in_place()
            self._ledger.set_batch(alive_at=utc_now())
        except LedgerError as exc:
            self._broken = exc
            raise LedgerWriteError(self._rerun(exc)) from exc

    def _ensure_writable(self) -> None:
        """Raise ``LedgerError`` once a write has failed: nothing more is recorded or sent."""
        if self._broken is not None:
            raise LedgerWriteError(self._rerun(self._broken)) from self._broken

    @staticmethod
    def _rerun(cause: BaseException) -> str:
        # It says what to do itself
        if isinstance(cause, LedgerWriteError):
            return str(cause)
        return f"{cause}; then run the same command again (nothing is paid twice)"

    def set_many(self, rows: Iterable[int], **values: Unpack[RowUpdate]) -> None:
        """Commit the same values for several rows in one transaction."""
        numbers = list(rows)
        if not numbers:
            return
        for number in numbers:
            self._ahead.pop(number, None)
        if self._ledger is not None:
            # Held outcomes first: a row's changes reach the disk in order
            self.flush()
            self._ensure_writable()
            try:
                self._ledger.update_many(numbers, **values)
            except LedgerError as exc:
                self._broken = exc
                raise LedgerWriteError(self._rerun(exc)) from exc
            except BaseException as exc:
                self._broken = exc
                raise
        for number in numbers:
            self._apply(number, values)

    def mark_intent(self, row: int, status: RowStatus, *, at: datetime | None = None) -> LedgerRow:
        """Commit an intent (creating or submitting) with its time before the call is made.

        Held outcomes go in the same transaction, ahead of the intent.
        """
        return self.set(row, **self._intent_values(row, status, at))

    async def intent(self, row: int, status: RowStatus, *, ahead: Iterable[int] = ()) -> LedgerRow:
        """``mark_intent`` for concurrent workers: intents of one loop turn share a commit.

        The first worker to stage an intent lets every other ready worker run once (they
        stage theirs), then commits them all, with held outcomes, in one transaction. Each
        returns only once its own intent is on disk; if that commit failed, each raises
        ``LedgerError`` and must not make its call.

        ``ahead``: rows that will make the same call next (their intents go in the same
        commit); a row whose intent was committed ahead returns without a commit.
        """
        early = self._ahead.pop(row, None)
        if early is not None and early.status is status:
            return await self._use_ahead(row, early)
        at = utc_now()
        values = self._intent_values(row, status, at)
        if self._ledger is None:
            return self._apply(row, values)
        self._held.append((row, values))
        self._staged += 1
        number = self._staged
        group = self._group
        leader = group is None
        if group is None:
            group = self._group = _GroupCommit()
        staged = self._stage_ahead(ahead, row, status, at, number, group)
        if leader:
            try:
                await anyio.lowlevel.cancel_shielded_checkpoint()
            finally:
                self._group = None
                try:
                    self.flush()
                except BaseException as exc:
                    group.error = exc
                    raise
                finally:
                    group.done.set()
        else:
            # At most one turn: memory follows the disk
            with anyio.CancelScope(shield=True):
                await group.done.wait()
        # The group's commit, or an earlier one, failed?
        self._ensure_durable(row, number, group)
        # On disk now: memory follows (unless its turn came already)
        for other in staged:
            entry = self._ahead.get(other)
            if entry is not None and entry.number == number:
                self._apply(other, entry.values)
        after = self._apply(row, values)
        # Due after a stalled loop: the sign of life goes before the call
        self.alive()
        # A cancelled run sends nothing more
        await anyio.lowlevel.checkpoint_if_cancelled()
        return after

    def _stage_ahead(
        self,
        ahead: Iterable[int],
        row: int,
        status: RowStatus,
        at: datetime,
        number: int,
        group: _GroupCommit,
    ) -> list[int]:
        """Stage the intents of rows ``ahead`` (not already staged) into this commit."""
        staged: list[int] = []
        for other in ahead:
            if other == row or other in self._ahead:
                continue
            before = self._rows[other]
            values = self._intent_values(other, status, at)
            restore: RowUpdate = {
                "status": before.status,
                "intent_at": before.intent_at,
                "attempts": before.attempts,
            }
            self._ahead[other] = _Ahead(status, values, restore, number, group)
            self._held.append((other, values))
            staged.append(other)
        return staged

    async def _use_ahead(self, row: int, early: _Ahead) -> LedgerRow:
        """A row's turn for an intent committed ahead: no commit of its own."""
        if not early.group.done.is_set():
            with anyio.CancelScope(shield=True):
                await early.group.done.wait()
        self._ensure_durable(row, early.number, early.group)
        after = self._rows[row]
        # Committed, not yet followed in memory
        if after.status is not early.status:
            after = self._apply(row, early.values)
        self.alive()
        await anyio.lowlevel.checkpoint_if_cancelled()
        return after

    def _ensure_durable(self, row: int, number: int, group: _GroupCommit) -> None:
        """Raise ``LedgerError`` unless intent ``number`` is on disk: the row must not be sent."""
        if number > self._durable:
            cause = group.error or self._broken
            msg = f"row {row} was not sent: {cause}; then run the same command again"
            raise LedgerWriteError(msg) from cause

    def withdraw_unused(self) -> None:
        """Put back every intent committed ahead whose row's turn never came (one commit).

        Called once no worker runs: those rows were never sent, so they are what they were.
        """
        entries, self._ahead = self._ahead, {}
        changes = {
            row: entry.restore
            for row, entry in entries.items()
            if entry.number <= self._durable and self._rows[row].status is entry.status
        }
        if changes and self._broken is None:
            self.set_each(changes)

    def _intent_values(self, row: int, status: RowStatus, at: datetime | None) -> RowUpdate:
        attempts = self._rows[row].attempts + 1
        return {"status": status, "intent_at": at or utc_now(), "attempts": attempts}

    def _apply(self, row: int, values: RowUpdate) -> LedgerRow:
        before = self._rows[row]
        after = before._replace(**values)
        self._rows[row] = after
        if "payment_url" in values:
            _move(self._payments, row, before.payment_url, after.payment_url)
        if "submission_url" in values:
            _move(self._submissions, row, before.submission_url, after.submission_url)
        if self._on_change is not None and before.status != after.status:
            self._on_change(before, after)
        return after


def _move(holders: dict[str, int], row: int, old: str | None, new: str | None) -> None:
    """Keep ``holders`` (URL -> row) up to date with one row's URL changing."""
    if old == new:
        return
    if old is not None and holders.get(old) == row:
        del holders[old]
    if new is not None:
        holders[new] = row
