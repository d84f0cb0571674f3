"""The row book: intents are on disk before they return; outcomes ride with the next commit."""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import pytest

from payrun._models import BatchInfo, PaymentInstruction, RowStatus, RowVerdict
from payrun.bank import AdaptiveLimiter
from payrun.errors import LedgerError
from payrun.ledger import Ledger
from payrun.run._book import RowBook


def _ledger(tmp_path: Path | None) -> Ledger:
    """A ledger of rows 2 and 3, pending: a file in ``tmp_path``, or in memory for None."""
    ledger = Ledger.in_memory() if tmp_path is None else Ledger.open(tmp_path / "b.ledger.sqlite")
    verdicts = [
        RowVerdict(
            row,
            PaymentInstruction(
                row=row,
                payee_name="Ada",
                sort_code="200000",
                account_number=f"{row:08d}",
                amount=Decimal("5.00"),
                reference="R",
                source_account="040004 30000001",
            ),
            {},
        )
        for row in (2, 3)
    ]
    ledger.start(
        BatchInfo(file_path="f", file_sha256="s", valid_count=2, valid_total=Decimal("10.00")),
        verdicts,
    )
    return ledger


def _on_disk(path: Path) -> dict[int, RowStatus]:
    with Ledger.open(path, readonly=True) as reader:
        return {row.row: row.status for row in reader.rows()}


def test_intent_is_on_disk_when_mark_intent_returns(tmp_path: Path) -> None:
    """A committed intent is visible to another reader at once."""
    ledger = _ledger(tmp_path)
    book = RowBook(ledger.rows(), ledger=ledger)
    book.mark_intent(2, RowStatus.CREATING)
    assert _on_disk(ledger.path)[2] is RowStatus.CREATING
    ledger.close()


def _alive_at(path: Path) -> datetime | None:
    """The batch's last sign of life, read as another process would."""
    with Ledger.open(path, readonly=True) as reader:
        batch = reader.batch()
    assert batch is not None
    return batch.alive_at


def test_tick_commits_held_outcomes_and_a_sign_of_life_every_alive_seconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tick`` flushes held outcomes every time, and commits the batch's alive_at only once
    ``ALIVE_SECONDS`` have passed since the last one (the first tick commits it at once)."""
    import payrun.run._book

    monkeypatch.setattr(payrun.run._book, "ALIVE_SECONDS", 0.2)
    ledger = _ledger(tmp_path)
    book = RowBook(ledger.rows(), ledger=ledger)

    assert _alive_at(ledger.path) is None
    book.tick()
    first = _alive_at(ledger.path)
    assert first is not None
    book.record(2, status=RowStatus.FAILED, error="refused")
    book.tick()  # at once: the outcome goes, the sign of life stays
    assert _on_disk(ledger.path)[2] is RowStatus.FAILED
    assert _alive_at(ledger.path) == first
    time.sleep(0.25)  # noqa: ASYNC251 - stalled again
    book.tick()
    later = _alive_at(ledger.path)
    assert later is not None and later > first
    ledger.close()


async def test_an_intent_commits_a_due_sign_of_life_before_its_call_goes_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the event loop stalled past ``ALIVE_SECONDS`` (no tick in between), the next
    intent, its own or one committed ahead, commits alive_at before it returns: a kill just
    after that call leaves a recent sign of life, not a stale one."""
    import payrun.run._book

    monkeypatch.setattr(payrun.run._book, "ALIVE_SECONDS", 0.2)
    ledger = _ledger(tmp_path)
    book = RowBook(ledger.rows(), ledger=ledger)

    book.tick()
    signs = [_alive_at(ledger.path)]
    time.sleep(0.25)  # noqa: ASYNC251 - a stalled event loop, on purpose: no tick
    await book.intent(2, RowStatus.CREATING, ahead=[3])
    signs.append(_alive_at(ledger.path))
    time.sleep(0.25)  # noqa: ASYNC251 - stalled again
    await book.intent(3, RowStatus.CREATING)  # committed ahead: no commit of its own
    signs.append(_alive_at(ledger.path))
    times = [sign for sign in signs if sign is not None]
    assert len(times) == 3 and times[0] < times[1] < times[2], signs
    ledger.close()


