"""Plans made, approved and run: the library calls ``payrun plan``, ``approve`` and
``run --plan`` make.

``make_plan`` runs the dry run's read-only checks and records the plan; ``open_plan``
finds a plan that is still open and that the file still reads as; ``approve_plan`` and
``reject_plan`` record a decision; ``approved_run`` checks a plan before a run and says
what the run may pay; ``refuse_unplanned`` refuses a plain run a policy forbids. Raises
``ApprovalError`` (exit 2) with one line saying what is missing, and what ``run_batch``
raises.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from payrun._models import ApprovedRows, RowStatus, utc_now
from payrun.approval._keys import load_private_key, public_key_pem, sign_plan, sign_rejection
from payrun.approval._plan import Plan, PlanRow
from payrun.approval._policy import Policy
from payrun.approval._rules import (
    Approval,
    Rejection,
    check_approvals,
    refuse_approver,
    refuse_closed,
    refuse_outside_policy,
    refuse_rejecter,
)
from payrun.approval._store import (
    approvals_of,
    find_plan,
    ran_before,
    record_approval,
    record_plan,
    record_rejection,
    record_run,
)
from payrun.config import RunOptions, Settings, ValidationOptions
from payrun.errors import ApprovalError, LedgerError
from payrun.ledger import LedgerLocation, LedgerStore, ledger_location, open_ledger

# The run is imported when a plan is made (it imports this package's callers)
if TYPE_CHECKING:
    from payrun.run import RunOutcome

__all__ = [
    "PlanMade",
    "approve_plan",
    "approved_run",
    "approved_stored_batch",
    "copy_plan",
    "make_plan",
    "open_plan",
    "plan_options",
    "refuse_unplanned",
    "reject_plan",
]

_PLANNED = (RowStatus.PENDING, RowStatus.CREATED)
"""Rows a run would still pay: these go in the plan (the rest are held or invalid)."""


@dataclass(frozen=True, slots=True)
class PlanMade:
    """A recorded plan and where: the plan, the ledger, the exit code (1: rows left out)."""

    plan: Plan
    location: str
    exit_code: int


def plan_options(validation: ValidationOptions, options: RunOptions) -> dict[str, Any]:
    """The options a plan's rows were read and checked with (command-line names)."""
    return {
        "source_account": validation.source_account,
        "sheet": validation.sheet,
        "input_format": validation.input_format,
        "max_amount": str(validation.max_amount),
        "max_rows": validation.max_rows,
        "allow_duplicates": validation.allow_duplicates,
        "confirm_payees": options.confirm_payees,
        "accept_close_match": options.accept_close_match,
        "accept_changed_details": options.accept_changed_details,
        "allow_repeat": options.allow_repeat,
        "duplicate_window": options.duplicate_window_days,
    }


def _validation_of(plan: Plan) -> ValidationOptions:
    chosen = plan.options
    return ValidationOptions(
        max_amount=Decimal(chosen["max_amount"]),
        allow_duplicates=chosen["allow_duplicates"],
        source_account=chosen["source_account"],
        max_rows=chosen["max_rows"],
        sheet=chosen["sheet"],
        input_format=chosen.get("input_format", "auto"),
    )


async def make_plan(
    batch_path: Path,
    settings: Settings,
    *,
    validation: ValidationOptions,
    options: RunOptions,
    policy: Policy,
    maker: str,
    pay_date: str | None = None,
) -> PlanMade:
    """Check the batch read-only with the bank (the dry run) and record the plan of the
    rows a run would pay; ``ApprovalError`` when no row can be planned."""
    from payrun.run import run_batch

    outcome = await run_batch(
        batch_path,
        settings,
        validation=validation,
        options=dataclasses.replace(options, dry_run=True, planning=True),
    )
    changed = {n for account in outcome.plans for n in account.changed_rows}
    plan = _plan_of(
        outcome,
        changed,
        plan_options(validation, options),
        policy,
        maker,
        pay_date,
    )
    if not plan.rows:
        held = [check for check in plan.payee_checks if check.held]
        why = (
            f"Confirmation of Payee held {plan.cop_held} row(s) (row {held[0].rows[0]}:"
            f" {held[0].held})"
            if held
            else "see payrun run --dry-run"
        )
        msg = (
            f"nothing to plan: none of the {len(outcome.rows)} rows can be paid as the file"
            f" and the bank stand ({why}); nothing was recorded"
        )
        raise ApprovalError(msg)
    location = ledger_location(options.ledger_path, batch_path)
    with open_ledger(location) as ledger:
        record_plan(ledger, plan)
        where = ledger.location
    return PlanMade(plan, where, 1 if plan.held or plan.invalid else 0)


