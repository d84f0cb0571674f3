"""The whole run on one screen: read -> validate -> ledger -> preflight -> execute -> track.

Input: a batch file, ``Settings`` for the bank, ``ValidationOptions`` and ``RunOptions``.
Output: a ``RunOutcome`` (every row's final state, the exit code, where the ledger is).
Raises ``UsageError`` (bad file, control totals), ``LedgerError`` (ledger of another
file, bank or organization; locked), ``BankError`` (bank unreachable, API key refused).
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import anyio

from payrun.config import RunOptions, Settings, ValidationOptions
from payrun.domain import RowStatus, RowVerdict
from payrun.errors import BatchFileError, InterruptedRunError, LedgerMismatchError, PayrunError
from payrun.execution import execute_rows
from payrun.intake import read_batch
from payrun.ledger import BatchInfo, Ledger, LedgerRow, default_ledger_path, utc_now
from payrun.planning import check_control_totals
from payrun.preflight import AccountPlan, Preflight
from payrun.reconciliation import reconcile_rows
from payrun.records import RowBook
from payrun.stopping import StopSignal
from payrun.tracking import follow_submissions
from payrun.validation import validate_rows

if TYPE_CHECKING:  # imported at run time only when a bank is called (keeps `validate` fast)
    from payrun.bank import BankClient, Organization

__all__ = [
    "RunObserver",
    "RunOutcome",
    "file_sha256",
    "run_batch",
    "run_exit_code",
]

_MAX_ROUNDS = 6
_STOP_POLL_SECONDS = 0.05
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

    rows: list[LedgerRow]
    plans: list[AccountPlan]
    ledger_path: Path | None
    dry_run: bool = False
    interrupted: bool = False
    attention: list[int] = field(default_factory=list)
    exit_code: int = 0


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
    ledger_path = options.ledger_path or default_ledger_path(batch_path)
    stop = stop or StopSignal()
    if options.dry_run:
        book = _dry_run_book(batch_path, ledger_path, validation, options)
        return await _with_client(settings, options, lambda c: _dry_run(c, book, options))
    ledger = _open_ledger(batch_path, ledger_path, validation, options)
    try:
        book = RowBook(ledger.rows(), ledger=ledger, on_change=watcher.row_changed)
        outcome = await _with_client(
            settings,
            options,
            lambda c: _guarded(
                stop, lambda: _pay(c, ledger, book, settings, options, watcher, stop)
            ),
        )
        ledger.set_batch(ended_at=utc_now())
    finally:
        ledger.close()
    outcome.ledger_path = ledger_path
    return outcome


async def _with_client(
    settings: Settings, options: RunOptions, body: Callable[[BankClient], Awaitable[RunOutcome]]
) -> RunOutcome:
    from payrun.bank import AdaptiveLimiter, BankClient, make_http_client

    http = make_http_client(settings, max_connections=options.max_in_flight)
    async with BankClient(http, limiter=AdaptiveLimiter(options.max_in_flight)) as client:
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
            "stopped at once: requests in flight were cut off, and the ledger marks them"
            " for checking; run the same command again to resume"
        )
        raise InterruptedRunError(msg)
    return result[0]


def _open_ledger(
    batch_path: Path, ledger_path: Path, validation: ValidationOptions, options: RunOptions
) -> Ledger:
    """Open the ledger; a new one gets every row of the validated file (control totals first)."""
    is_new = not ledger_path.exists()
    ledger = Ledger.open(ledger_path)
    try:
        info = ledger.batch()
        if info is None:
            _record_new_batch(ledger, batch_path, validation, options)
        else:
            _check_same_file(info, batch_path, ledger_path, validation)
            check_control_totals(
                info.valid_count,
                info.valid_total,
                expect_count=options.expect_count,
                expect_total=options.expect_total,
            )
    except BaseException:
        ledger.close()
        if is_new:
            for suffix in ("", "-wal", "-shm", ".lock"):
                ledger_path.with_name(ledger_path.name + suffix).unlink(missing_ok=True)
        raise
    return ledger


def _record_new_batch(
    ledger: Ledger, batch_path: Path, validation: ValidationOptions, options: RunOptions
) -> None:
    with read_batch(batch_path, sheet=validation.sheet, max_rows=validation.max_rows) as batch:
        counter = _ValidCounter()
        with ledger.atomic():
            ledger.start(
                BatchInfo(
                    file_path=str(batch_path.resolve()),
                    file_sha256=batch.sha256,
                    valid_count=0,
                    valid_total=Decimal(0),
                    expect_count=options.expect_count,
                    expect_total=options.expect_total,
                ),
                counter.count(validate_rows(batch, validation)),
            )
            check_control_totals(
                counter.valid,
                counter.total,
                expect_count=options.expect_count,
                expect_total=options.expect_total,
            )
            ledger.set_valid_totals(counter.valid, counter.total)


class _ValidCounter:
    def __init__(self) -> None:
        self.valid = 0
        self.total = Decimal(0)

    def count(self, verdicts: Iterator[RowVerdict]) -> Iterator[RowVerdict]:
        for verdict in verdicts:
            if verdict.instruction is not None:
                self.valid += 1
                self.total += verdict.instruction.amount
            yield verdict


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes, hex (what the ledger records as the batch's identity)."""
    digest = hashlib.sha256()
    try:
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError as exc:
        msg = f"cannot read {path}: {exc.strerror}"
        raise BatchFileError(msg, path=path) from None
    return digest.hexdigest()


