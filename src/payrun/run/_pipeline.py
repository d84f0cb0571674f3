"""The whole run on one screen: read -> validate -> ledger -> preflight -> execute -> track.

Input: a batch file, ``Settings`` for the bank, ``ValidationOptions`` and ``RunOptions``.
Output: a ``RunOutcome`` (every row's final state, the exit code, where the ledger is).
Raises ``UsageError`` (bad file, control totals), ``LedgerError`` (ledger of another
file, bank or organization; locked), ``BankError`` (bank unreachable, API key refused).
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import anyio

from payrun._models import BatchInfo, LedgerRow, PayeeCheck, RowStatus, utc_now
from payrun.config import RunOptions, Settings, ValidationOptions
from payrun.errors import InterruptedRunError, LedgerError, first_payrun_error
from payrun.ledger import (
    LedgerLocation,
    LedgerStore,
    bank_identity,
    check_batch_lock,
    discard_if_refused,
    ledger_location,
    open_ledger,
)
from payrun.run import _start as run_start
from payrun.run._approvals import refresh_created
from payrun.run._book import RowBook
from payrun.run._confirm import Confirmer, confirm_live_run, preview_run, refuse_unconfirmable
from payrun.run._execute import ExecutionResult, PayingEngine, execute_rows
from payrun.run._gate import LIVE_MODE, WriteGate
from payrun.run._organization import find_organization
from payrun.run._planned import hold_unplanned, refuse_unplanned_payees
from payrun.run._preflight import AccountPlan, Preflight
from payrun.run._reconcile import reconcile_rows
from payrun.run._settle import (
    IN_DOUBT,
    InDoubt,
    bank_may_still_finish,
    doubt_until,
    remember_late_answers,
)
from payrun.run._stop import StopSignal
from payrun.run._track import follow_submissions

# Imported at run time only when a bank is called (keeps `validate` fast)
if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from payrun.bank import BankAccount, BankClient, Organization
    from payrun.run._preflight import PayeeKey

__all__ = [
    "RunObserver",
    "RunOutcome",
    "event_loop_options",
    "run_batch",
    "run_exit_code",
    "run_stored_batch",
]

_MAX_ROUNDS = 6
# Each wake-up costs CPU; a quarter second is prompt enough
_STOP_POLL_SECONDS = 0.25
_GC_YOUNG_THRESHOLD = 50_000
_UNPAID = (RowStatus.PENDING, RowStatus.CREATING, RowStatus.SUBMITTING)
_NOT_PAID = (
    RowStatus.INVALID,
    RowStatus.HELD,
    RowStatus.FAILED,
    RowStatus.RETURNED,
    RowStatus.REJECTED,
)


class RunObserver(Protocol):
    """Receives progress: the CLI draws a bar or writes log lines from it."""

    def started(
        self,
        *,
        total: int,
        done: int,
        not_paid: int = 0,
        settled: int = 0,
        settled_not_paid: int = 0,
    ) -> None:
        """The run begins paying ``total`` rows, ``done`` of them already finished, of which
        ``not_paid`` will not be paid (invalid, held, failed, returned, rejected).
        ``settled``: rows this run already finished before this call (an account pays as
        soon as its own checks pass, maybe before the others' end), ``settled_not_paid`` of
        them not paid; their changes came before this call, and count as done."""

    def row_changed(self, before: LedgerRow, after: LedgerRow) -> None:
        """A row moved from one status to another (already committed to the ledger)."""

    def note(self, message: str) -> None:
        """A line worth telling the user (a phase, a warning)."""

    def in_doubt(self, *, count: int, until: datetime | None) -> None:
        """``count`` rows are in doubt until ``until`` (their requests may still be carried
        out: they are checked with the bank then); 0 and None once none waits."""


@dataclass(slots=True)
class RunOutcome:
    """How a run ended: rows, per-account plans, exit code and where things were written."""

    # Not in repr: asyncio may repr a finished task's result, and 100k rows make 130 MB.
    rows: list[LedgerRow] = field(repr=False)
    plans: list[AccountPlan] = field(repr=False)
    ledger_path: LedgerLocation | None
    dry_run: bool = False
    interrupted: bool = False
    attention: list[int] = field(default_factory=list)
    exit_code: int = 0
    # Why --wait ended with payments not final (ran out, no answer)
    wait_ended: str | None = None
    # Rows whose status this run changed: 0 is a rerun that found nothing to do (None: not
    # counted)
    changed: int | None = None
    # A plan's dry run: the new payees' Confirmation of Payee answers
    payee_checks: list[PayeeCheck] = field(default_factory=list, repr=False)


class _Quiet:
    def started(self, *, total: int, done: int, not_paid: int = 0, **_: int) -> None:
        """Ignore."""

    def row_changed(self, before: LedgerRow, after: LedgerRow) -> None:
        """Ignore."""

    def note(self, message: str) -> None:
        """Ignore."""

    def in_doubt(self, *, count: int, until: datetime | None) -> None:
        """Ignore."""


def run_exit_code(
    rows: list[LedgerRow], *, create_only: bool, wait: bool, dry_run: bool, interrupted: bool
) -> int:
    """0 all paid, 1 some rows invalid/held/failed, 3 incomplete (run again)."""
    statuses = {row.status for row in rows}
    if dry_run:
        return 1 if statuses & set(_NOT_PAID) else 0
    unfinished = set(_UNPAID)
    if not create_only:
        unfinished.add(RowStatus.CREATED)
    if wait:
        unfinished.add(RowStatus.SUBMITTED)
    if interrupted or statuses & unfinished:
        return 3
    return 1 if statuses & set(_NOT_PAID) else 0


async def run_batch(
    batch_path: Path,
    settings: Settings,
    *,
    validation: ValidationOptions,
    options: RunOptions,
    observer: RunObserver | None = None,
    stop: StopSignal | None = None,
    confirmer: Confirmer | None = None,
) -> RunOutcome:
    """Pay a batch file exactly once (or, with ``dry_run``, check what a run would do).

    ``stop`` is how the caller asks the run to stop (the CLI requests it on Ctrl-C and
    SIGTERM): nothing new starts, in-flight requests finish, and the outcome says so.
    ``confirmer`` asks a person before a live-mode organization's run creates anything;
    without one (and without ``options.assume_yes``) such a run is refused.
    """
    watcher = observer or _Quiet()
    ledger_path = ledger_location(options.ledger_path, batch_path)
    stop = stop or StopSignal()
    if options.dry_run:
        book, info = run_start.dry_run_book(batch_path, ledger_path, validation, options)
        # Then a run would wait before it checks
        late = bank_may_still_finish(ledger_path, settle_wait=options.settle_wait)
        dry = functools.partial(
            _dry_run,
            book=book,
            settings=settings,
            options=options,
            late=late,
            recorded=(info, str(ledger_path)),
        )
        return await _with_client(settings, options, dry)
    ledger = run_start.open_run_ledger(batch_path, ledger_path, validation, options)
    outcome = await _pay_ledger(ledger, settings, options, watcher, stop, confirmer=confirmer)
    outcome.ledger_path = ledger_path
    return outcome


async def run_stored_batch(
    location: LedgerLocation,
    settings: Settings,
    *,
    options: RunOptions,
    observer: RunObserver | None = None,
    stop: StopSignal | None = None,
) -> RunOutcome:
    """Pay a batch whose rows a ledger already holds (``payrun fleet submit`` stored them),
    exactly as ``run_batch`` pays a file's: the same phases, limits and resume.

    Raises ``LedgerError`` when the ledger holds no such batch (nothing is created).
    """
    ledger = open_ledger(location)
    try:
        info = ledger.batch()
        if info is None or not info.file_sha256:
            msg = f"the ledger {ledger.location} holds no rows of this batch: submit it first"
            raise LedgerError(msg)
    except BaseException:
        if ledger.created:
            ledger.discard()
        else:
            ledger.close()
        raise
    outcome = await _pay_ledger(
        ledger, settings, options, observer or _Quiet(), stop, confirmer=None
    )
    outcome.ledger_path = location
    return outcome


async def _pay_ledger(
    ledger: LedgerStore,
    settings: Settings,
    options: RunOptions,
    watcher: RunObserver,
    stop: StopSignal | None,
    *,
    confirmer: Confirmer | None,
) -> RunOutcome:
    """Pay the open ledger's rows, then close it; a refused first run removes it."""
    stop = stop or StopSignal()
    changed = 0

    def row_changed(before: LedgerRow, after: LedgerRow) -> None:
        nonlocal changed
        changed += before.status is not after.status
        watcher.row_changed(before, after)

    try:
        book = RowBook(ledger.rows(), ledger=ledger, on_change=row_changed)
        with _collector_tuned():
            outcome = await _with_client(
                settings,
                options,
                lambda c: _guarded(
                    stop,
                    lambda: _pay(
                        c, ledger, book, settings, options, watcher, stop, confirmer=confirmer
                    ),
                ),
            )
        ledger.check_in_place()
        ledger.set_batch(ended_at=utc_now())
    except BaseException as exc:
        if ledger.created:
            # A refused first run leaves no ledger behind
            discard_if_refused(ledger, exc)
        raise
    finally:
        ledger.close()
    outcome.changed = changed
    return outcome


@contextmanager
def _collector_tuned() -> Iterator[None]:
    """Collect garbage less often while paying, then restore the caller's settings.

    Each request makes short-lived containers (JSON, HTTP state) and the book holds every
    row: with the default thresholds, garbage collection took about 20% of a 100,000-row
    run's CPU, mostly re-scanning objects that live for the whole run.
    """
    previous = gc.get_threshold()
    gc.set_threshold(_GC_YOUNG_THRESHOLD, *previous[1:])
    # What exists now (the book, the indexes) lives for the whole run
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*previous)


