"""Records -> the spec's JSON shapes (kebab-case keys, URLs, money objects).

One ``render_<resource>`` per resource. They read the state only to follow links
(an account's restrictions, a payment's latest submission) and never change it.
"""

from __future__ import annotations

from typing import Any

from payrun.sandbox._model import (
    Account,
    Admission,
    CopRequest,
    Event,
    LegalPerson,
    Payee,
    Payment,
    Product,
    Restriction,
    Submission,
    Transaction,
    format_pence,
    format_time,
)
from payrun.sandbox.state import SandboxState

__all__ = [
    "SENSITIVE_REASONS",
    "account_url",
    "money",
    "render_account",
    "render_admission",
    "render_cop",
    "render_event",
    "render_legal_person",
    "render_organization",
    "render_payee",
    "render_payment",
    "render_product",
    "render_restriction",
    "render_submission",
    "render_transaction",
]

JSON = dict[str, Any]
SENSITIVE_REASONS = frozenset(
    {"service-decision", "griffin-decision", "law-enforcement", "sanctions", "terrorist-financing"}
)
"""Reason codes that hide type, reason and legal status when the service applied them."""


def money(pence: int) -> JSON:
    """Render integer pence as ``{"currency": "GBP", "value": "12.34"}``."""
    return {"currency": "GBP", "value": format_pence(pence)}


def account_url(account_id: str) -> str:
    """Return the URL of a bank account."""
    return f"/v0/bank/accounts/{account_id}"


def render_organization(state: SandboxState) -> JSON:
    """Render the organization with its own legal person and link fields."""
    base = f"/v0/organizations/{state.org_id}"
    links = {
        f"organization-{name}-url": f"{base}/{path}"
        for name, path in (
            ("memberships", "memberships"),
            ("invitations", "invitations"),
            ("payments", "payments"),
            ("payments-search", "payments/search"),
            ("bank-accounts", "bank/accounts"),
            ("bank-accounts-search", "bank/accounts/search"),
            ("bank-account-products", "bank/products"),
            ("onboarding-applications", "onboarding/applications"),
            ("api-keys", "api-keys"),
            ("live-access", "live-access"),
            ("webhooks", "webhooks"),
            ("workflows", "workflows"),
            ("individuals", "individuals"),
            ("corporations", "corporations"),
            ("legal-persons", "legal-persons"),
            ("legal-persons-search", "legal-persons/search"),
            ("events", "events"),
        )
    }
    return {
        "organization-url": base,
        "display-name": state.org_name,
        "organization-mode": state.org_mode,
        "own-legal-person-url": f"/v0/legal-persons/{state.own_legal_person_id}",
        "can-decide-on-verifications?": True,
        "available-roles": [],
        "created-at": format_time(state.created_at),
        **links,
    }


def render_legal_person(person: LegalPerson) -> JSON:
    """Render a legal person as it appears in included data."""
    url = f"/v0/legal-persons/{person.id}"
    return {
        "legal-person-url": url,
        "legal-person-type": person.legal_person_type,
        "display-name": person.display_name,
        "legal-name": person.display_name,
        "application-status": "accepted",
        "legal-person-status": "verified",
        "status-changed-at": format_time(person.created_at),
        "created-at": format_time(person.created_at),
        "legal-person-bank-payees-url": f"{url}/bank/payees",
    }


def render_product(product: Product, state: SandboxState) -> JSON:
    """Render a bank account product."""
    url = f"/v0/bank/products/{product.id}"
    rate = {"basis-points": 0, "display-text": "0.00%"}
    return {
        "bank-account-product-url": url,
        "bank-account-product-status": product.status,
        "bank-account-product-class": product.product_class,
        "bank-product-type": product.product_type,
        "display-name": product.display_name,
        "funding-type": "pooled" if product.product_type == "client-money-account" else "single",
        "owner-type": "individual" if product.product_type == "savings-account" else "corporation",
        "notice-period": {"notice-period-type": "instant-access"},
        "commission": {"gross-rate": rate},
        "interest": {"gross-rate": rate, "annual-effective-rate": rate},
        "bank-account-product-accounts-url": f"{url}/accounts",
        "organization-url": f"/v0/organizations/{state.org_id}",
        "created-at": format_time(product.created_at),
        "updated-at": format_time(product.created_at),
        "payment-schemes": {
            "faster-payments": {"inbound": True, "outbound": True},
            "chaps": {"inbound": True},
            "bacs-direct-credits": {"inbound": True},
            "bacs-direct-debits": {"paying": False},
        },
    }