def _check_same_file(
    info: BatchInfo, batch_path: Path, ledger_path: Path, validation: ValidationOptions
) -> None:
    if file_sha256(batch_path) != info.file_sha256:
        msg = (
            f"the ledger {ledger_path} was made for a different content of {batch_path.name}"
            " (the file changed since its first run); restore the original file to finish"
            " that run, or pay the new file with a fresh ledger (--ledger NEW.ledger.sqlite)"
        )
        raise LedgerMismatchError(msg)


def _check_same_bank(ledger: Ledger, settings: Settings, org: Organization) -> None:
    info = ledger.batch()
    assert info is not None
    for what, recorded, now in (
        ("bank", info.base_url, settings.base_url),
        ("organization", info.organization_url, org.url),
    ):
        if recorded is not None and recorded != now:
            msg = (
                f"the ledger {ledger.path} was used with {what} {recorded}, not {now}; run it"
                f" against the same {what}, or start a fresh ledger with --ledger NEW.ledger.sqlite"
            )
            raise LedgerMismatchError(msg)
    if info.base_url is None:
        ledger.set_batch(base_url=settings.base_url, organization_url=org.url, started_at=utc_now())


def _dry_run_book(
    batch_path: Path, ledger_path: Path, validation: ValidationOptions, options: RunOptions
) -> RowBook:
    if ledger_path.exists():
        with Ledger.open(ledger_path, readonly=True) as ledger:
            info = ledger.batch()
            if info is not None:
                _check_same_file(info, batch_path, ledger_path, validation)
                return RowBook(ledger.rows())
    with read_batch(batch_path, sheet=validation.sheet, max_rows=validation.max_rows) as batch:
        rows = [_row_of(verdict) for verdict in validate_rows(batch, validation)]
    valid = [r for r in rows if r.status is RowStatus.PENDING]
    check_control_totals(
        len(valid),
        sum((r.amount for r in valid), Decimal(0)),
        expect_count=options.expect_count,
        expect_total=options.expect_total,
    )
    return RowBook(rows)


def _row_of(verdict: RowVerdict) -> LedgerRow:
    item = verdict.instruction
    if item is None:
        raw = verdict.raw
        return LedgerRow(
            row=verdict.row,
            row_id=raw.get("row_id") or None,
            payee_name=raw.get("payee_name", ""),
            sort_code=raw.get("sort_code", ""),
            account_number=raw.get("account_number", ""),
            amount=Decimal(0),
            amount_text=raw.get("amount", ""),
            reference=raw.get("reference"),
            source_account=raw.get("source_account", ""),
            status=RowStatus.INVALID,
            error="; ".join(p.message for p in verdict.errors),
        )
    return LedgerRow(
        row=item.row,
        row_id=item.row_id,
        payee_name=item.payee_name,
        sort_code=item.sort_code,
        account_number=item.account_number,
        amount=item.amount,
        amount_text=str(item.amount),
        reference=item.reference,
        source_account=item.source_account,
        status=RowStatus.PENDING,
    )


