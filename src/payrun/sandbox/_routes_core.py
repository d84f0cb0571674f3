"""Navigation, organization, legal persons, payees, Confirmation of Payee, events, and the
signature check (``/v0/security/message-signature/verify``, any method, no API key).

Payees are never deduplicated (two payees with the same details are allowed, as the real
service is not known to refuse them). Deactivating a deactivated payee is 422
``payee-already-deactivated``; reactivation is impossible. The CoP simulator takes the type
as a path segment (``/v0/simulation/organizations/{og}/cop-request/simulate/{type}``), and
also in the body as ``cop-simulation-type`` on ``…/cop-request/simulate``.
"""

from __future__ import annotations

from typing import Any

from payrun.sandbox._checks import ACCOUNT_NUMBER, SORT_CODE, check_keys, choice, text, url_id
from payrun.sandbox._cop import SIMULATION_TYPES, confirm_payee, simulate
from payrun.sandbox._http import ApiError, Reply, Request, reply
from payrun.sandbox._listing import Filter, ListSpec, created_sorts
from payrun.sandbox._model import CopRequest, Payee, format_time
from payrun.sandbox._render import (
    render_cop,
    render_event,
    render_legal_person,
    render_organization,
    render_payee,
)
from payrun.sandbox._routing import Context, Router
from payrun.sandbox._seeding import new_payee
from payrun.sandbox._signatures import SignedMessage

__all__ = ["EVENT_TYPES", "register"]

EVENT_TYPES = frozenset(
    {
        "account-status-created",
        "account-status-updated",
        "admission-created",
        "admission-updated",
        "decision-created",
        "onboarding-application-created",
        "onboarding-application-updated",
        "payment-created",
        "submission-created",
        "submission-updated",
        "test-event",
        "transaction-created",
        "verification-created",
        "verification-updated",
        "verification-resource-created",
        "verification-resource-updated",
    }
)
_COP_FIELDS = (
    "account-number",
    "bank-id",
    "account-classification",
    "name",
    "requester-legal-person-url",
)


