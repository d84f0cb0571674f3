"""Planning: pure decisions about rows, with no I/O.

Input: ledger rows and what the bank said (payees, recent payments). Output: decisions the
pipeline records: which payee a row pays, which bank payment a half-done row already made
(reconciliation), which rows look like a repeat of a payment made elsewhere, and the
per-account totals that control totals and balance checks use. Raises
``ControlTotalsError`` only from ``check_control_totals``.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Protocol

from payrun.domain import format_money
from payrun.errors import ControlTotalsError
from payrun.ledger import LedgerRow

__all__ = [
    "CLOCK_SKEW",
    "PayeeIndex",
    "PayeeLike",
    "PaymentLike",
    "Reconciliation",
    "account_classification",
    "check_control_totals",
    "find_repeats",
    "match_half_created",
    "normalise_name",
]

CLOCK_SKEW = timedelta(minutes=1)
"""How far the bank's clock may lag ours when matching payments to committed intents."""

_DEFAULT_REFERENCE_PREFIX = "sent from "
_BUSINESS_WORDS = re.compile(
    r"\b(ltd|limited|llp|plc|inc|co|company|corp|corporation|group|services|solutions|"
    r"trust|partners|partnership|associates|consulting|holdings)\b|&",
    re.IGNORECASE,
)


class PayeeLike(Protocol):
    """What planning reads of a bank payee."""

    @property
    def url(self) -> str: ...
    @property
    def account_holder(self) -> str: ...
    @property
    def sort_code(self) -> str: ...
    @property
    def account_number(self) -> str: ...
    @property
    def status(self) -> str: ...


class PaymentLike(Protocol):
    """What planning reads of a bank payment."""

    @property
    def url(self) -> str: ...
    @property
    def amount(self) -> Decimal: ...
    @property
    def reference(self) -> str | None: ...
    @property
    def created_at(self) -> datetime: ...
    @property
    def creditor_payee_url(self) -> str | None: ...
    @property
    def creditor_sort_code(self) -> str | None: ...
    @property
    def creditor_account_number(self) -> str | None: ...
    @property
    def latest_submission_url(self) -> str | None: ...
    @property
    def rejected(self) -> bool: ...


def normalise_name(name: str) -> str:
    """Compare names ignoring case and runs of whitespace."""
    return " ".join(name.casefold().split())


def account_classification(name: str) -> str:
    """Guess the account type Confirmation of Payee needs: business names carry Ltd, LLP, &..."""
    return "business" if _BUSINESS_WORDS.search(name) else "personal"


@dataclass(slots=True)
class PayeeIndex:
    """The payees of one legal person, looked up by name, sort code and account number."""

    active: dict[tuple[str, str, str], str] = field(default_factory=dict)
    deactivated: set[tuple[str, str, str]] = field(default_factory=set)
    details: dict[str, tuple[str, str]] = field(default_factory=dict)

    @classmethod
    def build(cls, payees: Iterable[PayeeLike]) -> PayeeIndex:
        """Index payees; the first active payee with given details wins."""
        index = cls()
        for payee in payees:
            index.add(payee)
        return index

    def add(self, payee: PayeeLike) -> None:
        """Add one payee (for example one just created)."""
        key = (normalise_name(payee.account_holder), payee.sort_code, payee.account_number)
        self.details[payee.url] = (payee.sort_code, payee.account_number)
        if payee.status == "active":
            self.active.setdefault(key, payee.url)
        else:
            self.deactivated.add(key)

    def lookup(self, name: str, sort_code: str, account_number: str) -> str | None:
        """The URL of an active payee with these details, or None."""
        return self.active.get((normalise_name(name), sort_code, account_number))

    def is_deactivated(self, name: str, sort_code: str, account_number: str) -> bool:
        """True when only a deactivated payee has these details."""
        key = (normalise_name(name), sort_code, account_number)
        return key in self.deactivated and key not in self.active


def check_control_totals(
    count: int, total: Decimal, *, expect_count: int | None, expect_total: Decimal | None
) -> None:
    """Refuse to start when the file's valid rows differ from the scheduler's control totals."""
    problems = []
    if expect_count is not None and expect_count != count:
        problems.append(f"{count} valid rows where --expect-count says {expect_count}")
    if expect_total is not None and expect_total != total:
        problems.append(
            f"valid rows total {format_money(total)} where --expect-total says"
            f" {format_money(expect_total)}"
        )
    if problems:
        msg = "control totals differ: " + "; ".join(problems) + " (nothing was sent to the bank)"
        raise ControlTotalsError(msg)


