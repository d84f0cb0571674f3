"""The execution engine against the in-process sandbox bank (an ASGI test transport)."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from _transports import HttpxTransport, asgi_transport
from payrun._models import BatchInfo, LedgerRow, PaymentInstruction, RowStatus, RowVerdict
from payrun.bank import AdaptiveLimiter, BankClient, RetryPolicy
from payrun.config import Secret, Settings
from payrun.errors import AuthError
from payrun.ledger import Ledger
from payrun.run._book import RowBook
from payrun.run._execute import EngineLimits, ExecutionResult, PayingEngine, execute_rows
from payrun.run._stop import StopSignal
from payrun.sandbox import create_app, default_seed

SECRET = "sandbox-test-key"
SETTINGS = Settings(base_url="http://sandbox", api_key=Secret(SECRET))


@asynccontextmanager
async def _bank(latency_ms: float) -> AsyncIterator[tuple[Any, BankClient]]:
    """A sandbox app with this latency and a BankClient bound to it in-process."""
    app = create_app(seed=default_seed(), api_key=SECRET, latency_ms=latency_ms)
    limiter, retry = AdaptiveLimiter(50), RetryPolicy.no_wait()
    async with BankClient(asgi_transport(app), SETTINGS, limiter=limiter, retry=retry) as client:
        yield app, client


@pytest.fixture
async def sandbox() -> AsyncIterator[tuple[Any, BankClient]]:
    """A sandbox app with 20 ms latency and a BankClient bound to it in-process."""
    async with _bank(20) as bound:
        yield bound


async def _rows(client: BankClient, count: int, *, reference: str = "EXEC") -> list[LedgerRow]:
    org = await client.organization()
    account = await client.find_account(org, sort_code="040004", account_number="30000001")
    assert account is not None
    payee = await client.create_payee(
        account.owner_url, name="Ada Lovelace", sort_code="200000", account_number="12345678"
    )
    return [
        LedgerRow(
            row=n + 2,
            row_id=None,
            payee_name="Ada Lovelace",
            sort_code="200000",
            account_number="12345678",
            amount=Decimal("1.00") + n,
            reference=reference,
            source_account="040004 30000001",
            status=RowStatus.PENDING,
            account_url=account.url,
            payee_url=payee.url,
        )
        for n in range(count)
    ]


async def _execute(
    client: BankClient,
    book: RowBook,
    rows: list[LedgerRow],
    *,
    per_account_submits: int = 3,
    create_workers: int = 50,
    create_only: bool = False,
    stop: StopSignal | None = None,
) -> ExecutionResult:
    """Create (and submit) ``rows`` with the engine, as a run would."""
    limits = EngineLimits(
        per_account_submits=per_account_submits,
        create_workers=create_workers,
        create_only=create_only,
    )
    accounts = len({r.account_url for r in rows})
    engine = PayingEngine(client, book, limits, stop=stop or StopSignal(), accounts=accounts)
    return await execute_rows(engine, rows, [])


def _stats(app: Any) -> Any:
    return app.state.sandbox.stats


async def test_engine_creates_and_submits_within_account_limit(
    sandbox: tuple[Any, BankClient],
) -> None:
    """Every row ends submitted and the account never sees more than 3 submits at once."""
    app, client = sandbox
    rows = await _rows(client, 30)
    book = RowBook(rows)
    result = await _execute(client, book, rows)
    assert result.created == 30 and result.submitted == 30
    assert {r.status for r in book.all()} == {RowStatus.SUBMITTED}
    stats = _stats(app)
    assert max(stats.max_concurrent_submits.values()) == 3
    assert stats.max_in_flight <= 50
    assert sum(stats.rate_limited.values()) == 0


async def test_engine_respects_lower_limits(sandbox: tuple[Any, BankClient]) -> None:
    """One submit per account and a 5-request limiter are never exceeded."""
    app, client = sandbox
    rows = await _rows(client, 12)
    transport = client._transport  # noqa: SLF001
    client_limited = BankClient(transport, SETTINGS, limiter=AdaptiveLimiter(5))
    result = await _execute(
        client_limited, RowBook(rows), rows, per_account_submits=1, create_workers=5
    )
    assert result.submitted == 12
    assert max(_stats(app).max_concurrent_submits.values()) == 1
    assert client_limited.limiter.peak <= 5


async def test_create_only_submits_nothing(sandbox: tuple[Any, BankClient]) -> None:
    """With create_only the rows end created and no submission exists."""
    _, client = sandbox
    rows = await _rows(client, 5)
    book = RowBook(rows)
    result = await _execute(client, book, rows, create_only=True)
    assert result.created == 5 and result.submitted == 0
    for row in book.all():
        assert row.status is RowStatus.CREATED and row.payment_url
        assert await client.payment_submissions(row.payment_url) == []


async def test_stop_starts_nothing_new(sandbox: tuple[Any, BankClient]) -> None:
    """Once stop is set no further create starts: rows not begun stay pending."""
    _, client = sandbox
    rows = await _rows(client, 40)
    flag = StopSignal()
    book = RowBook(
        rows,
        on_change=lambda b, a: flag.request() if a.status is RowStatus.CREATED else None,
    )
    await _execute(client, book, rows, create_workers=2, stop=flag)
    statuses = [r.status for r in book.all()]
    assert statuses.count(RowStatus.PENDING) >= 30
    assert RowStatus.CREATING not in statuses


def _ledger_of(path: Path, rows: list[LedgerRow]) -> Ledger:
    """A real ledger file holding ``rows``, bound to their account and payee."""
    ledger = Ledger.open(path)
    verdicts = [
        RowVerdict(
            r.row,
            PaymentInstruction(
                row=r.row,
                payee_name=r.payee_name,
                sort_code=r.sort_code,
                account_number=r.account_number,
                amount=r.amount,
                reference=r.reference,
                source_account=r.source_account,
            ),
            {},
        )
        for r in rows
    ]
    info = BatchInfo(
        file_path="f",
        file_sha256="s",
        valid_count=len(rows),
        valid_total=sum((r.amount for r in rows), Decimal(0)),
    )
    ledger.start(info, verdicts)
    ledger.update_many(
        [r.row for r in rows], account_url=rows[0].account_url, payee_url=rows[0].payee_url
    )
    return ledger


@pytest.mark.parametrize("stop_on", [RowStatus.CREATED, RowStatus.SUBMITTED])
async def test_a_stop_leaves_only_sent_rows_in_an_intent_state_on_disk(
    sandbox: tuple[Any, BankClient], tmp_path: Path, stop_on: RowStatus
) -> None:
    """Intents are committed a few rows ahead of their turn. When a stop ends the pass,
    those whose turn never came are put back: every row the ledger shows creating was
    created at the bank, every row it shows submitting was submitted, and the rows not
    begun are pending (or created) as before, with no attempt counted."""
    _, client = sandbox
    ledger = _ledger_of(tmp_path / "b.ledger.sqlite", await _rows(client, 40))
    flag = StopSignal()
    book = RowBook(
        ledger.rows(),
        ledger=ledger,
        on_change=lambda b, a: flag.request() if a.status is stop_on else None,
    )
    await _execute(client, book, book.all(), create_workers=2, stop=flag)
    account_url = book.get(2).account_url
    assert account_url is not None
    made = {
        p.amount: p
        async for p in client.payments(account_url, created_since=datetime(2000, 1, 1, tzinfo=UTC))
    }
    disk = {row.row: row for row in ledger.rows()}

    def state(row: LedgerRow) -> tuple[Any, ...]:
        return row.status, row.attempts, row.intent_at, row.payment_url, row.submission_url

    assert {n: state(r) for n, r in disk.items()} == {r.row: state(r) for r in book.all()}
    statuses = [row.status for row in disk.values()]
    assert statuses.count(RowStatus.PENDING) >= 25  # the stop came early
    for row in disk.values():
        sent = made.get(row.amount)
        if row.status in {RowStatus.CREATING, RowStatus.CREATED}:
            assert sent is not None, row
        if row.status is RowStatus.SUBMITTING:
            assert sent is not None and sent.latest_submission_url is not None, row
        if row.status is RowStatus.CREATED:
            assert sent is not None and sent.latest_submission_url is None, row
        if row.status is RowStatus.PENDING:
            assert sent is None and row.attempts == 0 and row.intent_at is None, row
    ledger.close()


async def test_rejected_create_fails_the_row(sandbox: tuple[Any, BankClient]) -> None:
    """A 422 from the bank fails the row with the bank's reason; nothing else is sent for it."""
    _, client = sandbox
    rows = await _rows(client, 1)
    big = [rows[0]._replace(amount=Decimal("2000000.00"))]
    book = RowBook(big)
    result = await _execute(client, book, big, create_workers=5)
    assert result.failed == 1
    row = book.all()[0]
    assert row.status is RowStatus.FAILED and row.error