def _index(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    state = ctx.state
    return reply(
        {
            "organizations-url": "/v0/organizations",
            "users-url": "/v0/users",
            "roles-url": "/v0/roles",
            "session-url": "/v0/session",
            "api-key-url": f"/v0/api-keys/{state.api_key_id}",
            "organization-url": f"/v0/organizations/{state.org_id}",
        }
    )


def _ping(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    return reply(None, 204)


def _api_key(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    state = ctx.state
    if args[0] != state.api_key_id:
        raise ApiError(404, "not-found", "no such API key")
    return reply(
        {
            "api-key-url": f"/v0/api-keys/{state.api_key_id}",
            "api-key-name": state.api_key_name,
            "api-key-live?": state.org_mode == "live-mode",
            "organization-url": f"/v0/organizations/{state.org_id}",
            "user-url": f"/v0/users/{state.user_id}",
            "created-at": format_time(state.created_at),
        }
    )


def _organization(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    return reply(render_organization(ctx.state))


def _legal_person(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    person = ctx.state.legal_persons.get(args[0])
    if person is None:
        raise ApiError(404, "not-found", "no such legal person")
    return reply(render_legal_person(person))


def _legal_persons(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    page = ctx.page(
        ListSpec(sorts=created_sorts()), list(ctx.state.legal_persons.values()), request
    )
    return reply(
        {"legal-persons": [render_legal_person(p) for p in page.items], "links": page.links}
    )


_PAYEE_SPEC = ListSpec(sorts=created_sorts(), includes=frozenset({"cop-requests"}))


def _person_id(ctx: Context, person_id: str) -> str:
    if person_id not in ctx.state.legal_persons:
        raise ApiError(404, "not-found", "no such legal person")
    return person_id


def _list_payees(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    state = ctx.state
    records = [state.payees[i] for i in state.children(f"payees:{_person_id(ctx, args[0])}")]
    page = ctx.page(_PAYEE_SPEC, records, request)
    body: dict[str, Any] = {
        "payees": [render_payee(p, state) for p in page.items],
        "links": page.links,
    }
    if page.includes:
        cops = dict.fromkeys(p.cop_request_id for p in page.items if p.cop_request_id)
        body["included"] = {"cop-requests": [render_cop(state.cop_requests[c]) for c in cops]}
    return reply(body)


def _cop_id(ctx: Context, body: dict[str, Any]) -> str:
    cop_id = url_id(body["cop-request-url"], "cop-requests", "cp", "/cop-request-url")
    if cop_id not in ctx.state.cop_requests:
        raise ApiError(404, "not-found", "no such CoP request", pointer="/cop-request-url")
    return cop_id


def _create_payee(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    person_id = _person_id(ctx, args[0])
    body = request.json()
    check_keys(
        body,
        required=("account-holder", "account-number", "bank-id"),
        optional=("cop-request-url",),
    )
    holder = text(body, "account-holder")
    address = (
        text(body, "bank-id", pattern=SORT_CODE),
        text(body, "account-number", pattern=ACCOUNT_NUMBER),
    )
    cop_id = _cop_id(ctx, body) if body.get("cop-request-url") is not None else None
    payee = new_payee(ctx.state, person_id, holder, address, cop_request_id=cop_id)
    return reply(render_payee(payee, ctx.state), 201)


def _payee(ctx: Context, payee_id: str) -> Payee:
    payee = ctx.state.payees.get(payee_id)
    if payee is None:
        raise ApiError(404, "not-found", "no such payee")
    return payee


def _show_payee(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    return reply(render_payee(_payee(ctx, args[0]), ctx.state))


def _update_payee(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    payee = _payee(ctx, args[0])
    body = request.json()
    check_keys(body, required=(), optional=("payee-status", "cop-request-url"))
    status = choice(body, "payee-status", ("deactivated",)) if "payee-status" in body else None
    cop_id = _cop_id(ctx, body) if body.get("cop-request-url") is not None else None
    if status and payee.status == "deactivated":
        raise ApiError(422, "payee-already-deactivated", "the payee is already deactivated")
    payee.status = status or payee.status
    payee.cop_request_id = cop_id or payee.cop_request_id
    return reply(render_payee(payee, ctx.state))


def _cop_body(ctx: Context, body: dict[str, Any], extra: tuple[str, ...] = ()) -> dict[str, Any]:
    check_keys(body, required=_COP_FIELDS + extra, optional=("secondary-reference-data",))
    account: dict[str, Any] = {
        "account-number": text(body, "account-number", pattern=ACCOUNT_NUMBER),
        "bank-id": text(body, "bank-id", pattern=SORT_CODE),
        "account-classification": choice(body, "account-classification", ("personal", "business")),
        "name": text(body, "name"),
        "requester-legal-person-url": body["requester-legal-person-url"],
    }
    person_id = url_id(
        account["requester-legal-person-url"], "legal-persons", "lp", "/requester-legal-person-url"
    )
    if person_id not in ctx.state.legal_persons:
        raise ApiError(
            404, "not-found", "no such legal person", pointer="/requester-legal-person-url"
        )
    if body.get("secondary-reference-data") is not None:
        account["secondary-reference-data"] = text(body, "secondary-reference-data", max_len=35)
    return account


def _store_cop(ctx: Context, account: dict[str, Any], answer: dict[str, Any]) -> Reply:
    state = ctx.state
    cop = CopRequest(state.new_id("cp"), account, answer, state.now(), state.next_seq())
    state.cop_requests[cop.id] = cop
    return reply(render_cop(cop), 201)


def _create_cop(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    account = _cop_body(ctx, request.json())
    entry = ctx.state.directory.get((account["bank-id"], account["account-number"]))
    return _store_cop(
        ctx, account, confirm_payee(account["name"], account["account-classification"], entry)
    )


def _simulate(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    body = request.json()
    if len(args) > 1:
        kind = args[1]
        if kind not in SIMULATION_TYPES:
            raise ApiError(
                400,
                "invalid-enum-value",
                "unknown cop-simulation-type",
                parameter="cop-simulation-type",
            )
        body.pop("cop-simulation-type", None)
    else:
        kind = choice(body, "cop-simulation-type", SIMULATION_TYPES)
        body = {k: v for k, v in body.items() if k != "cop-simulation-type"}
    account = _cop_body(ctx, body)
    return _store_cop(
        ctx, account, simulate(kind, account["name"], account["account-classification"])
    )


def _show_cop(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    cop = ctx.state.cop_requests.get(args[0])
    if cop is None:
        raise ApiError(404, "not-found", "no such CoP request")
    return reply(render_cop(cop))


_EVENT_SPEC = ListSpec(
    sorts=created_sorts(),
    filters={
        "event-type": Filter(frozenset({"eq"}), "enum", lambda e: e.event_type, EVENT_TYPES),
        "created-at": Filter(frozenset({"lt", "lte", "gt", "gte"}), "time", lambda e: e.created_at),
    },
)


def _list_events(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    page = ctx.page(_EVENT_SPEC, list(ctx.state.events.values()), request)
    return reply({"events": [render_event(e) for e in page.items], "links": page.links})


def _show_event(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    event = ctx.state.events.get(args[0])
    if event is None:
        raise ApiError(404, "not-found", "no such event")
    return reply(render_event(event))


def _verify_signature(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    """The bank's signature check: 200 when the request's signature verifies, else 401."""
    state = ctx.state
    if state.signatures is None:
        problem: str | None = "no message signature key is registered with this organization"
    else:
        query = request.query_string.decode("latin-1")
        message = SignedMessage(request.method, request.path, query, request.headers, request.body)
        problem = state.signatures.problem(message, state.now().timestamp())
    if problem is not None:
        return reply({"message": f"not verified: {problem}", "busy": False}, 401)
    return reply({"message": "the message signature was verified", "busy": False})


def register(router: Router) -> None:
    """Add navigation, party, CoP, event and signature-check routes to ``router``."""
    add = router.add
    for method in ("GET", "POST", "PUT", "PATCH", "DELETE"):
        add(method, "/v0/security/message-signature/verify", _verify_signature, public=True)
    add("GET", "/v0/ping", _ping, public=True)
    add("GET", "/v0/index", _index)
    add("GET", "/v0/api-keys/{ak}", _api_key)
    add("GET", "/v0/organizations/{og}", _organization)
    add("GET", "/v0/organizations/{og}/legal-persons", _legal_persons)
    add("GET", "/v0/legal-persons/{lp}", _legal_person)
    add("GET", "/v0/legal-persons/{lp}/bank/payees", _list_payees)
    add("POST", "/v0/legal-persons/{lp}/bank/payees", _create_payee)
    add("GET", "/v0/payees/{pe}", _show_payee)
    add("PATCH", "/v0/payees/{pe}", _update_payee)
    add("POST", "/v0/organizations/{og}/cop-request", _create_cop)
    add("GET", "/v0/cop-requests/{cp}", _show_cop)
    add("POST", "/v0/simulation/organizations/{og}/cop-request/simulate", _simulate)
    add("POST", "/v0/simulation/organizations/{og}/cop-request/simulate/<type>", _simulate)
    add("GET", "/v0/organizations/{og}/events", _list_events)
    add("GET", "/v0/events/{ev}", _show_event)
