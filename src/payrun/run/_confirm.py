"""The confirmation before real money: a run paying a live-mode organization asks first.

Input: the organization (its ``organization-mode``), the run's options, the book once
preflight has planned the payees, and a ``Confirmer`` (the CLI's asks on a terminal).
Output: nothing when the run may go on; else ``NotConfirmedError`` (exit 2: no one to ask
and no ``--yes``, or an answer other than yes) or ``InterruptedRunError`` (exit 3: Ctrl-C
at the question). Both come before any payee or payment is created. A test-mode
organization, a dry run and ``--yes`` are never asked.
"""

from __future__ import annotations

import enum
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Protocol

from payrun._models import LedgerRow, RowStatus
from payrun.errors import InterruptedRunError, NotConfirmedError
from payrun.run._organization import LIVE_MODE

# The bank client is imported only by runs that talk to a bank
if TYPE_CHECKING:
    from payrun.bank import BankAccount, Organization
    from payrun.config import RunOptions

__all__ = [
    "AccountPreview",
    "ConfirmAnswer",
    "Confirmer",
    "RunPreview",
    "confirm_live_run",
    "preview_run",
    "refuse_unconfirmable",
    "unconfirmable",
]

_NOT_PAID = frozenset({RowStatus.INVALID, RowStatus.HELD, RowStatus.FAILED})


class ConfirmAnswer(enum.Enum):
    """What the person asked did."""

    CONFIRMED = "confirmed"
    DECLINED = "declined"
    NO_ANSWER = "no-answer"
    INTERRUPTED = "interrupted"


@dataclass(frozen=True, slots=True)
class AccountPreview:
    """What one source account is about to pay."""

    source: str
    name: str
    rows: int
    total: Decimal


@dataclass(frozen=True, slots=True)
class RunPreview:
    """What a run is about to do, shown before a person confirms it."""

    organization: str
    rows: int
    total: Decimal
    accounts: tuple[AccountPreview, ...]
    new_payees: tuple[str, ...]
    create_only: bool
    confirm_payees: bool
    not_paid: int
    """Rows this run leaves unpaid: invalid, held or failed."""


class Confirmer(Protocol):
    """Asks a person whether the run shown may go on (the CLI's asks on a terminal)."""

    async def __call__(self, preview: RunPreview) -> ConfirmAnswer:
        """The person's answer to ``preview``."""


def _is_live(org: Organization) -> bool:
    """True when the organization moves real money."""
    return org.mode == LIVE_MODE


def refuse_unconfirmable(
    org: Organization, options: RunOptions, confirmer: Confirmer | None
) -> None:
    """Refuse (exit 2) a live-mode run no one can confirm (no terminal) and no --yes allows,
    before anything else is read or created (a fleet's route that knew the organization
    as another one, or in test mode, has had its source accounts looked up with it)."""
    if not unconfirmable(org, options, confirmer):
        return
    msg = (
        f"nothing was created: {org.display_name} is a live-mode organization (real money),"
        " and a run there needs a person to type yes on a terminal, but stdin is not one"
        " (or --log-format json, which asks nothing); run it from a terminal, or pass --yes"
        " (a scheduler: with --expect-count and --expect-total)"
    )
    raise NotConfirmedError(msg)


def unconfirmable(org: Organization, options: RunOptions, confirmer: Confirmer | None) -> bool:
    """Whether ``refuse_unconfirmable`` refuses a run of ``org``."""
    return not (options.dry_run or options.assume_yes or confirmer is not None) and _is_live(org)


def preview_run(
    org: Organization,
    rows: Iterable[LedgerRow],
    accounts: dict[str, BankAccount],
    new_payees: Iterable[str],
    *,
    create_only: bool,
    confirm_payees: bool,
) -> RunPreview:
    """What the run is about to pay: rows left to create (and, unless ``create_only``,
    to submit) from the accounts that can pay, per source account, and the new payees."""
    wanted = {RowStatus.PENDING} if create_only else {RowStatus.PENDING, RowStatus.CREATED}
    per_source: dict[str, list[LedgerRow]] = defaultdict(list)
    names: dict[str, str] = {}
    not_paid = 0
    for row in rows:
        not_paid += row.status in _NOT_PAID
        if row.status in wanted and row.account_url in accounts:
            per_source[row.source_account].append(row)
            names[row.source_account] = accounts[row.account_url].display_name
    previews = tuple(
        AccountPreview(
            source=source,
            name=names[source],
            rows=len(paid),
            total=sum((r.amount for r in paid), Decimal(0)),
        )
        for source, paid in sorted(per_source.items())
    )
    return RunPreview(
        organization=org.display_name,
        rows=sum(p.rows for p in previews),
        total=sum((p.total for p in previews), Decimal(0)),
        accounts=previews,
        new_payees=tuple(new_payees),
        create_only=create_only,
        confirm_payees=confirm_payees,
        not_paid=not_paid,
    )


async def confirm_live_run(
    org: Organization, preview: RunPreview, options: RunOptions, confirmer: Confirmer | None
) -> None:
    """Ask before a live-mode run creates anything; return only when it may go on."""
    if options.dry_run or options.assume_yes or not _is_live(org):
        return
    # Nothing to create: nothing to confirm
    if not preview.rows and not preview.new_payees:
        return
    # ``refuse_unconfirmable`` said so already; kept for callers that skip it
    if confirmer is None:
        refuse_unconfirmable(org, options, confirmer)
        return
    answer = await confirmer(preview)
    if answer is ConfirmAnswer.CONFIRMED:
        return
    if answer is ConfirmAnswer.INTERRUPTED:
        msg = (
            "interrupted at the confirmation: nothing was created; run the same command"
            " again to be asked again"
        )
        raise InterruptedRunError(msg)
    said = (
        "no answer (end of input)"
        if answer is ConfirmAnswer.NO_ANSWER
        else "the answer was not yes"
    )
    msg = (
        f"not confirmed: {said}, so nothing was created; run the same command again and type"
        f" yes (or {preview.rows}) to pay"
    )
    raise NotConfirmedError(msg)