async def test_unknown_outcome_is_left_for_reconciliation() -> None:
    """A 500 after create leaves the row 'creating' (never resent blindly)."""
    app = create_app(seed=default_seed(), api_key=SECRET, fault_rate=1.0, fault_kinds=("500",))
    async with BankClient(asgi_transport(app), SETTINGS, retry=RetryPolicy.no_wait()) as client:
        rows = await _rows(client, 3)
        book = RowBook(rows)
        result = await _execute(client, book, rows, create_workers=5)
    assert result.unknown == 3
    assert {r.status for r in book.all()} == {RowStatus.CREATING}
    stats = app.state.sandbox.stats
    assert stats.faults_injected["500"] == 3  # exactly one create per row: nothing resent
    assert all(r.intent_at is not None and r.intent_at <= datetime.now(UTC) for r in book.all())


async def test_a_revoked_key_mid_run_stops_everything_cleanly(
    sandbox: tuple[Any, BankClient],
) -> None:
    """A 401 mid-run is fatal: queued creates and submits are dropped, nothing new starts."""
    app, client = sandbox
    rows = await _rows(client, 40)
    created = []

    def on_change(before: LedgerRow, after: LedgerRow) -> None:
        if after.status is RowStatus.CREATED:
            created.append(after.row)
            if len(created) == 3:  # the key is revoked at the bank while requests fly
                app.state.sandbox.api_key_secret = "revoked"

    book = RowBook(rows, on_change=on_change)
    result = await _execute(client, book, rows, per_account_submits=1, create_workers=2)
    assert isinstance(result.fatal, AuthError)
    statuses = [r.status for r in book.all()]
    # at most the 2 creates and 1 submit in flight when the key went were answered 401
    assert len(created) <= 3 + 2
    assert statuses.count(RowStatus.PENDING) >= 40 - len(created) - 2
    assert RowStatus.CREATING not in statuses and RowStatus.SUBMITTING not in statuses