async def _with_client(
    settings: Settings, options: RunOptions, body: Callable[[BankClient], Awaitable[RunOutcome]]
) -> RunOutcome:
    from payrun.bank import AdaptiveLimiter, BankClient, make_transport

    transport = make_transport(max_connections=options.max_in_flight)
    limiter = AdaptiveLimiter(options.max_in_flight)
    async with BankClient(transport, settings, limiter=limiter) as client:
        return await body(client)


async def _guarded(stop: StopSignal, body: Callable[[], Awaitable[RunOutcome]]) -> RunOutcome:
    """Run ``body``; once ``stop`` must cut off (a second request, or 30 s), cancel it."""
    result: list[RunOutcome] = []
    try:
        async with anyio.create_task_group() as group:

            async def main() -> None:
                result.append(await body())
                group.cancel_scope.cancel()

            async def watch() -> None:
                # The flag is set by a signal handler, which cannot touch an anyio Event.
                while not stop.must_cut_off():  # noqa: ASYNC110
                    await anyio.sleep(_STOP_POLL_SECONDS)
                group.cancel_scope.cancel()

            group.start_soon(main)
            group.start_soon(watch)
    except BaseExceptionGroup as errors:
        _raise_first(errors)
        raise
    if not result:
        msg = (
            "stopped: nothing more was sent (a request already sent got its answer), and a"
            " request whose answer was not recorded is checked with the bank first; run the"
            " same command again to resume"
        )
        raise InterruptedRunError(msg)
    return result[0]


