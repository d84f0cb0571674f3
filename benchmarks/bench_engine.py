"""payrun's own CPU per row while paying, without HTTP: engine, bank client, book, ledger.

The execution engine pays rows from a real SQLite ledger through ``BankClient`` (limiter,
retry policy, answer checks, parsing), over a stand-in transport that answers each create
and submit with the sandbox's own JSON after a fixed delay. No socket, no HTTP library,
no other thread: what is left is payrun's Python per row (and the event loop's timers).
On this shared 2-core machine one pass varies by about 15%, as whole runs do: to compare
two commits, run each several times, interleaved (``PYTHONPATH=<worktree>/src``), and
look at the medians.

    python benchmarks/bench_engine.py                  # 1 account (3 submits) and 10
    python benchmarks/bench_engine.py --rows 2000 --repeats 9 --delay-ms 5
    python benchmarks/bench_engine.py --no-ledger      # the same without ledger writes
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import uvloop

from payrun._models import PaymentInstruction, RowStatus, RowVerdict
from payrun.bank import AdaptiveLimiter, Answer, BankClient, PreparedRequest, RetryPolicy
from payrun.config import Secret, Settings
from payrun.ledger import BatchInfo, Ledger, LedgerRow
from payrun.run._book import RowBook
from payrun.run._execute import EngineLimits, PayingEngine, execute_rows
from payrun.run._stop import StopSignal
from payrun.sandbox import create_app, default_seed

SECRET = "bench-engine-secret"  # noqa: S105 - the in-process sandbox's key, nothing real
CANNED_BASE = "https://bank.invalid"


class CannedBank:
    """A ``Transport`` that answers each create with a payment of its own (the canned one
    under a new URL, from the account and for the amount asked) and each submit with a
    submission of its own naming that payment (payrun checks that an answer is about what
    it asked for)."""

    def __init__(self, payment: bytes, submission: bytes, delay: float) -> None:
        self._payment, self._submission, self._delay = payment, submission, delay
        self._payment_url = _field(payment, b"payment-url")
        self._submission_url = _field(submission, b"submission-url")
        self._account_url = _field(submission, b"account-url")
        self.requests = 0

    async def aclose(self) -> None:
        """Nothing to close."""

    async def send(self, request: PreparedRequest) -> Answer:
        """Wait the delay, then answer 201 with this call's own payment or submission."""
        url = request.url.removeprefix(CANNED_BASE)
        await asyncio.sleep(self._delay)
        self.requests += 1
        number = str(self.requests).encode()
        if url.endswith("/submissions"):
            body = self._submission.replace(
                self._submission_url, self._submission_url + number
            ).replace(self._payment_url, url.removesuffix("/submissions").encode())
        else:
            amount = _field(request.body, b"value")
            body = (
                self._payment.replace(self._payment_url, self._payment_url + number)
                .replace(b'"value":"1.00"', b'"value":"' + amount + b'"')
                .replace(self._account_url, url.removesuffix("/payments").encode())
            )
        return Answer(201, body)


def _field(body: bytes, name: bytes) -> bytes:
    """The text of one string field of a canned JSON body."""
    return body.split(b'"' + name + b'":"', 1)[1].split(b'"', 1)[0]


class InProcess:
    """The sandbox app called in process, as payrun's ``Transport``."""

    def __init__(self, app: Any) -> None:
        self._inner = httpx.ASGITransport(app=app)

    async def send(self, request: PreparedRequest) -> Answer:
        """Call the app with the request as built."""
        outgoing = httpx.Request(
            request.method, request.url, headers=request.headers, content=request.body or None
        )
        response = await self._inner.handle_async_request(outgoing)
        return Answer(response.status_code, await response.aread(), response.headers.get("date"))

    async def aclose(self) -> None:
        """Nothing to close."""


