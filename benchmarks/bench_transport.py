"""Transport benchmark: requests/s and client CPU per request at 50 concurrent workers.

Measures, against a bank in another process, payrun's aiohttp transport alone (a prepared
GET), ``BankClient.get_account`` over it (limiter, retry and parsing included) and
``BankClient`` create+submit pairs. Client CPU is ``time.process_time()`` of this process
only, so the server never counts.

    python benchmarks/bench_transport.py                 # payrun sandbox, 0 and 20 ms
    python benchmarks/bench_transport.py --server tiny   # a minimal uvicorn app instead
    python benchmarks/bench_transport.py --latency 0 --latency 50 --requests 4000
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import anyio
import httpx

from payrun.bank import (
    AdaptiveLimiter,
    BankClient,
    PreparedRequest,
    RetryPolicy,
    Transport,
    make_transport,
)
from payrun.config import Secret, Settings

WORKERS = 50


@dataclass(frozen=True)
class Target:
    """Where to send: base URL, key, an account to read and pay from, and a payee."""

    base_url: str
    api_key: str
    account_urls: list[str]
    payee_url: str


@dataclass(frozen=True)
class Result:
    """One scenario's numbers."""

    name: str
    latency_ms: int
    requests: int
    seconds: float
    cpu_seconds: float
    errors: int

    def row(self) -> str:
        """One line of the results table."""
        rate = self.requests / self.seconds
        cpu_ms = 1000 * self.cpu_seconds / self.requests
        return (
            f"{self.name:<34} {self.latency_ms:>5} {self.requests:>8} {rate:>10,.0f}"
            f" {cpu_ms:>10.3f} {self.errors:>6}"
        )


HEADER = (
    f"{'scenario':<34} {'L ms':>5} {'requests':>8} {'req/s':>10} {'CPU ms/req':>10} {'errors':>6}"
)


# -- servers ----------------------------------------------------------------------------


@contextlib.contextmanager
def start_server(kind: str, latency_ms: int) -> Iterator[tuple[str, str, subprocess.Popen[str]]]:
    """Start the bank in a subprocess; yield its base URL and API key."""
    if kind == "sandbox":
        cmd = [sys.executable, "-m", "payrun", "sandbox", "--port", "0"]
        cmd += ["--latency-ms", str(latency_ms)]
    else:
        cmd = [sys.executable, __file__, "--serve-tiny", "--latency-ms", str(latency_ms)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)  # noqa: S603
    try:
        assert proc.stdout is not None
        lines = dict(
            proc.stdout.readline().strip().removeprefix("export ").split("=", 1) for _ in range(2)
        )
        yield lines["PAYRUN_BASE_URL"], lines["PAYRUN_API_KEY"], proc
    finally:
        proc.terminate()
        proc.wait(10)