def _preflight(
    client: BankClient,
    org: Organization,
    book: RowBook,
    options: RunOptions,
    stop: StopSignal | None = None,
) -> Preflight:
    return Preflight(
        client,
        org,
        book,
        confirm_payees=options.confirm_payees,
        accept_close_match=options.accept_close_match,
        allow_repeat=options.allow_repeat,
        accept_changed_details=options.accept_changed_details,
        duplicate_window=timedelta(days=options.duplicate_window_days),
        dry_run=options.dry_run,
        stop=stop,
        planning=options.planning,
        planned_cop=options.plan.cop_requests if options.plan is not None else None,
    )


async def _dry_run(
    client: BankClient,
    book: RowBook,
    settings: Settings,
    options: RunOptions,
    *,
    late: bool,
    recorded: tuple[BatchInfo | None, str],
) -> RunOutcome:
    org = await find_organization(client, settings)
    # A ledger of another bank or organization: as a run, exit 2
    if recorded[0] is not None:
        run_start.refuse_other_bank(recorded[0], recorded[1], settings, org)
    checks = _preflight(client, org, book, options)
    # Held rows checked again, as in a run
    checks.recall_holds(run_start.reopen_unfinished(book))
    await checks.check_accounts()
    # A run paying these rows now has payments in flight that the bank does not show yet.
    check_batch_lock(book.all(), bank_identity(settings.base_url, org.url))
    # Reads only, as a run (which first waits out a late bank: rows mid-call stay started);
    # payments approved or rejected in the app are read, never submitted
    attention = await _check_before_paying(
        client, book, checks, reconcile=not late, submit_approved=False, options=options
    )
    rows = book.all()
    code = run_exit_code(rows, create_only=False, wait=False, dry_run=True, interrupted=False)
    return RunOutcome(
        rows=rows,
        plans=list(checks.plans.values()),
        ledger_path=None,
        dry_run=True,
        attention=attention,
        exit_code=max(code, 1 if attention else 0),
        payee_checks=sorted(checks.payee_checks, key=lambda check: check.rows),
    )


