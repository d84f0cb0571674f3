"""The two limits, proven with real concurrency over loopback (uvicorn in a thread)."""

from __future__ import annotations

from typing import Any

import aiohttp
import anyio
import httpx
import pytest

from payrun.sandbox import RunningSandbox, serve_in_thread


def _client(server: RunningSandbox, connections: int = 100) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    headers = {"Authorization": f"ServiceAPIKey {server.api_key}"}
    return httpx.AsyncClient(base_url=server.base_url, headers=headers, limits=limits, timeout=30)


async def _operational(client: httpx.AsyncClient) -> dict[str, Any]:
    index = (await client.get("/v0/index")).json()
    org = (await client.get(index["organization-url"])).json()
    accounts = (await client.get(org["organization-bank-accounts-url"])).json()["accounts"]
    account = next(a for a in accounts if a["bank-addresses"][0]["account-number"] == "30000001")
    payees = (await client.get(f"{org['own-legal-person-url']}/bank/payees")).json()["payees"]
    account["payee"] = next(p for p in payees if p["payee-status"] == "active")["payee-url"]
    return account  # type: ignore[no-any-return]


async def test_real_server_serves_the_api(sandbox_server: RunningSandbox) -> None:
    """The session's real server answers ping and creates a payment over HTTP."""
    async with _client(sandbox_server) as client:
        assert (await client.get("/v0/ping")).status_code == 204
        account = await _operational(client)
        body = {
            "creditor": {"creditor-type": "payee", "payee-url": account["payee"]},
            "payment-amount": {"currency": "GBP", "value": "1.00"},
        }
        response = await client.post(account["account-payments-url"], json=body)
        assert response.status_code == 201


@pytest.mark.slow
async def test_org_in_flight_limit() -> None:
    """60 concurrent slow requests: 50 are served at once, the other 10 get 429."""
    with serve_in_thread(latency_ms=600) as server:
        async with _client(server) as client:
            statuses: list[int] = []

            async def one() -> None:
                statuses.append((await client.get("/v0/index")).status_code)

            with anyio.fail_after(20):
                async with anyio.create_task_group() as group:
                    for _ in range(60):
                        group.start_soon(one)
            stats = (await client.get("/__sandbox/stats")).json()
    assert statuses.count(429) == 10
    assert statuses.count(200) == 50
    assert stats["max_in_flight"] == 50
    assert stats["rate_limited"]["org_in_flight"] == 10


@pytest.mark.slow
async def test_account_submit_limit_refuses_the_fourth() -> None:
    """4 concurrent submits from one account: 3 are served, 1 gets 429 and changes nothing."""
    with serve_in_thread(latency_ms=250) as server:
        async with _client(server) as client:
            account = await _operational(client)
            body = {
                "creditor": {"creditor-type": "payee", "payee-url": account["payee"]},
                "payment-amount": {"currency": "GBP", "value": "1.00"},
            }
            payments = [
                (await client.post(account["account-payments-url"], json=body)).json()
                for _ in range(4)
            ]
            await client.post("/__sandbox/stats/reset")
            results: dict[str, httpx.Response] = {}

            async def submit(payment: dict[str, Any]) -> None:
                url = payment["payment-submissions-url"]
                results[url] = await client.post(url, json={"payment-scheme": "fps"})

            with anyio.fail_after(20):
                async with anyio.create_task_group() as group:
                    for payment in payments:
                        group.start_soon(submit, payment)
            stats = (await client.get("/__sandbox/stats")).json()
            refused = [url for url, r in results.items() if r.status_code == 429]
            assert len(refused) == 1
            assert (await client.get(refused[0])).json()["submissions"] == []
    assert sorted(r.status_code for r in results.values()) == [200, 200, 200, 429]
    assert stats["max_concurrent_submits"] == {account["account-url"]: 3}
    assert stats["rate_limited"]["account_submits"] == 1


async def test_fast_client_at_the_limit_is_never_refused() -> None:
    """50 workers sending back to back (one request each in flight) never see a 429."""
    with serve_in_thread() as server:
        headers = {"Authorization": f"ServiceAPIKey {server.api_key}"}
        connector = aiohttp.TCPConnector(limit=50)
        async with aiohttp.ClientSession(
            server.base_url, headers=headers, connector=connector
        ) as session:

            async def worker() -> None:
                for _ in range(40):
                    async with session.get("/v0/index") as response:
                        await response.read()
                        assert response.status == 200

            with anyio.fail_after(30):
                async with anyio.create_task_group() as group:
                    for _ in range(50):
                        group.start_soon(worker)
            async with session.get("/__sandbox/stats") as response:
                stats = await response.json()
    assert stats["requests"] == 2000
    assert stats["rate_limited"]["org_in_flight"] == 0
    assert stats["max_in_flight"] <= 50
    assert stats["in_flight"] == 0


def test_serve_in_thread_stops_cleanly() -> None:
    """After the context manager exits, the port no longer accepts connections."""
    with serve_in_thread(api_key="fixed") as server:
        assert server.api_key == "fixed"
        assert httpx.get(f"{server.base_url}/v0/ping").status_code == 204
        base_url = server.base_url
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{base_url}/v0/ping", timeout=2)
