"""Matching a bank payment to a ledger row: the one rule every phase that looks at payments uses.

A payment is a row's when it is not rejected and has the row's amount, creditor (payee or
account) and reference, as typed or as the bank rewrites it (its default text for a blank
reference, or the secondary reference data of the creditor's payee). Execution checks its
answers with it (``PaymentCheck``), preflight looks for repeats and reconciliation for
payments whose answer was lost.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from datetime import datetime, timedelta
from decimal import Decimal
from typing import NamedTuple, Protocol

from payrun._models import LedgerRow

__all__ = [
    "CLOCK_SKEW",
    "PayeeFacts",
    "PaymentCheck",
    "PaymentLike",
    "Srds",
    "creditor_details",
    "payment_match",
    "reference_match",
    "srds_by_account",
]

CLOCK_SKEW = timedelta(minutes=1)
"""The margin kept when matching payments to committed intents on the bank's clock: what
measuring the bank's clock (``BankClock``) may miss, and a clock that moved since."""

_DEFAULT_REFERENCE_PREFIX = "sent from "


class PaymentLike(Protocol):
    """What matching reads of a bank payment."""

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
    def latest_submission_status(self) -> str | None: ...
    @property
    def rejected(self) -> bool: ...


class PayeeFacts(NamedTuple):
    """What matching needs of a bank payee: its account, and the secondary reference data
    (SRD) of its CoP request, which the bank writes on its payments instead of their reference."""

    sort_code: str
    account_number: str
    srd: str | None = None


_EXACT, _LOOSE = 2, 1
"""How a payment's reference matches a row's: as typed, or only as the bank rewrites it."""


def creditor_details(
    payment: PaymentLike, payees: Mapping[str, PayeeFacts]
) -> tuple[str, str] | None:
    """The creditor's sort code and account number, from the payment or its payee (or None)."""
    if payment.creditor_sort_code and payment.creditor_account_number:
        return (payment.creditor_sort_code, payment.creditor_account_number)
    facts = payees.get(payment.creditor_payee_url or "")
    return (facts.sort_code, facts.account_number) if facts else None


Srds = Mapping[tuple[str, str], set[str]]
"""Sort code and account number -> the SRDs of that account's payees."""


def srds_by_account(payees: Mapping[str, PayeeFacts]) -> dict[tuple[str, str], set[str]]:
    """Each payee account's SRDs (``Srds``), from the payees' details."""
    srds: dict[tuple[str, str], set[str]] = defaultdict(set)
    for facts in payees.values():
        if facts.srd:
            srds[(facts.sort_code, facts.account_number)].add(facts.srd)
    return srds


def reference_match(
    row_reference: str | None,
    payment: PaymentLike,
    payees: Mapping[str, PayeeFacts],
    srds: Srds,
) -> int:
    """``_EXACT``, ``_LOOSE`` (the bank's default text for a blank reference, or an SRD of
    the creditor's account that replaced any reference) or 0."""
    if row_reference and payment.reference == row_reference:
        return _EXACT
    if payment.reference and payment.reference in _account_srds(payment, payees, srds):
        return _LOOSE
    if row_reference:
        return 0
    if not payment.reference:
        return _EXACT
    # A blank reference makes the bank write "Sent from <owner>".
    return _LOOSE if payment.reference.casefold().startswith(_DEFAULT_REFERENCE_PREFIX) else 0


def _account_srds(payment: PaymentLike, payees: Mapping[str, PayeeFacts], srds: Srds) -> set[str]:
    """The SRDs the bank may have written on a payment: its payee's, or, when the bank shows
    the creditor as a bare account (no payee URL), those of every payee of that account."""
    facts = payees.get(payment.creditor_payee_url or "")
    if facts is not None:
        return {facts.srd} if facts.srd else set()
    account = creditor_details(payment, payees)
    return set(srds.get(account, ())) if account else set()


def payment_match(
    row: LedgerRow, payment: PaymentLike, payees: Mapping[str, PayeeFacts], srds: Srds
) -> int:
    """How well a payment matches a row (0: it does not)."""
    if payment.rejected or payment.amount != row.amount:
        return 0
    if creditor_details(payment, payees) != (row.sort_code, row.account_number) and not (
        row.payee_url and payment.creditor_payee_url == row.payee_url
    ):
        return 0
    return reference_match(row.reference, payment, payees, srds)


class PaymentCheck:
    """Whether a payment is one a row asked for, against one set of payee details."""

    __slots__ = ("_payees", "_srds")

    def __init__(self, payee_details: Mapping[str, PayeeFacts], srds: Srds | None = None) -> None:
        """``srds``: the details' SRDs when already known (they may grow with them)."""
        self._payees = payee_details
        self._srds = srds_by_account(payee_details) if srds is None else srds

    def matches(self, row: LedgerRow, payment: PaymentLike) -> bool:
        """True when the payment is not rejected and has the row's amount, creditor (payee
        or account) and reference (as typed, or as the bank rewrites it)."""
        return payment_match(row, payment, self._payees, self._srds) > 0