def render_account(account: Account, state: SandboxState) -> JSON:
    """Render a bank account with balances, its bank address and sub-collection links."""
    url = account_url(account.id)
    body: JSON = {
        "account-url": url,
        "display-name": account.display_name,
        "account-status": account.status,
        "bank-product-type": account.product_type,
        "pooled-funds": account.pooled,
        "account-restricted": state.is_restricted(account.id),
        "primary-account": account.primary,
        "created-at": format_time(account.created_at),
        "account-balance": money(account.balance),
        "available-balance": money(account.available),
        "accrued-interest": money(0),
        "owner-url": f"/v0/legal-persons/{account.owner_id}",
        "controller-url": f"/v0/legal-persons/{state.own_legal_person_id}",
        "bank-addresses": [
            {
                "account-holder": account.holder,
                "bank-id-code": "gbdsc",
                "bank-id": account.sort_code,
                "account-number": account.account_number,
                "account-number-code": "bban",
            }
        ],
        "account-payments-url": f"{url}/payments",
        "account-admissions-url": f"{url}/admissions",
        "account-submissions-url": f"{url}/submissions",
        "account-transactions-url": f"{url}/transactions",
        "bank-account-restrictions-url": f"{url}/restrictions",
        "bank-account-events-url": f"{url}/events",
        **account.extra,
    }
    if account.opened_at:
        body["opened-at"] = format_time(account.opened_at)
    if account.closed_at:
        body["closed-at"] = format_time(account.closed_at)
    else:
        body["close-account-url"] = f"{url}/actions/close"
    if account.beneficiary_id:
        body["beneficiary-url"] = f"/v0/legal-persons/{account.beneficiary_id}"
    if account.product_id:
        body["bank-account-product-url"] = f"/v0/bank/products/{account.product_id}"
    return body


def render_restriction(restriction: Restriction) -> JSON:
    """Render a restriction; a sensitive service restriction hides three fields."""
    url = f"/v0/bank/account-restrictions/{restriction.id}"
    body: JSON = {
        "bank-account-restriction-url": url,
        "account-url": account_url(restriction.account_id),
        "restriction-status": restriction.status,
        "restriction-type": restriction.restriction_type,
        "restriction-reason-code": restriction.reason_code,
        "restriction-legal-status": restriction.legal_status,
        "restriction-applied-by": (
            {"restriction-applied-by-type": "ops-user"}
            if restriction.applied_by_service
            else {"restriction-applied-by-type": "user", "user-url": "/v0/users/ur.sandbox"}
        ),
        "created-at": format_time(restriction.created_at),
        "bank-account-restriction-events-url": f"{url}/events",
    }
    if restriction.applied_by_service and restriction.reason_code in SENSITIVE_REASONS:
        for hidden in ("restriction-type", "restriction-reason-code", "restriction-legal-status"):
            del body[hidden]
    if restriction.status == "active" and not restriction.applied_by_service:
        body["update-bank-account-restriction-url"] = f"{url}/actions/update"
        body["lift-bank-account-restriction-url"] = f"{url}/actions/lift"
    return body


def render_payee(payee: Payee, state: SandboxState) -> JSON:
    """Render a payee; ``account-url`` when it is one of the sandbox's own accounts."""
    body: JSON = {
        "payee-url": f"/v0/payees/{payee.id}",
        "legal-person-url": f"/v0/legal-persons/{payee.legal_person_id}",
        "account-holder": payee.account_holder,
        "account-number": payee.account_number,
        "bank-id": payee.sort_code,
        "country-code": "GB",
        "payee-status": payee.status,
        "created-at": format_time(payee.created_at),
    }
    own = state.account_by_address.get((payee.sort_code, payee.account_number))
    if own:
        body["account-url"] = account_url(own)
    if payee.cop_request_id:
        body["cop-request-url"] = f"/v0/cop-requests/{payee.cop_request_id}"
    return body


