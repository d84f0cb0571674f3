"""Plans and their approvals as a ledger keeps them: plans by id, and an append-only audit
trail of every plan made, approved, rejected and run.

Input: an open ``LedgerStore``. Output: ``Plan`` values read back (each checked against its
id), the approvals and rejections of a plan, and new audit entries. Raises
``ApprovalError`` for an unknown or ambiguous plan id.
"""

from __future__ import annotations

import json
import re
from datetime import datetime

from payrun._models import AuditEntry, format_money
from payrun.approval._plan import Plan, plan_from_document
from payrun.approval._rules import Approval, Rejection
from payrun.errors import ApprovalError
from payrun.ledger import LedgerStore

__all__ = [
    "APPROVED",
    "PLANNED",
    "REJECTED",
    "RUN",
    "approvals_of",
    "find_plan",
    "ran_before",
    "record_approval",
    "record_plan",
    "record_rejection",
    "record_run",
]

PLANNED = "plan"
APPROVED = "approve"
REJECTED = "reject"
RUN = "run"
"""The audit trail's events."""

_SHORTEST_ID = 12
_HEX = re.compile(r"[0-9a-f]+")


def record_plan(ledger: LedgerStore, plan: Plan) -> None:
    """Record the plan and its audit entry, in one transaction."""
    detail = {"rows": len(plan.rows), "total": format_money(plan.total)}
    with ledger.atomic():
        ledger.add_plan(plan.plan_id, plan.canonical(), at=plan.created_at)
        ledger.append_audit(
            AuditEntry(plan.created_at, PLANNED, plan.maker, plan.plan_id, json.dumps(detail))
        )


def find_plan(ledger: LedgerStore, given: str) -> Plan:
    """The plan whose id is ``given`` or starts with it (at least 12 hex digits)."""
    wanted = given.strip().lower()
    if len(wanted) < _SHORTEST_ID or not _HEX.fullmatch(wanted):
        msg = f"{given!r} is not a plan id: give the plan's id or its first 12 hex digits"
        raise ApprovalError(msg)
    found = [(pid, text) for pid, text in ledger.plans() if pid.startswith(wanted)]
    if not found:
        msg = (
            f"no plan {wanted[:12]} in the ledger {ledger.location}: make one with payrun plan"
            " BATCH (with the same --ledger)"
        )
        raise ApprovalError(msg)
    if len(found) > 1:
        msg = f"several plans start with {wanted}: give the whole id"
        raise ApprovalError(msg)
    return plan_from_document(*found[0])


def approvals_of(ledger: LedgerStore, plan_id: str) -> tuple[list[Approval], list[Rejection]]:
    """The plan's recorded approvals and rejections, oldest first."""
    approvals: list[Approval] = []
    rejections: list[Rejection] = []
    for entry in ledger.audit_trail():
        if entry.plan_id != plan_id or entry.event not in (APPROVED, REJECTED):
            continue
        detail = json.loads(entry.detail)
        if entry.event == REJECTED:
            rejections.append(
                Rejection(
                    entry.actor,
                    entry.at,
                    detail.get("note"),
                    detail.get("signature"),
                    detail.get("public_key"),
                )
            )
        else:
            approvals.append(
                Approval(
                    entry.actor,
                    entry.at,
                    detail.get("note"),
                    detail["signature"],
                    detail["public_key"],
                )
            )
    return approvals, rejections


def record_approval(ledger: LedgerStore, plan_id: str, approval: Approval) -> None:
    """Append an approval (its signature and the public key it verifies with)."""
    detail = {
        "note": approval.note,
        "signature": approval.signature,
        "public_key": approval.public_key,
    }
    ledger.append_audit(
        AuditEntry(approval.at, APPROVED, approval.name, plan_id, json.dumps(detail))
    )


def record_rejection(ledger: LedgerStore, plan_id: str, rejection: Rejection) -> None:
    """Append a rejection (with its signature and public key when signed)."""
    found = {
        "note": rejection.note,
        "signature": rejection.signature,
        "public_key": rejection.public_key,
    }
    detail = json.dumps({k: v for k, v in found.items() if k == "note" or v is not None})
    ledger.append_audit(AuditEntry(rejection.at, REJECTED, rejection.name, plan_id, detail))


def ran_before(ledger: LedgerStore, plan_id: str) -> bool:
    """True when a run of the plan already started in this ledger (this one resumes it)."""
    return any(e.event == RUN and e.plan_id == plan_id for e in ledger.audit_trail())


def record_run(
    ledger: LedgerStore, plan: Plan, who: str, at: datetime, approvers: tuple[str, ...]
) -> None:
    """Append a run of the plan (each start and each resume), naming the approvers whose
    signatures were verified for it."""
    detail = json.dumps(
        {"rows": len(plan.rows), "total": format_money(plan.total), "approvers": list(approvers)}
    )
    ledger.append_audit(AuditEntry(at, RUN, who, plan.plan_id, detail))
