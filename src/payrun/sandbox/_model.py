"""Records the sandbox bank keeps in memory, plus money, id and clock helpers.

Records are mutable ``slots`` dataclasses: the bank changes them in place (a payment gets
rejected, a submission gets delivered). Money is held in integer pence. Every record has a
``seq`` taken from one counter, so creation order is total even when two records share a
timestamp; pagination cursors and ``created-at`` sorting rely on it.
"""

from __future__ import annotations

import base64
import hashlib
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "Account",
    "Admission",
    "CopRequest",
    "Event",
    "LegalPerson",
    "Payee",
    "Payment",
    "Product",
    "Restriction",
    "Submission",
    "Transaction",
    "format_pence",
    "format_time",
    "random_id",
    "stable_id",
    "utc_now",
]

JSON = dict[str, Any]


def utc_now() -> datetime:
    """Return the current time, timezone-aware in UTC."""
    return datetime.now(UTC)


def format_time(moment: datetime) -> str:
    """Render a timestamp the way the API does: ISO 8601, microseconds, ``Z``."""
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def format_pence(pence: int) -> str:
    """Render integer pence as a decimal string with two places (``-12.05``)."""
    sign = "-" if pence < 0 else ""
    whole, part = divmod(abs(pence), 100)
    return f"{sign}{whole}.{part:02d}"


def stable_id(prefix: str, *parts: str) -> str:
    """Derive a random-looking but deterministic id (``ba.<22 chars>``) from ``parts``."""
    digest = hashlib.sha256("\x1f".join((prefix, *parts)).encode()).digest()[:16]
    return f"{prefix}.{base64.urlsafe_b64encode(digest).rstrip(b'=').decode()}"


def random_id(prefix: str, rng: random.Random) -> str:
    """Make a fresh 22-character base64url id like the real service's."""
    raw = rng.getrandbits(128).to_bytes(16, "big")
    return f"{prefix}.{base64.urlsafe_b64encode(raw).rstrip(b'=').decode()}"


@dataclass(slots=True)
class LegalPerson:
    """A legal person: the organization itself or one of its customers."""

    id: str
    legal_person_type: str
    display_name: str
    created_at: datetime
    seq: int


@dataclass(slots=True)
class Product:
    """A bank account product that accounts can be opened from."""

    id: str
    display_name: str
    product_type: str
    product_class: str
    status: str
    created_at: datetime
    seq: int


@dataclass(slots=True)
class Account:
    """A bank account of the organization, with its one UK bank address."""

    id: str
    display_name: str
    product_type: str
    sort_code: str
    account_number: str
    holder: str
    owner_id: str
    balance: int
    available: int
    status: str
    created_at: datetime
    seq: int
    product_id: str | None = None
    beneficiary_id: str | None = None
    opened_at: datetime | None = None
    closed_at: datetime | None = None
    primary: bool = False
    pooled: bool = False
    extra: JSON = field(default_factory=dict)


@dataclass(slots=True)
class Restriction:
    """A freeze (outbound blocked) or block (both ways blocked) on an account."""

    id: str
    account_id: str
    restriction_type: str
    reason_code: str
    legal_status: str
    applied_by_service: bool
    status: str
    created_at: datetime
    seq: int
    notes: list[str] = field(default_factory=list)


@dataclass(slots=True)
class CopRequest:
    """A Confirmation of Payee request and the answer the sandbox gave."""

    id: str
    account: JSON
    response: JSON
    created_at: datetime
    seq: int


@dataclass(slots=True)
class Payee:
    """A payee of a legal person; every account of that legal person may pay it."""

    id: str
    legal_person_id: str
    account_holder: str
    sort_code: str
    account_number: str
    status: str
    created_at: datetime
    seq: int
    cop_request_id: str | None = None


@dataclass(slots=True)
class Payment:
    """A payment: outbound from one of our accounts, or inbound into one."""

    id: str
    account_id: str
    direction: str
    creditor: JSON
    amount: int
    reference: str
    created_at: datetime
    seq: int
    creditor_sort_code: str
    creditor_account_number: str
    creditor_holder: str | None
    payee_id: str | None = None
    target_account_id: str | None = None
    debtor: JSON | None = None
    submission_ids: list[str] = field(default_factory=list)
    admission_id: str | None = None
    rejected_at: datetime | None = None
    rejection_reason: str | None = None


@dataclass(slots=True)
class Submission:
    """One submission of an outbound payment to a scheme."""

    id: str
    payment_id: str
    account_id: str
    scheme: str
    status: str
    end_to_end_id: str
    scheme_id: str
    created_at: datetime
    seq: int
    due: float
    funded: bool
    status_reason: str | None = None


@dataclass(slots=True)
class Admission:
    """The arrival of an inbound payment in one of our accounts."""

    id: str
    payment_id: str
    account_id: str
    scheme: str
    status: str
    end_to_end_id: str
    scheme_id: str
    created_at: datetime
    seq: int


@dataclass(slots=True)
class Transaction:
    """A posting on an account: the balance change and the running balance after it."""

    id: str
    account_id: str
    change: int
    balance_after: int
    origin: str
    created_at: datetime
    seq: int
    payment_id: str | None = None
    reference: str | None = None
    description: str | None = None


@dataclass(slots=True)
class Event:
    """An event; its payload is serialized once, when the event is created."""

    id: str
    event_type: str
    payload: JSON
    created_at: datetime
    seq: int