async def _check_before_paying(
    client: BankClient,
    book: RowBook,
    checks: Preflight,
    *,
    reconcile: bool,
    submit_approved: bool,
    options: RunOptions,
    found_only: bool = False,
    gate: WriteGate | None = None,
) -> list[int]:
    """The preflight a run and a dry run share once the batch lock allows it, for the whole
    batch at once: the accounts' restrictions, the bank's payees and payments, rows left
    mid-call (``found_only``: before their settle time, only what the bank shows is
    recorded), payments approved in the bank's app, repeats, changed bank details, balances
    and payees (created once ``gate`` lets them). Returns the rows a person must look at."""
    await checks.read_accounts()
    attention = (
        await reconcile_rows(
            client,
            book,
            accounts=checks.accounts,
            payee_details=checks.payee_details,
            payments=checks.payments,
            found_only=found_only,
        )
        if reconcile
        else []
    )
    await refresh_created(client, book, create_only=not submit_approved)
    checks.guard_repeats()
    checks.guard_changed_details()
    checks.check_balances(created=not options.create_only)
    missing = checks.find_payees()
    if gate is not None:
        gate.checked_all()
        if not await gate.wait():
            return attention
    await checks.create_payees(missing)
    return attention


def _whole_batch_first(book: RowBook) -> bool:
    """True when rows an earlier run left with the bank (mid-call, or with a payment) must be
    settled for the whole batch before any account pays."""
    mid_call = (RowStatus.CREATING, RowStatus.SUBMITTING)
    return any(row.payment_url or row.status in mid_call for row in book.all())


