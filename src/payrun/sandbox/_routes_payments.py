"""Payment, submission, admission and transaction endpoints.

Lists follow ``_listing``'s conventions; the filters, sorts and includes are the spec's.
``include`` on payments adds ``included`` with ``bank-accounts``, ``submissions`` and
``users``.
"""

from __future__ import annotations

from typing import Any

from payrun.sandbox._checks import check_keys, text
from payrun.sandbox._http import ApiError, Reply, Request, reply
from payrun.sandbox._listing import Filter, ListSpec, created_sorts
from payrun.sandbox._model import Payment
from payrun.sandbox._payments import create_payment, reject_payment, submit_payment
from payrun.sandbox._render import (
    render_account,
    render_admission,
    render_payment,
    render_submission,
    render_transaction,
)
from payrun.sandbox._routing import Context, Router

__all__ = ["register"]

_TIME = frozenset({"lt", "lte", "gt", "gte"})
_SUBMISSION_STATUSES = frozenset({"scheduled", "failed", "processing", "returned", "delivered"})
_PAYMENT_INCLUDES = frozenset(
    {
        "bank-account",
        "rejected-by",
        "created-by",
        "latest-submission",
        "latest-submission.created-by",
    }
)


def _latest_status(ctx: Context) -> Any:
    def getter(payment: Payment) -> str | None:
        latest = ctx.state.latest_submission(payment)
        return latest.status if latest else None

    return getter


def _payment_spec(ctx: Context) -> ListSpec:
    return ListSpec(
        sorts=created_sorts(),
        filters={
            "rejected": Filter(frozenset({"eq"}), "bool", lambda p: p.rejected_at is not None),
            "payment-direction": Filter(
                frozenset({"eq"}),
                "enum",
                lambda p: p.direction,
                frozenset({"inbound-payment", "outbound-payment"}),
            ),
            "latest-submission-status": Filter(
                frozenset({"in"}), "enum", _latest_status(ctx), _SUBMISSION_STATUSES | {"null"}
            ),
            "created-at": Filter(_TIME, "time", lambda p: p.created_at),
        },
        includes=_PAYMENT_INCLUDES,
    )


_SUBMISSION_SPEC = ListSpec(
    sorts=created_sorts(),
    filters={
        "submission-status": Filter(
            frozenset({"in"}), "enum", lambda s: s.status, _SUBMISSION_STATUSES
        ),
        "created-at": Filter(_TIME, "time", lambda s: s.created_at),
    },
)
_ADMISSION_SPEC = ListSpec(
    sorts=created_sorts(),
    filters={
        "admission-status": Filter(
            frozenset({"in"}),
            "enum",
            lambda a: a.status,
            frozenset({"cancelled", "processing", "returned", "delivered"}),
        ),
        "created-at": Filter(_TIME, "time", lambda a: a.created_at),
    },
)
_TRANSACTION_SPEC = ListSpec(
    sorts={"created-at": lambda t: t.seq, "processed-at": lambda t: t.seq},
    filters={"processed-at": Filter(_TIME, "time", lambda t: t.created_at)},
    includes=frozenset({"payment"}),
)


def _account(ctx: Context, account_id: str) -> str:
    if account_id not in ctx.state.accounts:
        raise ApiError(404, "not-found", "no such bank account")
    return account_id


def _included(ctx: Context, payments: list[Payment], includes: frozenset[str]) -> dict[str, Any]:
    state = ctx.state
    included: dict[str, Any] = {}
    if "bank-account" in includes:
        ids = dict.fromkeys(p.account_id for p in payments)
        included["bank-accounts"] = [render_account(state.accounts[i], state) for i in ids]
    if "latest-submission" in includes or "latest-submission.created-by" in includes:
        latest = (state.latest_submission(p) for p in payments)
        included["submissions"] = [render_submission(s) for s in latest if s is not None]
    if includes & {"created-by", "rejected-by", "latest-submission.created-by"}:
        included["users"] = [_user(ctx)]
    return included


def _user(ctx: Context) -> dict[str, Any]:
    url = f"/v0/users/{ctx.state.user_id}"
    return {
        "user-url": url,
        "user-username": "sandbox",
        "user-email": "sandbox@example.invalid",
        "given-name": "Sandbox",
        "surname": "User",
        "api-keys-url": f"{url}/api-keys",
        "user-memberships-url": f"{url}/memberships",
    }


def _list_payments(ctx: Context, request: Request, records: list[Payment]) -> Reply:
    page = ctx.page(_payment_spec(ctx), records, request)
    body: dict[str, Any] = {
        "payments": [render_payment(p, ctx.state) for p in page.items],
        "links": page.links,
    }
    if page.includes:
        body["included"] = _included(ctx, page.items, page.includes)
    return reply(body)


