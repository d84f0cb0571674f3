"""The run's checks before it pays, in their order: the accounts' restrictions, rows an
earlier run left with the bank, payments approved in the bank's app, repeats, changed bank
details, balances and payees; then, for a live-mode organization, a person's confirmation.

A run checks the whole batch at once when an earlier run left rows with the bank
(``whole_batch_first``: ``check_before_paying``), else account by account as the accounts
are read (``_schedule.FirstPass``): either way through the same ``guard``.

An orchestrator, as ``_schedule`` and ``_pipeline`` are: it calls the phases in order (the
parts of preflight, then reconciliation of rows left mid-call, then the confirmation); the
phases import no orchestrator.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING

from payrun._models import LedgerRow, RowStatus
from payrun.config import RunOptions
from payrun.run._approvals import refresh_created
from payrun.run._book import RowBook
from payrun.run._confirm import confirm_live_run, preview_run
from payrun.run._gate import WriteGate
from payrun.run._planned import refuse_unplanned_payees
from payrun.run._preflight import Preflight
from payrun.run._reconcile import reconcile_rows
from payrun.run._state import RunState
from payrun.run._stop import StopSignal

# Imported at run time only when a bank is called (keeps `validate` fast)
if TYPE_CHECKING:
    from payrun.bank import BankClient, Organization
    from payrun.run._preflight import PayeeKey

__all__ = [
    "check_before_paying",
    "confirm_run",
    "guard",
    "new_preflight",
    "whole_batch_first",
]


def new_preflight(
    client: BankClient,
    org: Organization,
    book: RowBook,
    options: RunOptions,
    stop: StopSignal | None,
) -> Preflight:
    """The run's checks, as its options ask (``stop``: None in a dry run)."""
    return Preflight(client, org, book, options, stop=stop)


def whole_batch_first(book: RowBook) -> bool:
    """True when rows an earlier run left with the bank (mid-call, or with a payment) must be
    settled for the whole batch before any account pays."""
    mid_call = (RowStatus.CREATING, RowStatus.SUBMITTING)
    return any(row.payment_url or row.status in mid_call for row in book.all())


def guard(
    run: RunState, accounts: Collection[str] | None = None
) -> Mapping[PayeeKey, list[LedgerRow]]:
    """The read-only checks of ``accounts`` (every account when None): repeats, changed bank
    details, balances; returns the payees they still need (their rows by payee)."""
    checks = run.checks
    checks.guard_repeats(accounts)
    checks.guard_changed_details()
    checks.check_balances(created=not run.options.create_only, accounts=accounts)
    return checks.find_payees(accounts)


async def check_before_paying(
    run: RunState,
    *,
    reconcile: bool,
    submit_approved: bool,
    found_only: bool = False,
    gate: WriteGate | None = None,
) -> list[int]:
    """The preflight a run and a dry run share once the batch lock allows it, for the whole
    batch at once: the accounts' restrictions, the bank's payees and payments, rows left
    mid-call (``found_only``: before their settle time, only what the bank shows is
    recorded), payments approved in the bank's app, repeats, changed bank details, balances
    and payees (created once ``gate`` lets them). Returns the rows a person must look at."""
    checks = run.checks
    await checks.read_accounts()
    attention = (
        await reconcile_rows(run, payments=checks.payments, found_only=found_only)
        if reconcile
        else []
    )
    await refresh_created(run.client, run.book, create_only=not submit_approved)
    missing = guard(run)
    if gate is not None:
        gate.checked_all()
        if not await gate.wait():
            return attention
    await checks.create_payees(missing)
    return attention


async def confirm_run(run: RunState) -> None:
    """A live-mode organization's run: show what is about to be paid and ask a person (or
    take ``--yes``); a test-mode one goes on. A run of a plan first refuses payees the plan
    did not count as new."""
    options, checks = run.options, run.checks
    if options.plan is not None:
        refuse_unplanned_payees(checks.new_payees.values(), options.plan)
    preview = preview_run(
        run.org,
        run.book.all(),
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
    await confirm_live_run(run.org, preview, options, run.caller.confirmer)
