"""Adding accounts, payees and restrictions: shared by seeds and the API's own operations.

``open_account``, ``new_payee`` and ``new_restriction`` create records and their events.
The ``add_*`` wrappers read one seed entry and raise ``SeedError`` on a bad one.
"""

from __future__ import annotations

from typing import Any

from payrun.sandbox._model import Account, Payee, Restriction, stable_id
from payrun.sandbox.state import SandboxState

__all__ = [
    "ACCOUNT_STATUSES",
    "NEW_ACCOUNT_PENCE",
    "PRODUCT_TYPES",
    "RESTRICTION_LEGAL_STATUSES",
    "RESTRICTION_REASONS",
    "SeedError",
    "add_account",
    "add_payee",
    "add_restriction",
    "new_payee",
    "new_restriction",
    "open_account",
    "register_signature_key",
]

NEW_ACCOUNT_PENCE = 100_000_000
"""A new sandbox account starts with GBP 1,000,000.00, as the real sandbox's do."""
PRODUCT_TYPES = frozenset(
    {
        "savings-account",
        "client-money-account",
        "safeguarding-account",
        "embedded-account",
        "operational-account",
    }
)
ACCOUNT_STATUSES = frozenset({"opening", "open", "closing", "closed"})
RESTRICTION_REASONS = frozenset(
    {
        "customer-request",
        "deceased",
        "dormant",
        "fraud-1st-party",
        "fraud-3rd-party",
        "fraud-app-perpetrator",
        "fraud-app-victim",
        "law-enforcement",
        "money-laundering",
        "other",
        "risk-appetite",
        "sanctions",
        "terrorist-financing",
        "suspicious",
        "service-decision",
        "griffin-decision",
    }
)
RESTRICTION_LEGAL_STATUSES = frozenset(
    {"not-applicable", "suspected", "formal-charge-filed", "conviction-confirmed"}
)


class SeedError(ValueError):
    """A seed that cannot be used; the message names the offending entry."""


def open_account(
    state: SandboxState,
    *,
    display_name: str,
    product_type: str,
    owner_id: str,
    address: tuple[str, str],
    balance: int = NEW_ACCOUNT_PENCE,
    status: str = "open",
) -> Account:
    """Create an account (with its ``account-status-created`` event) and index it."""
    now = state.now()
    owner = state.legal_persons[owner_id]
    account = Account(
        id=stable_id("ba", *address),
        display_name=display_name,
        product_type=product_type,
        sort_code=address[0],
        account_number=address[1],
        holder=owner.display_name,
        owner_id=owner_id,
        balance=balance,
        available=balance,
        status=status,
        created_at=now,
        seq=state.next_seq(),
        opened_at=now if status != "opening" else None,
        closed_at=now if status == "closed" else None,
        pooled=product_type == "client-money-account",
        primary=not state.accounts,
    )
    if product_type == "client-money-account":
        account.extra["client-money-type"] = "designated-client-money"
    if product_type == "savings-account":
        account.extra["savings-type"] = "easy-access"
    account.product_id = stable_id("bp", product_type)
    state.accounts[account.id] = account
    state.account_by_address[address] = account.id
    state.index("accounts", account.id)
    url = f"/v0/bank/accounts/{account.id}"
    state.add_event("account-status-created", {"account-url": url, "account-status": status})
    return account


def add_account(
    state: SandboxState,
    entry: dict[str, Any],
    owners: dict[str, str],
    where: str,
    address: tuple[str, str],
) -> Account:
    """Add one seed account."""
    product_type = entry.get("bank-product-type", "operational-account")
    status = entry.get("account-status", "open")
    owner = entry.get("owner", "org")
    balance = str(entry.get("balance", "1000000.00"))
    whole, _, part = balance.partition(".")
    valid = whole.isdigit() and (part == "" or (part.isdigit() and len(part) <= 2))  # noqa: PLR2004
    problems = [
        (product_type not in PRODUCT_TYPES, "bank-product-type is not a known product type"),
        (status not in ACCOUNT_STATUSES, "account-status must be opening, open, closing or closed"),
        (owner not in owners, f"owner {owner!r} is not a legal person key"),
        (not valid, "balance must be a decimal string like 1000000.00"),
        (address in state.account_by_address, "an account with these details already exists"),
    ]
    for failed, problem in problems:
        if failed:
            message = f"{where}: {problem}"
            raise SeedError(message)
    return open_account(
        state,
        display_name=entry["display-name"],
        product_type=product_type,
        owner_id=owners[owner],
        address=address,
        balance=int(whole) * 100 + int(part.ljust(2, "0")),
        status=status,
    )


