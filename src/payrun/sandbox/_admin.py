"""``/__sandbox/``: inspection and test controls, outside the bank API.

No API key is needed (the sandbox listens on loopback only unless told ``--public``), and
these requests are not counted against the limits. Endpoints:

- ``GET /__sandbox/stats``: ``{"in_flight", "max_in_flight", "requests",
  "max_concurrent_submits": {account-url: n}, "rate_limited": {"org_in_flight",
  "account_submits", "injected"}, "faults_injected": n, "faults": {"500": n, "drop": n},
  "payments": [{"account_url", "sort_code", "account_number", "amount", "reference",
  "payments", "submissions", "delivered"}], "round_trips": {"longest_chain",
  "before_first_payment"}, "timeline": {"first_request", "first_payment",
  "last_answer"}}`` (payments grouped per account, creditor, amount and reference:
  ``payments > 1`` in a group is a double payment; ``round_trips``: the longest chain of
  requests each sent after the previous one's answer, over all requests and over the
  requests before the first create-payment, 0 before any; ``timeline``: when the first
  request and the first create-payment arrived and the last answer went, in seconds
  since the epoch, 0 before any);
- ``POST /__sandbox/stats/reset``: forget peaks and counts (204);
- ``POST /__sandbox/accounts/{ba}/balance`` with ``{"value": "123.45"}``: set the account
  balance (the available balance follows, less money reserved by processing submissions);
  returns the account;
- ``POST /__sandbox/accounts/{ba}/restrictions`` with ``restriction-type``,
  ``restriction-reason-code`` and optional ``restriction-legal-status``: a restriction applied
  by the bank itself (sensitive reason codes hide its details; it cannot be lifted); 201;
- ``POST /__sandbox/settle``: settle every processing submission now; ``{"settled": n}``;
- ``POST /__sandbox/submissions/{ps}/return`` with an optional ``{"reason": "..."}`` (default
  ``account-closed``): the payee's bank returns a delivered fps payment (a processing one is
  delivered first): the submission becomes ``returned``, the amount comes back, and a
  ``submission-updated`` event says so; returns the submission (409 if not returnable).
"""

from __future__ import annotations

from typing import Any

from payrun.sandbox._checks import check_keys, choice, money, text
from payrun.sandbox._http import ApiError, Reply, Request, reply
from payrun.sandbox._payments import return_submission, settle
from payrun.sandbox._render import render_account, render_restriction, render_submission
from payrun.sandbox._routing import Context, Router
from payrun.sandbox._seeding import RESTRICTION_LEGAL_STATUSES, RESTRICTION_REASONS, new_restriction

__all__ = ["register", "stats_body"]


def stats_body(ctx: Context) -> dict[str, Any]:
    """Return the ``/__sandbox/stats`` document."""
    stats = ctx.state.stats
    return {
        "in_flight": stats.in_flight,
        "max_in_flight": stats.max_in_flight,
        "requests": stats.requests,
        "max_concurrent_submits": dict(stats.max_concurrent_submits),
        "rate_limited": dict(stats.rate_limited),
        "faults_injected": sum(stats.faults_injected.values()),
        "faults": dict(stats.faults_injected),
        "payments": ctx.state.payment_groups(),
        "round_trips": {
            "longest_chain": stats.longest_chain,
            "before_first_payment": max(0, stats.first_payment_depth - 1),
        },
        "timeline": {
            "first_request": stats.first_request_at,
            "first_payment": stats.first_payment_at,
            "last_answer": stats.last_answer_at,
        },
    }


def _stats(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    return reply(stats_body(ctx))


def _reset(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    ctx.state.stats.reset()
    return reply(None, 204)


def _set_balance(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    state = ctx.state
    account = state.accounts.get(args[0])
    if account is None:
        raise ApiError(404, "not-found", "no such bank account")
    body = request.json()
    check_keys(body, required=("value",), optional=("currency",))
    pence = money(
        {"currency": body.get("currency", "GBP"), "value": body["value"]}, "", positive=False
    )
    reserved = account.balance - account.available
    account.balance = pence
    account.available = pence - reserved
    return reply(render_account(account, state))


def _restrict(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    account = ctx.state.accounts.get(args[0])
    if account is None:
        raise ApiError(404, "not-found", "no such bank account")
    body = request.json()
    optional = ("restriction-legal-status",)
    check_keys(body, required=("restriction-type", "restriction-reason-code"), optional=optional)
    legal = "not-applicable"
    if "restriction-legal-status" in body:
        legal = choice(body, "restriction-legal-status", RESTRICTION_LEGAL_STATUSES)
    fields = (
        choice(body, "restriction-type", ("freeze", "block")),
        choice(body, "restriction-reason-code", RESTRICTION_REASONS),
        legal,
    )
    restriction = new_restriction(
        ctx.state, account, fields, by_service=True, notes="applied by the bank"
    )
    return reply(render_restriction(restriction), 201)


def _settle(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    return reply({"settled": settle(ctx.state, ctx.clock(), everything=True)})


def _return(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    reason = "account-closed"
    if request.body.strip():
        body = request.json()
        check_keys(body, required=(), optional=("reason",))
        if "reason" in body:
            reason = text(body, "reason")
    return reply(render_submission(return_submission(ctx.state, args[0], reason)))


def register(router: Router) -> None:
    """Add the ``/__sandbox/`` routes to ``router``."""
    router.add("GET", "/__sandbox/stats", _stats)
    router.add("POST", "/__sandbox/stats/reset", _reset)
    router.add("POST", "/__sandbox/accounts/{ba}/balance", _set_balance)
    router.add("POST", "/__sandbox/accounts/{ba}/restrictions", _restrict)
    router.add("POST", "/__sandbox/settle", _settle)
    router.add("POST", "/__sandbox/submissions/{ps}/return", _return)
