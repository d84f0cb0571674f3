"""Property tests: no request makes the sandbox answer 500, and no refused request changes state."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from payrun.sandbox import SandboxApp, create_app
from payrun.sandbox._payments import settle

KEY = "test-key"
APP = create_app(api_key=KEY, deliver_after_ms=0)
STATE = APP.sandbox
ACCOUNT = next(a for a in STATE.accounts.values() if a.account_number == "30000001")
PAYEE = next(p for p in STATE.payees.values() if p.status == "active")
ORG, LP = STATE.org_id, STATE.own_legal_person_id
IDS = [ACCOUNT.id, PAYEE.id, ORG, LP, "ba.nope", "pm.nope", "x", "", "%00", "..", "ba." + "a" * 70]

KEYS = st.sampled_from(
    [
        "creditor",
        "creditor-type",
        "payee-url",
        "account-url",
        "payment-amount",
        "currency",
        "value",
        "payment-reference",
        "payment-scheme",
        "account-holder",
        "account-number",
        "bank-id",
        "uk-domestic-sort-code",
        "uk-domestic-account-number",
        "rejection-reason",
        "payee-status",
        "display-name",
        "notes",
        "restriction-type",
        "search-query",
        "name",
        "account-classification",
        "requester-legal-person-url",
        "cop-request-url",
        "x",
    ]
) | st.text(max_size=8)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(
        [
            "GBP",
            "1.00",
            "fps",
            "book-transfer",
            "payee",
            "uk-domestic",
            "deactivated",
            "12345678",
            "123456",
            f"/v0/payees/{PAYEE.id}",
            f"/v0/bank/accounts/{ACCOUNT.id}",
            f"/v0/legal-persons/{LP}",
            "freeze",
            "personal",
            "0.001",
            "-5",
            "1e3",
        ]
    )
    | st.text(max_size=40)
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=5),
    max_leaves=12,
)
BODIES = st.one_of(
    st.dictionaries(KEYS, JSON_VALUES, max_size=6).map(lambda d: json.dumps(d).encode()),
    JSON_VALUES.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=64),
    st.sampled_from(
        [
            b"",
            b"{",
            b'{"a":NaN}',
            b"[" * 5000,
            b'{"payment-amount": {"currency": "GBP", "value": "1"}}',
        ]
    ),
)
TEMPLATES = [
    "/v0/bank/accounts/{}/payments",
    "/v0/payments/{}/submissions",
    "/v0/payments/{}",
    "/v0/legal-persons/{}/bank/payees",
    "/v0/payees/{}",
    "/v0/organizations/{}/cop-request",
    "/v0/bank/accounts/{}",
    "/v0/bank/accounts/{}/actions/close",
    "/v0/bank/accounts/{}/restrictions",
    "/v0/organizations/{}/payments/search",
    "/v0/organizations/{}/bank/accounts",
    "/v0/organizations/{}/bank/accounts/search",
    "/v0/bank/account-restrictions/{}/actions/lift",
    "/v0/simulation/organizations/{}/cop-request/simulate/full-match",
    "/v0/organizations/{}/events",
    "/v0/bank/accounts/{}/transactions",
    "/v0/bank/accounts/{}/submissions",
    "/v0/{}",
]
QUERY_KEYS = st.sampled_from(
    [
        "page[size]",
        "page[after]",
        "page[before]",
        "sort",
        "include",
        "include[]",
        "filter[created-at][gte]",
        "filter[latest-submission-status][in][]",
        "filter[rejected][eq]",
        "filter[account-status][in][]",
        "filter[event-type][eq]",
        "filter[x][eq]",
        "filter[created-at][zz]",
    ]
) | st.text(max_size=10)
QUERY_VALUES = st.sampled_from(
    ["0", "1", "200", "201", "-created-at", "null", "true", "eyJ4Ijox", "2026-01-01T00:00:00Z"]
) | st.text(max_size=12)


def _snapshot(app: SandboxApp) -> tuple[Any, ...]:
    state = app.sandbox
    settle(state, 0.0, everything=True)  # deliveries due by time are not the request's doing
    return (
        len(state.payments),
        len(state.submissions),
        len(state.payees),
        len(state.cop_requests),
        len(state.events),
        len(state.restrictions),
        len(state.accounts),
        tuple((a.balance, a.available, a.status, a.display_name) for a in state.accounts.values()),
        tuple(p.status for p in state.payees.values()),
        tuple(r.status for r in state.restrictions.values()),
        sum(p.rejected_at is not None for p in state.payments.values()),
    )


Query = list[tuple[str, str | int | float | bool | None]]


async def _send(method: str, path: str, body: bytes, query: Query) -> httpx.Response:
    transport = httpx.ASGITransport(app=APP)
    headers = {"Authorization": f"ServiceAPIKey {KEY}", "content-type": "application/json"}
    async with httpx.AsyncClient(
        transport=transport, base_url="http://sandbox", headers=headers
    ) as client:
        return await client.request(method, path, content=body or None, params=query)


def _check(
    method: str, path: str, body: bytes, query: list[tuple[str, str | int | float | bool | None]]
) -> None:
    before = _snapshot(APP)
    response = anyio.run(_send, method, path, body, query)
    assert response.status_code < 500, (method, path, body, response.text)
    if response.status_code >= 400:
        assert _snapshot(APP) == before, (method, path, body, response.text)
        assert response.json()["errors"][0]["status"] == str(response.status_code)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    method=st.sampled_from(["POST", "PATCH"]),
    template=st.sampled_from(TEMPLATES),
    ident=st.sampled_from(IDS),
    body=BODIES,
)
def test_random_bodies_never_500_and_refusals_change_nothing(
    method: str, template: str, ident: str, body: bytes
) -> None:
    """Random JSON (and non-JSON) bodies: never a 500; a 4xx leaves the state as it was."""
    _check(method, template.format(ident), body, [])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    template=st.sampled_from(TEMPLATES),
    ident=st.sampled_from(IDS),
    query=st.lists(st.tuples(QUERY_KEYS, QUERY_VALUES), max_size=4),
)
def test_random_queries_never_500(template: str, ident: str, query: Query) -> None:
    """Random list queries and paths: never a 500, never a state change on GET."""
    before = _snapshot(APP)
    response = anyio.run(_send, "GET", template.format(ident), b"", query)
    assert response.status_code < 500, (template, ident, query, response.text)
    assert _snapshot(APP) == before


@settings(max_examples=150, deadline=None)
@given(
    value=st.from_regex(r"-?\d{0,8}(\.\d{0,3})?", fullmatch=True) | st.text(max_size=10),
    reference=st.none() | st.text(max_size=40),
    extra=st.dictionaries(st.sampled_from(["x", "payee-url", "iban"]), SCALARS, max_size=1),
)
def test_create_payment_bodies(value: str, reference: str | None, extra: dict[str, Any]) -> None:
    """Near-valid create-payment bodies: 201, 400 or 422, never a 500, and 4xx changes nothing."""
    body: dict[str, Any] = {
        "creditor": {"creditor-type": "payee", "payee-url": f"/v0/payees/{PAYEE.id}"},
        "payment-amount": {"currency": "GBP", "value": value},
        **({"payment-reference": reference} if reference is not None else {}),
        **extra,
    }
    _check("POST", f"/v0/bank/accounts/{ACCOUNT.id}/payments", json.dumps(body).encode(), [])
