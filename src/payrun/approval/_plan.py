"""A plan: exactly what a run will pay, as one canonical document whose sha256 is its id.

Input: the rows a dry run checked (``LedgerRow``), the options they were read with, the
policy and the maker. Output: a ``Plan``, its canonical bytes (JSON, sorted keys, no
spaces, UTF-8) and its id (sha256 hex of those bytes). The document binds the rows to pay
exactly as read (row, row id, source account, payee details, amount, reference), the rows
left out (held, invalid), the rows that need a new payee and the Confirmation of Payee
answers for those payees (``PayeeCheck``: what the approver sees, and the CoP request a run
creates the payee with), the pay date, the policy's digest, the maker and the plan's times:
an approval signs the id, so it signs all of them. A plan of layout 1 (before CoP answers
were kept) reads and hashes as it was made.
Raises ``ApprovalError`` for a stored document that does not hash to its id.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from payrun._models import (
    ApprovedRows,
    LedgerRow,
    PayeeCheck,
    PlanKey,
    RowStatus,
    format_money,
    plan_key,
)
from payrun.errors import ApprovalError

__all__ = ["PLAN_VERSION", "Plan", "PlanRow", "plan_from_document"]

PLAN_VERSION = 2
"""The canonical document's layout (a new field means a new version): 2 added ``cop``."""

_ROW_FIELDS = (
    "row",
    "row_id",
    "source_account",
    "payee_name",
    "sort_code",
    "account_number",
    "amount",
    "reference",
)


@dataclass(frozen=True, slots=True)
class PlanRow:
    """One row to pay, exactly as read from the file."""

    row: int
    row_id: str | None
    source_account: str
    payee_name: str
    sort_code: str
    account_number: str
    amount: str
    reference: str | None

    @classmethod
    def of(cls, row: LedgerRow) -> PlanRow:
        """The plan's copy of a batch row."""
        return cls(*plan_key(row))

    @property
    def key(self) -> PlanKey:
        """The row as ``plan_key`` names it (what a run compares)."""
        return (
            self.row,
            self.row_id,
            self.source_account,
            self.payee_name,
            self.sort_code,
            self.account_number,
            self.amount,
            self.reference,
        )


