"""Contract tests: BankClient against the sandbox bank, in-process and over real loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import anyio
import httpx
import pytest

from _run_helpers import error_answer
from _transports import asgi_transport
from payrun.bank import AdaptiveLimiter, BankClient, PreparedRequest, RetryPolicy, make_transport
from payrun.config import Secret, Settings
from payrun.errors import AuthError, BankRejectedError, OutcomeUnknownError
from payrun.sandbox import RunningSandbox, SandboxApp, create_app, default_seed, serve_in_thread

SECRET = "g-test-contract-secret-key"
BASE = "http://sandbox.test"


def _seed() -> dict[str, Any]:
    seed = default_seed()
    seed["accounts"] = [
        *seed["accounts"],
        {
            "display-name": "Frozen by the bank",
            "sort-code": "040004",
            "account-number": "30000003",
            "owner": "org",
            "restrictions": [
                {
                    "restriction-type": "freeze",
                    "restriction-reason-code": "sanctions",
                    "applied-by": "service",
                }
            ],
        },
        {
            "display-name": "Frozen by a user",
            "sort-code": "040004",
            "account-number": "30000004",
            "owner": "org",
            "restrictions": [
                {
                    "restriction-type": "block",
                    "restriction-reason-code": "fraud-1st-party",
                    "restriction-legal-status": "not-applicable",
                }
            ],
        },
        {
            "display-name": "Nearly empty",
            "sort-code": "040004",
            "account-number": "30000005",
            "owner": "org",
            "balance": "5.00",
        },
    ]
    seed["payees"] = [
        *seed["payees"],
        *(
            {
                "owner": "org",
                "account-holder": f"Bulk {n}",
                "sort-code": "112233",
                "account-number": f"{n:08d}",
            }
            for n in range(200)
        ),
    ]
    seed["directory"] = [
        {
            "account-holder": "Jane Doe",
            "sort-code": "112233",
            "account-number": "12345678",
            "account-classification": "personal",
        }
    ]
    return seed


def _asgi_bank(app: SandboxApp, *, key: str = SECRET, attempts: int = 4) -> BankClient:
    settings = Settings(base_url=BASE, api_key=Secret(key))
    retry = RetryPolicy.no_wait(attempts=attempts)
    return BankClient(asgi_transport(app), settings, retry=retry)


@pytest.fixture
def sandbox_app() -> SandboxApp:
    """A fresh in-process sandbox bank with the contract seed."""
    return create_app(seed=_seed(), api_key=SECRET, rng_seed=1)


@pytest.fixture
async def bank(sandbox_app: SandboxApp) -> AsyncIterator[BankClient]:
    """A BankClient bound to the in-process sandbox (an ASGI test transport)."""
    async with _asgi_bank(sandbox_app) as client:
        yield client


@pytest.fixture(scope="module")
def served() -> Iterator[RunningSandbox]:
    """The sandbox served by uvicorn on 127.0.0.1 (real loopback HTTP)."""
    with serve_in_thread(seed=_seed(), api_key=SECRET) as running:
        yield running


async def _every_method(bank: BankClient) -> None:
    """Call every BankClient method once against a sandbox with the contract seed."""
    since = datetime.now(UTC) - timedelta(minutes=1)
    org = await bank.organization()
    assert (org.display_name, org.mode) == ("Acme Payroll Ltd", "test-mode")
    account = await bank.find_account(org, sort_code="04-00-04", account_number="30000001")
    assert account is not None and account.status == "open"
    assert await bank.find_account(org, sort_code="999999", account_number="30000001") is None
    assert await bank.get_account(account.url) == account
    assert account.available_balance > Decimal(1000)
    assert await bank.active_restrictions(account) == []
    payees = [p async for p in bank.payees(account.owner_url)]
    assert len(payees) >= 206 and len({p.url for p in payees}) == len(payees)
    assert {p.status for p in payees} == {"active", "deactivated"}
    cop = await bank.confirm_payee(
        org,
        name="Jane Doe",
        sort_code="112233",
        account_number="12345678",
        classification="personal",
        requester_url=org.own_legal_person_url,
    )
    assert (cop.status, cop.result) == ("verified", "match")
    payee = await bank.create_payee(
        account.owner_url,
        name="Jane Doe",
        sort_code="112233",
        account_number="12345678",
        cop_request_url=cop.url,
    )
    assert (payee.status, payee.sort_code, payee.account_number) == ("active", "112233", "12345678")
    payment = await bank.create_payment(
        account.url, payee_url=payee.url, amount=Decimal("12.3"), reference="CONTRACT-1"
    )
    assert (payment.amount, payment.reference) == (Decimal("12.30"), "CONTRACT-1")
    submission = await bank.submit_payment(payment.url)
    assert submission.payment_url == payment.url
    assert [s.url for s in await bank.payment_submissions(payment.url)] == [submission.url]
    assert (await bank.get_submission(submission.url)).url == submission.url
    assert (await bank.get_payment(payment.url)).latest_submission_url == submission.url
    listed = [p async for p in bank.payments(account, created_since=since)]
    mine = [p for p in listed if p.url == payment.url]
    assert len(mine) == 1
    assert (mine[0].creditor_sort_code, mine[0].creditor_account_number) == ("112233", "12345678")
    events = [
        e async for e in bank.events(org, event_type="submission-created", created_since=since)
    ]
    assert submission.url in {e.payload.get("submission-url") for e in events}


async def test_every_method_in_process(bank: BankClient) -> None:
    """Every method works against the sandbox called in process."""
    with anyio.fail_after(20):
        await _every_method(bank)


async def test_every_method_over_loopback(served: RunningSandbox) -> None:
    """Every method works over real loopback HTTP."""
    settings = Settings(base_url=served.base_url, api_key=Secret(served.api_key))
    transport = make_transport(timeout=10)
    with anyio.fail_after(30):
        async with BankClient(transport, settings, retry=RetryPolicy.no_wait()) as bank:
            await _every_method(bank)


async def test_limits_are_never_exceeded_over_loopback(served: RunningSandbox) -> None:
    """100 workers through one limiter of 50 never exceed the bank's limit: no 429s."""
    settings = Settings(base_url=served.base_url, api_key=Secret(served.api_key))
    limiter = AdaptiveLimiter(50)
    async with httpx.AsyncClient(base_url=served.base_url) as admin:
        await admin.post("/__sandbox/stats/reset")
        async with BankClient(make_transport(), settings, limiter=limiter) as bank:
            org = await bank.organization()
            account = await bank.find_account(org, sort_code="040004", account_number="30000002")
            assert account is not None

            async def worker() -> None:
                for _ in range(6):
                    await bank.get_account(account.url)

            with anyio.fail_after(30):
                async with anyio.create_task_group() as tg:
                    for _ in range(100):
                        tg.start_soon(worker)
        stats = (await admin.get("/__sandbox/stats")).json()
    assert stats["max_in_flight"] <= 50
    assert limiter.peak == 50
    assert sum(stats["rate_limited"].values()) == 0


