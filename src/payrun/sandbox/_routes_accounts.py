"""Bank account, product and restriction endpoints.

Closing an account (``POST …/actions/close``) answers 422 ``bank-account-closed`` when it
is already closed, ``account-balance-not-zero`` while money remains, and
``account-has-pending-payments`` while a submission is processing. A new account (either
way of opening one) starts open with GBP 1,000,000.00 and the next free account number.
"""

from __future__ import annotations

from typing import Any

from payrun.sandbox._checks import check_keys, choice, text, url_id
from payrun.sandbox._http import ApiError, Reply, Request, reply
from payrun.sandbox._listing import Filter, ListSpec, created_sorts
from payrun.sandbox._model import Account, Restriction
from payrun.sandbox._render import (
    render_account,
    render_event,
    render_legal_person,
    render_product,
    render_restriction,
)
from payrun.sandbox._routing import Context, Router
from payrun.sandbox._seeding import (
    ACCOUNT_STATUSES,
    PRODUCT_TYPES,
    RESTRICTION_LEGAL_STATUSES,
    RESTRICTION_REASONS,
    new_restriction,
    open_account,
)

__all__ = ["register"]

_SANDBOX_SORT_CODE = "040004"
_NOTES_MAX = 2000
_TIME = frozenset({"lt", "lte", "gt", "gte"})


def _account_spec(ctx: Context) -> ListSpec:
    restricted = Filter(frozenset({"eq", "in"}), "bool", lambda a: ctx.state.is_restricted(a.id))
    return ListSpec(
        sorts={**created_sorts(), "display-name": lambda a: a.display_name.casefold()},
        filters={
            "account-status": Filter(
                frozenset({"in"}), "enum", lambda a: a.status, ACCOUNT_STATUSES
            ),
            "bank-product-type": Filter(
                frozenset({"in"}), "enum", lambda a: a.product_type, PRODUCT_TYPES
            ),
            "pooled-funds": Filter(frozenset({"eq"}), "bool", lambda a: a.pooled),
            "owner-url": Filter(
                frozenset({"eq"}), "text", lambda a: f"/v0/legal-persons/{a.owner_id}"
            ),
            "beneficiary-url": Filter(
                frozenset({"eq"}),
                "text",
                lambda a: f"/v0/legal-persons/{a.beneficiary_id}" if a.beneficiary_id else None,
            ),
            "account-restricted": restricted,
        },
        includes=frozenset({"beneficiary", "owner"}),
    )


def _get_account(ctx: Context, account_id: str) -> Account:
    account = ctx.state.accounts.get(account_id)
    if account is None:
        raise ApiError(404, "not-found", "no such bank account")
    return account


