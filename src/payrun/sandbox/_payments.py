"""Payments as the bank carries them out: create, submit, settle, reject.

Every check runs before the first change, so a refused request (400/404/409/410/422)
changes nothing. The money rules:

- create: the account must be open and not frozen/blocked, the payee active, the amount
  within the Faster Payments limit (GBP 1,000,000) unless it is a book transfer between
  sandbox accounts, and the available balance must cover it (422 otherwise);
- submit (200): a submission is created ``processing``; when the available balance covers
  the amount it is reserved at once (available-balance drops), otherwise the submission
  will fail with reason ``insufficient-funds``;
- settle (lazy: run at the start of each request): once ``deliver_after_ms`` has passed, a
  funded submission is ``delivered`` (account-balance drops, a debit transaction is posted,
  and a transfer to a sandbox account credits it through an inbound payment and admission);
  an unfunded one is ``failed``;
- a payment may be submitted again only while its latest submission has failed; otherwise 422
  ``payment-already-submitted``. A rejected payment cannot be submitted (410);
- a return (a test control, ``/__sandbox/``): a delivered fps submission becomes ``returned``
  (with its reason) and the amount comes back to the account; the bank's final word, as
  "returned can follow delivered".
"""

from __future__ import annotations

import heapq
from typing import Any

from payrun.sandbox._checks import check_keys, choice, money, text
from payrun.sandbox._creditors import Creditor, parse_creditor
from payrun.sandbox._http import ApiError
from payrun.sandbox._model import Account, Admission, Payment, Submission, Transaction
from payrun.sandbox._render import (
    render_admission,
    render_payment,
    render_submission,
    render_transaction,
)
from payrun.sandbox.state import SandboxState

__all__ = [
    "FPS_LIMIT_PENCE",
    "create_payment",
    "post_transaction",
    "reject_payment",
    "return_submission",
    "settle",
    "submit_payment",
]

FPS_LIMIT_PENCE = 100_000_000
"""The Faster Payments scheme limit: GBP 1,000,000.00."""

_PAYMENT_EVENT_KEYS = (
    "payment-url",
    "payment-direction",
    "creditor",
    "debtor",
    "payment-amount",
    "payment-reference",
    "payment-admissions-url",
    "payment-submissions-url",
    "created-at",
)
_TRANSACTION_EVENT_KEYS = (
    "account-transaction-url",
    "account-url",
    "balance-change",
    "account-balance",
    "balance-change-direction",
    "transaction-origin-type",
    "payment-url",
    "reference",
    "post-datetime",
    "processed-at",
    "effective-at",
)


def _check_outbound(state: SandboxState, account: Account, amount: int, creditor: Creditor) -> None:
    """Apply the business rules shared by create and submit (422s)."""
    if account.status != "open":
        raise ApiError(422, "bank-account-closed", f"the account is {account.status}")
    if state.blocks_outbound(account.id):
        raise ApiError(
            422, "account-restricted", "a restriction on the account blocks outbound payments"
        )
    if creditor.payee_id and state.payees[creditor.payee_id].status != "active":
        raise ApiError(422, "payee-deactivated", "the payee is deactivated")
    target = state.accounts.get(creditor.target_account_id or "")
    if target is not None and target.status != "open":
        raise ApiError(422, "bank-account-closed", "the creditor account is not open")
    if target is not None and state.blocks_inbound(target.id):
        raise ApiError(422, "account-restricted", "a restriction on the creditor account blocks it")
    if target is None and amount > FPS_LIMIT_PENCE:
        raise ApiError(
            422, "payment-amount-exceeds-scheme-limit", "fps payments are limited to 1000000.00"
        )


def create_payment(state: SandboxState, account_id: str, body: dict[str, Any]) -> Payment:
    """Create an outbound payment from ``account_id`` (201), or raise ``ApiError``."""
    account = state.accounts.get(account_id)
    if account is None:
        raise ApiError(404, "not-found", "no such bank account")
    check_keys(body, required=("creditor", "payment-amount"), optional=("payment-reference",))
    amount = money(body["payment-amount"], "/payment-amount")
    reference = None
    if body.get("payment-reference") is not None or "payment-reference" in body:
        reference = text(body, "payment-reference", max_len=35)
    creditor = parse_creditor(state, account, body["creditor"])
    if creditor.target_account_id == account.id:
        raise ApiError(422, "same-account", "an account cannot pay itself")
    _check_outbound(state, account, amount, creditor)
    if amount > account.available:
        raise ApiError(422, "insufficient-funds", "the available balance does not cover the amount")
    owner = state.legal_persons[account.owner_id].display_name
    reference = creditor.srd or reference or f"Sent from {owner}"[:35]
    payment = Payment(
        id=state.new_id("pm"),
        account_id=account.id,
        direction="outbound-payment",
        creditor=creditor.rendered,
        amount=amount,
        reference=reference,
        created_at=state.now(),
        seq=state.next_seq(),
        creditor_sort_code=creditor.sort_code,
        creditor_account_number=creditor.account_number,
        creditor_holder=creditor.holder,
        payee_id=creditor.payee_id,
        target_account_id=creditor.target_account_id,
        debtor=_address(account),
    )
    _record_payment(state, payment)
    return payment


