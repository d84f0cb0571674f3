"""The audit trail as a report: every plan made, approved, rejected and run.

Input: a ledger's ``AuditEntry`` values. Output: the trail's table (``AUDIT_COLUMNS``, for
``payrun report --audit`` and the .xlsx report's ``audit`` sheet) and the summary sheet's
lines naming the plan a run paid, its maker and its approvers.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from payrun._models import AuditEntry
from payrun.ledger import LedgerLocation, open_ledger

__all__ = ["AUDIT_COLUMNS", "audit_table", "plan_summary_lines", "read_audit_trail"]

AUDIT_COLUMNS = ("at_utc", "event", "actor", "plan_id", "detail")
"""One line per audit entry: when, what (plan, approve, reject, run), who, which plan, and
the event's facts (JSON: a note, a signature and the public key it verifies with)."""


def read_audit_trail(location: LedgerLocation) -> list[AuditEntry]:
    """The ledger's audit trail, read-only (works mid-run)."""
    with open_ledger(location, readonly=True) as ledger:
        return ledger.audit_trail()


def audit_table(entries: Sequence[AuditEntry]) -> list[tuple[object, ...]]:
    """The trail as rows of ``AUDIT_COLUMNS``."""
    return [
        (entry.at.isoformat(), entry.event, entry.actor, entry.plan_id, entry.detail)
        for entry in entries
    ]


def plan_summary_lines(entries: Sequence[AuditEntry]) -> list[tuple[object, ...]]:
    """Summary-sheet lines for the plan the last run paid: its id, maker and approvers --
    those whose signatures the run verified, as its audit entry names them, never every
    recorded approval (none when no run paid a plan)."""
    runs = [entry for entry in entries if entry.event == "run"]
    if not runs:
        return []
    plan_id = runs[-1].plan_id
    makers = [e.actor for e in entries if e.event == "plan" and e.plan_id == plan_id]
    approvers = _verified(runs[-1])
    return [
        ("plan", plan_id, None, None),
        ("maker", makers[0] if makers else "", None, None),
        ("approvers", ", ".join(approvers), len(approvers), None),
    ]


def _verified(run: AuditEntry) -> list[str]:
    """The approvers a run's audit entry names (none in a ledger written before runs named
    them: an approval recorded there was not necessarily valid)."""
    try:
        named = json.loads(run.detail).get("approvers", [])
    except (ValueError, AttributeError):
        return []
    return [str(name) for name in named] if isinstance(named, list) else []