async def canned_bodies() -> tuple[bytes, bytes, str, str]:
    """A payment and a submission as the sandbox writes them, and an account and payee."""
    app = create_app(seed=default_seed(), api_key=SECRET)
    headers = {"Authorization": f"ServiceAPIKey {SECRET}"}
    settings = Settings(base_url="http://sandbox", api_key=Secret(SECRET))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://sandbox", headers=headers
    ) as http:
        bank = BankClient(InProcess(app), settings, retry=RetryPolicy.no_wait())
        org = await bank.organization()
        account = await bank.find_account(org, sort_code="040004", account_number="30000001")
        assert account is not None
        payee = await bank.create_payee(
            account.owner_url, name="Ada Lovelace", sort_code="200000", account_number="12345678"
        )
        body = {
            "creditor": {"creditor-type": "payee", "payee-url": payee.url},
            "payment-amount": {"currency": "GBP", "value": "1.00"},
            "payment-reference": "BENCH",
        }
        made = await http.post(f"{account.url}/payments", json=body)
        url = made.json()["payment-url"]
        sent = await http.post(f"{url}/submissions", json={"payment-scheme": "fps"})
        return made.content, sent.content, account.url, payee.url


def ledger_of(path: Path, rows: list[LedgerRow]) -> Ledger:
    """A real ledger file holding ``rows``, bound to their accounts and payee."""
    ledger = Ledger.open(path)
    verdicts = [
        RowVerdict(
            r.row,
            PaymentInstruction(
                row=r.row,
                payee_name=r.payee_name,
                sort_code=r.sort_code,
                account_number=r.account_number,
                amount=r.amount,
                reference=r.reference,
                source_account=r.source_account,
            ),
            {},
        )
        for r in rows
    ]
    info = BatchInfo(
        file_path="bench",
        file_sha256="bench",
        valid_count=len(rows),
        valid_total=sum((r.amount for r in rows), Decimal(0)),
    )
    ledger.start(info, verdicts)
    for account in {r.account_url for r in rows}:
        numbers = [r.row for r in rows if r.account_url == account]
        ledger.update_many(numbers, account_url=account, payee_url=rows[0].payee_url)
    return ledger


async def one_pass(
    args: argparse.Namespace, accounts: int, canned: tuple[bytes, bytes, str, str], directory: Path
) -> float:
    """Pay ``args.rows`` rows spread over ``accounts`` accounts; CPU ms per row."""
    payment, submission, account_url, payee_url = canned
    rows = [
        LedgerRow(
            row=n + 2,
            row_id=None,
            payee_name="Ada Lovelace",
            sort_code="200000",
            account_number="12345678",
            amount=Decimal("1.00") + n,
            reference="BENCH",
            source_account="040004 30000001",
            status=RowStatus.PENDING,
            account_url=f"{account_url}-{n % accounts}",
            payee_url=payee_url,
        )
        for n in range(args.rows)
    ]
    ledger = ledger_of(directory / f"bench-{time.monotonic_ns()}.sqlite", rows)
    book = RowBook(ledger.rows(), ledger=None if args.no_ledger else ledger)
    bank = CannedBank(payment, submission, args.delay_ms / 1000)
    settings = Settings(base_url=CANNED_BASE, api_key=Secret("bench-engine-key-0f3a9c2e7d41b8a6"))
    limiter, retry = AdaptiveLimiter(50), RetryPolicy.no_wait()
    client = BankClient(bank, settings, limiter=limiter, retry=retry)
    gc.collect()
    started = time.process_time()
    limits = EngineLimits(per_account_submits=3, create_workers=50)
    engine = PayingEngine(client, book, limits, stop=StopSignal(), accounts=accounts)
    result = await execute_rows(engine, rows, [])
    cpu = time.process_time() - started
    ledger.close()
    if result.submitted != args.rows or bank.requests != 2 * args.rows:
        msg = f"not every row was paid once: {result}, {bank.requests} requests"
        raise RuntimeError(msg)
    return 1000 * cpu / args.rows


async def main(args: argparse.Namespace) -> None:
    """Each pattern ``--repeats`` times, interleaved; median and spread of CPU per row."""
    canned = await canned_bodies()
    results: dict[int, list[float]] = {1: [], 10: []}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(args.repeats):
            for accounts in results:
                results[accounts].append(await one_pass(args, accounts, canned, Path(folder)))
    ledger = "no ledger" if args.no_ledger else "real ledger"
    print(
        f"payrun's own CPU per row, {args.rows} rows, answers after {args.delay_ms} ms,"
        f" {ledger}, {args.repeats} passes each:"
    )
    for accounts, values in results.items():
        print(
            f"  {accounts:>2} account(s): median {statistics.median(values):.3f} ms/row,"
            f" min {min(values):.3f}, max {max(values):.3f}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--delay-ms", type=float, default=5.0)
    parser.add_argument("--no-ledger", action="store_true", help="keep the book in memory only")
    uvloop.run(main(parser.parse_args()))
