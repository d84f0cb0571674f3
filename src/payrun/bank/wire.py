"""Wire format of the bank's ``/v0`` API: frozen value types and their JSON parsers.

Input: decoded JSON objects with kebab-case keys. Output: ``@dataclass(frozen=True,
slots=True)`` values. Parsing is plain dict access (cheap on the hot path), tolerates
unknown fields and unknown enum values (kept as strings), and raises ``KeyError``,
``TypeError``, ``ValueError`` or ``decimal.InvalidOperation`` when a required field is
missing or malformed; ``payrun.bank.client`` turns those into ``BankError``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

__all__ = [
    "BankAccount",
    "BankAddress",
    "CopResult",
    "Event",
    "Organization",
    "Payee",
    "Payment",
    "Restriction",
    "Submission",
    "format_timestamp",
    "parse_account",
    "parse_cop_result",
    "parse_event",
    "parse_organization",
    "parse_payee",
    "parse_payment",
    "parse_restriction",
    "parse_submission",
    "parse_timestamp",
    "payee_parser",
    "payment_parser",
]

Json = dict[str, Any]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Organization:
    """The organization the API key belongs to, with the links payrun follows."""

    url: str
    display_name: str
    mode: str
    own_legal_person_url: str
    payments_url: str
    events_url: str
    accounts_search_url: str
    accounts_url: str
    payments_search_url: str
    cop_request_url: str


@dataclass(frozen=True, slots=True)
class BankAddress:
    """One sort code and account number an account can be paid into."""

    account_holder: str
    sort_code: str
    account_number: str


@dataclass(frozen=True, slots=True)
class BankAccount:
    """A bank account of the organization: status, balances, addresses and links."""

    url: str
    display_name: str
    status: str
    restricted: bool
    available_balance: Decimal
    account_balance: Decimal
    owner_url: str
    bank_addresses: tuple[BankAddress, ...]
    payments_url: str
    restrictions_url: str | None


@dataclass(frozen=True, slots=True)
class Restriction:
    """A restriction on an account; ``type`` is None when a sensitive code hides it."""

    url: str
    status: str
    type: str | None
    account_url: str | None = None
    """The account it restricts, when the bank says."""


@dataclass(frozen=True, slots=True)
class Payee:
    """A saved creditor of a legal person; only ``active`` payees can be paid."""

    url: str
    legal_person_url: str
    account_holder: str
    sort_code: str
    account_number: str
    status: str
    cop_request_url: str | None = None
    srd: str | None = None
    """Secondary reference data of its CoP request: the bank puts it on every payment instead
    of the payment's own reference (known when the payees list includes CoP requests)."""


@dataclass(frozen=True, slots=True)
class CopResult:
    """The answer to a Confirmation of Payee request."""

    url: str
    status: str
    result: str
    reason: str | None
    suggested_name: str | None


@dataclass(frozen=True, slots=True)
class Payment:
    """A payment, with its creditor flattened from whichever creditor shape the bank sent."""

    url: str
    account_url: str | None
    direction: str
    amount: Decimal
    reference: str | None
    creditor_type: str
    creditor_payee_url: str | None
    creditor_sort_code: str | None
    creditor_account_number: str | None
    created_at: datetime
    latest_submission_url: str | None
    rejected: bool
    latest_submission_status: str | None = None
    """Known when the payments list includes the latest submissions."""


@dataclass(frozen=True, slots=True)
class Submission:
    """A submission of a payment to a scheme; its presence means the payment was submitted."""

    url: str
    payment_url: str
    status: str
    created_at: datetime
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Event:
    """An organization event; ``payload`` is the raw ``event-payload`` object."""

    url: str
    type: str
    payload: dict[str, Any]
    created_at: datetime