class _FirstPass:
    """The run's checks and its first execution pass, together: each account is paid as
    soon as its own checks are done, through ``WriteGate`` (a live-mode organization's run
    creates nothing before every account is checked)."""

    def __init__(
        self,
        client: BankClient,
        book: RowBook,
        checks: Preflight,
        options: RunOptions,
        stop: StopSignal,
        watcher: RunObserver,
        *,
        live: bool,
        confirm: Callable[[], Awaitable[None]],
        doubt: InDoubt,
        until: datetime | None,
    ) -> None:
        self._book = book
        self._checks = checks
        self._options = options
        self._watcher = watcher
        self._confirm = confirm
        self._doubt = doubt
        self._until = until
        self.engine = PayingEngine(
            client,
            book,
            per_account_submits=options.per_account_submits,
            create_workers=options.max_in_flight,
            create_only=options.create_only,
            stop=stop,
            payee_details=checks.payee_details,
            settle_wait=options.settle_wait,
            srds=checks.payee_srds,
            accounts=sum(1 for p in checks.plans.values() if p.account and not p.problem),
        )
        self.gate = WriteGate(checks.accounts, hold=live)
        self._read_error: Exception | None = None
        self._errors: list[Exception] = []

    async def run(self, client: BankClient, *, found_only: bool) -> list[int]:
        """Check and pay; the rows a person must look at. Raises what the checks raised
        (the first failed read in the checks' order), once the payments under way ended."""
        attention: list[int] = []
        async with anyio.create_task_group() as group:
            group.start_soon(self.engine.run)
            group.start_soon(self._when_all_checked)
            try:
                if _whole_batch_first(self._book):
                    attention = await _check_before_paying(
                        client,
                        self._book,
                        self._checks,
                        reconcile=True,
                        submit_approved=not self._options.create_only,
                        options=self._options,
                        found_only=found_only,
                        gate=self.gate,
                    )
                    if self._until is not None:
                        self._doubt.add(self._book.in_status(*IN_DOUBT), self._until)
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

            # Live mode creates nothing before every account is checked
            early = None if self.gate.holds else self._early
            try:
                await self._checks.read_accounts(ready, early)
            except Exception as exc:
                # Raised once every account's waiter has ended
                self._read_error = exc
                self._fail()

    def _account(self, group: TaskGroup, account: BankAccount) -> None:
        """One account's read-only checks, then its payees and payments: at once when the
        gate is open and it needs no new payee (the first payment goes out without a turn
        of the event loop more), else in a task of ``group`` that waits for the gate."""
        checks, url = self._checks, account.url
        try:
            checks.guard_repeats([url])
            checks.guard_changed_details()
            checks.check_balances(created=not self._options.create_only, accounts=[url])
            missing = checks.find_payees([url])
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
            await self._checks.create_payees(missing)
            self._pay(url)
        except Exception as exc:  # noqa: BLE001 - raised by ``run`` once payments ended
            self._errors.append(exc)
            self._fail()

    def _early(self, account: BankAccount, rows: list[LedgerRow]) -> None:
        """Rows of an account paid while its owner's payees are still read (``take_early``);
        the engine keeps the account's lane open for the rest."""
        if not self.gate.failed:
            self.engine.add(self._doubt.may_create(rows, utc_now()), [], more=True)

    def _pay(self, account_url: str | None) -> None:
        """Give the engine an account's rows (every account's when None): all it has
        left to pay (``take_early`` took the others)."""
        checks = self._checks
        rows = (
            self._book.in_status(RowStatus.PENDING, RowStatus.CREATED)
            if account_url is None
            else checks.rows_of(account_url, RowStatus.PENDING, RowStatus.CREATED)
        )
        # None that could be taken for a row in doubt still waiting for its settle time
        to_create = self._doubt.may_create(
            (
                r
                for r in rows
                if r.status is RowStatus.PENDING
                and r.payee_url
                and r.account_url in checks.accounts
            ),
            utc_now(),
        )
        to_submit = (
            []
            if self._options.create_only
            else [
                r
                for r in rows
                if r.status is RowStatus.CREATED and r.account_url in checks.accounts
            ]
        )
        self.engine.add(to_create, to_submit)
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
            await self._confirm()
        except Exception as exc:  # noqa: BLE001 - raised by ``run`` once payments ended
            self._errors.append(exc)
            self._fail()
            return
        planned = self.engine.planned
        settled = (*_UNPAID, RowStatus.CREATED)
        rows = [r for r in self._book.all() if r.row not in planned]
        done = sum(1 for r in rows if r.status not in settled)
        not_paid = sum(1 for r in rows if r.status in _NOT_PAID)
        # An account whose checks passed first may have paid rows already
        unfinished = settled if not self._options.create_only else _UNPAID
        paid_early = [
            r for r in self._book.all() if r.row in planned and r.status not in unfinished
        ]
        self._watcher.started(
            total=len(self._book),
            done=done,
            not_paid=not_paid,
            settled=len(paid_early),
            settled_not_paid=sum(1 for r in paid_early if r.status in _NOT_PAID),
        )
        self.gate.open()


async def _pay(
    client: BankClient,
    ledger: LedgerStore,
    book: RowBook,
    settings: Settings,
    options: RunOptions,
    watcher: RunObserver,
    stop: StopSignal,
    *,
    confirmer: Confirmer | None,
) -> RunOutcome:
    started = utc_now()
    org = await find_organization(client, settings)
    run_start.check_same_bank(ledger, settings, org)
    # No one to ask: refused before anything is read, waited for or created
    refuse_unconfirmable(org, options, confirmer)
    batch = ledger.batch()
    assert batch is not None
    # --wait reads the events from the batch's start
    if batch.started_at is not None:
        started = min(started, batch.started_at)
    run_start.reopen_unfinished(book)
    # run --plan: only the approved rows are paid
    if options.plan is not None:
        hold_unplanned(book, options.plan)
    checks = _preflight(client, org, book, options, stop)
    watcher.note("checking source accounts, payees and recent payments")
    await checks.check_accounts()
    # Taken once the accounts are the bank's (its row keys name them so), and before the
    # bank's payments are read or any payee or payment is made.
    bank = bank_identity(settings.base_url, org.url)
    with ledger.hold_batch(book.all(), bank, note=watcher.note):
        return await _pay_locked(
            client,
            ledger,
            book,
            checks,
            org,
            started,
            options,
            watcher,
            stop,
            confirmer=confirmer,
        )


