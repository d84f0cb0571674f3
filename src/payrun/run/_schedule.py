"""The schedulers around the paying engine: the first pass, which pays each account as soon
as its checks are done (``FirstPass``), and the rounds after it (``execute_rounds``), which
check rows in doubt once their settle time comes and send what may be sent again.

Which rows a pass may send is one rule (``sendable``), and every pass's engine is built in
one place (``new_engine``).

An orchestrator, after ``_checks`` and before ``_pipeline``: it sequences the checks,
execution, settling and reconciliation of each pass; the phases import no orchestrator.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime
from typing import TYPE_CHECKING

import anyio

from payrun._models import LedgerRow, RowStatus, utc_now
from payrun.run._checks import check_before_paying, confirm_run, guard, whole_batch_first
from payrun.run._doubt import IN_DOUBT
from payrun.run._execute import EngineLimits, ExecutionResult, PayingEngine, execute_rows
from payrun.run._gate import WriteGate
from payrun.run._matching import PaymentCheck
from payrun.run._organization import LIVE_MODE
from payrun.run._outcome import NOT_PAID, UNPAID
from payrun.run._reconcile import reconcile_rows
from payrun.run._settle import remember_late_answers
from payrun.run._state import RunState

# Imported at run time only when a bank is called (keeps `validate` fast)
if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from payrun.bank import BankAccount
    from payrun.run._preflight import PayeeKey

__all__ = ["FirstPass", "execute_rounds", "new_engine", "sendable"]

_MAX_ROUNDS = 6


def new_engine(run: RunState, accounts: int) -> PayingEngine:
    """An engine for a pass of the run, sharing its create workers among ``accounts``."""
    checks = run.checks
    return PayingEngine(
        run.client,
        run.book,
        EngineLimits.of(run.options),
        stop=run.stop,
        check=PaymentCheck(checks.payee_details, checks.payee_srds),
        accounts=accounts,
    )


def sendable(
    run: RunState, now: datetime, account_url: str | None = None
) -> tuple[list[LedgerRow], list[LedgerRow]]:
    """The rows (of ``account_url``, or of every account) a pass may create: pending, with a
    payee and an account the bank showed, and none that could be taken for a row in doubt
    still waiting; and those it may submit: created (none with ``--create-only``)."""
    book, checks = run.book, run.checks
    rows = (
        book.in_status(RowStatus.PENDING, RowStatus.CREATED)
        if account_url is None
        else checks.rows_of(account_url, RowStatus.PENDING, RowStatus.CREATED)
    )
    to_create = run.doubt.may_create(
        (
            r
            for r in rows
            if r.status is RowStatus.PENDING and r.payee_url and r.account_url in checks.accounts
        ),
        now,
    )
    to_submit = (
        []
        if run.options.create_only
        else [r for r in rows if r.status is RowStatus.CREATED and r.account_url in checks.accounts]
    )
    return to_create, to_submit


class FirstPass:
    """The run's checks and its first execution pass, together: each account is paid as
    soon as its own checks are done, through ``WriteGate`` (a live-mode organization's run,
    or one of an approved plan, creates nothing before every account is checked)."""

    def __init__(self, run: RunState, *, until: datetime | None) -> None:
        """``until``: when the bank may no longer carry out requests of rows in doubt (None:
        it can no longer)."""
        self._run = run
        self._until = until
        checks = run.checks
        self.engine = new_engine(
            run, sum(1 for p in checks.plans.values() if p.account and not p.problem)
        )
        # An approved plan's new payees are checked before any create, as in live mode
        live = run.org.mode == LIVE_MODE or run.options.plan is not None
        self.gate = WriteGate(checks.accounts, hold=live)
        self._read_error: Exception | None = None
        self._errors: list[Exception] = []

    async def run(self, *, found_only: bool) -> list[int]:
        """Check and pay; the rows a person must look at. Raises what the checks raised
        (the first failed read in the checks' order), once the payments under way ended."""
        attention: list[int] = []
        run = self._run
        async with anyio.create_task_group() as group:
            group.start_soon(self.engine.run)
            group.start_soon(self._when_all_checked)
            try:
                if whole_batch_first(run.book):
                    attention = await check_before_paying(
                        run,
                        reconcile=True,
                        submit_approved=not run.options.create_only,
                        found_only=found_only,
                        gate=self.gate,
                    )
                    if self._until is not None:
                        run.doubt.add(run.book.in_status(*IN_DOUBT), self._until)
                    if await self.gate.wait():
                        self._pay(None)
                else:
                    await self._account_by_account()
                    # Accounts there may be none of
                    self.gate.checked_all()
            except Exception as exc:
                self._read_error = exc
                self._fail()
            self.engine.seal()
        error = self._read_error or (self._errors[0] if self._errors else None)
        if error is not None:
            raise error
        return attention

    @property
    def result(self) -> ExecutionResult:
        """What the first execution pass did."""
        return self.engine.result

    async def _account_by_account(self) -> None:
        async with anyio.create_task_group() as accounts:

            def ready(account: BankAccount) -> None:
                self._account(accounts, account)

            # Live mode (and a plan's run) creates nothing before every account is checked
            early = None if self.gate.holds else self._early
            try:
                await self._run.checks.read_accounts(ready, early)
            except Exception as exc:
                # Raised once every account's waiter has ended
                self._read_error = exc
                self._fail()

    def _account(self, group: TaskGroup, account: BankAccount) -> None:
        """One account's read-only checks, then its payees and payments: at once when the
        gate is open and it needs no new payee (the first payment goes out without a turn
        of the event loop more), else in a task of ``group`` that waits for the gate."""
        url = account.url
        try:
            missing = guard(self._run, [url])
            self.gate.checked(url)
            if missing or self.gate.holds:
                group.start_soon(self._account_writes, url, missing)
            elif not self.gate.failed:
                self._pay(url)
        except Exception as exc:  # noqa: BLE001 - raised by ``run`` once payments ended
            self._errors.append(exc)
            self._fail()

    async def _account_writes(self, url: str, missing: Mapping[PayeeKey, list[LedgerRow]]) -> None:
        """Once the gate allows: an account's new payees, then its payments."""
        try:
            if not await self.gate.wait():
                return
            await self._run.checks.create_payees(missing)
            self._pay(url)
        except Exception as exc:  # noqa: BLE001 - raised by ``run`` once payments ended
            self._errors.append(exc)
            self._fail()

    def _early(self, account: BankAccount, rows: list[LedgerRow]) -> None:
        """Rows of an account paid while its owner's payees are still read (``take_early``);
        the engine keeps the account's lane open for the rest."""
        if not self.gate.failed:
            self.engine.add(self._run.doubt.may_create(rows, utc_now()), [], more=True)

    def _pay(self, account_url: str | None) -> None:
        """Give the engine an account's rows (every account's when None): all it has left
        to pay (``take_early`` took the others), and no more of them will come."""
        self.engine.add(*sendable(self._run, utc_now(), account_url))
        if account_url is not None:
            self.engine.release(account_url)

    def _fail(self) -> None:
        """Nothing more is created: payments under way finish."""
        self.gate.fail()
        self.engine.halt()

    async def _when_all_checked(self) -> None:
        """Once every account is checked: say what is paid, and open the gate."""
        if not await self.gate.all_checked():
            return
        # A live run shows what it will pay and asks, before anything is created
        try:
            await confirm_run(self._run)
        except Exception as exc:  # noqa: BLE001 - raised by ``run`` once payments ended
            self._errors.append(exc)
            self._fail()
            return
        book, planned = self._run.book, self.engine.planned
        settled = (*UNPAID, RowStatus.CREATED)
        rows = [r for r in book.all() if r.row not in planned]
        done = sum(1 for r in rows if r.status not in settled)
        not_paid = sum(1 for r in rows if r.status in NOT_PAID)
        # An account whose checks passed first may have paid rows already
        unfinished = settled if not self._run.options.create_only else UNPAID
        paid_early = [r for r in book.all() if r.row in planned and r.status not in unfinished]
        self._run.watcher.started(
            total=len(book),
            done=done,
            not_paid=not_paid,
            settled=len(paid_early),
            settled_not_paid=sum(1 for r in paid_early if r.status in NOT_PAID),
        )
        self.gate.open()


async def execute_rounds(
    run: RunState, attention: list[int], first: ExecutionResult
) -> tuple[list[int], bool]:
    """After the ``first`` execution pass (run with the checks): check with the bank the rows
    in doubt whose settle time has come, execute every row that may be sent, and go again
    while progress is possible; wait for the next settle time when only rows in doubt are
    left. Returns the rows needing attention, and whether the bank was found unreachable."""
    book, doubt, stop = run.book, run.doubt, run.stop
    unreachable = False
    answered_otherwise: set[int] = set()
    retries = passes = 0
    # Rows let go from doubt since the last pass: new work, not a retry
    released = False
    shown: tuple[int, datetime | None] = (0, None)
    result: ExecutionResult | None = first
    while True:
        if result is None:
            if stop.is_set() or passes >= 2 * _MAX_ROUNDS:
                break
            now = utc_now()
            ready = doubt.ready(book.in_status(*IN_DOUBT), now)
            if ready:
                attention = await _check_ready(run, ready, answered_otherwise)
                sendable_now = (RowStatus.PENDING, RowStatus.CREATED)
                released = released or any(book.get(r.row).status in sendable_now for r in ready)
            shown = _show_doubt(run, now, shown)
            to_create, to_submit = sendable(run, now)
            if not (to_create or to_submit):
                if not await _wait_for_settle_time(run, now):
                    break
                continue
            # Only rows left over from the last pass: a retry, after a pause
            if not released:
                if retries >= _MAX_ROUNDS:
                    break
                await anyio.sleep(min(2.0**retries, 10.0) / 4 if retries else 0)
                retries += 1
            released = False
            passes += 1
            accounts = {r.account_url for r in to_create} | {r.account_url for r in to_submit}
            engine = new_engine(run, len(accounts - {None}))
            result = await execute_rows(engine, to_create, to_submit)
        _after_pass(run, result)
        answered_otherwise |= result.answered_otherwise
        unreachable = result.unreachable
        result = None
        # A rerun finishes: nothing is paid twice
        if unreachable:
            break
    _show_doubt(run, utc_now(), shown)
    return attention, unreachable


def _after_pass(run: RunState, result: ExecutionResult) -> None:
    """Keep until when the bank may still carry out the pass's requests whose answer was
    lost (for this run's check and, if stopped, the next), and put their rows in doubt;
    raise what stopped the pass for good."""
    late = remember_late_answers(run.paying_ledger, result)
    if late is not None:
        doubt = run.doubt
        doubt.add((r for r in run.book.in_status(*IN_DOUBT) if r.row not in doubt), late)
    if result.fatal is not None:
        raise result.fatal


async def _check_ready(
    run: RunState, ready: list[LedgerRow], answered_otherwise: Collection[int]
) -> list[int]:
    """Check with the bank the rows in doubt whose settle time has come: what it shows is
    recorded, the others are let go to be sent. The rows a person must look at."""
    return await reconcile_rows(
        run, answered_otherwise=answered_otherwise, rows={r.row for r in ready}
    )


async def _wait_for_settle_time(run: RunState, now: datetime) -> bool:
    """Wait for the next row in doubt's settle time; False when none is left or the run was
    asked to stop."""
    due = run.doubt.next_due(now)
    return due is not None and await run.stop.wait_until(
        anyio.current_time() + (due - now).total_seconds()
    )


def _show_doubt(
    run: RunState, now: datetime, shown: tuple[int, datetime | None]
) -> tuple[int, datetime | None]:
    """Tell the observer how many rows are in doubt and until when, if that changed; return
    what it was told."""
    waiting = run.doubt.waiting(now)
    now_shown = (len(waiting), run.doubt.last_due(now))
    if now_shown != shown:
        run.watcher.in_doubt(count=now_shown[0], until=now_shown[1])
    return now_shown