def format_timestamp(moment: datetime) -> str:
    """Format a timestamp for a filter, in UTC with ``Z``; a naive value is taken as UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def parse_timestamp(text: str) -> datetime:
    """Parse an ISO 8601 date-time (``Z`` or offset); a naive value is taken as UTC."""
    value = datetime.fromisoformat(text)
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _money(obj: Json) -> Decimal:
    return Decimal(obj["value"])


def _opt_str(obj: Json, key: str) -> str | None:
    value = obj.get(key)
    return value if isinstance(value, str) else None


def parse_organization(obj: Json) -> Organization:
    """Parse an organization; links the bank leaves out are built from its URL.

    ``own_legal_person_url`` is ``""`` in the (unseen) case the bank leaves it out.
    """
    url: str = obj["organization-url"]
    return Organization(
        url=url,
        display_name=obj.get("display-name") or "",
        mode=obj.get("organization-mode") or "",
        own_legal_person_url=_opt_str(obj, "own-legal-person-url") or "",
        payments_url=_opt_str(obj, "organization-payments-url") or f"{url}/payments",
        events_url=_opt_str(obj, "organization-events-url") or f"{url}/events",
        accounts_search_url=(
            _opt_str(obj, "organization-bank-accounts-search-url") or f"{url}/bank/accounts/search"
        ),
        accounts_url=_opt_str(obj, "organization-bank-accounts-url") or f"{url}/bank/accounts",
        payments_search_url=(
            _opt_str(obj, "organization-payments-search-url") or f"{url}/payments/search"
        ),
        cop_request_url=f"{url}/cop-request",
    )


def _parse_address(obj: Json) -> BankAddress:
    return BankAddress(
        account_holder=obj.get("account-holder") or "",
        sort_code=obj.get("bank-id") or obj.get("uk-domestic-sort-code") or "",
        account_number=obj.get("account-number") or obj.get("uk-domestic-account-number") or "",
    )


def parse_account(obj: Json) -> BankAccount:
    """Parse a bank account."""
    url: str = obj["account-url"]
    return BankAccount(
        url=url,
        display_name=obj.get("display-name") or "",
        status=obj["account-status"],
        restricted=bool(obj.get("account-restricted")),
        available_balance=_money(obj["available-balance"]),
        account_balance=_money(obj["account-balance"]),
        owner_url=obj["owner-url"],
        bank_addresses=tuple(_parse_address(a) for a in obj.get("bank-addresses") or ()),
        payments_url=_opt_str(obj, "account-payments-url") or f"{url}/payments",
        restrictions_url=_opt_str(obj, "bank-account-restrictions-url"),
    )


def parse_restriction(obj: Json) -> Restriction:
    """Parse an account restriction; a hidden (sensitive) type stays None."""
    return Restriction(
        url=obj.get("bank-account-restriction-url") or "",
        status=obj["restriction-status"],
        type=_opt_str(obj, "restriction-type"),
        account_url=_opt_str(obj, "account-url"),
    )


def parse_payee(obj: Json) -> Payee:
    """Parse a payee."""
    return Payee(
        url=obj["payee-url"],
        legal_person_url=obj.get("legal-person-url") or "",
        account_holder=obj.get("account-holder") or "",
        sort_code=obj.get("bank-id") or obj.get("uk-domestic-sort-code") or "",
        account_number=obj.get("account-number") or obj.get("uk-domestic-account-number") or "",
        status=obj.get("payee-status") or "",
        cop_request_url=_opt_str(obj, "cop-request-url"),
    )


def parse_cop_result(obj: Json) -> CopResult:
    """Parse a Confirmation of Payee response (``cop-request-url`` plus ``cop-response``)."""
    answer: Json = obj.get("cop-response") or {}
    return CopResult(
        url=obj["cop-request-url"],
        status=answer.get("status") or "",
        result=answer.get("result") or "",
        reason=_opt_str(answer, "reason"),
        suggested_name=_opt_str(answer, "suggested-name"),
    )


def parse_payment(obj: Json) -> Payment:
    """Parse a payment and flatten any creditor shape (payee, bank account, uk-domestic)."""
    creditor: Json = obj.get("creditor") or {}
    debtor: Json = obj.get("debtor") or {}
    get = creditor.get
    return Payment(
        url=obj["payment-url"],
        account_url=_opt_str(obj, "account-url") or _opt_str(debtor, "account-url"),
        direction=obj.get("payment-direction") or "",
        amount=_money(obj["payment-amount"]),
        reference=_opt_str(obj, "payment-reference"),
        creditor_type=get("creditor-type") or "",
        creditor_payee_url=_opt_str(creditor, "payee-url"),
        creditor_sort_code=get("uk-domestic-sort-code") or get("bank-id"),
        creditor_account_number=get("uk-domestic-account-number") or get("account-number"),
        created_at=parse_timestamp(obj["created-at"]),
        latest_submission_url=_opt_str(obj, "latest-submission-url"),
        rejected=bool(obj.get("rejected-at") or obj.get("rejected")),
    )


def payee_parser(page: Json) -> Callable[[Json], Payee]:
    """``parse_payee`` for one page of a payees list that includes CoP requests: each payee
    gets the secondary reference data (SRD) of its CoP request, which the bank puts on its
    payments instead of their reference."""
    srd: dict[str, str] = {}
    for cop in _included(page, "cop-requests"):
        account, url = cop.get("account"), cop.get("cop-request-url")
        value = account.get("secondary-reference-data") if isinstance(account, dict) else None
        if isinstance(url, str) and isinstance(value, str) and value:
            srd[url] = value

    def parse(obj: Json) -> Payee:
        payee = parse_payee(obj)
        found = srd.get(payee.cop_request_url or "")
        return replace(payee, srd=found) if found else payee

    return parse


def payment_parser(page: Json) -> Callable[[Json], Payment]:
    """``parse_payment`` for one page of a payments list that includes latest submissions:
    each payment gets its latest submission's status."""
    statuses: dict[str, str] = {}
    for submission in _included(page, "submissions"):
        url, status = submission.get("submission-url"), submission.get("submission-status")
        if isinstance(url, str) and isinstance(status, str):
            statuses[url] = status

    def parse(obj: Json) -> Payment:
        payment = parse_payment(obj)
        status = statuses.get(payment.latest_submission_url or "")
        return replace(payment, latest_submission_status=status) if status else payment

    return parse


def _included(page: Json, kind: str) -> list[Json]:
    """The page's ``included`` objects of one kind (the bank does not promise their shape)."""
    included = page.get("included")
    items = included.get(kind) if isinstance(included, dict) else None
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


def parse_submission(obj: Json) -> Submission:
    """Parse a submission."""
    return Submission(
        url=obj["submission-url"],
        payment_url=obj.get("payment-url") or "",
        status=obj.get("submission-status") or "",
        created_at=parse_timestamp(obj["created-at"]),
        reason=_opt_str(obj, "submission-status-reason"),
    )


def parse_event(obj: Json) -> Event:
    """Parse an event envelope; a missing ``created-at`` falls back to the payload's, else 1970."""
    payload = obj.get("event-payload")
    body: Json = payload if isinstance(payload, dict) else {}
    stamp = _opt_str(obj, "created-at") or _opt_str(body, "created-at")
    return Event(
        url=obj["event-url"],
        type=obj.get("event-type") or "",
        payload=body,
        created_at=parse_timestamp(stamp) if stamp else _EPOCH,
    )