def _preflight(
    client: BankClient, org: Organization, book: RowBook, options: RunOptions
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
    )


async def _dry_run(client: BankClient, book: RowBook, options: RunOptions) -> RunOutcome:
    org = await client.organization()
    checks = _preflight(client, org, book, options)
    await checks.check_accounts()
    await checks.load_payees_and_payments()
    checks.guard_repeats()
    checks.check_balances()
    await checks.prepare_payees()
    rows = book.all()
    return RunOutcome(
        rows=rows,
        plans=list(checks.plans.values()),
        ledger_path=None,
        dry_run=True,
        exit_code=run_exit_code(
            rows, create_only=False, wait=False, dry_run=True, interrupted=False
        ),
    )


def _reopen_unfinished(book: RowBook) -> None:
    """Rows held or failed before any payment existed are checked again on every run."""
    for row in book.in_status(RowStatus.HELD, RowStatus.FAILED):
        if row.payment_url is None:
            book.set(row.row, status=RowStatus.PENDING, error=None)
        elif row.submission_url is None:
            book.set(row.row, status=RowStatus.CREATED, error=None)


async def _pay(
    client: BankClient,
    ledger: Ledger,
    book: RowBook,
    settings: Settings,
    options: RunOptions,
    watcher: RunObserver,
    stop: StopSignal,
) -> RunOutcome:
    started = utc_now()
    org = await client.organization()
    _check_same_bank(ledger, settings, org)
    _reopen_unfinished(book)
    checks = _preflight(client, org, book, options)
    watcher.note("checking source accounts, payees and recent payments")
    await checks.check_accounts()
    await checks.load_payees_and_payments()
    attention = await reconcile_rows(
        client,
        book,
        accounts=checks.accounts,
        payee_details=checks.payee_details,
        payments=checks.payments,
    )
    checks.guard_repeats()
    checks.check_balances()
    await checks.prepare_payees()
    done = sum(1 for r in book.all() if r.status not in (*_UNPAID, RowStatus.CREATED))
    watcher.started(total=len(book), done=done)
    attention = await _execute_rounds(client, book, checks, options, stop, attention)
    if options.wait and not stop.is_set() and book.in_status(RowStatus.SUBMITTED):
        watcher.note("waiting for the bank to deliver the submitted payments")
        await follow_submissions(
            client, org, book, since=started, wait_seconds=options.wait_timeout, stop=stop
        )
    rows = book.all()
    return RunOutcome(
        rows=rows,
        plans=list(checks.plans.values()),
        ledger_path=ledger.path,
        interrupted=stop.is_set(),
        attention=attention,
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
    book: RowBook,
    checks: Preflight,
    options: RunOptions,
    stop: StopSignal,
    attention: list[int],
) -> list[int]:
    """Execute, reconcile what came back unknown, and go again while progress is possible."""
    for round_number in range(_MAX_ROUNDS):
        to_create = [
            r
            for r in book.in_status(RowStatus.PENDING)
            if r.payee_url and r.account_url in checks.accounts
        ]
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
        )
        if result.fatal is not None:
            raise result.fatal
        if stop.is_set():
            break
        if book.in_status(RowStatus.CREATING, RowStatus.SUBMITTING):
            attention = await reconcile_rows(
                client, book, accounts=checks.accounts, payee_details=checks.payee_details
            )
    return attention


def _raise_first(error: BaseException) -> None:
    """Unwrap an exception group to the first payrun error it holds."""
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            _raise_first(inner)
    if isinstance(error, PayrunError):
        raise error