class _GoesDown(httpx.AsyncBaseTransport):
    """The sandbox in-process until ``down``; then every connection is refused (never sent,
    once the test transport maps it)."""

    def __init__(self, app: Any) -> None:
        self.inner = httpx.ASGITransport(app=app)
        self.down = False
        self.refused = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            self.refused += 1
            msg = "connection refused"
            raise httpx.ConnectError(msg, request=request)
        return await self.inner.handle_async_request(request)


async def test_a_bank_gone_mid_run_stops_the_pass_instead_of_retrying_every_row() -> None:
    """The bank stops answering after 3 creates: the first request to exhaust its retries
    stops the pass (nothing new starts), so the other rows do not each wait out their own
    retries; they stay pending for the rerun, and no row is left half-done."""
    app = create_app(seed=default_seed(), api_key=SECRET, latency_ms=5)
    transport = _GoesDown(app)
    http = HttpxTransport(transport)
    async with BankClient(http, SETTINGS, retry=RetryPolicy.no_wait(attempts=3)) as client:
        rows = await _rows(client, 40)
        created: list[int] = []

        def on_change(before: LedgerRow, after: LedgerRow) -> None:
            if after.status is RowStatus.CREATED:
                created.append(after.row)
                transport.down = len(created) >= 3

        book = RowBook(rows, on_change=on_change)
        result = await _execute(client, book, rows, per_account_submits=1, create_workers=2)
    assert result.unreachable and result.deferred >= 1
    assert transport.refused <= 3 * (2 + 1)  # the requests in flight, 3 attempts each
    statuses = [r.status for r in book.all()]
    assert statuses.count(RowStatus.PENDING) >= 40 - len(created) - 2
    assert RowStatus.CREATING not in statuses and RowStatus.SUBMITTING not in statuses


