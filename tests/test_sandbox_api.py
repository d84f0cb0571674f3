"""Contract tests: navigation, bank accounts, products and restrictions (in-process)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from payrun.sandbox import SandboxApp, create_app

KEY = "test-key"
AUTH = {"Authorization": f"ServiceAPIKey {KEY}"}
ACCOUNT_FIELDS = {
    "account-url",
    "display-name",
    "account-status",
    "bank-product-type",
    "pooled-funds",
    "account-restricted",
    "primary-account",
    "created-at",
    "account-balance",
    "available-balance",
    "accrued-interest",
    "owner-url",
    "controller-url",
    "account-payments-url",
    "account-admissions-url",
    "account-submissions-url",
    "account-transactions-url",
}


@pytest.fixture
def app() -> SandboxApp:
    """A fresh sandbox bank with the default seed and a fixed key."""
    return create_app(api_key=KEY, deliver_after_ms=0)


async def _org(client: httpx.AsyncClient) -> dict[str, Any]:
    index = (await client.get("/v0/index")).json()
    return (await client.get(index["organization-url"])).json()  # type: ignore[no-any-return]


async def _accounts(client: httpx.AsyncClient) -> dict[str, dict[str, Any]]:
    org = await _org(client)
    listed = (await client.get(org["organization-bank-accounts-url"])).json()["accounts"]
    return {a["bank-addresses"][0]["account-number"]: a for a in listed}


async def test_ping_needs_no_key(client: httpx.AsyncClient) -> None:
    """GET /v0/ping answers 204 with no body and no API key."""
    response = await client.get("/v0/ping", headers={"Authorization": ""})
    assert response.status_code == 204
    assert response.content == b""


@pytest.mark.parametrize(
    "header", [None, "ServiceAPIKey wrong", "Bearer test-key", f"serviceapikey {KEY}"]
)
async def test_missing_or_wrong_key_is_401(client: httpx.AsyncClient, header: str | None) -> None:
    """A missing or wrong key gets 401, www-authenticate ServiceSession and the error envelope."""
    headers = {"Authorization": header} if header else {}
    client.headers.pop("Authorization")
    response = await client.get("/v0/index", headers=headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "ServiceSession"
    assert response.json()["errors"][0]["status"] == "401"


async def test_griffin_scheme_word_is_accepted(client: httpx.AsyncClient) -> None:
    """The real service's scheme word GriffinAPIKey works too."""
    response = await client.get("/v0/index", headers={"Authorization": f"GriffinAPIKey {KEY}"})
    assert response.status_code == 200


async def test_index_api_key_and_organization(client: httpx.AsyncClient) -> None:
    """Navigation: index -> api key -> organization in test-mode with its own legal person."""
    index = (await client.get("/v0/index")).json()
    key = (await client.get(index["api-key-url"])).json()
    assert {
        "api-key-url",
        "api-key-name",
        "api-key-live?",
        "organization-url",
        "user-url",
        "created-at",
    } <= set(key)
    assert "api-key-secret" not in key
    org = (await client.get(key["organization-url"])).json()
    assert org["organization-mode"] == "test-mode"
    assert org["display-name"] == "Acme Payroll Ltd"
    person = (await client.get(org["own-legal-person-url"])).json()
    assert person["legal-person-type"] == "corporation"
    for link in (
        "organization-bank-accounts-url",
        "organization-payments-url",
        "organization-events-url",
    ):
        assert org[link].startswith(org["organization-url"])


async def test_unknown_organization_is_404(client: httpx.AsyncClient) -> None:
    """Another organization's id is not found."""
    response = await client.get("/v0/organizations/og.nottheone/bank/accounts")
    assert response.status_code == 404


async def test_default_accounts(client: httpx.AsyncClient) -> None:
    """The default seed has the operational and client money accounts with GBP 1,000,000."""
    accounts = await _accounts(client)
    operational, client_money = accounts["30000001"], accounts["30000002"]
    assert ACCOUNT_FIELDS <= set(operational)
    assert operational["bank-product-type"] == "operational-account"
    assert operational["display-name"] == "Acme Payroll Operational"
    assert client_money["bank-product-type"] == "client-money-account"
    for account in (operational, client_money):
        assert account["account-status"] == "open"
        assert account["available-balance"] == {"currency": "GBP", "value": "1000000.00"}
        assert account["bank-addresses"][0]["bank-id"] == "040004"
        assert account["account-url"].startswith("/v0/bank/accounts/ba.")


