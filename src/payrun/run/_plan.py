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
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import NamedTuple, Protocol

from payrun._models import LedgerRow, format_money
from payrun.errors import ControlTotalsError

__all__ = [
    "CLOCK_SKEW",
    "PayeeFacts",
    "PayeeIndex",
    "PayeeLike",
    "PaymentCheck",
    "PaymentLike",
    "Reconciliation",
    "account_classification",
    "check_control_totals",
    "find_repeats",
    "match_half_created",
    "normalise_name",
]

CLOCK_SKEW = timedelta(minutes=1)
"""The margin kept when matching payments to committed intents on the bank's clock: what
measuring the bank's clock (``BankClock``) may miss, and a clock that moved since."""

_DEFAULT_REFERENCE_PREFIX = "sent from "
_DID_NOT_PAY = frozenset({"failed", "returned"})
_NO_TIME = datetime.min.replace(tzinfo=UTC)
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
    @property
    def srd(self) -> str | None: ...


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
    def latest_submission_status(self) -> str | None: ...
    @property
    def rejected(self) -> bool: ...


def normalise_name(name: str) -> str:
    """Compare names ignoring case and runs of whitespace."""
    return " ".join(name.casefold().split())


def account_classification(name: str) -> str:
    """Guess the account type Confirmation of Payee needs: business names carry Ltd, LLP, &..."""
    return "business" if _BUSINESS_WORDS.search(name) else "personal"


class PayeeFacts(NamedTuple):
    """What matching needs of a bank payee: its account, and the secondary reference data
    (SRD) of its CoP request, which the bank writes on its payments instead of their reference."""

    sort_code: str
    account_number: str
    srd: str | None = None


@dataclass(slots=True)
class PayeeIndex:
    """The payees of one legal person, looked up by name, sort code and account number."""

    active: dict[tuple[str, str, str], str] = field(default_factory=dict)
    deactivated: set[tuple[str, str, str]] = field(default_factory=set)
    details: dict[str, PayeeFacts] = field(default_factory=dict)
    inactive: set[str] = field(default_factory=set)
    """URLs of payees that cannot be paid (deactivated)."""

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
        self.details[payee.url] = PayeeFacts(payee.sort_code, payee.account_number, payee.srd)
        if payee.status == "active":
            self.active.setdefault(key, payee.url)
        else:
            self.deactivated.add(key)
            self.inactive.add(payee.url)

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


_EXACT, _LOOSE = 2, 1
"""How a payment's reference matches a row's: as typed, or only as the bank rewrites it."""


def _creditor_details(
    payment: PaymentLike, payees: Mapping[str, PayeeFacts]
) -> tuple[str, str] | None:
    if payment.creditor_sort_code and payment.creditor_account_number:
        return (payment.creditor_sort_code, payment.creditor_account_number)
    facts = payees.get(payment.creditor_payee_url or "")
    return (facts.sort_code, facts.account_number) if facts else None


_Srds = Mapping[tuple[str, str], set[str]]
"""Sort code and account number -> the SRDs of that account's payees."""


def _srds_by_account(payees: Mapping[str, PayeeFacts]) -> dict[tuple[str, str], set[str]]:
    srds: dict[tuple[str, str], set[str]] = defaultdict(set)
    for facts in payees.values():
        if facts.srd:
            srds[(facts.sort_code, facts.account_number)].add(facts.srd)
    return srds


def _reference_match(
    row_reference: str | None,
    payment: PaymentLike,
    payees: Mapping[str, PayeeFacts],
    srds: _Srds,
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


def _account_srds(payment: PaymentLike, payees: Mapping[str, PayeeFacts], srds: _Srds) -> set[str]:
    """The SRDs the bank may have written on a payment: its payee's, or, when the bank shows
    the creditor as a bare account (no payee URL), those of every payee of that account."""
    facts = payees.get(payment.creditor_payee_url or "")
    if facts is not None:
        return {facts.srd} if facts.srd else set()
    account = _creditor_details(payment, payees)
    return set(srds.get(account, ())) if account else set()


def _payment_match(
    row: LedgerRow, payment: PaymentLike, payees: Mapping[str, PayeeFacts], srds: _Srds
) -> int:
    """How well a payment matches a row (0: it does not)."""
    if payment.rejected or payment.amount != row.amount:
        return 0
    if _creditor_details(payment, payees) != (row.sort_code, row.account_number) and not (
        row.payee_url and payment.creditor_payee_url == row.payee_url
    ):
        return 0
    return _reference_match(row.reference, payment, payees, srds)


class PaymentCheck:
    """Whether a payment is one a row asked for, against one set of payee details."""

    __slots__ = ("_payees", "_srds")

    def __init__(self, payee_details: Mapping[str, PayeeFacts]) -> None:
        self._payees = payee_details
        self._srds = _srds_by_account(payee_details)

    def matches(self, row: LedgerRow, payment: PaymentLike) -> bool:
        """True when the payment is not rejected and has the row's amount, creditor (payee
        or account) and reference (as typed, or as the bank rewrites it)."""
        return _payment_match(row, payment, self._payees, self._srds) > 0


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
    payee_details: Mapping[str, PayeeFacts],
    bank_offset: timedelta = timedelta(0),
) -> Reconciliation:
    """Match rows left ``creating`` to payments this ledger has not recorded yet.

    A payment counts for a group when the bank made it after the group's first intent
    (``bank_offset``: how far the bank's clock is ahead of ours, its ``created-at`` being
    the bank's time), less ``CLOCK_SKEW``.

    Rows with the same payee account, amount and reference are interchangeable, so a group
    of k such rows with m <= k candidate payments takes them in intent order and the rest
    are created again; m > k is ambiguous and every row of the group needs attention.
    Groups that match one payment at all (a typed reference and the bank's default text for
    a blank one, or two references the payee's SRD replaced) are counted together, and
    each payment goes to one row, the earliest that matches it best; no payment is ever
    given to two rows, and a payment no row is left for makes them all need attention.
    """
    groups: dict[_Key, list[LedgerRow]] = defaultdict(list)
    for row in sorted(rows, key=_by_intent):
        groups[row.payment_key].append(row)
    free = sorted(
        (p for p in payments if p.url not in known_payment_urls), key=lambda p: p.created_at
    )
    claims = _claims(groups, free, payee_details, bank_offset)
    matched: dict[int, str] = {}
    not_made: list[int] = []
    ambiguous: list[int] = []
    for members, urls in _components(groups, claims):
        assigned = _assign(members, [p for p in free if p.url in urls], claims)
        if assigned is None:
            ambiguous.extend(r.row for r in members)
            continue
        matched.update(assigned)
        not_made.extend(r.row for r in members if r.row not in assigned)
    return Reconciliation(matched=matched, not_made=sorted(not_made), ambiguous=sorted(ambiguous))