async def test_outcomes_reach_the_ledger_within_a_flush_period_while_submits_drain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the last create, an account's remaining submits use intents committed ahead
    (no commit of their own): their outcomes still reach the disk within the engine's
    flush period (1 s), not only at the end of the pass."""
    import time

    async with _bank(300) as (_, c):
        ledger = _ledger_of(tmp_path / "lag.ledger.sqlite", await _rows(c, 12))  # 3.6 s of submits
        book = RowBook(ledger.rows(), ledger=ledger)
        noted: dict[int, float] = {}
        lags: list[float] = []
        record, update_each = RowBook.record, Ledger.update_each

        def timed_record(self: RowBook, row: int, **values: Any) -> Any:
            if values.get("status") is RowStatus.SUBMITTED:
                noted[row] = time.monotonic()
            return record(self, row, **values)

        def timed_update_each(self: Ledger, changes: Any) -> None:
            changes = list(changes)
            for row, values in changes:
                if values.get("status") is RowStatus.SUBMITTED and row in noted:
                    lags.append(time.monotonic() - noted.pop(row))
            update_each(self, changes)

        monkeypatch.setattr(RowBook, "record", timed_record)
        monkeypatch.setattr(Ledger, "update_each", timed_update_each)
        await _execute(c, book, book.all(), per_account_submits=1, create_workers=8)
        ledger.close()
    assert len(lags) == 12 and not noted
    assert max(lags) < 1.5, sorted(lags)  # without the flush: 1.2-3.6 s (up to 12 round trips)


async def test_the_sign_of_life_stays_on_time_while_requests_only_wait_for_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While no intent is committed (every request waits for a slow answer), the engine's
    watcher still commits alive_at as soon as ``ALIVE_SECONDS`` have passed, within one
    look at the stop flag (0.25 s), not only with the once-a-second flush of outcomes."""
    import time

    import payrun.run._book

    monkeypatch.setattr(payrun.run._book, "ALIVE_SECONDS", 0.3)
    async with _bank(0) as (app, c):
        ledger = _ledger_of(tmp_path / "alive.ledger.sqlite", await _rows(c, 1))
        app.latency_s = 2.5  # one create, answered after 2.5 s: no intent meanwhile
        book = RowBook(ledger.rows(), ledger=ledger)
        marks: list[float] = []
        set_batch = Ledger.set_batch

        def timed_set_batch(self: Ledger, **values: Any) -> None:
            if "alive_at" in values:
                marks.append(time.monotonic())
            set_batch(self, **values)

        monkeypatch.setattr(Ledger, "set_batch", timed_set_batch)
        await _execute(c, book, book.all(), create_only=True)
        ledger.close()
    gaps = [later - earlier for earlier, later in itertools.pairwise(marks)]
    assert len(marks) >= 5, marks
    assert max(gaps) < 0.9, gaps  # due every 0.3 s, seen within 0.25 s; with the 1 s flush: 1.0 s


async def test_an_account_held_open_takes_more_rows_and_pays_each_once(
    sandbox: tuple[Any, BankClient],
) -> None:
    """Rows of an account given in three parts (``more``) while it pays: each created and
    submitted once, 3 submits at most; a lane held open ends once released, and one still
    held when the engine is sealed ends then (no engine waits for rows that never come)."""
    app, client = sandbox
    rows = await _rows(client, 30)
    book = RowBook(rows)
    for release, parts in ((True, [rows[:5], rows[5:15], rows[15:20]]), (False, [rows[20:]])):
        limits = EngineLimits(per_account_submits=3, create_workers=50, settle_wait=1.0)
        engine = PayingEngine(client, book, limits, stop=StopSignal())
        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                group.start_soon(engine.run)
                for part in parts:
                    engine.add(part, [], more=True)
                    await anyio.sleep(0.03)
                if release:
                    engine.release(rows[0].account_url or "")
                engine.seal()
    assert {r.status for r in book.all()} == {RowStatus.SUBMITTED}
    groups = app.state.sandbox.payment_groups()
    assert len(groups) == 30
    assert all(g["payments"] == 1 and g["submissions"] == 1 for g in groups)
    assert max(_stats(app).max_concurrent_submits.values()) <= 3