async def _confirm(
    org: Organization,
    book: RowBook,
    checks: Preflight,
    options: RunOptions,
    confirmer: Confirmer | None,
) -> None:
    """A live-mode organization's run: show what is about to be paid and ask a person (or
    take ``--yes``); a test-mode one goes on. A run of a plan first refuses payees the plan
    did not count as new."""
    if options.plan is not None:
        refuse_unplanned_payees(checks.new_payees.values(), options.plan)
    preview = preview_run(
        org,
        book.all(),
        checks.accounts,
        # In the file's order: accounts find their new payees in the order their checks end
        [
            name
            for (_, name, _, _), rows in sorted(
                checks.new_payees.items(), key=lambda item: min(r.row for r in item[1])
            )
        ],
        create_only=options.create_only,
        confirm_payees=options.confirm_payees,
    )
    await confirm_live_run(org, preview, options, confirmer)


async def _pay_locked(
    client: BankClient,
    ledger: LedgerStore,
    book: RowBook,
    checks: Preflight,
    org: Organization,
    started: datetime,
    options: RunOptions,
    watcher: RunObserver,
    stop: StopSignal,
    *,
    confirmer: Confirmer | None,
) -> RunOutcome:
    # Kept in the ledger before anything is sent: a rerun waits out the same time
    until = doubt_until(ledger, book.in_status(*IN_DOUBT), settle_wait=options.settle_wait)
    doubt = InDoubt()
    attention: list[int] = []
    unreachable = False
    # Ctrl-C during the checks: not even a read starts
    if not stop.is_set():
        first = _FirstPass(
            client,
            book,
            checks,
            options,
            stop,
            watcher,
            # An approved plan's new payees are checked before any create, as in live mode
            live=org.mode == LIVE_MODE or options.plan is not None,
            confirm=lambda: _confirm(org, book, checks, options, confirmer),
            doubt=doubt,
            until=until,
        )
        # Rows in doubt are matched at once: what the bank shows is recorded, the rest wait
        attention = await first.run(client, found_only=until is not None)
        attention, unreachable = await _execute_rounds(
            client, ledger, book, checks, options, stop, watcher, attention, doubt, first.result
        )
    # Delivered rows too: a return can follow; an unreachable bank: a rerun
    followed = (
        await follow_submissions(
            client,
            org,
            book,
            since=started,
            stop=stop,
            wait_seconds=options.wait_timeout,
            note=watcher.note,
        )
        if options.wait and not stop.is_set() and not unreachable
        else None
    )
    rows = book.all()
    return RunOutcome(
        rows=rows,
        plans=list(checks.plans.values()),
        # ``run_batch`` says where the ledger is
        ledger_path=None,
        interrupted=stop.is_set(),
        attention=attention,
        wait_ended=None if followed is None else followed.ended,
        exit_code=run_exit_code(
            rows,
            create_only=options.create_only,
            wait=options.wait,
            dry_run=False,
            interrupted=stop.is_set(),
        ),
    )