def render_cop(request: CopRequest) -> JSON:
    """Render a Confirmation of Payee request with its answer."""
    return {
        "cop-request-url": f"/v0/cop-requests/{request.id}",
        "account": request.account,
        "cop-response": request.response,
        "created-at": format_time(request.created_at),
    }


def render_payment(payment: Payment, state: SandboxState) -> JSON:
    """Render a payment (the creditor in the shape it was paid to)."""
    url = f"/v0/payments/{payment.id}"
    body: JSON = {
        "payment-url": url,
        "payment-direction": payment.direction,
        "creditor": payment.creditor,
        "payment-amount": money(payment.amount),
        "payment-reference": payment.reference,
        "payment-type": "credit-transfer",
        "created-at": format_time(payment.created_at),
        "created-by-url": f"/v0/users/{state.user_id}",
        "created-via": "api",
        "payment-admissions-url": f"{url}/admissions",
        "payment-submissions-url": f"{url}/submissions",
    }
    if payment.debtor is not None:
        body["debtor"] = payment.debtor
    if payment.submission_ids:
        body["latest-submission-url"] = f"/v0/submissions/{payment.submission_ids[-1]}"
    if payment.rejected_at is not None:
        body["rejected-at"] = format_time(payment.rejected_at)
        body["rejected-by-url"] = f"/v0/users/{state.user_id}"
        body["rejection-reason"] = payment.rejection_reason
    return body


def render_submission(submission: Submission) -> JSON:
    """Render a submission with its scheme information."""
    scheme: JSON = {
        "payment-scheme": submission.scheme,
        "end-to-end-identification": submission.end_to_end_id,
    }
    if submission.scheme == "fps":
        scheme["scheme-status-code"] = "0000"
        scheme["scheme-status-code-description"] = "The payment was accepted by the scheme"
    body: JSON = {
        "submission-url": f"/v0/submissions/{submission.id}",
        "submission-status": submission.status,
        "payment-url": f"/v0/payments/{submission.payment_id}",
        "account-url": account_url(submission.account_id),
        "created-at": format_time(submission.created_at),
        "created-by-url": "/v0/users/ur.sandbox",
        "unique-scheme-identifier": submission.scheme_id,
        "submission-scheme-information": scheme,
    }
    if submission.status_reason:
        body["submission-status-reason"] = submission.status_reason
    return body


def render_admission(admission: Admission) -> JSON:
    """Render an admission (an inbound payment's arrival)."""
    return {
        "admission-url": f"/v0/admissions/{admission.id}",
        "admission-status": admission.status,
        "admission-scheme-information": {
            "payment-scheme": admission.scheme,
            "end-to-end-identification": admission.end_to_end_id,
        },
        "payment-url": f"/v0/payments/{admission.payment_id}",
        "account-url": account_url(admission.account_id),
        "created-at": format_time(admission.created_at),
        "unique-scheme-identifier": admission.scheme_id,
    }


def render_transaction(transaction: Transaction) -> JSON:
    """Render a transaction; ``balance-change`` is signed (negative for a debit)."""
    posted = format_time(transaction.created_at)
    body: JSON = {
        "account-transaction-url": f"/v0/bank/transactions/{transaction.id}",
        "account-url": account_url(transaction.account_id),
        "balance-change": money(transaction.change),
        "account-balance": money(transaction.balance_after),
        "balance-change-direction": "credit" if transaction.change >= 0 else "debit",
        "transaction-origin-type": transaction.origin,
        "origin-metadata": {},
        "post-datetime": posted,
        "processed-at": posted,
        "effective-at": posted,
        "created-at": posted,
    }
    if transaction.payment_id:
        body["payment-url"] = f"/v0/payments/{transaction.payment_id}"
    if transaction.reference is not None:
        body["reference"] = transaction.reference
    if transaction.description is not None:
        body["description"] = transaction.description
    return body


def render_event(event: Event) -> JSON:
    """Render an event envelope."""
    return {
        "event-url": f"/v0/events/{event.id}",
        "event-type": event.event_type,
        "event-payload": event.payload,
        "created-at": format_time(event.created_at),
    }
