"""The policy applied to a plan: who may approve it, and whether its approvals suffice.

Input: a ``Plan``, its recorded approvals and rejections, a ``Policy`` and the time now.
Output: nothing when allowed; ``ApprovalError`` saying what is missing otherwise. Every
signature is checked against the policy's public keys as they are now (without a policy,
against the key recorded with the approval).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from payrun.approval._keys import signature_verifies
from payrun.approval._plan import Plan
from payrun.approval._policy import Policy
from payrun.errors import ApprovalError

__all__ = [
    "Approval",
    "Rejection",
    "approvals_needed",
    "check_approvals",
    "refuse_approver",
    "refuse_closed",
]


@dataclass(frozen=True, slots=True)
class Approval:
    """One recorded approval of a plan."""

    name: str
    at: datetime
    note: str | None
    signature: str
    public_key: str


@dataclass(frozen=True, slots=True)
class Rejection:
    """One recorded rejection of a plan."""

    name: str
    at: datetime
    note: str | None


def approvals_needed(plan: Plan, policy: Policy) -> tuple[int, str]:
    """How many approvals the plan needs, and why more than the policy's base number."""
    reasons = []
    above = policy.second_approver_above
    if above is not None and plan.total >= above:
        reasons.append(f"its total £{plan.total:,.2f} is at or above £{above:,.2f}")
    if policy.second_approver_for_new_payees and (plan.new_payee_rows or plan.changed_detail_rows):
        reasons.append("it pays a new or changed payee")
    extra = 1 if reasons else 0
    return policy.approvers_needed + extra, " and ".join(reasons)


def refuse_closed(plan: Plan, rejections: Sequence[Rejection], now: datetime) -> None:
    """``ApprovalError`` when the plan expired or was rejected."""
    plan_id = plan.plan_id[:12]
    if rejections:
        first = rejections[0]
        note = f" ({first.note})" if first.note else ""
        msg = (
            f"plan {plan_id} was rejected by {first.name}{note}: correct the file, then make"
            " and approve a new plan"
        )
        raise ApprovalError(msg)
    if now >= plan.expires_at:
        msg = (
            f"plan {plan_id} expired at {plan.expires_at.isoformat()}: make and approve a new"
            " plan (payrun plan)"
        )
        raise ApprovalError(msg)


def refuse_approver(plan: Plan, policy: Policy, name: str, public_pem: str) -> None:
    """``ApprovalError`` unless ``name``, holding the key whose public half is
    ``public_pem``, may approve the plan."""
    if name == plan.maker:
        msg = f"{name} made plan {plan.plan_id[:12]}, so cannot approve it: ask another approver"
        raise ApprovalError(msg)
    if policy.path is None:
        return
    approver = policy.approver(name)
    if approver is None:
        msg = f"{name} is not an approver in the policy {policy.path}"
        raise ApprovalError(msg)
    if _normalised(approver.public_key) != _normalised(public_pem):
        msg = (
            f"the key given is not {name}'s: its public half differs from {name}'s in the"
            f" policy {policy.path}"
        )
        raise ApprovalError(msg)


def check_approvals(plan: Plan, approvals: Sequence[Approval], policy: Policy) -> None:
    """``ApprovalError`` unless enough distinct approvers, none the maker, signed the plan
    with the keys the policy holds now."""
    valid: set[str] = set()
    for approval in approvals:
        if approval.name == plan.maker or approval.name in valid:
            continue
        if _signed(plan, approval, policy):
            valid.add(approval.name)
    needed, why = approvals_needed(plan, policy)
    if len(valid) >= needed:
        return
    because = f" ({why})" if why else ""
    have = ", ".join(sorted(valid)) if valid else "none"
    msg = (
        f"plan {plan.plan_id[:12]} needs {needed} approval(s) by distinct approvers other than"
        f" its maker{because}; valid approvals: {have}: ask an approver to run"
        f" payrun approve BATCH --plan {plan.plan_id[:12]}"
    )
    raise ApprovalError(msg)


def _signed(plan: Plan, approval: Approval, policy: Policy) -> bool:
    """The approval's signature verifies with the approver's key (the policy's, if any)."""
    if policy.path is None:
        key = approval.public_key
    else:
        approver = policy.approver(approval.name)
        if approver is None:
            return False
        key = approver.public_key
    return signature_verifies(key, plan.plan_id, approval.signature)


def _normalised(pem: str) -> str:
    return "".join(pem.split())