async def _execute_rounds(
    client: BankClient,
    ledger: LedgerStore,
    book: RowBook,
    checks: Preflight,
    options: RunOptions,
    stop: StopSignal,
    watcher: RunObserver,
    attention: list[int],
    doubt: InDoubt,
    first: ExecutionResult,
) -> tuple[list[int], bool]:
    """After the ``first`` execution pass (run with the checks): check with the bank the rows
    in doubt whose settle time has come, execute every row that may be sent, and go again
    while progress is possible; wait for the next settle time when only rows in doubt are
    left. Returns the rows needing attention, and whether the bank was found unreachable."""
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
                attention = await _check_ready(client, book, checks, ready, answered_otherwise)
                sendable = (RowStatus.PENDING, RowStatus.CREATED)
                released = released or any(book.get(r.row).status in sendable for r in ready)
            shown = _show_doubt(watcher, doubt, now, shown)
            to_create, to_submit = _sendable(book, checks, options, doubt, now)
            if not (to_create or to_submit):
                if not await _wait_for_settle_time(doubt, now, stop):
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
            result = await execute_rows(
                client,
                book,
                to_create=to_create,
                to_submit=to_submit,
                per_account_submits=options.per_account_submits,
                create_workers=options.max_in_flight,
                create_only=options.create_only,
                stop=stop,
                payee_details=checks.payee_details,
                settle_wait=options.settle_wait,
            )
        _after_pass(ledger, book, doubt, result)
        answered_otherwise |= result.answered_otherwise
        unreachable = result.unreachable
        result = None
        # A rerun finishes: nothing is paid twice
        if unreachable:
            break
    _show_doubt(watcher, doubt, utc_now(), shown)
    return attention, unreachable


def _after_pass(
    ledger: LedgerStore, book: RowBook, doubt: InDoubt, result: ExecutionResult
) -> None:
    """Keep until when the bank may still carry out the pass's requests whose answer was
    lost (for this run's check and, if stopped, the next), and put their rows in doubt;
    raise what stopped the pass for good."""
    late = remember_late_answers(ledger, result)
    if late is not None:
        doubt.add((r for r in book.in_status(*IN_DOUBT) if r.row not in doubt), late)
    if result.fatal is not None:
        raise result.fatal


async def _check_ready(
    client: BankClient,
    book: RowBook,
    checks: Preflight,
    ready: list[LedgerRow],
    answered_otherwise: set[int],
) -> list[int]:
    """Check with the bank the rows in doubt whose settle time has come: what it shows is
    recorded, the others are let go to be sent. The rows a person must look at."""
    return await reconcile_rows(
        client,
        book,
        accounts=checks.accounts,
        payee_details=checks.payee_details,
        answered_otherwise=answered_otherwise,
        rows={r.row for r in ready},
    )


async def _wait_for_settle_time(doubt: InDoubt, now: datetime, stop: StopSignal) -> bool:
    """Wait for the next row in doubt's settle time; False when none is left or the run was
    asked to stop."""
    due = doubt.next_due(now)
    return due is not None and await stop.wait_until(
        anyio.current_time() + (due - now).total_seconds()
    )


def _sendable(
    book: RowBook, checks: Preflight, options: RunOptions, doubt: InDoubt, now: datetime
) -> tuple[list[LedgerRow], list[LedgerRow]]:
    """The rows a pass may create (pending, with a payee and an account the bank showed, and
    none that could be taken for a row in doubt still waiting) and submit (created)."""
    pending = book.in_status(RowStatus.PENDING)
    to_create = doubt.may_create(
        (r for r in pending if r.payee_url and r.account_url in checks.accounts), now
    )
    to_submit = (
        []
        if options.create_only
        else [r for r in book.in_status(RowStatus.CREATED) if r.account_url in checks.accounts]
    )
    return to_create, to_submit


def _show_doubt(
    watcher: RunObserver,
    doubt: InDoubt,
    now: datetime,
    shown: tuple[int, datetime | None],
) -> tuple[int, datetime | None]:
    """Tell the observer how many rows are in doubt and until when, if that changed; return
    what it was told."""
    waiting = doubt.waiting(now)
    now_shown = (len(waiting), doubt.last_due(now))
    if now_shown != shown:
        watcher.in_doubt(count=now_shown[0], until=now_shown[1])
    return now_shown


def event_loop_options() -> dict[str, bool]:
    """anyio's backend options for a run: uvloop where it is installed (a faster event loop
    for the same code)."""
    try:
        import uvloop  # noqa: F401
    except ImportError:  # pragma: no cover - uvloop is a dependency except on Windows
        return {}
    return {"use_uvloop": True}


def _raise_first(error: BaseException) -> None:
    """Unwrap an exception group to the first payrun error it holds."""
    found = first_payrun_error(error)
    if found is not None:
        raise found