async def test_restrictions_hide_sensitive_types(bank: BankClient) -> None:
    """A bank-applied sanctions freeze shows with type None; a user block shows its type."""
    org = await bank.organization()
    hidden = await bank.find_account(org, sort_code="040004", account_number="30000003")
    shown = await bank.find_account(org, sort_code="040004", account_number="30000004")
    assert hidden is not None and shown is not None
    assert hidden.restricted and shown.restricted
    assert [r.type for r in await bank.active_restrictions(hidden)] == [None]
    assert [r.type for r in await bank.active_restrictions(shown)] == ["block"]


async def _payee(bank: BankClient, owner: str, *, status: str) -> str:
    async for payee in bank.payees(owner):
        if payee.status == status:
            return payee.url
    raise AssertionError(status)


@pytest.mark.parametrize(
    ("number", "payee_status", "code"),
    [
        ("30000005", "active", "insufficient-funds"),
        ("30000004", "active", "account-restricted"),
        ("30000001", "deactivated", "payee-deactivated"),
    ],
)
async def test_refusals_carry_the_sandbox_code(
    bank: BankClient, number: str, payee_status: str, code: str
) -> None:
    """The bank's 422 codes reach BankRejectedError.code from create or submit."""
    org = await bank.organization()
    account = await bank.find_account(org, sort_code="040004", account_number=number)
    assert account is not None
    payee_url = await _payee(bank, account.owner_url, status=payee_status)
    with pytest.raises(BankRejectedError) as info:
        payment = await bank.create_payment(
            account.url, payee_url=payee_url, amount=Decimal(100), reference=None
        )
        await bank.submit_payment(payment.url)
    assert (info.value.status, info.value.code) == (422, code)


async def test_wrong_key_is_an_auth_error(sandbox_app: SandboxApp) -> None:
    """A wrong API key gives AuthError naming PAYRUN_API_KEY and never showing the key."""
    async with _asgi_bank(sandbox_app, key="g-test-wrong-key") as bank:
        with pytest.raises(AuthError, match="PAYRUN_API_KEY") as info:
            await bank.organization()
    assert "g-test-wrong-key" not in repr(info.value) + str(info.value)


