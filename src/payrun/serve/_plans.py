"""A plan as the page shows it: the plan, its decisions, its run, and one state word.

``plan_view`` reads the plan (cached by id: a plan's id is the hash of its text, so a
cached copy is never stale), its approvals and rejections from the ledger's audit trail,
and its run's files and ledger rows, and names its state: awaiting approval, approved,
paying, interrupted (press Pay to resume), paid, rejected or expired.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from functools import lru_cache
from pathlib import Path

from payrun._models import PayeeCheck
from payrun.approval import (
    Approval,
    Plan,
    Policy,
    Rejection,
    approvals_needed,
    approvals_of,
    check_approvals,
)
from payrun.errors import ApprovalError, PayrunError
from payrun.serve._batches import StoredBatch
from payrun.serve._runs import Progress, RunFiles, read_progress

__all__ = ["PlanView", "cop_words", "held_reasons", "load_plan", "plan_view"]

_CACHED_PLANS = 64
_RAN_TO_THE_END = (0, 1)
"""``payrun run``'s exit codes when every row got its answer (1: some not paid)."""


@dataclass(frozen=True, slots=True)
class PlanView:
    """Everything the plan page and the plan list show of one plan."""

    plan_id: str
    """The plan's id (``plan.plan_id`` hashes the whole plan again at each use)."""
    plan: Plan
    total: Decimal
    accounts: dict[str, tuple[int, Decimal]]
    """Source account -> (rows, total)."""
    stored: StoredBatch
    approvals: list[Approval]
    rejections: list[Rejection]
    state: str
    why_not_approved: str | None
    files: RunFiles
    progress: Progress | None
    needed: tuple[int, str]
    """The approvals the policy asks of this plan, and why more than its base number."""

    @property
    def can_pay(self) -> bool:
        """True when "Pay" starts (or resumes) the run."""
        return self.state in {"approved", "interrupted"}

    @property
    def open(self) -> bool:
        """True while approvals and rejections are still taken."""
        return self.state == "awaiting approval"


@lru_cache(maxsize=_CACHED_PLANS)
def _plan(ledger: Path, plan_id: str) -> Plan:
    from payrun.approval import find_plan
    from payrun.ledger import open_ledger

    with open_ledger(ledger, readonly=True) as store:
        return find_plan(store, plan_id)


def load_plan(stored: StoredBatch, plan_id: str) -> Plan:
    """The recorded plan ``plan_id`` of ``stored``."""
    return _plan(stored.ledger, plan_id)


def _decisions(ledger: Path, plan_id: str) -> tuple[list[Approval], list[Rejection]]:
    from payrun.ledger import open_ledger

    with open_ledger(ledger, readonly=True) as store:
        return approvals_of(store, plan_id)


def plan_view(stored: StoredBatch, plan_id: str, policy: Policy, now: datetime) -> PlanView:
    """The plan, its decisions and its run, and its state now."""
    plan = load_plan(stored, plan_id)
    approvals, rejections = _decisions(stored.ledger, plan_id)
    files = RunFiles(stored.runs, plan_id)
    why = _why_not_approved(plan, plan_id, tuple(approvals), policy)
    progress = read_progress(stored.ledger, len(plan.rows)) if files.started() else None
    state = _state(plan, rejections, why, files, progress, now)
    total, accounts = _totals(stored.ledger, plan_id)
    needed = approvals_needed(plan, policy) if state == "awaiting approval" else (0, "")
    return PlanView(
        plan_id,
        plan,
        total,
        accounts,
        stored,
        approvals,
        rejections,
        state,
        why,
        files,
        progress,
        needed,
    )


@lru_cache(maxsize=_CACHED_PLANS)
def _totals(ledger: Path, plan_id: str) -> tuple[Decimal, dict[str, tuple[int, Decimal]]]:
    plan = _plan(ledger, plan_id)
    return plan.total, plan.by_account()


_checked: dict[tuple[str, tuple[Approval, ...], str | None], str | None] = {}


def _why_not_approved(
    plan: Plan, plan_id: str, approvals: tuple[Approval, ...], policy: Policy
) -> str | None:
    """Why the approvals do not meet the policy (None: they do), remembered per plan,
    approvals and policy (checking hashes the whole plan again for each signature)."""
    key = (plan_id, approvals, policy.digest)
    if key not in _checked:
        if len(_checked) >= _CACHED_PLANS:
            _checked.clear()
        try:
            check_approvals(plan, approvals, policy)
            _checked[key] = None
        except ApprovalError as error:
            _checked[key] = str(error)
    return _checked[key]


def _state(
    plan: Plan,
    rejections: list[Rejection],
    why: str | None,
    files: RunFiles,
    progress: Progress | None,
    now: datetime,
) -> str:
    if files.started():
        if files.alive():
            return "paying"
        code = files.exit_code()
        if code is None:
            # Killed with a server, the run went on: the ledger says whether it ended
            finished = progress is not None and not progress.pending and files.report.exists()
        else:
            finished = code in _RAN_TO_THE_END
        return "paid" if finished else "interrupted"
    if rejections:
        return "rejected"
    if now >= plan.expires_at:
        return "expired"
    return "awaiting approval" if why is not None else "approved"


def cop_words(check: PayeeCheck) -> str:
    """A new payee's Confirmation of Payee answer in words: match, close match with the
    name the bank suggests, or no match and the bank's reason."""
    if check.result == "match":
        return "match"
    if check.result == "close-match":
        said = f": the bank says {check.suggested_name!r}" if check.suggested_name else ""
        return f"close match{said}"
    why = f" ({check.reason})" if check.reason else ""
    return f"{check.result.replace('-', ' ')}{why}"


def held_reasons(stored: StoredBatch, plan: Plan) -> dict[int, str]:
    """Why each held row was left out (Confirmation of Payee, changed details, ...)."""
    from payrun.ledger import open_ledger

    wanted = set(plan.held)
    if not wanted:
        return {}
    # Confirmation of Payee's holds, as the plan's check said them
    reasons = {row: check.held for check in plan.payee_checks if check.held for row in check.rows}
    try:
        with open_ledger(stored.ledger, readonly=True) as store:
            found = {r.row: r.error for r in store.rows() if r.row in wanted and r.error}
    except PayrunError:
        found = {}
    return {row: found.get(row) or reasons.get(row) or "held" for row in sorted(wanted)}