def test_outcome_is_held_until_the_next_intent(tmp_path: Path) -> None:
    """An outcome is in memory at once and on disk with the next intent, in order."""
    ledger = _ledger(tmp_path)
    book = RowBook(ledger.rows(), ledger=ledger)
    book.mark_intent(2, RowStatus.CREATING)
    book.record(2, status=RowStatus.CREATED, payment_url="/v0/payments/pm.1")
    assert book.get(2).status is RowStatus.CREATED
    assert _on_disk(ledger.path)[2] is RowStatus.CREATING  # not yet: a crash here is safe
    book.mark_intent(3, RowStatus.CREATING)
    assert _on_disk(ledger.path) == {2: RowStatus.CREATED, 3: RowStatus.CREATING}
    ledger.close()


def test_flush_writes_held_outcomes(tmp_path: Path) -> None:
    """flush() commits every held outcome."""
    ledger = _ledger(tmp_path)
    book = RowBook(ledger.rows(), ledger=ledger)
    book.record(2, status=RowStatus.FAILED, error="refused")
    book.record(3, status=RowStatus.HELD, error="held")
    book.flush()
    assert _on_disk(ledger.path) == {2: RowStatus.FAILED, 3: RowStatus.HELD}
    ledger.close()


def test_book_without_ledger_writes_nothing(tmp_path: Path) -> None:
    """A dry-run book changes rows in memory only."""
    ledger = _ledger(tmp_path)
    book = RowBook(ledger.rows())
    book.set(2, status=RowStatus.HELD)
    book.record(3, status=RowStatus.FAILED)
    book.flush()
    assert _on_disk(ledger.path) == {2: RowStatus.PENDING, 3: RowStatus.PENDING}
    ledger.close()


def test_status_changes_reach_the_observer() -> None:
    """on_change sees each status change once, with the before and after rows."""
    ledger = _ledger(None)
    seen: list[tuple[RowStatus, RowStatus]] = []
    book = RowBook(
        ledger.rows(),
        ledger=ledger,
        on_change=lambda before, after: seen.append((before.status, after.status)),
    )
    book.mark_intent(2, RowStatus.CREATING)
    book.record(2, error="x")  # no status change: not reported
    book.record(2, status=RowStatus.CREATED)
    assert seen == [
        (RowStatus.PENDING, RowStatus.CREATING),
        (RowStatus.CREATING, RowStatus.CREATED),
    ]
    ledger.close()