def _plan_of(
    outcome: RunOutcome,
    changed: set[int],
    options: dict[str, Any],
    policy: Policy,
    maker: str,
    pay_date: str | None,
) -> Plan:
    """The plan of a dry run's rows: rows above the policy's max_payment are held."""
    rows = outcome.rows
    limit = policy.max_payment
    planned = [r for r in rows if r.status in _PLANNED and (limit is None or r.amount <= limit)]
    numbers = {r.row for r in planned}
    now = utc_now()
    return Plan(
        rows=tuple(PlanRow.of(r) for r in planned),
        held=tuple(
            r.row for r in rows if r.row not in numbers and r.status is not RowStatus.INVALID
        ),
        invalid=tuple(r.row for r in rows if r.status is RowStatus.INVALID),
        new_payee_rows=tuple(r.row for r in planned if r.payee_url is None),
        changed_detail_rows=tuple(sorted(changed & numbers)),
        options=options,
        pay_date=pay_date,
        policy_digest=policy.digest,
        maker=maker,
        created_at=now,
        expires_at=now + policy.expires_after,
        payee_checks=tuple(outcome.payee_checks),
    )


def _existing(location: LedgerLocation) -> LedgerStore:
    """The ledger at ``location`` opened to write, refused when no plan was ever made there
    (opening would make an empty one)."""
    try:
        with open_ledger(location, readonly=True) as ledger:
            has_plans = bool(ledger.plans())
    except LedgerError:
        has_plans = False
    if not has_plans:
        msg = (
            f"no plans in the ledger {location}: make one with payrun plan BATCH (with the"
            " same --ledger), then approve it"
        )
        raise ApprovalError(msg)
    return open_ledger(location)


def open_plan(
    ledger: LedgerStore, batch_path: Path, given: str, *, now: datetime, started: bool = False
) -> Plan:
    """The plan ``given`` names, if not rejected, not expired (unless ``started``: its run
    is resumed) and the file still reads as it."""
    plan = find_plan(ledger, given)
    _, rejections = approvals_of(ledger, plan.plan_id)
    refuse_closed(plan, rejections, now, started=started)
    from payrun.run import file_rows

    difference = plan.differences(file_rows(batch_path, _validation_of(plan)))
    if difference is not None:
        msg = (
            f"{batch_path.name} no longer reads as plan {plan.plan_id[:12]}: {difference};"
            " make and approve a new plan"
        )
        raise ApprovalError(msg)
    return plan


def approve_plan(
    location: LedgerLocation,
    batch_path: Path,
    given: str,
    *,
    name: str,
    key_path: Path,
    note: str | None,
    policy: Policy,
    confirm: Callable[[Plan], None] | None = None,
) -> Plan:
    """Sign and record ``name``'s approval; ``confirm(plan)`` (if given) must say yes first."""
    key = load_private_key(key_path)
    with _existing(location) as ledger:
        plan = open_plan(ledger, batch_path, given, now=utc_now())
        refuse_approver(plan, policy, name, public_key_pem(key))
        refuse_outside_policy(plan, policy, utc_now(), started=False)
        if confirm is not None:
            confirm(plan)
        approval = Approval(
            name, utc_now(), note, sign_plan(key, plan.plan_id), public_key_pem(key)
        )
        record_approval(ledger, plan.plan_id, approval)
    return plan