def new_payee(
    state: SandboxState, legal_person_id: str, holder: str, address: tuple[str, str], **extra: Any
) -> Payee:
    """Create a payee of ``legal_person_id`` and index it."""
    payee_id = extra.pop("payee_id", None) or state.new_id("pe")
    status = extra.get("status", "active")
    cop_id = extra.get("cop_request_id")
    payee = Payee(
        payee_id, legal_person_id, holder, *address, status, state.now(), state.next_seq(), cop_id
    )
    state.payees[payee.id] = payee
    state.index(f"payees:{legal_person_id}", payee.id)
    return payee


def add_payee(
    state: SandboxState,
    entry: dict[str, Any],
    owners: dict[str, str],
    where: str,
    address: tuple[str, str],
) -> Payee:
    """Add one seed payee (its id is derived from owner, details and position)."""
    owner = entry.get("owner", "org")
    status = entry.get("payee-status", "active")
    if owner not in owners:
        message = f"{where}: owner {owner!r} is not a legal person key"
        raise SeedError(message)
    if status not in {"active", "deactivated"}:
        message = f"{where}: payee-status must be active or deactivated"
        raise SeedError(message)
    payee_id = stable_id("pe", owner, *address, entry["account-holder"], where)
    return new_payee(
        state, owners[owner], entry["account-holder"], address, payee_id=payee_id, status=status
    )


def new_restriction(
    state: SandboxState,
    account: Account,
    fields: tuple[str, str, str],
    *,
    by_service: bool,
    notes: str,
) -> Restriction:
    """Apply a restriction ``(type, reason code, legal status)`` to ``account``."""
    restriction = Restriction(
        state.new_id("ri"),
        account.id,
        *fields,
        by_service,
        "active",
        state.now(),
        state.next_seq(),
        [notes] if notes else [],
    )
    state.restrictions[restriction.id] = restriction
    state.index(f"restrictions:{account.id}", restriction.id)
    return restriction


def add_restriction(state: SandboxState, account: Account, entry: dict[str, Any]) -> Restriction:
    """Add one seed restriction to ``account``."""
    fields = (
        entry.get("restriction-type", "freeze"),
        entry.get("restriction-reason-code", "other"),
        entry.get("restriction-legal-status", "not-applicable"),
    )
    if fields[0] not in {"freeze", "block"} or fields[1] not in RESTRICTION_REASONS:
        message = f"restriction on {account.display_name}: unknown type or reason code"
        raise SeedError(message)
    if fields[2] not in RESTRICTION_LEGAL_STATUSES:
        message = f"restriction on {account.display_name}: unknown legal status"
        raise SeedError(message)
    by_service = entry.get("applied-by", "user") == "service"
    return new_restriction(state, account, fields, by_service=by_service, notes="seeded")


def register_signature_key(state: SandboxState, key_id: str, pem: str, where: str) -> None:
    """Register an Ed25519 public key (PEM) under ``key_id``: the organization is then in
    live mode, and every request that needs the API key must also be signed."""
    # cryptography loads only for a sandbox that checks signatures
    from payrun.sandbox._signatures import SignatureCheck, public_key

    try:
        key = public_key(pem)
    except ValueError as exc:
        message = f"{where} {exc}"
        raise SeedError(message) from None
    if state.signatures is None:
        state.signatures = SignatureCheck({})
    state.signatures.keys[key_id] = key
    state.org_mode = "live-mode"
