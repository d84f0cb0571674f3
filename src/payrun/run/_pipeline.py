"""The whole run on one screen: read -> validate -> ledger -> preflight -> execute -> track.

Input: a batch file, ``Settings`` for the bank, ``ValidationOptions`` and ``RunOptions``.
Output: a ``RunOutcome`` (every row's final state, the exit code, where the ledger is).
Raises ``UsageError`` (bad file, control totals), ``LedgerError`` (ledger of another
file, bank or organization; locked), ``BankError`` (bank unreachable, API key refused).
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import anyio

from payrun._models import BatchInfo, LedgerRow, RowStatus, utc_now
from payrun.config import RunOptions, Settings, ValidationOptions
from payrun.errors import InterruptedRunError, LedgerError, PayrunError
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
from payrun.run._execute import execute_rows
from payrun.run._organization import find_organization
from payrun.run._preflight import AccountPlan, Preflight
from payrun.run._reconcile import reconcile_rows
from payrun.run._settle import bank_may_still_finish, remember_late_answers, wait_for_late_answers
from payrun.run._stop import StopSignal
from payrun.run._track import follow_submissions

# Imported at run time only when a bank is called (keeps `validate` fast)
if TYPE_CHECKING:
    from payrun.bank import BankClient, Organization

__all__ = ["RunObserver", "RunOutcome", "run_batch", "run_exit_code", "run_stored_batch"]

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

    def started(self, *, total: int, done: int) -> None:
        """The run begins paying ``total`` rows, ``done`` of them already finished."""

    def row_changed(self, before: LedgerRow, after: LedgerRow) -> None:
        """A row moved from one status to another (already committed to the ledger)."""

    def note(self, message: str) -> None:
        """A line worth telling the user (a phase, a warning)."""


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


class _Quiet:
    def started(self, *, total: int, done: int) -> None:
        """Ignore."""

    def row_changed(self, before: LedgerRow, after: LedgerRow) -> None:
        """Ignore."""

    def note(self, message: str) -> None:
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
) -> RunOutcome:
    """Pay a batch file exactly once (or, with ``dry_run``, check what a run would do).

    ``stop`` is how the caller asks the run to stop (the CLI requests it on Ctrl-C and
    SIGTERM): nothing new starts, in-flight requests finish, and the outcome says so.
    """
    watcher = observer or _Quiet()
    ledger_path = ledger_location(options.ledger_path, batch_path)
    stop = stop or StopSignal()
    if options.dry_run:
        book, info = run_start.dry_run_book(batch_path, ledger_path, validation, options)
        # Then a run would wait before it checks
        late = bank_may_still_finish(ledger_path)
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
    outcome = await _pay_ledger(ledger, settings, options, watcher, stop)
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
    outcome = await _pay_ledger(ledger, settings, options, observer or _Quiet(), stop)
    outcome.ledger_path = location
    return outcome


async def _pay_ledger(
    ledger: LedgerStore,
    settings: Settings,
    options: RunOptions,
    watcher: RunObserver,
    stop: StopSignal | None,
) -> RunOutcome:
    """Pay the open ledger's rows, then close it; a refused first run removes it."""
    stop = stop or StopSignal()
    try:
        book = RowBook(ledger.rows(), ledger=ledger, on_change=watcher.row_changed)
        with _collector_tuned():
            outcome = await _with_client(
                settings,
                options,
                lambda c: _guarded(
                    stop, lambda: _pay(c, ledger, book, settings, options, watcher, stop)
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
        duplicate_window=timedelta(days=options.duplicate_window_days),
        dry_run=options.dry_run,
        stop=stop,
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
    )


async def _check_before_paying(
    client: BankClient,
    book: RowBook,
    checks: Preflight,
    *,
    reconcile: bool,
    submit_approved: bool,
    options: RunOptions,
) -> list[int]:
    """The preflight a run and a dry run share once the batch lock allows it: the bank's
    payees and payments, rows left mid-call, payments approved in the bank's app, repeats,
    balances and payees. Returns the rows a person must look at."""
    await checks.load_payees_and_payments()
    attention = (
        await reconcile_rows(
            client,
            book,
            accounts=checks.accounts,
            payee_details=checks.payee_details,
            payments=checks.payments,
        )
        if reconcile
        else []
    )
    await refresh_created(client, book, create_only=not submit_approved)
    checks.guard_repeats()
    checks.check_balances(created=not options.create_only)
    await checks.prepare_payees()
    return attention


async def _pay(
    client: BankClient,
    ledger: LedgerStore,
    book: RowBook,
    settings: Settings,
    options: RunOptions,
    watcher: RunObserver,
    stop: StopSignal,
) -> RunOutcome:
    started = utc_now()
    org = await find_organization(client, settings)
    run_start.check_same_bank(ledger, settings, org)
    batch = ledger.batch()
    assert batch is not None
    # --wait reads the events from the batch's start
    if batch.started_at is not None:
        started = min(started, batch.started_at)
    run_start.reopen_unfinished(book)
    checks = _preflight(client, org, book, options, stop)
    watcher.note("checking source accounts, payees and recent payments")
    await checks.check_accounts()
    # Taken once the accounts are the bank's (its row keys name them so), and before the
    # bank's payments are read or any payee or payment is made.
    bank = bank_identity(settings.base_url, org.url)
    with ledger.hold_batch(book.all(), bank):
        return await _pay_locked(client, ledger, book, checks, org, started, options, watcher, stop)


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
) -> RunOutcome:
    settled = await wait_for_late_answers(ledger, book, stop, watcher.note, at_start=True)
    attention: list[int] = []
    unreachable = False
    # Ctrl-C during the checks or the wait: not even a read starts
    if not stop.is_set():
        # Rows left mid-call are matched once a slow bank had time to finish
        attention = await _check_before_paying(
            client,
            book,
            checks,
            reconcile=settled,
            submit_approved=not options.create_only,
            options=options,
        )
        done = sum(1 for r in book.all() if r.status not in (*_UNPAID, RowStatus.CREATED))
        watcher.started(total=len(book), done=done)
        attention, unreachable = await _execute_rounds(
            client, ledger, book, checks, options, stop, watcher, attention
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
) -> tuple[list[int], bool]:
    """Execute, reconcile what came back unknown, and go again while progress is possible;
    the rows needing attention, and whether the bank was found unreachable."""
    unreachable = False
    answered_otherwise: set[int] = set()
    for round_number in range(_MAX_ROUNDS):
        pending = book.in_status(RowStatus.PENDING)
        to_create = [r for r in pending if r.payee_url and r.account_url in checks.accounts]
        to_submit = (
            []
            if options.create_only
            else [r for r in book.in_status(RowStatus.CREATED) if r.account_url in checks.accounts]
        )
        if stop.is_set() or not (to_create or to_submit):
            break
        if round_number:
            await anyio.sleep(min(2.0**round_number, 10.0) / 4)
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
        )
        # For this run's check and, if stopped, the next
        remember_late_answers(ledger, result)
        answered_otherwise |= result.answered_otherwise
        if result.fatal is not None:
            raise result.fatal
        unreachable = result.unreachable
        # A rerun finishes: nothing is paid twice
        if stop.is_set() or unreachable:
            break
        if book.in_status(RowStatus.CREATING, RowStatus.SUBMITTING):
            if not await wait_for_late_answers(ledger, book, stop, watcher.note):
                break
            attention = await reconcile_rows(
                client,
                book,
                accounts=checks.accounts,
                payee_details=checks.payee_details,
                answered_otherwise=answered_otherwise,
            )
    return attention, unreachable


def _raise_first(error: BaseException) -> None:
    """Unwrap an exception group to the first payrun error it holds."""
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            _raise_first(inner)
    if isinstance(error, PayrunError):
        raise error