def _account_payments(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    state = ctx.state
    ids = state.children(f"payments:{_account(ctx, args[0])}")
    return _list_payments(ctx, request, [state.payments[i] for i in ids])


def _org_payments(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    return _list_payments(ctx, request, list(ctx.state.payments.values()))


def _create_payment(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    payment = create_payment(ctx.state, args[0], request.json())
    return reply(render_payment(payment, ctx.state), 201)


def _get_payment(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    payment = ctx.state.payments.get(args[0])
    if payment is None:
        raise ApiError(404, "not-found", "no such payment")
    return reply(render_payment(payment, ctx.state))


def _patch_payment(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    reject_payment(ctx.state, args[0], request.json())
    return reply(None, 204)


def _search_payments(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    """Search by reference or scheme id: case-insensitive substring match."""
    body = request.json()
    check_keys(body, required=("search-query",))
    needle = text(body, "search-query").casefold()
    state = ctx.state
    found = []
    for payment in state.payments.values():
        haystacks = [payment.reference]
        for sub_id in payment.submission_ids:
            sub = state.submissions[sub_id]
            haystacks += [sub.scheme_id, sub.end_to_end_id]
        if any(needle in h.casefold() for h in haystacks):
            found.append(payment)
    found.reverse()
    includes = frozenset(v for k, v in request.query() if k in {"include", "include[]"})
    return reply(
        {
            "search-results": [render_payment(p, state) for p in found],
            "meta": {"page": {"total": len(found)}},
            "included": _included(ctx, found, includes & _PAYMENT_INCLUDES),
        }
    )


def _payment(ctx: Context, payment_id: str) -> Payment:
    payment = ctx.state.payments.get(payment_id)
    if payment is None:
        raise ApiError(404, "not-found", "no such payment")
    return payment


def _submit(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    body = request.json()
    submission = submit_payment(ctx.state, args[0], body, due=ctx.clock() + ctx.deliver_after_s)
    return reply(render_submission(submission), 200)


def _payment_submissions(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    payment = _payment(ctx, args[0])
    subs = [render_submission(ctx.state.submissions[s]) for s in reversed(payment.submission_ids)]
    return reply({"submissions": subs})


def _payment_admissions(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    payment = _payment(ctx, args[0])
    found = [ctx.state.admissions[payment.admission_id]] if payment.admission_id else []
    return reply({"admissions": [render_admission(a) for a in found]})


def _account_submissions(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    state = ctx.state
    records = [
        state.submissions[i] for i in state.children(f"submissions:{_account(ctx, args[0])}")
    ]
    page = ctx.page(_SUBMISSION_SPEC, records, request)
    return reply({"submissions": [render_submission(s) for s in page.items], "links": page.links})


def _account_admissions(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    state = ctx.state
    records = [state.admissions[i] for i in state.children(f"admissions:{_account(ctx, args[0])}")]
    page = ctx.page(_ADMISSION_SPEC, records, request)
    return reply({"admissions": [render_admission(a) for a in page.items], "links": page.links})


def _get_one(collection: str, render: Any, title: str) -> Any:
    def handler(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
        record = getattr(ctx.state, collection).get(args[0])
        if record is None:
            raise ApiError(404, "not-found", f"no such {title}")
        return reply(render(record))

    return handler


def _account_transactions(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    state = ctx.state
    records = [
        state.transactions[i] for i in state.children(f"transactions:{_account(ctx, args[0])}")
    ]
    page = ctx.page(_TRANSACTION_SPEC, records, request)
    body: dict[str, Any] = {
        "account-transactions": [render_transaction(t) for t in page.items],
        "links": page.links,
    }
    if page.includes:
        payments = dict.fromkeys(t.payment_id for t in page.items if t.payment_id)
        body["included"] = {
            "payments": [render_payment(state.payments[p], state) for p in payments]
        }
    return reply(body)


def register(router: Router) -> None:
    """Add the payment-side routes to ``router``."""
    add = router.add
    add("GET", "/v0/bank/accounts/{ba}/payments", _account_payments)
    add("POST", "/v0/bank/accounts/{ba}/payments", _create_payment, kind="create-payment")
    add("GET", "/v0/organizations/{og}/payments", _org_payments)
    add("POST", "/v0/organizations/{og}/payments/search", _search_payments)
    add("GET", "/v0/payments/{pm}", _get_payment)
    add("PATCH", "/v0/payments/{pm}", _patch_payment)
    add("GET", "/v0/payments/{pm}/submissions", _payment_submissions)
    add("POST", "/v0/payments/{pm}/submissions", _submit, kind="submit")
    add("GET", "/v0/payments/{pm}/admissions", _payment_admissions)
    add("GET", "/v0/bank/accounts/{ba}/submissions", _account_submissions)
    add("GET", "/v0/bank/accounts/{ba}/admissions", _account_admissions)
    add("GET", "/v0/submissions/{ps}", _get_one("submissions", render_submission, "submission"))
    add("GET", "/v0/admissions/{pa}", _get_one("admissions", render_admission, "admission"))
    add("GET", "/v0/bank/accounts/{ba}/transactions", _account_transactions)
    add(
        "GET",
        "/v0/bank/transactions/{tr}",
        _get_one("transactions", render_transaction, "transaction"),
    )