async def test_get_account_and_404(client: httpx.AsyncClient) -> None:
    """GET an account returns it (with Location); an unknown id is 404 in the error envelope."""
    account = (await _accounts(client))["30000001"]
    response = await client.get(account["account-url"])
    assert response.status_code == 200
    assert response.json() == account
    missing = await client.get("/v0/bank/accounts/ba.doesnotexist")
    assert missing.status_code == 404
    assert missing.json()["errors"][0]["title"] == "not-found"


async def test_account_list_filters_sort_include(client: httpx.AsyncClient) -> None:
    """Account list: product-type filter, display-name sort and include=owner."""
    org = await _org(client)
    url = org["organization-bank-accounts-url"]
    only = (
        await client.get(url, params={"filter[bank-product-type][in][]": "client-money-account"})
    ).json()
    assert [a["display-name"] for a in only["accounts"]] == ["Acme Client Money"]
    by_name = (await client.get(url, params={"sort": "display-name", "include": "owner"})).json()
    assert [a["display-name"] for a in by_name["accounts"]] == [
        "Acme Client Money",
        "Acme Payroll Operational",
    ]
    assert (
        by_name["included"]["legal-persons"][0]["legal-person-url"] == org["own-legal-person-url"]
    )
    restricted = (await client.get(url, params={"filter[account-restricted][eq]": "true"})).json()
    assert restricted["accounts"] == []
    bad = await client.get(url, params={"filter[account-status][in][]": "sleeping"})
    assert bad.status_code == 400
    assert bad.json()["errors"][0]["source"]["parameter"] == "filter[account-status][in]"


async def test_search_accounts_by_number_prefix(client: httpx.AsyncClient) -> None:
    """Account search matches the account number exactly or as a prefix."""
    org = await _org(client)
    url = org["organization-bank-accounts-search-url"]
    exact = (await client.post(url, json={"search-query": "30000002"})).json()
    assert [a["display-name"] for a in exact["search-results"]] == ["Acme Client Money"]
    prefix = (await client.post(url, json={"search-query": "3000000"})).json()
    assert prefix["meta"]["page"]["total"] == 2
    assert (await client.post(url, json={"search-query": ""})).status_code == 400


async def test_update_display_name(client: httpx.AsyncClient) -> None:
    """PATCH an account's display-name; an empty or 65-character name is 400."""
    account = (await _accounts(client))["30000001"]
    response = await client.patch(account["account-url"], json={"display-name": "Payroll"})
    assert response.status_code == 200
    assert response.json()["display-name"] == "Payroll"
    for bad in ("", "x" * 65):
        assert (
            await client.patch(account["account-url"], json={"display-name": bad})
        ).status_code == 400


async def test_close_account_refused_then_done(client: httpx.AsyncClient) -> None:
    """Close is 422 while money remains, then closes an emptied account, then 422 again."""
    account = (await _accounts(client))["30000002"]
    close = account["close-account-url"]
    refused = await client.post(close)
    assert refused.status_code == 422
    assert refused.json()["errors"][0]["title"] == "account-balance-not-zero"
    ba = account["account-url"].rsplit("/", 1)[1]
    await client.post(f"/__sandbox/accounts/{ba}/balance", json={"value": "0.00"})
    closed = await client.post(close)
    assert closed.status_code == 200
    assert closed.json()["account-status"] == "closed"
    assert "closed-at" in closed.json()
    again = await client.post(close)
    assert again.json()["errors"][0]["title"] == "bank-account-closed"