def _list_accounts(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    state = ctx.state
    page = ctx.page(
        _account_spec(ctx), [state.accounts[i] for i in state.children("accounts")], request
    )
    body: dict[str, Any] = {
        "accounts": [render_account(a, state) for a in page.items],
        "links": page.links,
    }
    if page.includes:
        people = dict.fromkeys(
            [a.owner_id for a in page.items if "owner" in page.includes]
            + [
                a.beneficiary_id
                for a in page.items
                if a.beneficiary_id and "beneficiary" in page.includes
            ]
        )
        body["included"] = {
            "legal-persons": [render_legal_person(state.legal_persons[p]) for p in people]
        }
    return reply(body)


def _show_account(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    account = _get_account(ctx, args[0])
    location = f"/v0/bank/accounts/{account.id}".encode()
    return reply(render_account(account, ctx.state), headers=[(b"location", location)])


def _update_account(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    account = _get_account(ctx, args[0])
    body = request.json()
    check_keys(body, required=("display-name",))
    account.display_name = text(body, "display-name", max_len=64)
    return reply(render_account(account, ctx.state))


def _close_account(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    state = ctx.state
    account = _get_account(ctx, args[0])
    pending = any(
        state.submissions[s].status == "processing"
        for s in state.children(f"submissions:{account.id}")
    )
    if account.status == "closed":
        raise ApiError(422, "bank-account-closed", "the account is already closed")
    if account.balance != 0 or account.available != 0:
        raise ApiError(422, "account-balance-not-zero", "move the money out before closing")
    if pending:
        raise ApiError(422, "account-has-pending-payments", "submissions are still processing")
    account.status = "closed"
    account.closed_at = state.now()
    url = f"/v0/bank/accounts/{account.id}"
    state.add_event("account-status-updated", {"account-url": url, "account-status": "closed"})
    return reply(render_account(account, state))


def _search_accounts(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    body = request.json()
    check_keys(body, required=("search-query",))
    query = text(body, "search-query")
    state = ctx.state
    found = [state.accounts[i] for i in reversed(state.children("accounts"))]
    found = [a for a in found if a.account_number.startswith(query)]
    return reply(
        {
            "search-results": [render_account(a, state) for a in found],
            "meta": {"page": {"total": len(found)}},
        }
    )


def _new_address(ctx: Context) -> tuple[str, str]:
    numbers = [
        int(a.account_number)
        for a in ctx.state.accounts.values()
        if a.sort_code == _SANDBOX_SORT_CODE
    ]
    return _SANDBOX_SORT_CODE, f"{max(numbers, default=30000000) + 1:08d}"


def _owner(ctx: Context, body: dict[str, Any], key: str) -> str:
    person_id = url_id(body[key], "legal-persons", "lp", f"/{key}")
    if person_id not in ctx.state.legal_persons:
        raise ApiError(404, "not-found", "no such legal person", pointer=f"/{key}")
    return person_id


def _open_savings(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    body = request.json()
    check_keys(
        body,
        required=("bank-product-type", "savings-type", "owner-url"),
        optional=("display-name",),
    )
    choice(body, "bank-product-type", ("savings-account",))
    choice(body, "savings-type", ("easy-access",))
    owner = _owner(ctx, body, "owner-url")
    name = (
        text(body, "display-name", max_len=64) if "display-name" in body else "Easy Access Savings"
    )
    account = open_account(
        ctx.state,
        display_name=name,
        product_type="savings-account",
        owner_id=owner,
        address=_new_address(ctx),
    )
    return reply(render_account(account, ctx.state), 201)


def _open_from_product(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    product = ctx.state.products.get(args[0])
    if product is None:
        raise ApiError(404, "not-found", "no such bank product")
    body = request.json() if request.body.strip() else {}
    check_keys(body, required=(), optional=("display-name", "owner-url", "beneficiary-url"))
    owner = _owner(ctx, body, "owner-url") if "owner-url" in body else ctx.state.own_legal_person_id
    beneficiary = _owner(ctx, body, "beneficiary-url") if "beneficiary-url" in body else None
    name = (
        text(body, "display-name", max_len=64) if "display-name" in body else product.display_name
    )
    account = open_account(
        ctx.state,
        display_name=name,
        product_type=product.product_type,
        owner_id=owner,
        address=_new_address(ctx),
    )
    account.beneficiary_id = beneficiary
    return reply(render_account(account, ctx.state), 201)


_PRODUCT_SPEC = ListSpec(
    sorts=created_sorts(),
    filters={
        "status": Filter(
            frozenset({"in"}), "enum", lambda p: p.status, frozenset({"active", "inactive"})
        )
    },
)


def _list_products(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    state = ctx.state
    page = ctx.page(_PRODUCT_SPEC, list(state.products.values()), request)
    return reply(
        {
            "bank-account-products": [render_product(p, state) for p in page.items],
            "links": page.links,
            "meta": {"page": {"total": page.total}},
        }
    )


def _show_product(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    product = ctx.state.products.get(args[0])
    if product is None:
        raise ApiError(404, "not-found", "no such bank product")
    return reply(render_product(product, ctx.state))


_RESTRICTION_SPEC = ListSpec(
    sorts=created_sorts(),
    filters={
        "restriction-status": Filter(
            frozenset({"eq"}), "enum", lambda r: r.status, frozenset({"active", "lifted"})
        )
    },
)


def _list_restrictions(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    state = ctx.state
    account = _get_account(ctx, args[0])
    records = [state.restrictions[i] for i in state.children(f"restrictions:{account.id}")]
    page = ctx.page(_RESTRICTION_SPEC, records, request)
    return reply(
        {
            "bank-account-restrictions": [render_restriction(r) for r in page.items],
            "links": page.links,
        }
    )


def _notes(body: dict[str, Any]) -> str:
    return text(body, "notes", max_len=_NOTES_MAX)


def _apply_restriction(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    account = _get_account(ctx, args[0])
    body = request.json()
    keys = ("restriction-type", "restriction-reason-code", "restriction-legal-status", "notes")
    check_keys(body, required=keys)
    fields = (
        choice(body, "restriction-type", ("freeze", "block")),
        choice(body, "restriction-reason-code", RESTRICTION_REASONS),
        choice(body, "restriction-legal-status", RESTRICTION_LEGAL_STATUSES),
    )
    restriction = new_restriction(ctx.state, account, fields, by_service=False, notes=_notes(body))
    return reply(render_restriction(restriction), 201)


def _active_restriction(ctx: Context, restriction_id: str) -> Restriction:
    restriction = ctx.state.restrictions.get(restriction_id)
    if restriction is None:
        raise ApiError(404, "not-found", "no such restriction")
    return restriction


def _check_changeable(restriction: Restriction) -> None:
    if restriction.status != "active":
        raise ApiError(422, "restriction-not-active", "only an active restriction can change")
    if restriction.applied_by_service:
        raise ApiError(
            422, "restriction-applied-by-service", "only the bank may change this restriction"
        )


def _lift(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    restriction = _active_restriction(ctx, args[0])
    body = request.json()
    check_keys(body, required=("notes",))
    notes = _notes(body)
    _check_changeable(restriction)
    restriction.status = "lifted"
    restriction.notes.append(notes)
    return reply(render_restriction(restriction))


def _update_restriction(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    restriction = _active_restriction(ctx, args[0])
    body = request.json()
    optional = ("restriction-type", "restriction-reason-code", "restriction-legal-status")
    check_keys(body, required=("notes",), optional=optional)
    notes = _notes(body)
    kind = choice(body, optional[0], ("freeze", "block")) if optional[0] in body else None
    reason = choice(body, optional[1], RESTRICTION_REASONS) if optional[1] in body else None
    legal = choice(body, optional[2], RESTRICTION_LEGAL_STATUSES) if optional[2] in body else None
    _check_changeable(restriction)
    restriction.restriction_type = kind or restriction.restriction_type
    restriction.reason_code = reason or restriction.reason_code
    restriction.legal_status = legal or restriction.legal_status
    restriction.notes.append(notes)
    return reply(render_restriction(restriction))


def _show_restriction(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    return reply(render_restriction(_active_restriction(ctx, args[0])))


_EVENT_SPEC = ListSpec(sorts=created_sorts())


def _account_events(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    url = f"/v0/bank/accounts/{_get_account(ctx, args[0]).id}"
    records = [e for e in ctx.state.events.values() if e.payload.get("account-url") == url]
    page = ctx.page(_EVENT_SPEC, records, request)
    return reply({"events": [render_event(e) for e in page.items], "links": page.links})


def _restriction_events(ctx: Context, request: Request, args: tuple[str, ...]) -> Reply:
    _active_restriction(ctx, args[0])
    return reply({"events": [], "links": {"prev": None, "next": None}})


def register(router: Router) -> None:
    """Add the account-side routes to ``router``."""
    add = router.add
    add("GET", "/v0/organizations/{og}/bank/accounts", _list_accounts)
    add("POST", "/v0/organizations/{og}/bank/accounts", _open_savings)
    add("POST", "/v0/organizations/{og}/bank/accounts/search", _search_accounts)
    add("GET", "/v0/bank/accounts/{ba}", _show_account)
    add("PATCH", "/v0/bank/accounts/{ba}", _update_account)
    add("POST", "/v0/bank/accounts/{ba}/actions/close", _close_account)
    add("GET", "/v0/bank/accounts/{ba}/events", _account_events)
    add("GET", "/v0/organizations/{og}/bank/products", _list_products)
    add("GET", "/v0/bank/products/{bp}", _show_product)
    add("POST", "/v0/bank/products/{bp}/accounts", _open_from_product)
    add("GET", "/v0/bank/accounts/{ba}/restrictions", _list_restrictions)
    add("POST", "/v0/bank/accounts/{ba}/restrictions", _apply_restriction)
    add("GET", "/v0/bank/account-restrictions/{ri}", _show_restriction)
    add("POST", "/v0/bank/account-restrictions/{ri}/actions/lift", _lift)
    add("POST", "/v0/bank/account-restrictions/{ri}/actions/update", _update_restriction)
    add("GET", "/v0/bank/account-restrictions/{ri}/events", _restriction_events)