@dataclass(frozen=True, slots=True)
class Plan:
    """An immutable plan: the rows to pay and what was known of them when it was made."""

    rows: tuple[PlanRow, ...]
    held: tuple[int, ...]
    invalid: tuple[int, ...]
    new_payee_rows: tuple[int, ...]
    changed_detail_rows: tuple[int, ...]
    options: Mapping[str, Any]
    """The options the file was read and checked with (a run --plan uses them again)."""
    pay_date: str | None
    policy_digest: str | None
    maker: str
    created_at: datetime
    expires_at: datetime
    payee_checks: tuple[PayeeCheck, ...] = ()
    """The new payees' Confirmation of Payee answers (held ones too), by first row."""
    version: int = PLAN_VERSION

    def document(self) -> dict[str, Any]:
        """The plan as the JSON object its id is the hash of."""
        document: dict[str, Any] = {
            "version": self.version,
            "rows": [{name: getattr(r, name) for name in _ROW_FIELDS} for r in self.rows],
            "held": list(self.held),
            "invalid": list(self.invalid),
            "new_payee_rows": list(self.new_payee_rows),
            "changed_detail_rows": list(self.changed_detail_rows),
            "options": dict(self.options),
            "pay_date": self.pay_date,
            "policy_digest": self.policy_digest,
            "maker": self.maker,
            "created_at": self.created_at.isoformat(),
            "expires_at": self.expires_at.isoformat(),
        }
        if self.version >= 2:  # noqa: PLR2004 - the layout that added CoP answers
            document["cop"] = [asdict(check) for check in self.payee_checks]
        return document

    @property
    def cop_matched(self) -> int:
        """New payees whose CoP answer lets their rows be paid."""
        return sum(1 for check in self.payee_checks if not check.held)

    @property
    def cop_held(self) -> int:
        """Rows held because of their new payee's CoP answer."""
        return sum(len(check.rows) for check in self.payee_checks if check.held)

    def check_of(self, row: int) -> PayeeCheck | None:
        """The CoP answer for ``row``'s new payee, if one was asked."""
        return next((check for check in self.payee_checks if row in check.rows), None)

    def canonical(self) -> str:
        """The canonical text: JSON, keys sorted, no spaces, non-ASCII kept as is."""
        return json.dumps(
            self.document(), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )

    @property
    def plan_id(self) -> str:
        """sha256 (hex) of the canonical text's UTF-8 bytes."""
        return hashlib.sha256(self.canonical().encode("utf-8")).hexdigest()

    @property
    def total(self) -> Decimal:
        """The sum of the rows' amounts."""
        return sum((Decimal(r.amount) for r in self.rows), Decimal(0))

    def by_account(self) -> dict[str, tuple[int, Decimal]]:
        """Source account -> (rows, total), in the file's order."""
        found: dict[str, tuple[int, Decimal]] = {}
        for r in self.rows:
            count, total = found.get(r.source_account, (0, Decimal(0)))
            found[r.source_account] = (count + 1, total + Decimal(r.amount))
        return found

    def approved_rows(self) -> ApprovedRows:
        """What a run may pay under this plan."""
        return ApprovedRows(
            plan_id=self.plan_id,
            rows=frozenset(r.key for r in self.rows),
            new_payee_rows=frozenset(self.new_payee_rows),
            cop_requests={
                row: check.cop_request_url
                for check in self.payee_checks
                if check.cop_request_url and not check.held
                for row in check.rows
                if row in self.new_payee_rows
            },
        )

    def summary(self) -> dict[str, object]:
        """The plan as ``payrun plan --format json`` prints it."""
        return {
            "plan": self.plan_id,
            "rows": len(self.rows),
            "total": format_money(self.total),
            "accounts": [
                {"source_account": source, "rows": count, "total": format_money(total)}
                for source, (count, total) in self.by_account().items()
            ],
            "new_payees": len(self.new_payee_rows),
            "changed_details": len(self.changed_detail_rows),
            "held": len(self.held),
            "invalid": len(self.invalid),
            "maker": self.maker,
            "created_at": self.created_at.isoformat(),
            "expires_at": self.expires_at.isoformat(),
        }

    def differences(self, rows: Iterable[LedgerRow]) -> str | None:
        """What differs between the file's ``rows`` (as read now) and this plan, or None."""
        now = {r.row: r for r in rows}
        planned = {r.row: r for r in self.rows}
        expected = set(planned) | set(self.held) | set(self.invalid)
        if set(now) != expected:
            extra = sorted(set(now) - expected)
            gone = sorted(expected - set(now))
            return f"row {extra[0]} is new" if extra else f"row {gone[0]} is gone"
        for number, planned_row in planned.items():
            row = now[number]
            if row.status is RowStatus.INVALID:
                return f"row {number} is now invalid ({row.error})"
            if PlanRow.of(row) != planned_row:
                return f"row {number} {_what_changed(planned_row, PlanRow.of(row))}"
        for number in self.invalid:
            if now[number].status is not RowStatus.INVALID:
                return f"row {number} was invalid and now reads as a payment"
        return None


def _what_changed(planned: PlanRow, now: PlanRow) -> str:
    """'amount 10.00 -> 12.00': the first field that differs."""
    for name in _ROW_FIELDS:
        if getattr(planned, name) != getattr(now, name):
            return f"{name.replace('_', ' ')} {getattr(planned, name)} -> {getattr(now, name)}"
    return "changed"


def plan_from_document(plan_id: str, text: str) -> Plan:
    """The plan a ledger stored as ``text``; ``ApprovalError`` unless it hashes to its id."""
    if hashlib.sha256(text.encode("utf-8")).hexdigest() != plan_id:
        msg = f"the ledger's record of plan {plan_id[:12]} does not match its id: it was altered"
        raise ApprovalError(msg)
    data = json.loads(text)
    plan = Plan(
        rows=tuple(PlanRow(**{name: r[name] for name in _ROW_FIELDS}) for r in data["rows"]),
        held=tuple(data["held"]),
        invalid=tuple(data["invalid"]),
        new_payee_rows=tuple(data["new_payee_rows"]),
        changed_detail_rows=tuple(data["changed_detail_rows"]),
        options=data["options"],
        pay_date=data["pay_date"],
        policy_digest=data["policy_digest"],
        maker=data["maker"],
        created_at=datetime.fromisoformat(data["created_at"]),
        expires_at=datetime.fromisoformat(data["expires_at"]),
        payee_checks=tuple(
            PayeeCheck(**{**check, "rows": tuple(check["rows"])}) for check in data.get("cop", [])
        ),
        version=data["version"],
    )
    if plan.canonical() != text:
        msg = f"the ledger's record of plan {plan_id[:12]} is not in canonical form"
        raise ApprovalError(msg)
    return plan
