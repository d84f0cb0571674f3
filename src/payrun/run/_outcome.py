"""What a run tells its caller: progress as it goes (``RunObserver``), and how it ended
(``RunOutcome``, with the exit code ``run_exit_code`` gives its rows, and what preflight
found for each source account: ``AccountPlan``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from payrun._models import LedgerRow, PayeeCheck, RowStatus
from payrun.ledger import LedgerLocation

if TYPE_CHECKING:
    from payrun.bank import BankAccount

__all__ = [
    "NOT_PAID",
    "UNPAID",
    "AccountPlan",
    "QuietObserver",
    "RunObserver",
    "RunOutcome",
    "run_exit_code",
]

UNPAID = (RowStatus.PENDING, RowStatus.CREATING, RowStatus.SUBMITTING)
"""A row still to be paid by this batch (a run ends 3 while one is left)."""
NOT_PAID = (
    RowStatus.INVALID,
    RowStatus.HELD,
    RowStatus.FAILED,
    RowStatus.RETURNED,
    RowStatus.REJECTED,
)
"""A row that will not be paid (a run ends 1 when one is left)."""


@dataclass(slots=True)
class AccountPlan:
    """What preflight found for one source account (printed by a dry run)."""

    source: str
    account: BankAccount | None = None
    problem: str | None = None
    payees_existing: int = 0
    payees_to_create: int = 0
    rows_by_payee: set[int] = field(default_factory=set)
    # A dry run's rows paid to changed bank details under --accept-changed-details
    changed_rows: set[int] = field(default_factory=set)


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


class QuietObserver:
    """An observer that says nothing: a caller that passed none, or ``--quiet`` (errors and
    the JSON log's last line still show)."""

    def started(self, *, total: int, done: int, not_paid: int = 0, **_: int) -> None:
        """Ignore."""

    def row_changed(self, before: LedgerRow, after: LedgerRow) -> None:
        """Ignore."""

    def note(self, message: str) -> None:
        """Ignore."""

    def in_doubt(self, *, count: int, until: datetime | None) -> None:
        """Ignore."""

    def close(self) -> None:
        """Nothing to release."""


def run_exit_code(
    rows: list[LedgerRow], *, create_only: bool, wait: bool, dry_run: bool, interrupted: bool
) -> int:
    """0 all paid, 1 some rows invalid/held/failed, 3 incomplete (run again)."""
    statuses = {row.status for row in rows}
    if dry_run:
        return 1 if statuses & set(NOT_PAID) else 0
    unfinished = set(UNPAID)
    if not create_only:
        unfinished.add(RowStatus.CREATED)
    if wait:
        unfinished.add(RowStatus.SUBMITTED)
    if interrupted or statuses & unfinished:
        return 3
    return 1 if statuses & set(NOT_PAID) else 0