def _creditor_details(
    payment: PaymentLike, payee_details: Mapping[str, tuple[str, str]]
) -> tuple[str, str] | None:
    if payment.creditor_sort_code and payment.creditor_account_number:
        return (payment.creditor_sort_code, payment.creditor_account_number)
    if payment.creditor_payee_url:
        return payee_details.get(payment.creditor_payee_url)
    return None


def _reference_matches(row_reference: str | None, payment_reference: str | None) -> bool:
    if row_reference:
        return payment_reference == row_reference
    # A blank reference makes the bank write "Sent from <owner>".
    return not payment_reference or payment_reference.casefold().startswith(
        _DEFAULT_REFERENCE_PREFIX
    )


def _payment_matches(
    row: LedgerRow, payment: PaymentLike, payee_details: Mapping[str, tuple[str, str]]
) -> bool:
    if payment.rejected or payment.amount != row.amount:
        return False
    if not _reference_matches(row.reference, payment.reference):
        return False
    if row.payee_url and payment.creditor_payee_url == row.payee_url:
        return True
    return _creditor_details(payment, payee_details) == (row.sort_code, row.account_number)


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """What the bank shows for rows whose create outcome was unknown."""

    matched: dict[int, str]
    """Row number -> the payment URL the bank holds for it."""
    not_made: list[int]
    """Rows the bank has no payment for: safe to create again."""
    ambiguous: list[int]
    """Rows with more matching payments than rows: a person must look (nothing is guessed)."""


def match_half_created(
    rows: Sequence[LedgerRow],
    payments: Sequence[PaymentLike],
    *,
    known_payment_urls: set[str],
    payee_details: Mapping[str, tuple[str, str]],
) -> Reconciliation:
    """Match rows left ``creating`` to payments this ledger has not recorded yet.

    Rows with the same payee, amount and reference are interchangeable, so a group of k
    such rows with m <= k candidate payments takes them in intent order and the rest are
    created again; m > k is ambiguous and every row of the group needs attention.
    """
    groups: dict[tuple[str, ...], list[LedgerRow]] = defaultdict(list)
    for row in sorted(rows, key=lambda r: (r.intent_at or datetime.min, r.row)):
        groups[(*row.payment_key, row.source_account)].append(row)
    free = sorted(
        (p for p in payments if p.url not in known_payment_urls), key=lambda p: p.created_at
    )
    matched: dict[int, str] = {}
    not_made: list[int] = []
    ambiguous: list[int] = []
    for group in groups.values():
        earliest = (
            min(r.intent_at for r in group if r.intent_at)
            if any(r.intent_at for r in group)
            else None
        )
        since = earliest - CLOCK_SKEW if earliest else None
        candidates = [
            p
            for p in free
            if (since is None or p.created_at >= since)
            and _payment_matches(group[0], p, payee_details)
        ]
        if len(candidates) > len(group):
            ambiguous.extend(r.row for r in group)
            continue
        for row, payment in zip(group, candidates, strict=False):
            matched[row.row] = payment.url
        not_made.extend(r.row for r in group[len(candidates) :])
    return Reconciliation(matched=matched, not_made=sorted(not_made), ambiguous=sorted(ambiguous))


def find_repeats(
    rows: Sequence[LedgerRow],
    payments: Sequence[PaymentLike],
    *,
    known_payment_urls: set[str],
    payee_details: Mapping[str, tuple[str, str]],
) -> dict[int, PaymentLike]:
    """Rows matching a recent payment this ledger did not make: row -> that payment."""
    by_key: dict[tuple[str, str, str], list[PaymentLike]] = defaultdict(list)
    for payment in payments:
        if payment.url in known_payment_urls or payment.rejected:
            continue
        details = _creditor_details(payment, payee_details)
        if details is not None:
            by_key[(*details, format_money(payment.amount))].append(payment)
    repeats: dict[int, PaymentLike] = {}
    for row in rows:
        for payment in by_key.get(
            (row.sort_code, row.account_number, format_money(row.amount)), []
        ):
            if _reference_matches(row.reference, payment.reference):
                repeats[row.row] = payment
                break
    return repeats