async def test_products_and_opening_accounts(client: httpx.AsyncClient) -> None:
    """Products list/get; open a savings account both ways; each starts with GBP 1,000,000."""
    org = await _org(client)
    products = (await client.get(org["organization-bank-account-products-url"])).json()
    assert products["meta"]["page"]["total"] == len(products["bank-account-products"]) >= 1
    product = products["bank-account-products"][0]
    assert (await client.get(product["bank-account-product-url"])).json() == product
    body = {
        "bank-product-type": "savings-account",
        "savings-type": "easy-access",
        "owner-url": org["own-legal-person-url"],
    }
    savings = await client.post(org["organization-bank-accounts-url"], json=body)
    assert savings.status_code == 201
    assert savings.json()["account-balance"]["value"] == "1000000.00"
    opened = product["bank-account-product-accounts-url"]
    from_product = await client.post(opened, json={"display-name": "New"})
    assert from_product.status_code == 201
    assert from_product.json()["bank-product-type"] == product["bank-product-type"]
    numbers = {
        a["bank-addresses"][0]["account-number"] for a in (savings.json(), from_product.json())
    }
    assert len(numbers) == 2


async def test_restrictions_apply_update_lift(client: httpx.AsyncClient) -> None:
    """Apply a freeze (201), list, update it to a block, lift it (200), lift again (422)."""
    account = (await _accounts(client))["30000001"]
    url = account["bank-account-restrictions-url"]
    body = {
        "restriction-type": "freeze",
        "restriction-reason-code": "customer-request",
        "restriction-legal-status": "not-applicable",
        "notes": "asked",
    }
    applied = await client.post(url, json=body)
    assert applied.status_code == 201
    restriction = applied.json()
    assert restriction["restriction-status"] == "active"
    assert (await client.get(account["account-url"])).json()["account-restricted"] is True
    listed = (await client.get(url, params={"filter[restriction-status][eq]": "active"})).json()
    assert [r["bank-account-restriction-url"] for r in listed["bank-account-restrictions"]] == [
        restriction["bank-account-restriction-url"]
    ]
    updated = await client.post(
        restriction["update-bank-account-restriction-url"],
        json={"notes": "n", "restriction-type": "block"},
    )
    assert updated.json()["restriction-type"] == "block"
    lifted = await client.post(
        restriction["lift-bank-account-restriction-url"], json={"notes": "ok"}
    )
    assert lifted.status_code == 200
    assert lifted.json()["restriction-status"] == "lifted"
    assert "lift-bank-account-restriction-url" not in lifted.json()
    again = await client.post(
        restriction["lift-bank-account-restriction-url"], json={"notes": "ok"}
    )
    assert again.status_code == 422
    assert (
        await client.post(restriction["lift-bank-account-restriction-url"], json={})
    ).status_code == 400
    too_long = {"notes": "x" * 2001}
    assert (
        await client.post(restriction["lift-bank-account-restriction-url"], json=too_long)
    ).status_code == 400


async def test_sensitive_service_restriction_hides_fields(client: httpx.AsyncClient) -> None:
    """A bank-applied sanctions restriction hides its type, reason and legal status; no lifting."""
    account = (await _accounts(client))["30000002"]
    ba = account["account-url"].rsplit("/", 1)[1]
    body = {"restriction-type": "block", "restriction-reason-code": "sanctions"}
    created = (await client.post(f"/__sandbox/accounts/{ba}/restrictions", json=body)).json()
    shown = (await client.get(created["bank-account-restriction-url"])).json()
    for hidden in ("restriction-type", "restriction-reason-code", "restriction-legal-status"):
        assert hidden not in shown
    assert "lift-bank-account-restriction-url" not in shown
    lift = await client.post(
        f"{created['bank-account-restriction-url']}/actions/lift", json={"notes": "x"}
    )
    assert lift.status_code == 422


async def test_unknown_path_and_method(client: httpx.AsyncClient) -> None:
    """Unknown paths are 404, a wrong method is 405 with Allow, both as JSON errors."""
    assert (await client.get("/v0/nothing/here")).status_code == 404
    response = await client.delete("/v0/index")
    assert response.status_code == 405
    assert "GET" in response.headers["allow"]


async def test_large_body_is_413_and_changes_nothing(
    client: httpx.AsyncClient, app: SandboxApp
) -> None:
    """A body over 1 MB is refused with 413 and nothing changes."""
    account = (await _accounts(client))["30000001"]
    before = len(app.sandbox.payments)
    response = await client.post(
        account["account-payments-url"], content=b"{" + b" " * 1_000_001 + b"}"
    )
    assert response.status_code == 413
    assert len(app.sandbox.payments) == before
