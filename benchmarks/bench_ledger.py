"""The ledger's cost per payment on PostgreSQL: payrun's CPU and the server's, while paying.

The execution engine pays one batch from a real PostgreSQL ledger (a throwaway server,
fsync on, as ``bench_fleet.py`` has it) through ``BankClient``, over ``bench_engine``'s
stand-in bank (each create and submit answered after a fixed delay, no HTTP): what
differs from a fleet worker's run is the bank's side, not the ledger's. Each pass is a
process of its own on a new batch; it prints payrun's CPU per payment (the process: the
engine, the book and psycopg), the server's (every process of the cluster, the
checkpointer and WAL writer too) and the commits per payment.

To compare two trees on the same server, back to back, give the other tree's ``src``:
passes alternate between this tree and each ``--compare`` tree, and the medians are
printed per tree (the machine may be shared: ``uptime`` is printed before and after).

    python benchmarks/bench_ledger.py                               # 500 rows, 2 accounts
    python benchmarks/bench_ledger.py --compare /tmp/old/src --repeats 7
    python benchmarks/bench_ledger.py --no-ledger                   # the engine alone
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from bench_engine import CANNED_BASE, CannedBank, canned_bodies  # noqa: E402

from _postgres import throwaway_cluster  # noqa: E402

if TYPE_CHECKING:
    from payrun._models import PaymentInstruction

SRC = Path(__file__).resolve().parents[1] / "src"
TICKS = os.sysconf("SC_CLK_TCK")


def tree_cpu(pid: int) -> float:
    """CPU seconds of ``pid``'s live threads and descendants (``schedstat``: nanoseconds,
    not the clock ticks of ``stat``), and of the children they reaped (ticks)."""
    total = 0.0
    pending = [pid]
    while pending:
        current = pending.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[13]) + int(fields[14])) / TICKS
            for task in Path(f"/proc/{current}/task").iterdir():
                total += int((task / "schedstat").read_text().split()[0]) / 1e9
                pending.extend(int(p) for p in (task / "children").read_text().split())
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


def _instructions(rows: int, reference: str, sources: list[str]) -> list[PaymentInstruction]:
    """``rows`` payments to one payee, round-robin over the ``sources`` accounts."""
    from payrun._models import PaymentInstruction

    return [
        PaymentInstruction(
            row=n + 2,
            payee_name="Ada Lovelace",
            sort_code="200000",
            account_number="12345678",
            amount=Decimal("1.00") + n,
            reference=reference,
            source_account=sources[n % len(sources)],
        )
        for n in range(rows)
    ]


async def one_pass(args: argparse.Namespace) -> dict[str, float]:
    """Pay ``args.rows`` rows over ``args.accounts`` accounts from a new batch."""
    import psycopg

    from payrun._models import RowVerdict
    from payrun.bank import AdaptiveLimiter, BankClient, RetryPolicy
    from payrun.config import DatabaseURL, Secret, Settings
    from payrun.ledger import BatchInfo, DatabaseLedger
    from payrun.ledger._postgres import PostgresLedger
    from payrun.run._book import RowBook
    from payrun.run._execute import EngineLimits, PayingEngine, execute_rows
    from payrun.run._stop import StopSignal

    payment, submission, account_url, payee_url = await canned_bodies()
    where = DatabaseLedger(DatabaseURL(Secret(args.url)), f"bench-{time.monotonic_ns()}")
    ledger = PostgresLedger.open(where)
    instructions = _instructions(
        args.rows, "BENCH", [f"040004 3000000{a}" for a in range(args.accounts)]
    )
    info = BatchInfo(
        file_path="bench",
        file_sha256="bench",
        valid_count=args.rows,
        valid_total=sum((i.amount for i in instructions), Decimal(0)),
    )
    ledger.start(info, [RowVerdict(i.row, i, {}) for i in instructions])
    for account in range(args.accounts):
        numbers = [i.row for i in instructions if (i.row - 2) % args.accounts == account]
        ledger.update_many(numbers, account_url=f"{account_url}-{account}", payee_url=payee_url)
    rows = ledger.rows()
    book = RowBook(rows, ledger=None if args.no_ledger else ledger)
    bank = CannedBank(payment, submission, args.delay_ms / 1000)
    settings = Settings(base_url=CANNED_BASE, api_key=Secret("bench-ledger-key-0f3a9c2e7d41b8a6"))
    client = BankClient(bank, settings, limiter=AdaptiveLimiter(50), retry=RetryPolicy.no_wait())
    with psycopg.connect(args.url, autocommit=True) as stats:
        postmaster = args.postmaster
        commits_sql = "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        stats.execute("SELECT pg_stat_force_next_flush()")
        commits_before = stats.execute(commits_sql).fetchone()[0]  # type: ignore[index]
        gc.collect()
        server_before, started = tree_cpu(postmaster), time.process_time()
        limits = EngineLimits(per_account_submits=3, create_workers=50)
        engine = PayingEngine(client, book, limits, stop=StopSignal(), accounts=args.accounts)
        result = await execute_rows(engine, rows, [])
        client_cpu = time.process_time() - started
        server_cpu = tree_cpu(postmaster) - server_before
        stats.execute("SELECT pg_stat_force_next_flush()")
        commits = stats.execute(commits_sql).fetchone()[0] - commits_before  # type: ignore[index]
    ledger.close()
    if result.submitted != args.rows or bank.requests != 2 * args.rows:
        msg = f"not every row was paid once: {result}, {bank.requests} requests"
        raise RuntimeError(msg)
    return {
        "client": 1000 * client_cpu / args.rows,
        "server": 1000 * server_cpu / args.rows,
        "commits": commits / args.rows,
    }


def seed(url: str, batches: int, rows: int) -> None:
    """Other batches in the database, which the table's statistics have seen (as a fleet's
    database holds yesterday's batches): the batches paid are newer than the statistics."""
    import psycopg

    from payrun._models import RowVerdict
    from payrun.config import DatabaseURL, Secret
    from payrun.ledger import BatchInfo, DatabaseLedger
    from payrun.ledger._postgres import PostgresLedger

    for number in range(batches):
        where = DatabaseLedger(DatabaseURL(Secret(url)), f"seed-{number}")
        with PostgresLedger.open(where) as ledger:
            instructions = _instructions(rows, "SEED", ["040004 30000001"])
            info = BatchInfo(
                file_path="seed", file_sha256="seed", valid_count=rows, valid_total=Decimal(0)
            )
            ledger.start(info, [RowVerdict(i.row, i, {}) for i in instructions])
    if batches:
        with psycopg.connect(url, autocommit=True) as db:
            db.execute("ANALYZE payrun_rows")


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def main(args: argparse.Namespace) -> None:
    """Passes alternating between the trees; medians per tree."""
    trees = [SRC, *(Path(path).resolve() for path in args.compare)]
    results: dict[Path, list[dict[str, float]]] = {tree: [] for tree in trees}
    print(f"uptime before: {_uptime()}")
    with throwaway_cluster(durable=True) as cluster:
        postmaster = (cluster.folder / "data" / "postmaster.pid").read_text().split()[0]
        seed(cluster.url, args.seed, args.rows)
        for _ in range(args.repeats):
            for tree in trees:
                command = [sys.executable, __file__, "--one-pass", "--url", cluster.url]
                command += ["--postmaster", postmaster, "--rows", str(args.rows)]
                command += ["--accounts", str(args.accounts), "--delay-ms", str(args.delay_ms)]
                if args.no_ledger:
                    command.append("--no-ledger")
                env = {**os.environ, "PYTHONPATH": str(tree)}
                done = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
                results[tree].append(json.loads(done.stdout.splitlines()[-1]))
    print(
        f"{args.rows} rows over {args.accounts} accounts, answers after {args.delay_ms} ms,"
        f" {args.repeats} passes per tree, CPU ms per payment (median, min-max):"
    )
    for tree, passes in results.items():
        print(f"  {tree}:")
        for name in ("client", "server", "commits"):
            values = [p[name] for p in passes]
            print(
                f"    {name:>7} {statistics.median(values):.3f}"
                f" ({min(values):.3f}-{max(values):.3f})"
            )
    print(f"uptime after: {_uptime()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=500)
    parser.add_argument("--accounts", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--delay-ms", type=float, default=50.0)
    parser.add_argument(
        "--seed", type=int, default=6, help="older batches in the database (default 6)"
    )
    parser.add_argument("--no-ledger", action="store_true", help="keep the book in memory only")
    parser.add_argument(
        "--compare", action="append", default=[], metavar="SRC", help="another tree's src"
    )
    parser.add_argument("--one-pass", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--postmaster", type=int, help=argparse.SUPPRESS)
    parsed = parser.parse_args()
    if parsed.one_pass:
        import uvloop

        print(json.dumps(uvloop.run(one_pass(parsed))))
    else:
        main(parsed)