def _address(account: Account) -> dict[str, Any]:
    return {
        "account-holder": account.holder,
        "uk-domestic-sort-code": account.sort_code,
        "uk-domestic-account-number": account.account_number,
        "account-url": f"/v0/bank/accounts/{account.id}",
    }


def _record_payment(state: SandboxState, payment: Payment) -> None:
    state.payments[payment.id] = payment
    state.index(f"payments:{payment.account_id}", payment.id)
    rendered = render_payment(payment, state)
    state.add_event(
        "payment-created", {k: rendered[k] for k in _PAYMENT_EVENT_KEYS if k in rendered}
    )


def _creditor_of(state: SandboxState, payment: Payment) -> Creditor:
    return Creditor(
        rendered=payment.creditor,
        sort_code=payment.creditor_sort_code,
        account_number=payment.creditor_account_number,
        holder=payment.creditor_holder,
        payee_id=payment.payee_id,
        target_account_id=payment.target_account_id,
    )


def _check_submittable(state: SandboxState, payment: Payment, scheme: str) -> None:
    if payment.direction != "outbound-payment":
        raise ApiError(422, "payment-not-outbound", "only outbound payments can be submitted")
    if payment.rejected_at is not None:
        raise ApiError(410, "payment-rejected", "the payment was rejected")
    latest = state.latest_submission(payment)
    if latest is not None and latest.status != "failed":
        raise ApiError(
            422, "payment-already-submitted", f"the payment has a {latest.status} submission"
        )
    if scheme == "book-transfer" and payment.target_account_id is None:
        raise ApiError(
            422, "payment-scheme-not-supported", "book-transfer needs a sandbox account creditor"
        )
    account = state.accounts[payment.account_id]
    _check_outbound(state, account, payment.amount, _creditor_of(state, payment))
    if scheme == "fps" and payment.amount > FPS_LIMIT_PENCE:
        raise ApiError(
            422, "payment-amount-exceeds-scheme-limit", "fps payments are limited to 1000000.00"
        )


def submit_payment(
    state: SandboxState, payment_id: str, body: dict[str, Any], *, due: float
) -> Submission:
    """Submit a payment (200 with the submission), to settle at monotonic time ``due``."""
    payment = state.payments.get(payment_id)
    if payment is None:
        raise ApiError(404, "not-found", "no such payment")
    check_keys(body, required=("payment-scheme",))
    scheme = choice(body, "payment-scheme", ("fps", "book-transfer"))
    _check_submittable(state, payment, scheme)
    account = state.accounts[payment.account_id]
    funded = account.available >= payment.amount
    if funded:
        account.available -= payment.amount
    submission = Submission(
        id=state.new_id("ps"),
        payment_id=payment.id,
        account_id=account.id,
        scheme=scheme,
        status="processing",
        end_to_end_id=f"E2E{state.rng.getrandbits(60):018d}"[:21],
        scheme_id=f"SBX{state.rng.getrandbits(64):020d}",
        created_at=state.now(),
        seq=state.next_seq(),
        due=due,
        funded=funded,
    )
    state.submissions[submission.id] = submission
    payment.submission_ids.append(submission.id)
    state.index(f"submissions:{account.id}", submission.id)
    heapq.heappush(state.pending, (due, submission.seq, submission.id))
    state.add_event("submission-created", render_submission(submission))
    return submission


def settle(state: SandboxState, now: float, *, everything: bool = False) -> int:
    """Deliver or fail every processing submission due by ``now``; return how many."""
    pending = state.pending
    settled = 0
    while pending and (everything or pending[0][0] <= now):
        submission = state.submissions[heapq.heappop(pending)[2]]
        if submission.status != "processing":
            continue
        if submission.funded:
            _deliver(state, submission)
        else:
            submission.status = "failed"
            submission.status_reason = "insufficient-funds"
            _submission_updated(state, submission)
        settled += 1
    return settled


