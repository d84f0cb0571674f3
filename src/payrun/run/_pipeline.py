"""The whole run on one screen: start -> preflight -> execute -> reconcile -> track.

Input: a batch file (or a ledger that holds a batch's rows), ``Settings`` for the bank,
``ValidationOptions`` and ``RunOptions``. Output: a ``RunOutcome`` (every row's final state,
the exit code, where the ledger is). Raises ``UsageError`` (bad file, control totals),
``LedgerError`` (ledger of another file, bank or organization; locked), ``BankError`` (bank
unreachable, API key refused).

Start (``_start``): the ledger, new or resumed, and the rows reopened. Preflight
(``_preflight``, in the order of ``_checks``): the organization, accounts, payees, payments,
repeats and changed details, and a live-mode run's confirmation. Execute (``_execute``,
scheduled by ``_schedule``): each account paid as soon as its checks are done. Reconcile
(``_reconcile``, ``_settle``): rows whose answer was lost, checked once the bank is done
with them. Track (``_track``): with ``--wait``, the submissions followed until final. Every
phase receives the run's state (``RunState``); ``_lifecycle`` holds the client and the
ledger around them.

The last of the orchestrators (``_checks``, ``_schedule``, ``_pipeline``): the modules that
call several phases in order. tests/test_run_layout.py places every module of the package.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Unpack

from payrun._models import BatchInfo, LedgerRow, utc_now
from payrun.config import RunOptions, Settings, ValidationOptions
from payrun.errors import LedgerError
from payrun.ledger import (
    LedgerLocation,
    LedgerStore,
    bank_identity,
    check_running,
    ledger_location,
    open_ledger,
)
from payrun.run import _start as run_start
from payrun.run._at_once import Read, all_at_once, raise_first_error
from payrun.run._book import RowBook
from payrun.run._checks import check_before_paying, new_preflight
from payrun.run._confirm import refuse_unconfirmable, unconfirmable
from payrun.run._doubt import IN_DOUBT
from payrun.run._lifecycle import event_loop_options, pay_ledger, with_client
from payrun.run._organization import LIVE_MODE, KnownOrganization, find_organization
from payrun.run._outcome import RunObserver, RunOutcome, run_exit_code
from payrun.run._planned import hold_unplanned
from payrun.run._preflight import Lookup, look_up_accounts
from payrun.run._schedule import FirstPass, execute_rounds
from payrun.run._settle import bank_may_still_finish, doubt_until
from payrun.run._state import Caller, RunHooks, RunState
from payrun.run._track import Followed, follow_submissions

# Imported at run time only when a bank is called (keeps `validate` fast)
if TYPE_CHECKING:
    from payrun.bank import BankClient, Organization

__all__ = [
    "RunObserver",
    "RunOutcome",
    "event_loop_options",
    "run_batch",
    "run_exit_code",
    "run_stored_batch",
]


async def run_batch(
    batch_path: Path,
    settings: Settings,
    *,
    validation: ValidationOptions,
    options: RunOptions,
    **hooks: Unpack[RunHooks],
) -> RunOutcome:
    """Pay a batch file exactly once (or, with ``dry_run``, check what a run would do).

    ``hooks``: ``observer`` is told the run's progress. ``stop`` is how the caller asks the
    run to stop (the CLI requests it on Ctrl-C and SIGTERM): nothing new starts, in-flight
    requests finish, and the outcome says so. ``confirmer`` asks a person before a
    live-mode organization's run creates anything; without one (and without
    ``options.assume_yes``) such a run is refused.
    """
    caller = Caller.of(settings, options, hooks)
    ledger_path = ledger_location(options.ledger_path, batch_path)
    if options.dry_run:
        book, info = run_start.dry_run_book(batch_path, ledger_path, validation, options)
        # Then a run would wait before it checks
        late = bank_may_still_finish(ledger_path, settle_wait=options.settle_wait)
        dry = functools.partial(
            _dry_run,
            caller=caller,
            book=book,
            late=late,
            recorded=(info, str(ledger_path)),
            ledger=ledger_path,
        )
        return await with_client(caller, dry)
    ledger = run_start.open_run_ledger(batch_path, ledger_path, validation, options)
    outcome = await pay_ledger(ledger, caller, _pay)
    outcome.ledger_path = ledger_path
    return outcome


async def run_stored_batch(
    location: LedgerLocation,
    settings: Settings,
    *,
    options: RunOptions,
    known: KnownOrganization | None = None,
    **hooks: Unpack[RunHooks],
) -> RunOutcome:
    """Pay a batch whose rows a ledger already holds (``payrun fleet submit`` stored them),
    exactly as ``run_batch`` pays a file's: the same phases, limits and resume. ``known``:
    the key's organization as the fleet's route found it (``Caller.known``).

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
    caller = replace(Caller.of(settings, options, hooks), known=known)
    outcome = await pay_ledger(ledger, caller, _pay)
    outcome.ledger_path = location
    return outcome