_Key = tuple[str, ...]


def _by_intent(row: LedgerRow) -> tuple[datetime, int]:
    return (row.intent_at or _NO_TIME, row.row)


def _claims(
    groups: Mapping[_Key, Sequence[LedgerRow]],
    free: Sequence[PaymentLike],
    payees: Mapping[str, PayeeFacts],
    bank_offset: timedelta,
) -> dict[str, dict[_Key, int]]:
    """Payment URL -> the groups it matches (made after their first intent), and how well."""
    claims: dict[str, dict[_Key, int]] = defaultdict(dict)
    srds = _srds_by_account(payees)
    for key, group in groups.items():
        since = _since(group, bank_offset)
        for payment in free:
            if since is None or payment.created_at >= since:
                strength = _payment_match(group[0], payment, payees, srds)
                if strength:
                    claims[payment.url][key] = strength
    return claims


def _components(
    groups: Mapping[_Key, Sequence[LedgerRow]], claims: Mapping[str, Mapping[_Key, int]]
) -> list[tuple[list[LedgerRow], set[str]]]:
    """Groups joined by any payment they both match: each part's rows (in intent order) and
    the payments they match (each payment in one part only)."""
    parent = {key: key for key in groups}

    def root(key: _Key) -> _Key:
        while parent[key] != key:
            key = parent[key]
        return key

    for claimers in claims.values():
        first, *others = claimers
        for key in others:
            parent[root(key)] = root(first)
    parts: dict[_Key, tuple[list[LedgerRow], set[str]]] = {}
    for key, group in groups.items():
        parts.setdefault(root(key), ([], set()))[0].extend(group)
    for url, claimers in claims.items():
        parts[root(next(iter(claimers)))][1].add(url)
    for members, _ in parts.values():
        members.sort(key=_by_intent)
    return list(parts.values())


def _assign(
    members: Sequence[LedgerRow],
    payments: Sequence[PaymentLike],
    claims: Mapping[str, Mapping[_Key, int]],
) -> dict[int, str] | None:
    """Each payment (oldest first) to the earliest free row that matches it best (a
    reference as typed before the bank's rewrite of one); None when there are more payments
    than rows, or a payment finds no row left: a person must look."""
    if len(payments) > len(members):
        return None
    free = list(members)
    assigned: dict[int, str] = {}
    for payment in payments:
        strengths = claims[payment.url]
        options = [r for r in free if strengths.get(r.payment_key)]
        if not options:
            return None
        # The earliest of the best
        best = max(options, key=lambda r: strengths[r.payment_key])
        assigned[best.row] = payment.url
        free.remove(best)
    return assigned


def _since(group: Sequence[LedgerRow], bank_offset: timedelta) -> datetime | None:
    """The earliest intent of a group on the bank's clock, less the clock skew (None: no
    intent recorded)."""
    intents = [r.intent_at for r in group if r.intent_at]
    return min(intents) + bank_offset - CLOCK_SKEW if intents else None


def find_repeats(
    rows: Sequence[LedgerRow],
    payments: Sequence[PaymentLike],
    *,
    known_payment_urls: set[str],
    payee_details: Mapping[str, PayeeFacts],
) -> dict[int, PaymentLike]:
    """Rows matching a recent payment this ledger did not make: row -> that payment.

    A payment that did not pay (rejected, or its latest submission failed or was returned)
    is no repeat.
    """
    by_key: dict[tuple[str, str, str], list[PaymentLike]] = defaultdict(list)
    for payment in payments:
        if (
            payment.url in known_payment_urls
            or payment.rejected
            or payment.latest_submission_status in _DID_NOT_PAY
        ):
            continue
        details = _creditor_details(payment, payee_details)
        if details is not None:
            by_key[(*details, format_money(payment.amount))].append(payment)
    repeats: dict[int, PaymentLike] = {}
    srds = _srds_by_account(payee_details)
    for row in rows:
        for payment in by_key.get(
            (row.sort_code, row.account_number, format_money(row.amount)), []
        ):
            if _reference_match(row.reference, payment, payee_details, srds):
                repeats[row.row] = payment
                break
    return repeats