@pytest.mark.parametrize("kind", ["500", "drop"])
async def test_faulted_create_is_unknown_and_sent_once(kind: str) -> None:
    """A 500 or dropped answer to create payment is an unknown outcome, never resent."""
    app = create_app(seed=_seed(), api_key=SECRET, fault_rate=1.0, fault_kinds=(kind,))
    async with _asgi_bank(app) as bank:
        org = await bank.organization()
        account = await bank.find_account(org, sort_code="040004", account_number="30000002")
        assert account is not None
        payee_url = await _payee(bank, account.owner_url, status="active")
        with pytest.raises(OutcomeUnknownError):
            await bank.create_payment(
                account.url, payee_url=payee_url, amount=Decimal(7), reference="FAULT-1"
            )
        since = datetime.now(UTC) - timedelta(minutes=1)
        found = [
            p async for p in bank.payments(account, created_since=since) if p.reference == "FAULT-1"
        ]
    assert len(found) == 1


async def test_injected_429s_are_retried_and_shrink_the_limit() -> None:
    """With half the requests refused 429, reads still complete and the limit shrinks."""
    app = create_app(seed=_seed(), api_key=SECRET, extra_429_rate=0.5, rng_seed=3)
    limiter = AdaptiveLimiter(50)
    settings = Settings(base_url=BASE, api_key=Secret(SECRET))
    retry = RetryPolicy.no_wait(attempts=30)
    async with BankClient(asgi_transport(app), settings, limiter=limiter, retry=retry) as bank:
        org = await bank.organization()
        account = await bank.find_account(org, sort_code="040004", account_number="30000001")
        assert account is not None
        for _ in range(10):
            assert (await bank.get_account(account.url)).url == account.url
    assert limiter.limit < 50


Received = tuple[str, str, dict[str, str], bytes]
"""What the sandbox server read of one request: method, target, headers, body."""


def _refuse_each_request_once(
    served: RunningSandbox, monkeypatch: pytest.MonkeyPatch
) -> list[Received]:
    """Record every request as the real server reads it (target, headers, body bytes) and
    answer every other one 429: sent one at a time, each request is sent twice."""
    serve_api = served.app._serve_api  # noqa: SLF001 - the server's own request handler
    refused = error_answer(429, "too-many-requests")
    received: list[Received] = []

    async def recording(scope: Any, receive: Any, send: Any) -> None:
        chunks = [await receive()]
        while chunks[-1].get("more_body", False):
            chunks.append(await receive())
        body = b"".join(chunk.get("body", b"") for chunk in chunks)
        query = scope["query_string"].decode()
        target = scope["raw_path"].decode() + (f"?{query}" if query else "")
        headers = {name.decode(): value.decode() for name, value in scope["headers"]}
        first = len(received) % 2 == 0
        received.append((scope["method"], target, headers, body))

        async def replay() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        await (refused if first else serve_api)(scope, replay, send)

    monkeypatch.setattr(served.app, "_serve_api", recording)
    return received


async def test_the_attempt_hook_sees_the_exact_bytes_sent_on_every_attempt(
    served: RunningSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The per-attempt hook is called once per attempt, retries included, and what it
    returns is byte for byte what the real server reads (method, target, headers, body)."""
    received = _refuse_each_request_once(served, monkeypatch)
    hooked: list[PreparedRequest] = []

    def sign(request: PreparedRequest) -> PreparedRequest:
        signed = request.with_headers({"Signature": f"attempt-{len(hooked) + 1}"})
        hooked.append(signed)
        return signed

    settings = Settings(base_url=served.base_url, api_key=Secret(served.api_key))
    transport = make_transport(timeout=10)
    retry = RetryPolicy.no_wait()
    with anyio.fail_after(30):
        async with BankClient(transport, settings, retry=retry, on_attempt=sign) as bank:
            await _every_method(bank)
    assert len(hooked) == len(received) >= 2 * 15
    # Each refused request is sent again as built, signed afresh by the hook
    for refused, again in zip(received[::2], received[1::2], strict=True):
        assert (again[0], again[1], again[3]) == (refused[0], refused[1], refused[3])
        assert again[2]["signature"] != refused[2]["signature"]
    host = served.base_url.removeprefix("http://")
    for request, (method, target, headers, body) in zip(hooked, received, strict=True):
        assert request.url == served.base_url + target
        assert (request.method, request.body) == (method, body)
        sent = {name.lower(): value for name, value in request.headers.items()}
        derived = {"host": host} | ({"content-length": str(len(body))} if body else {})
        assert headers == sent | derived
    assert [r.headers["Signature"] for r in hooked] == [
        f"attempt-{n}" for n in range(1, len(hooked) + 1)
    ]
    assert any(r.body for r in hooked) and any("?" in r.url for r in hooked)