async def test_concurrent_intents_share_one_commit_and_are_on_disk_when_they_return(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Intents staged in one turn of the loop go to disk in one transaction, before any call."""
    ledger = _ledger(tmp_path)
    book = RowBook(ledger.rows(), ledger=ledger)
    commits: list[int] = []
    original = Ledger.update_each

    def counted(self: Ledger, changes: Any) -> None:
        changes = list(changes)
        commits.append(len(changes))
        original(self, changes)

    monkeypatch.setattr(Ledger, "update_each", counted)
    seen: dict[int, dict[int, RowStatus]] = {}

    async def worker(row: int) -> None:
        await book.intent(row, RowStatus.CREATING)
        seen[row] = _on_disk(ledger.path)  # what a crash right now would leave

    async with anyio.create_task_group() as group:
        group.start_soon(worker, 2)
        group.start_soon(worker, 3)
    assert commits == [2]
    assert seen[2][2] is RowStatus.CREATING and seen[3][3] is RowStatus.CREATING
    assert book.get(2).attempts == 1 and book.get(3).status is RowStatus.CREATING
    ledger.close()


async def test_a_failed_group_commit_stops_every_worker_in_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """If the shared commit fails, no worker of the group goes on to make its call."""
    ledger = _ledger(None)
    book = RowBook(ledger.rows(), ledger=ledger)

    def broken(self: Ledger, changes: Any) -> None:
        msg = "disk full"
        raise LedgerError(msg)

    monkeypatch.setattr(Ledger, "update_each", broken)
    assert await _two_intents(book) == ([], [2, 3])  # nobody called, both refused
    assert book.get(2).status is RowStatus.PENDING  # memory follows the disk
    ledger.close()


async def _two_intents(
    book: RowBook, also: Callable[[], Coroutine[Any, Any, None]] | None = None
) -> tuple[list[int], list[int]]:
    """Rows 2 and 3 stage intents concurrently (with ``also``): (called, refused) rows."""
    called: list[int] = []
    refused: list[int] = []

    async def worker(row: int) -> None:
        try:
            await book.intent(row, RowStatus.CREATING)
        except LedgerError:
            refused.append(row)
            return
        called.append(row)

    async with anyio.create_task_group() as group:
        group.start_soon(worker, 2)
        group.start_soon(worker, 3)
        if also is not None:
            group.start_soon(also)
    return sorted(called), sorted(refused)


async def test_an_intent_dropped_by_a_failed_flush_elsewhere_is_never_called(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If another caller's flush fails while intents wait for their commit, none goes out."""
    ledger = _ledger(tmp_path)
    book = RowBook(ledger.rows(), ledger=ledger)
    original = Ledger.update_each
    failures = [1]

    def flaky(self: Ledger, changes: Any) -> None:
        if failures and failures.pop():
            msg = "database is locked"
            raise LedgerError(msg)
        original(self, changes)

    monkeypatch.setattr(Ledger, "update_each", flaky)

    async def periodic_flush() -> None:  # as the engine's watcher does
        with pytest.raises(LedgerError):
            book.flush()

    assert await _two_intents(book, periodic_flush) == ([], [2, 3])
    assert _on_disk(ledger.path) == {2: RowStatus.PENDING, 3: RowStatus.PENDING}
    ledger.close()


async def _cancel(scope: anyio.CancelScope) -> None:
    scope.cancel()


async def test_a_cancelled_run_sends_nothing_after_its_intent(tmp_path: Path) -> None:
    """Once the run is cancelled, a worker whose intent was just committed does not go on."""
    ledger = _ledger(tmp_path)
    book = RowBook(ledger.rows(), ledger=ledger)
    limiter = AdaptiveLimiter(5)
    sent: list[int] = []

    async def worker(row: int) -> None:
        await book.intent(row, RowStatus.CREATING)
        async with limiter.slot():
            sent.append(row)  # where the request would be written

    async with anyio.create_task_group() as group:
        group.start_soon(worker, 2)
        # the run is cancelled (another worker failed) while the intent's commit is pending
        group.start_soon(lambda: _cancel(group.cancel_scope))
    assert sent == []
    assert _on_disk(ledger.path)[2] is RowStatus.CREATING  # reconciliation settles it
    ledger.close()


def _ledger_of(tmp_path: Path | None, count: int) -> Ledger:
    """A ledger of ``count`` pending rows, numbered from 2 (in memory for None)."""
    ledger = (
        Ledger.in_memory() if tmp_path is None else Ledger.open(tmp_path / "ahead.ledger.sqlite")
    )
    verdicts = [
        RowVerdict(
            row,
            PaymentInstruction(
                row=row,
                payee_name="Ada",
                sort_code="200000",
                account_number=f"{row:08d}",
                amount=Decimal("5.00"),
                reference="R",
                source_account="040004 30000001",
            ),
            {},
        )
        for row in range(2, 2 + count)
    ]
    ledger.start(
        BatchInfo(
            file_path="f", file_sha256="s", valid_count=count, valid_total=Decimal("5.00") * count
        ),
        verdicts,
    )
    return ledger


def _disk_rows(path: Path) -> dict[int, Any]:
    with Ledger.open(path, readonly=True) as reader:
        return {row.row: row for row in reader.rows()}


async def test_intents_ahead_share_the_commit_and_their_turn_needs_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows ahead are on disk in their intent state with the first intent's commit; when
    their turn comes the intent returns with no commit of its own."""
    ledger = _ledger_of(tmp_path, 4)
    book = RowBook(ledger.rows(), ledger=ledger)
    commits: list[list[int]] = []
    original = Ledger.update_each

    def counted(self: Ledger, changes: Any) -> None:
        changes = list(changes)
        commits.append([row for row, _ in changes])
        original(self, changes)

    monkeypatch.setattr(Ledger, "update_each", counted)
    await book.intent(2, RowStatus.CREATING, ahead=[3, 4])
    assert commits == [[2, 3, 4]]
    disk = _disk_rows(ledger.path)
    assert [disk[n].status for n in (2, 3, 4, 5)] == [RowStatus.CREATING] * 3 + [RowStatus.PENDING]
    assert disk[3].intent_at is not None and disk[3].attempts == 1
    row = await book.intent(3, RowStatus.CREATING, ahead=[4, 5])  # 4 is staged already
    assert commits == [[2, 3, 4]]  # no commit: row 3's intent was on disk
    assert row.status is RowStatus.CREATING and row.attempts == 1
    await book.intent(5, RowStatus.CREATING)
    assert commits == [[2, 3, 4], [5]]
    ledger.close()


async def test_unused_intents_ahead_are_withdrawn_and_used_ones_kept(tmp_path: Path) -> None:
    """At the end of a pass, a row whose intent was committed ahead but whose turn never
    came is put back as it was (status, time, attempts); a row that was sent keeps its
    intent, and a row that moved on keeps its new state."""
    ledger = _ledger_of(tmp_path, 4)
    book = RowBook(ledger.rows(), ledger=ledger)
    await book.intent(2, RowStatus.CREATING, ahead=[3, 4, 5])
    await book.intent(3, RowStatus.CREATING)  # sent, answer lost: stays creating
    await book.intent(4, RowStatus.CREATING)
    book.record(4, status=RowStatus.CREATED, payment_url="/v0/payments/pm.4")
    book.withdraw_unused()
    disk = _disk_rows(ledger.path)
    assert disk[2].status is RowStatus.CREATING and disk[3].status is RowStatus.CREATING
    assert disk[4].status is RowStatus.CREATED
    assert disk[5].status is RowStatus.PENDING
    assert disk[5].intent_at is None and disk[5].attempts == 0
    assert book.get(5).status is RowStatus.PENDING and book.get(5).attempts == 0
    book.withdraw_unused()  # nothing left to withdraw
    assert _disk_rows(ledger.path)[3].status is RowStatus.CREATING
    ledger.close()


async def test_a_row_ahead_changed_by_someone_else_is_not_withdrawn(tmp_path: Path) -> None:
    """A row set to another state before its turn keeps that state."""
    ledger = _ledger_of(tmp_path, 2)
    book = RowBook(ledger.rows(), ledger=ledger)
    await book.intent(2, RowStatus.CREATING, ahead=[3])
    book.set(3, status=RowStatus.FAILED, error="refused")
    book.withdraw_unused()
    assert _disk_rows(ledger.path)[3].status is RowStatus.FAILED
    ledger.close()


async def test_a_failed_commit_leaves_rows_ahead_unsent_and_unchanged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """When the commit carrying intents ahead fails, their turn raises too: never sent."""
    ledger = _ledger_of(None, 2)
    book = RowBook(ledger.rows(), ledger=ledger)

    def broken(self: Ledger, changes: Any) -> None:
        msg = "disk full"
        raise LedgerError(msg)

    monkeypatch.setattr(Ledger, "update_each", broken)
    with pytest.raises(LedgerError):
        await book.intent(2, RowStatus.CREATING, ahead=[3])
    with pytest.raises(LedgerError):
        await book.intent(3, RowStatus.CREATING)
    assert book.get(3).status is RowStatus.PENDING
    ledger.close()


def test_the_book_knows_which_row_holds_each_payment_and_submission(tmp_path: Path) -> None:
    """payment_holder and submission_holder follow every change, a URL moved or cleared."""
    ledger = _ledger(tmp_path)
    book = RowBook(ledger.rows(), ledger=ledger)
    book.set(2, payment_url="/v0/payments/pm.1")
    book.record(3, payment_url="/v0/payments/pm.2", submission_url="/v0/submissions/ps.2")
    assert book.payment_holder("/v0/payments/pm.1") == 2
    assert book.submission_holder("/v0/submissions/ps.2") == 3
    book.set(2, payment_url=None)
    assert book.payment_holder("/v0/payments/pm.1") is None
    assert book.known_payment_urls() == {"/v0/payments/pm.2"}
    book.flush()
    ledger.close()
    with Ledger.open(ledger.path) as again:
        reopened = RowBook(again.rows(), ledger=again)
        assert reopened.payment_holder("/v0/payments/pm.2") == 3
        assert reopened.submission_holder("/v0/submissions/ps.2") == 3