def _submission_updated(state: SandboxState, submission: Submission) -> None:
    payload = render_submission(submission)
    payload["submission-scheme-information"].pop("scheme-status-code", None)
    payload["submission-scheme-information"].pop("scheme-status-code-description", None)
    state.add_event("submission-updated", payload)


def _deliver(state: SandboxState, submission: Submission) -> None:
    payment = state.payments[submission.payment_id]
    account = state.accounts[submission.account_id]
    submission.status = "delivered"
    post_transaction(state, account, -payment.amount, payment.id, payment.reference)
    _submission_updated(state, submission)
    target = state.accounts.get(payment.target_account_id or "")
    if target is not None:
        _admit(state, payment, submission, target, account)


def return_submission(state: SandboxState, submission_id: str, reason: str) -> Submission:
    """Return a delivered fps submission (delivering it first if it is still processing).

    The amount is credited back to the account. 404 for no such submission; 409 for one
    that failed, was returned already, or went by book transfer (its credit is not undone).
    """
    submission = state.submissions.get(submission_id)
    if submission is None:
        raise ApiError(404, "not-found", "no such submission")
    if submission.status == "processing" and submission.funded:
        _deliver(state, submission)
    if submission.status != "delivered" or submission.scheme != "fps":
        raise ApiError(
            409, "submission-not-returnable", "only a delivered fps submission can be returned"
        )
    payment = state.payments[submission.payment_id]
    account = state.accounts[submission.account_id]
    submission.status = "returned"
    submission.status_reason = reason
    account.available += payment.amount
    post_transaction(state, account, payment.amount, payment.id, payment.reference)
    _submission_updated(state, submission)
    return submission


def _admit(
    state: SandboxState, payment: Payment, submission: Submission, target: Account, source: Account
) -> None:
    """Credit a sandbox account paid from another: inbound payment, admission, transaction."""
    inbound = Payment(
        id=state.new_id("pm"),
        account_id=target.id,
        direction="inbound-payment",
        creditor=_address(target) | {"creditor-type": "uk-domestic"},
        amount=payment.amount,
        reference=payment.reference,
        created_at=state.now(),
        seq=state.next_seq(),
        creditor_sort_code=target.sort_code,
        creditor_account_number=target.account_number,
        creditor_holder=target.holder,
        debtor=_address(source),
    )
    _record_payment(state, inbound)
    admission = Admission(
        id=state.new_id("pa"),
        payment_id=inbound.id,
        account_id=target.id,
        scheme=submission.scheme,
        status="delivered",
        end_to_end_id=submission.end_to_end_id,
        scheme_id=submission.scheme_id,
        created_at=state.now(),
        seq=state.next_seq(),
    )
    state.admissions[admission.id] = admission
    inbound.admission_id = admission.id
    state.index(f"admissions:{target.id}", admission.id)
    state.add_event("admission-created", render_admission(admission))
    target.available += payment.amount
    post_transaction(state, target, payment.amount, inbound.id, payment.reference)


def post_transaction(
    state: SandboxState,
    account: Account,
    change: int,
    payment_id: str | None,
    reference: str | None,
) -> Transaction:
    """Post a balance change on ``account`` (account-balance moves) and its event."""
    account.balance += change
    transaction = Transaction(
        id=state.new_id("tr"),
        account_id=account.id,
        change=change,
        balance_after=account.balance,
        origin="payment" if payment_id else "manual-payment",
        created_at=state.now(),
        seq=state.next_seq(),
        payment_id=payment_id,
        reference=reference,
        description=reference,
    )
    state.transactions[transaction.id] = transaction
    state.index(f"transactions:{account.id}", transaction.id)
    rendered = render_transaction(transaction)
    state.add_event(
        "transaction-created", {k: rendered[k] for k in _TRANSACTION_EVENT_KEYS if k in rendered}
    )
    return transaction


def reject_payment(state: SandboxState, payment_id: str, body: dict[str, Any]) -> None:
    """Reject a payment that has not gone out (204), or raise ``ApiError``."""
    payment = state.payments.get(payment_id)
    if payment is None:
        raise ApiError(404, "not-found", "no such payment")
    check_keys(body, required=("rejection-reason",))
    reason = body["rejection-reason"]
    if reason is not None:
        reason = text(body, "rejection-reason")
    if payment.rejected_at is not None:
        raise ApiError(409, "payment-already-rejected", "the payment is already rejected")
    latest = state.latest_submission(payment)
    if payment.direction != "outbound-payment" or (
        latest is not None and latest.status != "failed"
    ):
        raise ApiError(409, "payment-not-rejectable", "the payment has already been submitted")
    payment.rejected_at = state.now()
    payment.rejection_reason = reason
