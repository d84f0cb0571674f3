"""The policy applied to a plan: who may approve it, and whether its approvals suffice.

Input: a ``Plan``, its recorded approvals and rejections, a ``Policy`` and the time now.
Output: nothing when allowed (``check_approvals``: the approvers whose signatures count);
``ApprovalError`` saying what is missing otherwise. Every signature is checked against the
policy's public keys as they are now (without a policy, against the key recorded with the
approval), and the plan against the policy in force now: the maker's own policy decides
nothing (``refuse_outside_policy``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from payrun.approval._keys import raw_public_key, signature_verifies
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
    "refuse_outside_policy",
    "refuse_rejecter",
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
    """One recorded rejection of a plan (signed when a policy was in force)."""

    name: str
    at: datetime
    note: str | None
    signature: str | None = None
    public_key: str | None = None


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


def refuse_closed(
    plan: Plan, rejections: Sequence[Rejection], now: datetime, *, started: bool = False
) -> None:
    """``ApprovalError`` when the plan was rejected, or expired before its first run
    (``started``: a run of it began in this ledger, and this is its resume)."""
    plan_id = plan.plan_id[:12]
    if rejections:
        first = rejections[0]
        note = f" ({first.note})" if first.note else ""
        msg = (
            f"plan {plan_id} was rejected by {first.name}{note}: correct the file, then make"
            " and approve a new plan"
        )
        raise ApprovalError(msg)
    if not started and now >= plan.expires_at:
        msg = (
            f"plan {plan_id} expired at {plan.expires_at.isoformat()}: make and approve a new"
            " plan (payrun plan)"
        )
        raise ApprovalError(msg)


def refuse_outside_policy(plan: Plan, policy: Policy, now: datetime, *, started: bool) -> None:
    """``ApprovalError`` when the plan was made under another policy than the one in force,
    pays a row above its max_payment, or is older than its expiry allows (before the first
    run only: a resume must finish what was sent)."""
    plan_id = plan.plan_id[:12]
    if policy.path is not None and plan.policy_digest != policy.digest:
        msg = (
            f"plan {plan_id} was made under another policy than {policy.path}: make the plan"
            " again under this one (payrun plan --policy), and have it approved"
        )
        raise ApprovalError(msg)
    limit = policy.max_payment
    above = [r for r in plan.rows if limit is not None and Decimal(r.amount) > limit]
    if limit is not None and above:
        msg = (
            f"plan {plan_id} pays row {above[0].row} £{above[0].amount}, above the policy's"
            f" max_payment £{limit:,.2f}: make the plan again under this policy"
        )
        raise ApprovalError(msg)
    ends = plan.created_at + policy.expires_after
    if not started and now >= ends:
        msg = (
            f"plan {plan_id} expired at {ends.isoformat()} (the policy's"
            " expires_after_days): make and approve a new plan (payrun plan)"
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
    if raw_public_key(approver.public_key) != raw_public_key(public_pem):
        msg = (
            f"the key given is not {name}'s: its public half differs from {name}'s in the"
            f" policy {policy.path}"
        )
        raise ApprovalError(msg)


def refuse_rejecter(plan: Plan, policy: Policy, name: str, public_pem: str | None) -> None:
    """``ApprovalError`` unless ``name`` may reject the plan: anyone without a policy; with
    one, only an approver it lists, with their key (whose public half is ``public_pem``)."""
    if policy.path is None:
        return
    approver = policy.approver(name)
    if approver is None:
        msg = (
            f"{name} is not an approver in the policy {policy.path}, so cannot reject plan"
            f" {plan.plan_id[:12]}: ask an approver"
        )
        raise ApprovalError(msg)
    if public_pem is None or raw_public_key(approver.public_key) != raw_public_key(public_pem):
        msg = (
            f"rejecting under the policy {policy.path} needs {name}'s approver key: add"
            " --key FILE (payrun approver-key wrote it)"
        )
        raise ApprovalError(msg)


def check_approvals(plan: Plan, approvals: Sequence[Approval], policy: Policy) -> tuple[str, ...]:
    """The approvers whose approvals count: distinct people with distinct keys, none the
    maker, who signed the plan with the keys the policy holds now; ``ApprovalError`` unless
    they are enough."""
    valid: dict[str, None] = {}
    keys: set[bytes] = set()
    for approval in approvals:
        if approval.name == plan.maker or approval.name in valid:
            continue
        raw = _verified_key(plan, approval, policy)
        # One key is one person, whatever names it is listed under
        if raw is None or raw in keys:
            continue
        valid[approval.name] = None
        keys.add(raw)
    needed, why = approvals_needed(plan, policy)
    if len(valid) >= needed:
        return tuple(valid)
    because = f" ({why})" if why else ""
    have = ", ".join(sorted(valid)) if valid else "none"
    msg = (
        f"plan {plan.plan_id[:12]} needs {needed} approval(s) by distinct approvers other than"
        f" its maker{because}; valid approvals: {have}: ask an approver to run"
        f" payrun approve BATCH --plan {plan.plan_id[:12]}"
    )
    raise ApprovalError(msg)


def _verified_key(plan: Plan, approval: Approval, policy: Policy) -> bytes | None:
    """The raw public key the approval's signature verifies with -- the policy's for its
    name, or without a policy the one recorded with it -- or None when it does not."""
    if policy.path is None:
        key = approval.public_key
    else:
        approver = policy.approver(approval.name)
        if approver is None:
            return None
        key = approver.public_key
    if not signature_verifies(key, plan.plan_id, approval.signature):
        return None
    return raw_public_key(key)