def reject_plan(
    location: LedgerLocation,
    batch_path: Path,
    given: str,
    *,
    name: str,
    note: str | None,
    policy: Policy,
    key_path: Path | None = None,
    confirm: Callable[[Plan], None] | None = None,
) -> Plan:
    """Record ``name``'s rejection of the plan (no later run or approval of it goes on);
    with a policy, only an approver it lists may reject, signing with their key."""
    key = None if key_path is None else load_private_key(key_path)
    public = None if key is None else public_key_pem(key)
    with _existing(location) as ledger:
        plan = find_plan(ledger, given)
        _, rejections = approvals_of(ledger, plan.plan_id)
        refuse_closed(plan, rejections, utc_now())
        refuse_rejecter(plan, policy, name, public)
        if confirm is not None:
            confirm(plan)
        signature = None if key is None else sign_rejection(key, plan.plan_id)
        rejection = Rejection(name, utc_now(), note, signature, public)
        record_rejection(ledger, plan.plan_id, rejection)
    return plan


def approved_run(
    location: LedgerLocation,
    batch_path: Path,
    given: str,
    *,
    policy: Policy,
    who: str,
    check: Callable[[Plan], None] | None = None,
) -> tuple[Plan, ApprovedRows]:
    """Check the plan before its run (open, the file reads as it, the policy in force is
    the plan's, approvals meet it, then ``check(plan)`` if given), record the run in the
    audit trail, and say what the run may pay. Expiry stops only a plan's first run: a
    resume (a run of it is in this ledger's trail) finishes what was sent."""
    with _existing(location) as ledger:
        plan = find_plan(ledger, given)
        started = ran_before(ledger, plan.plan_id)
        now = utc_now()
        plan = open_plan(ledger, batch_path, given, now=now, started=started)
        refuse_outside_policy(plan, policy, now, started=started)
        approvals, _ = approvals_of(ledger, plan.plan_id)
        approvers = check_approvals(plan, approvals, policy)
        if check is not None:
            check(plan)
        record_run(ledger, plan, who, utc_now(), approvers)
    return plan, plan.approved_rows()


def copy_plan(source: LedgerLocation, target: LedgerLocation, given: str) -> str:
    """Copy the plan ``given`` names, with its approvals and rejections, from the ledger
    ``payrun plan`` recorded it in (``source``) to a stored batch's (``target``: a fleet
    batch); its full id. ``ApprovalError`` when ``source`` has no such plan."""
    try:
        with open_ledger(source, readonly=True) as ledger:
            plan = find_plan(ledger, given)
            entries = [e for e in ledger.audit_trail() if e.plan_id == plan.plan_id]
    except LedgerError:
        msg = (
            f"no plan {given} in {source}: make it with payrun plan BATCH --ledger URL (the"
            " same database), and have it approved"
        )
        raise ApprovalError(msg) from None
    with open_ledger(target) as ledger:
        known = set(ledger.audit_trail())
        with ledger.atomic():
            ledger.add_plan(plan.plan_id, plan.canonical(), at=plan.created_at)
            for entry in entries:
                if entry not in known:
                    ledger.append_audit(entry)
    return plan.plan_id


def approved_stored_batch(
    location: LedgerLocation, given: str, *, policy: Policy, who: str
) -> tuple[Plan, ApprovedRows]:
    """Check the plan of a batch whose rows a ledger holds (a fleet lane's) before it is
    paid, as ``approved_run`` checks a file's: open (expiry stops only the first run), the
    stored rows read as the plan, the policy in force is the plan's and its approvals meet
    it; record the run; what it may pay."""
    with open_ledger(location) as ledger:
        plan = find_plan(ledger, given)
        started = ran_before(ledger, plan.plan_id)
        now = utc_now()
        approvals, rejections = approvals_of(ledger, plan.plan_id)
        refuse_closed(plan, rejections, now, started=started)
        difference = plan.differences(ledger.rows())
        if difference is not None:
            msg = (
                f"the batch's stored rows do not read as plan {plan.plan_id[:12]}:"
                f" {difference}; make and approve a new plan"
            )
            raise ApprovalError(msg)
        refuse_outside_policy(plan, policy, now, started=started)
        approvers = check_approvals(plan, approvals, policy)
        record_run(ledger, plan, who, utc_now(), approvers)
    return plan, plan.approved_rows()


def refuse_unplanned(policy: Policy) -> None:
    """``ApprovalError`` for a run without a plan when the policy requires one."""
    if policy.required:
        msg = (
            f"the approval policy {policy.path} requires an approved plan: run payrun plan"
            " BATCH, have it approved (payrun approve), then payrun run BATCH --plan ID"
        )
        raise ApprovalError(msg)
