"""A resume after kill -9: when does the rerun pay the rows never sent, and the rows in doubt?

Pays a ROWS-row batch (two accounts, 50 payees) with `payrun run` in a process of its own
against a sandbox bank served in this process, kills its process group with SIGKILL once
the bank holds KILL_AFTER submissions, and runs the same command again at once with the
settle wait as users have it (default 60 s; ``--settle-wait`` to try another). The ledger
at the kill says which rows were never sent (pending, or created and not submitted) and
which were in doubt (creating, submitting: intents committed, some of them ahead of their
turn and never sent; the requests in flight at the kill estimate how many were sent). The
bank's own creation times say when the rerun paid each row (its submission), against the
rerun's start. The goal (issue 22): every row never sent is paid within 10 s of the
rerun's start; the rows in doubt only from their settle time on.

    python benchmarks/bench_resume.py                    # 1,500 rows, kill after ~200
    python benchmarks/bench_resume.py --settle-wait 5 --rows 600
"""

from __future__ import annotations

import argparse
import csv
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from payrun.sandbox import RunningSandbox, serve_in_thread

ACCOUNTS = ("040004 30000001", "040004 30000002")
PAYEES = 50
GOAL_SECONDS = 10.0


def write_batch(path: Path, rows: int) -> None:
    """``rows`` rows over both accounts and PAYEES payees, each with its own reference."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            ["payee_name", "sort_code", "account_number", "amount", "reference", "source_account"]
        )
        for i in range(rows):
            payee = i % PAYEES
            writer.writerow(
                [
                    f"Resume Payee {payee:03d}",
                    "201122",
                    f"6{payee:07d}",
                    f"{10 + (i * 7919) % 990}.{(i * 37) % 100:02d}",
                    f"RES-{i:05d}",
                    ACCOUNTS[i % len(ACCOUNTS)],
                ]
            )


def payrun(batch: Path, ledger: Path, settle: str | None) -> list[str]:
    """The `payrun run` command line (``settle``: its --settle-wait, if any)."""
    extra = [] if settle is None else ["--settle-wait", settle]
    return [
        sys.executable,
        "-m",
        "payrun",
        "run",
        str(batch),
        "--ledger",
        str(ledger),
        "--no-confirm-payees",
        *extra,
    ]


def env(bank: RunningSandbox) -> dict[str, str]:
    """This environment without PAYRUN_*, plus the bank's address and key."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith("PAYRUN_")}
    return {**kept, "PAYRUN_BASE_URL": bank.base_url, "PAYRUN_API_KEY": bank.api_key}


def ledger_state(ledger: Path) -> tuple[dict[str, str], datetime | None]:
    """Reference -> status, and the batch's late_until (read-only)."""
    db = sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)
    try:
        statuses = dict(db.execute("SELECT reference, status FROM rows").fetchall())
        (late,) = db.execute("SELECT late_until FROM batch").fetchone()
    finally:
        db.close()
    return statuses, None if late is None else datetime.fromisoformat(late)


def paid_at(bank: RunningSandbox) -> dict[str, datetime]:
    """Reference -> when the bank made its submission."""
    payments = dict(bank.state.payments)
    return {
        payments[s.payment_id].reference: s.created_at
        for s in list(bank.state.submissions.values())
    }


def spread(seconds: list[float]) -> str:
    """min / median / max of some seconds."""
    if not seconds:
        return "-"
    return f"{min(seconds):.1f} / {statistics.median(seconds):.1f} / {max(seconds):.1f} s"


def main() -> int:
    """Kill, rerun, and print when the rerun paid which rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1500)
    parser.add_argument("--kill-after", type=int, default=200, help="submissions at the bank")
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--settle-wait", help="passed to the rerun (default: payrun's, 60)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench-resume-"))
    batch, ledger = folder / "batch.csv", folder / "batch.ledger.sqlite"
    write_batch(batch, args.rows)
    with serve_in_thread(latency_ms=args.latency_ms, deliver_after_ms=50) as bank:
        first = subprocess.Popen(
            payrun(batch, ledger, None),
            env=env(bank),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        while len(bank.state.submissions) < args.kill_after and first.poll() is None:
            time.sleep(0.005)
        os.killpg(first.pid, signal.SIGKILL)
        # Sent, answer never read: the sandbox refuses these (their client is gone)
        lost = bank.state.stats.in_flight
        first.wait()
        while bank.state.stats.in_flight:
            time.sleep(0.01)
        at_kill, _ = ledger_state(ledger)
        had = set(paid_at(bank))
        made = {p.reference for p in list(bank.state.payments.values())}
        start = datetime.now(UTC)
        began = time.monotonic()
        rerun = subprocess.run(
            payrun(batch, ledger, args.settle_wait),
            env=env(bank),
            capture_output=True,
            text=True,
            check=False,
        )
        wall = time.monotonic() - began
        after = paid_at(bank)
        _, until = ledger_state(ledger)
        payments = len(bank.state.payments)
    never = [r for r, s in at_kill.items() if s in ("pending", "created")]
    doubt = [r for r, s in at_kill.items() if s in ("creating", "submitting")]
    found = [r for r in doubt if r in had or (at_kill[r] == "creating" and r in made)]
    waited = [r for r in doubt if r not in found]
    since = {r: (t - start).total_seconds() for r, t in after.items() if r not in had}
    never_times = [since[r] for r in never if r in since]
    soon = sum(1 for t in never_times if t <= GOAL_SECONDS)
    settle = "-" if until is None else f"{(until - start).total_seconds():.1f} s"
    print(
        f"batch {args.rows} rows, killed at {len(had)} submissions; rerun exit {rerun.returncode}"
    )
    print(f"rerun wall time {wall:.1f} s; the rows in doubt settle {settle} after its start")
    print(f"payments at the bank {payments} for {args.rows} rows (exactly once: one each)")
    print(
        f"never sent: {len(never)} rows; paid within {GOAL_SECONDS:.0f} s of the rerun's"
        f" start: {soon} ({soon / max(1, len(never)):.0%}; goal: all);"
        f" paid after min/median/max {spread(never_times)}"
    )
    print(
        f"in doubt: {len(doubt)} rows; {len(found)} found at the bank at the start, paid"
        f" {spread([since[r] for r in found if r in since])};"
        f" {len(waited)} waited, paid {spread([since[r] for r in waited if r in since])}"
    )
    print(
        f"requests in flight at the kill: {lost} (so about {max(0, len(waited) - lost)} of the"
        " rows that waited were never sent: intents committed ahead of their turn)"
    )
    if rerun.returncode:
        print(rerun.stderr[-2000:])
    return 0 if rerun.returncode == 0 and payments == args.rows else 1


if __name__ == "__main__":
    raise SystemExit(main())
