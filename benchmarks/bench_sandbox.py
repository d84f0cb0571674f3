"""Sandbox throughput: how many requests/s one ``payrun sandbox`` process serves.

Starts ``payrun sandbox --port 0`` as a subprocess (pinned to one core with ``taskset``
when available), seeded with 10 accounts x 200 payees and big balances, then drives it
from this process (pinned to another core) over keep-alive HTTP/1.1 connections (raw asyncio
streams by default, or aiohttp):
``--workers`` concurrent workers, each repeating GET account, create payment, submit.
The sandbox must never be what a benchmark measures: the bar is 3,000 requests/s.

    python benchmarks/bench_sandbox.py                   # 45 workers, 8 s, 0 ms latency
    python benchmarks/bench_sandbox.py --seconds 15 --workers 48 --no-pin
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import aiohttp

ACCOUNTS = 10
PAYEES_PER_ACCOUNT = 200
TARGET_RPS = 3000


def _seed_file(directory: Path) -> Path:
    """Write a seed: 10 accounts, each with its own owner and 200 existing payees."""
    people = [{"key": f"owner{a}", "display-name": f"Owner {a} Ltd"} for a in range(ACCOUNTS)]
    accounts = [
        {
            "display-name": f"Bench {a}",
            "sort-code": "040004",
            "account-number": f"{40000000 + a:08d}",
            "balance": "1000000000.00",
            "owner": f"owner{a}",
        }
        for a in range(ACCOUNTS)
    ]
    payees = [
        {
            "owner": f"owner{a}",
            "account-holder": f"Payee {a}-{p}",
            "sort-code": "200000",
            "account-number": f"{a * 1000 + p:08d}",
        }
        for a in range(ACCOUNTS)
        for p in range(PAYEES_PER_ACCOUNT)
    ]
    path = directory / "seed.json"
    seed = {"legal-persons": people, "accounts": accounts, "payees": payees}
    path.write_text(json.dumps(seed), "utf-8")
    return path


def _start_sandbox(seed: Path, *, pin: bool) -> tuple[subprocess.Popen[str], str, str]:
    command = [sys.executable, "-m", "payrun", "sandbox", "--port", "0", "--seed", str(seed)]
    if pin and shutil.which("taskset") and (os.cpu_count() or 1) > 1:
        command = ["taskset", "-c", "1", *command]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    base_url = (
        process.stdout.readline().strip().removeprefix("export ").removeprefix("PAYRUN_BASE_URL=")
    )
    api_key = (
        process.stdout.readline().strip().removeprefix("export ").removeprefix("PAYRUN_API_KEY=")
    )
    return process, base_url, api_key


async def _targets(session: aiohttp.ClientSession, base: str) -> list[tuple[str, list[str]]]:
    """Return (account URL, payee URLs) per account, found through the API."""
    async with session.get(f"{base}/v0/index") as response:
        org_url = (await response.json())["organization-url"]
    async with session.get(f"{base}{org_url}/bank/accounts?page[size]=200") as response:
        accounts = (await response.json())["accounts"]
    found = []
    for account in accounts:
        async with session.get(
            f"{base}{account['owner-url']}/bank/payees?page[size]=200"
        ) as response:
            payees = [p["payee-url"] for p in (await response.json())["payees"]]
        found.append((account["account-url"], payees))
    return found


async def _worker(
    session: aiohttp.ClientSession,
    base: str,
    target: tuple[str, list[str]],
    deadline: float,
    counts: Counter[str],
) -> None:
    account_url, payees = target
    n = 0
    while time.perf_counter() < deadline:
        n += 1
        async with session.get(f"{base}{account_url}") as response:
            await response.read()
            counts[f"GET account {response.status}"] += 1
        body = {
            "creditor": {"creditor-type": "payee", "payee-url": payees[n % len(payees)]},
            "payment-amount": {"currency": "GBP", "value": "1.00"},
            "payment-reference": f"bench {n}",
        }
        async with session.post(f"{base}{account_url}/payments", json=body) as response:
            payment = await response.json()
            counts[f"create payment {response.status}"] += 1
        if response.status != 201:  # noqa: PLR2004
            continue
        url = f"{base}{payment['payment-submissions-url']}"
        async with session.post(url, json={"payment-scheme": "fps"}) as response:
            await response.read()
            counts[f"submit {response.status}"] += 1


class _RawConnection:
    """One keep-alive HTTP/1.1 connection over asyncio streams: the lightest client here."""

    def __init__(self, host: str, port: int, api_key: str) -> None:
        self.host, self.port = host, port
        self.auth = f"Authorization: ServiceAPIKey {api_key}\r\n".encode()
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        """Send one request and read the whole response (Content-Length framed)."""
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        head = f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\n".encode() + self.auth
        if body:
            head += b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
        self.writer.write(head + b"\r\n" + body)
        lines = (await self.reader.readuntil(b"\r\n\r\n")).split(b"\r\n")
        length = 0
        for line in lines[1:]:
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        return int(lines[0].split(b" ", 2)[1]), await self.reader.readexactly(length)

    def close(self) -> None:
        """Close the connection."""
        if self.writer is not None:
            self.writer.close()


async def _raw_worker(
    connection: _RawConnection, target: tuple[str, list[str]], deadline: float, counts: Counter[str]
) -> None:
    account_url, payees = target
    n = 0
    while time.perf_counter() < deadline:
        n += 1
        status, _ = await connection.request("GET", account_url)
        counts[f"GET account {status}"] += 1
        body = {
            "creditor": {"creditor-type": "payee", "payee-url": payees[n % len(payees)]},
            "payment-amount": {"currency": "GBP", "value": "1.00"},
            "payment-reference": f"bench {n}",
        }
        status, raw = await connection.request(
            "POST", f"{account_url}/payments", json.dumps(body).encode()
        )
        counts[f"create payment {status}"] += 1
        if status != 201:  # noqa: PLR2004
            continue
        url = json.loads(raw)["payment-submissions-url"]
        status, _ = await connection.request("POST", url, b'{"payment-scheme":"fps"}')
        counts[f"submit {status}"] += 1


async def _drive(
    base: str, api_key: str, *, workers: int, seconds: float, client: str
) -> tuple[float, Counter[str]]:
    headers = {"Authorization": f"ServiceAPIKey {api_key}"}
    connector = aiohttp.TCPConnector(limit=workers)
    async with aiohttp.ClientSession(headers=headers, connector=connector) as session:
        targets = await _targets(session, base)
        counts: Counter[str] = Counter()
        started = time.perf_counter()
        deadline = started + seconds
        if client == "raw":
            host, port = base.removeprefix("http://").rsplit(":", 1)
            connections = [_RawConnection(host, int(port), api_key) for _ in range(workers)]
            jobs = [
                _raw_worker(c, targets[i % len(targets)], deadline, counts)
                for i, c in enumerate(connections)
            ]
        else:
            jobs = [
                _worker(session, base, targets[i % len(targets)], deadline, counts)
                for i in range(workers)
            ]
        await asyncio.gather(*jobs)
        if client == "raw":
            for connection in connections:
                connection.close()
        elapsed = time.perf_counter() - started
        async with session.get(f"{base}/__sandbox/stats") as response:
            stats = await response.json()
    counts["(stats) max_in_flight"] = stats["max_in_flight"]
    for reason, number in stats["rate_limited"].items():
        counts[f"(stats) 429 {reason}"] = number
    return elapsed, counts


def _cpu_seconds(pid: int) -> float:
    """CPU time (user + system) a process has used so far, from /proc (0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    """Run the benchmark and print requests/s."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=45)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument(
        "--client",
        choices=("raw", "aiohttp"),
        default="raw",
        help="raw asyncio HTTP/1.1 keep-alive connections (lightest), or aiohttp",
    )
    parser.add_argument(
        "--no-pin", action="store_true", help="do not pin server and client to cores"
    )
    args = parser.parse_args()
    pin = not args.no_pin
    with tempfile.TemporaryDirectory() as tmp:
        process, base, api_key = _start_sandbox(_seed_file(Path(tmp)), pin=pin)
        try:
            if pin and hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
                os.sched_setaffinity(0, {0})
            cpu_before = _cpu_seconds(process.pid)
            elapsed, counts = asyncio.run(
                _drive(
                    base, api_key, workers=args.workers, seconds=args.seconds, client=args.client
                )
            )
            server_cpu = _cpu_seconds(process.pid) - cpu_before
        finally:
            process.terminate()
            process.wait(10)
    total = sum(v for k, v in counts.items() if not k.startswith("(stats)"))
    rate = total / elapsed
    print(
        f"payrun sandbox: {args.client} client, {args.workers} workers, {elapsed:.1f} s, "
        f"server pinned: {pin}"
    )
    for key in sorted(counts):
        print(f"  {key}: {counts[key]}")
    verdict = "PASS" if rate >= TARGET_RPS else "FAIL"
    print(f"requests: {total}  requests/s: {rate:,.0f}  (bar: {TARGET_RPS:,}/s) {verdict}")
    if server_cpu > 0:
        per_request = server_cpu / total
        print(
            f"server CPU: {server_cpu:.2f} s = {per_request * 1e6:.0f} us/request, "
            f"{server_cpu / elapsed:.0%} of one core; capacity at 100% of one core: "
            f"{1 / per_request:,.0f} requests/s"
        )
    return 0 if rate >= TARGET_RPS else 1


if __name__ == "__main__":
    raise SystemExit(main())