def serve_tiny(latency_ms: int) -> None:
    """A minimal bank: fixed JSON answers for an account, payments and submissions."""
    import socket

    import uvicorn

    account = {
        "account-url": "/v0/bank/accounts/ba.bench",
        "display-name": "Bench",
        "account-status": "open",
        "account-restricted": False,
        "available-balance": {"currency": "GBP", "value": "1000000.00"},
        "account-balance": {"currency": "GBP", "value": "1000000.00"},
        "owner-url": "/v0/legal-persons/lp.bench",
        "bank-addresses": [{"account-holder": "B", "bank-id": "040004", "account-number": "1"}],
        "account-payments-url": "/v0/bank/accounts/ba.bench/payments",
    }
    payment = {
        "payment-url": "/v0/payments/pm.bench",
        "payment-direction": "outbound-payment",
        "creditor": {"creditor-type": "payee", "payee-url": "/v0/payees/pe.bench"},
        "payment-amount": {"currency": "GBP", "value": "0.01"},
        "created-at": "2026-11-21T10:00:00Z",
    }
    submission = {
        "submission-url": "/v0/submissions/ps.bench",
        "payment-url": "/v0/payments/pm.bench",
        "submission-status": "processing",
        "created-at": "2026-11-21T10:00:00Z",
    }
    bodies = {
        "/v0/bank/accounts/ba.bench": (200, json.dumps(account).encode()),
        "/v0/bank/accounts/ba.bench/payments": (201, json.dumps(payment).encode()),
        "/v0/payments/pm.bench/submissions": (200, json.dumps(submission).encode()),
    }

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        if latency_ms:
            await anyio.sleep(latency_ms / 1000)
        status, body = bodies.get(scope["path"], (404, b"{}"))
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    # Listening before the address is printed: the first connects queue instead of failing
    sock.listen(1024)
    print(f"PAYRUN_BASE_URL=http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    print("PAYRUN_API_KEY=tiny", flush=True)
    config = uvicorn.Config(app, log_level="warning", http="httptools", loop="uvloop")
    uvicorn.Server(config).run(sockets=[sock])


async def discover(base_url: str, api_key: str) -> Target:
    """Find the accounts to read and pay from, and a payee to pay (creating one if needed)."""
    settings = Settings(base_url=base_url, api_key=Secret(api_key))
    if api_key == "tiny":
        return Target(base_url, api_key, ["/v0/bank/accounts/ba.bench"], "/v0/payees/pe.bench")
    async with BankClient(make_transport(), settings) as bank:
        org = await bank.organization()
        headers = {"Authorization": f"ServiceAPIKey {api_key}", "Accept": "application/json"}
        async with httpx.AsyncClient(base_url=base_url, headers=headers) as http:
            answer = await http.get(org.accounts_url, params={"page[size]": "200"})
            listing = json.loads(answer.content)
        urls = [a["account-url"] for a in listing["accounts"] if a["account-status"] == "open"]
        owner = (await bank.get_account(urls[0])).owner_url
        payee = None
        async for candidate in bank.payees(owner):
            if candidate.status == "active":
                payee = candidate
                break
        if payee is None:
            payee = await bank.create_payee(
                owner, name="Bench Payee", sort_code="040004", account_number="12345678"
            )
    return Target(base_url, api_key, urls, payee.url)


# -- scenarios --------------------------------------------------------------------------


async def run_workers(total: int, job: Callable[[int], Awaitable[int]]) -> tuple[int, float, float]:
    """Run ``job`` over ``total`` iterations in WORKERS long-lived tasks; time wall and CPU."""
    counter = iter(range(total))
    errors = 0

    async def worker() -> None:
        nonlocal errors
        for i in counter:
            errors += await job(i)

    wall, cpu = time.perf_counter(), time.process_time()
    async with anyio.create_task_group() as tg:
        for _ in range(WORKERS):
            tg.start_soon(worker)
    return errors, time.perf_counter() - wall, time.process_time() - cpu


@contextlib.asynccontextmanager
async def raw_transport() -> AsyncIterator[Transport]:
    """The transport, as the bank client would get it."""
    transport = make_transport(max_connections=WORKERS)
    try:
        yield transport
    finally:
        await transport.aclose()


async def bench_raw(target: Target, n: int) -> tuple[int, float, float]:
    """GET the account with the bare transport (body read and decoded)."""
    headers = {
        "Authorization": f"ServiceAPIKey {target.api_key}",
        "Accept": "application/json",
        "User-Agent": "payrun",
    }
    requests = [
        PreparedRequest("GET", target.base_url + url, headers) for url in target.account_urls
    ]
    async with raw_transport() as http:

        async def job(i: int) -> int:
            response = await http.send(requests[i % len(requests)])
            json.loads(response.content)
            return 0 if response.status == 200 else 1  # noqa: PLR2004

        await run_workers(WORKERS * 4, job)  # warm the connection pool
        return await run_workers(n, job)


def _bank(target: Target) -> BankClient:
    settings = Settings(base_url=target.base_url, api_key=Secret(target.api_key))
    limiter, retry = AdaptiveLimiter(WORKERS), RetryPolicy(attempts=8)
    return BankClient(make_transport(), settings, limiter=limiter, retry=retry)


async def bench_get_account(target: Target, n: int) -> tuple[int, float, float]:
    """BankClient.get_account: limiter, retry policy, error mapping and parsing included."""
    urls = target.account_urls
    async with _bank(target) as bank:

        async def job(i: int) -> int:
            await bank.get_account(urls[i % len(urls)])
            return 0

        await run_workers(WORKERS * 4, job)
        return await run_workers(n, job)


async def bench_pairs(target: Target, n: int) -> tuple[int, float, float]:
    """create_payment + submit_payment pairs; submits kept to 3 per account like the runner."""
    urls = target.account_urls
    tag = f"B{time.monotonic_ns() % 10**6}-"
    submit_slots = {url: anyio.CapacityLimiter(3) for url in urls}
    async with _bank(target) as bank:

        async def job(i: int) -> int:
            url = urls[i % len(urls)]
            payment = await bank.create_payment(
                url, payee_url=target.payee_url, amount=Decimal("0.01"), reference=f"{tag}{i}"
            )
            async with submit_slots[url]:
                await bank.submit_payment(payment.url)
            return 0

        await run_workers(WORKERS, job)
        errors, wall, cpu = await run_workers(n // 2, job)
        return errors, wall, cpu


SCENARIOS: list[tuple[str, Callable[[Target, int], Awaitable[Any]], int]] = [
    ("raw GET", bench_raw, 1),
    ("BankClient.get_account", bench_get_account, 1),
    ("BankClient create+submit", bench_pairs, 2),
]


async def run_all(kind: str, latency_ms: int, n: int) -> list[Result]:
    """Every scenario against one server."""
    results = []
    with start_server(kind, latency_ms) as (base_url, api_key, _proc):
        target = await discover(base_url, api_key)
        for label, bench, per_job in SCENARIOS:
            errors, wall, cpu = await bench(target, n)
            requests = (n // per_job) * per_job
            results.append(Result(label, latency_ms, requests, wall, cpu, errors))
            print(results[-1].row(), flush=True)
        if kind == "sandbox":
            async with httpx.AsyncClient(base_url=base_url) as http:
                auth = {"Authorization": f"ServiceAPIKey {api_key}"}
                stats = (await http.get("/__sandbox/stats", headers=auth)).json()
            shown = {k: stats[k] for k in ("max_in_flight", "requests", "rate_limited")}
            shown["max_concurrent_submits"] = max(stats["max_concurrent_submits"].values())
            print(f"sandbox stats: {json.dumps(shown)}", flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", choices=["sandbox", "tiny"], default="sandbox")
    parser.add_argument("--latency", type=int, action="append", help="ms (repeatable)")
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--serve-tiny", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--latency-ms", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_tiny:
        serve_tiny(args.latency_ms)
        return 0
    print(f"{WORKERS} workers, server: {args.server} (own process), client CPU in this process")
    print(HEADER)
    for latency in args.latency or [0, 20]:
        anyio.run(run_all, args.server, latency, args.requests)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