async def _dry_run(
    client: BankClient,
    *,
    caller: Caller,
    book: RowBook,
    late: bool,
    recorded: tuple[BatchInfo | None, str],
    ledger: LedgerLocation,
) -> RunOutcome:
    """Start, preflight and reconcile, reading only: what a run would do."""
    settings = caller.settings
    org = await find_organization(client, settings)
    # A ledger of another bank or organization: as a run, exit 2
    if recorded[0] is not None:
        run_start.refuse_other_bank(recorded[0], recorded[1], settings, org)
    checks = new_preflight(client, org, book, caller.options, None)
    # Held rows checked again, as in a run
    checks.recall_holds(run_start.reopen_unfinished(book))
    await checks.check_accounts()
    # A run paying these rows now (in any register the ledger's runs use: a database's
    # for every machine) has payments in flight that the bank does not show yet.
    check_running(ledger, book.all(), bank_identity(settings.base_url, org.url))
    # Reads only, as a run (which first waits out a late bank: rows mid-call stay started);
    # payments approved or rejected in the app are read, never submitted
    run = RunState(caller, client, org, book, checks)
    attention = await check_before_paying(run, reconcile=not late, submit_approved=False)
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


async def _pay(
    caller: Caller, client: BankClient, ledger: LedgerStore, book: RowBook
) -> RunOutcome:
    """Start (the organization, the rows reopened) and the accounts looked up, then the
    rest of the run under the batch lock."""
    started = utc_now()
    settings, options = caller.settings, caller.options
    org, looked_up = await _organization(caller, client, book)
    run_start.check_same_bank(ledger, settings, org)
    # No one to ask: refused before anything is read, waited for or created
    refuse_unconfirmable(org, options, caller.confirmer)
    batch = ledger.batch()
    assert batch is not None
    # --wait reads the events from the batch's start
    if batch.started_at is not None:
        started = min(started, batch.started_at)
    run_start.reopen_unfinished(book)
    # run --plan: only the approved rows are paid
    if options.plan is not None:
        hold_unplanned(book, options.plan)
    checks = new_preflight(client, org, book, options, caller.stop)
    checks.adopt_lookups(looked_up)
    caller.watcher.note("checking source accounts, payees and recent payments")
    await checks.check_accounts()
    run = RunState(caller, client, org, book, checks, ledger)
    # Taken once the accounts are the bank's (its row keys name them so), and before the
    # bank's payments are read or any payee or payment is made.
    bank = bank_identity(settings.base_url, org.url)
    with ledger.hold_batch(book.all(), bank, note=caller.watcher.note):
        return await _pay_locked(run, started)


async def _organization(
    caller: Caller, client: BankClient, book: RowBook
) -> tuple[Organization, dict[str, Lookup]]:
    """The key's organization; with what the caller knew of it (``Caller.known``), read at
    once with the index and, unless the run would be refused (``_looks_early``), with the
    lookups of the rows' source accounts in it, which are kept only when the bank still
    says the same organization (reads only: nothing is recorded before the organization is
    checked). An organization read that fails cancels the lookups."""
    known = caller.known
    if known is None or not _looks_early(known.organization, caller):
        return await find_organization(client, caller.settings, known=known), {}
    found: list[Organization] = []
    looked_up: dict[str, Lookup] = {}

    async def organization() -> None:
        found.append(await find_organization(client, caller.settings, known=known))

    async def accounts() -> None:
        looked_up.update(await look_up_accounts(client, known.organization, book))

    reads = [Read((0, 0), organization, fatal=True), Read((1, 0), accounts)]
    await all_at_once(reads, workers=len(reads))
    raise_first_error(reads)
    return found[0], looked_up if found[0] == known.organization else {}


def _looks_early(known: Organization, caller: Caller) -> bool:
    """Whether the source accounts are looked up with the organization read: not for a
    live-mode organization the run refuses (no signing key, no one to confirm), which is
    refused before anything else is read. A fleet's live-mode batch (its submit, as
    ``--yes``, is the go-ahead: docs/fleet.md) with its signing key is looked up early."""
    if known.mode != LIVE_MODE:
        return True
    signed = caller.settings.signing is not None
    return signed and not unconfirmable(known, caller.options, caller.confirmer)


async def _pay_locked(run: RunState, started: datetime) -> RunOutcome:
    """Preflight and execute together (each account pays once its checks pass), reconcile
    and execute again while rows may be sent, then track (``--wait``)."""
    options, stop = run.options, run.stop
    # Kept in the ledger before anything is sent: a rerun waits out the same time
    until = doubt_until(
        run.paying_ledger, run.book.in_status(*IN_DOUBT), settle_wait=options.settle_wait
    )
    attention: list[int] = []
    unreachable = False
    # Ctrl-C during the checks: not even a read starts
    if not stop.is_set():
        first = FirstPass(run, until=until)
        # Rows in doubt are matched at once: what the bank shows is recorded, the rest wait
        attention = await first.run(found_only=until is not None)
        attention, unreachable = await execute_rounds(run, attention, first.result)
    # Delivered rows too: a return can follow; an unreachable bank: a rerun
    followed = (
        await follow_submissions(run, since=started)
        if options.wait and not stop.is_set() and not unreachable
        else None
    )
    return _outcome(run, run.book.all(), attention, followed)


def _outcome(
    run: RunState, rows: list[LedgerRow], attention: list[int], followed: Followed | None
) -> RunOutcome:
    """How a run that paid ended (``run_batch`` says where the ledger is)."""
    interrupted = run.stop.is_set()
    return RunOutcome(
        rows=rows,
        plans=list(run.checks.plans.values()),
        ledger_path=None,
        interrupted=interrupted,
        attention=attention,
        wait_ended=None if followed is None else followed.ended,
        exit_code=run_exit_code(
            rows,
            create_only=run.options.create_only,
            wait=run.options.wait,
            dry_run=False,
            interrupted=interrupted,
        ),
    )
