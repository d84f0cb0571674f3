"""Fault injection: 500s and dropped connections after the work is done, extra 429s, latency."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from payrun.sandbox import InjectedDropError, SandboxApp, create_app, serve_in_thread

KEY = "test-key"
HEADERS = {"Authorization": f"ServiceAPIKey {KEY}"}


def _client(app: SandboxApp) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://sandbox", headers=HEADERS
    )


def _payment_body(app: SandboxApp) -> tuple[str, dict[str, Any]]:
    state = app.sandbox
    account = next(a for a in state.accounts.values() if a.account_number == "30000001")
    payee = next(p for p in state.payees.values() if p.status == "active")
    body = {
        "creditor": {"creditor-type": "payee", "payee-url": f"/v0/payees/{payee.id}"},
        "payment-amount": {"currency": "GBP", "value": "9.99"},
    }
    return f"/v0/bank/accounts/{account.id}/payments", body


async def test_injected_500_after_the_payment_is_made() -> None:
    """With fault rate 1 a create-payment answers 500, yet the payment exists."""
    app = create_app(api_key=KEY, fault_rate=1.0, fault_kinds=("500",))
    url, body = _payment_body(app)
    async with _client(app) as client:
        response = await client.post(url, json=body)
        assert response.status_code == 500
        assert response.json()["errors"][0]["status"] == "500"
        listed = (await client.get(url)).json()["payments"]
    assert len(listed) == 1
    stats = app.sandbox.stats
    assert stats.faults_injected["500"] == 1


async def test_injected_fault_on_submit_still_submits() -> None:
    """A faulted submit has still created its submission."""
    app = create_app(api_key=KEY, fault_rate=0.0)
    url, body = _payment_body(app)
    async with _client(app) as client:
        payment = (await client.post(url, json=body)).json()
        app.fault_rate = 1.0
        app.fault_kinds = ("500",)
        response = await client.post(
            payment["payment-submissions-url"], json={"payment-scheme": "fps"}
        )
        assert response.status_code == 500
        app.fault_rate = 0.0
        submissions = (await client.get(payment["payment-submissions-url"])).json()["submissions"]
    assert len(submissions) == 1


async def test_reads_are_never_faulted() -> None:
    """Only create-payment and create-submission are faulted; a GET always answers."""
    app = create_app(api_key=KEY, fault_rate=1.0)
    async with _client(app) as client:
        for _ in range(20):
            assert (await client.get("/v0/index")).status_code == 200


async def test_injected_drop_in_process_raises() -> None:
    """In-process, a dropped connection raises InjectedDropError; the work is done."""
    app = create_app(api_key=KEY, fault_rate=1.0, fault_kinds=("drop",))
    url, body = _payment_body(app)
    async with _client(app) as client:
        with pytest.raises(InjectedDropError):
            await client.post(url, json=body)
    assert len(app.sandbox.payments) == 1
    assert app.sandbox.stats.faults_injected["drop"] == 1
    assert app.sandbox.stats.in_flight == 0


async def test_injected_drop_over_http_closes_the_connection() -> None:
    """Over uvicorn the client sees the connection closed mid-response; the server keeps serving."""
    with serve_in_thread(api_key=KEY, fault_rate=1.0, fault_kinds=("drop",)) as server:
        url, body = _payment_body(server.app)
        async with httpx.AsyncClient(base_url=server.base_url, headers=HEADERS) as client:
            with pytest.raises(httpx.RemoteProtocolError):
                await client.post(url, json=body)
            assert (await client.get(url)).status_code == 200
        assert len(server.state.payments) == 1


async def test_extra_429_changes_nothing() -> None:
    """With extra_429_rate 1 every request is refused 429 and nothing is created."""
    app = create_app(api_key=KEY, extra_429_rate=1.0)
    url, body = _payment_body(app)
    async with _client(app) as client:
        response = await client.post(url, json=body)
    assert response.status_code == 429
    assert app.sandbox.payments == {}
    assert app.sandbox.stats.rate_limited["injected"] == 1


async def test_fault_rate_is_a_fraction() -> None:
    """A fault rate of 0.5 faults roughly half of 200 create-payment requests."""
    app = create_app(api_key=KEY, fault_rate=0.5, fault_kinds=("500",), rng_seed=7)
    url, body = _payment_body(app)
    async with _client(app) as client:
        statuses = [(await client.post(url, json=body)).status_code for _ in range(200)]
    assert 60 < statuses.count(500) < 140
    assert len(app.sandbox.payments) == 200


async def test_latency_and_jitter() -> None:
    """latency_ms delays each answer; jitter keeps it within latency +- jitter."""
    app = create_app(api_key=KEY, latency_ms=60, jitter_ms=20)
    async with _client(app) as client:
        started = time.perf_counter()
        for _ in range(3):
            await client.get("/v0/index")
        elapsed = time.perf_counter() - started
    assert 0.12 <= elapsed < 1.0


def test_unknown_fault_kind_is_refused() -> None:
    """create_app refuses fault kinds it does not know."""
    with pytest.raises(ValueError, match="fault_kinds"):
        create_app(fault_kinds=("timeout",))
