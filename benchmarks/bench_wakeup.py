"""What a sleep costs on this machine: the same Python work, back to back and after sleeps.

A client waiting on a slow bank sleeps between answers. On a VM, waking costs CPU of its
own, and the work done right after a wake-up runs on cold caches. This prints, for gaps of
0, 1, 5 and 20 ms: the CPU of a fixed piece of work (JSON round trips, about what handling
one answer costs) done right after the gap, the CPU of one ledger-style commit (SQLite in
WAL mode, synchronous=NORMAL, two rows updated, as a run's group commit) right after the
gap, and the CPU of a bare sleep-and-wake.

    python benchmarks/bench_wakeup.py
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPEATS = 500
GAPS_MS = (0.0, 1.0, 5.0, 20.0)


def work() -> None:
    """A fixed piece of work: 20 JSON round trips of a small answer."""
    answer = {"payment-url": "/v0/payments/pm.x", "status": "created", "amounts": [1, 2, 3]}
    for _ in range(20):
        json.loads(json.dumps(answer))


def ledger(directory: str) -> sqlite3.Connection:
    """A table shaped like the ledger's rows, in WAL mode as a run opens it."""
    db = sqlite3.connect(Path(directory) / "wakeup.sqlite", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute(
        "CREATE TABLE rows (row INTEGER PRIMARY KEY, status TEXT, intent_at TEXT,"
        " attempts INTEGER, updated_at TEXT, rest TEXT)"
    )
    db.executemany(
        "INSERT INTO rows VALUES (?, 'pending', NULL, 0, '', ?)",
        [(i, "x" * 150) for i in range(5000)],
    )
    return db


def commit(db: sqlite3.Connection, n: int) -> None:
    """One group commit: an outcome and an intent, on rows some pages apart."""
    now = "2026-11-22T04:00:00+00:00"
    db.execute("BEGIN IMMEDIATE")
    db.executemany(
        "UPDATE rows SET status = ?, intent_at = ?, attempts = 1, updated_at = ? WHERE row = ?",
        [("submitting", now, now, n % 4000), ("creating", now, now, n % 4000 + 56)],
    )
    db.execute("COMMIT")


def measure(gap_s: float, db: sqlite3.Connection) -> tuple[float, float, float]:
    """CPU us of ``work`` and of one ``commit`` after each gap, and of a sleep-and-wake."""
    spent = committing = 0
    for n in range(REPEATS):
        if gap_s:
            time.sleep(gap_s)
        started = time.thread_time_ns()
        work()
        spent += time.thread_time_ns() - started
        if gap_s:
            time.sleep(gap_s)
        started = time.thread_time_ns()
        commit(db, n)
        committing += time.thread_time_ns() - started
    cpu0 = time.process_time()
    for _ in range(REPEATS // 4):
        if gap_s:
            time.sleep(gap_s)
    wake = (time.process_time() - cpu0) / (REPEATS // 4) * 1e6
    return spent / REPEATS / 1000, committing / REPEATS / 1000, wake


def main() -> int:
    """Print the table (pinned to core 0 when taskset is there, as bench_run's client is)."""
    if "--pinned" not in sys.argv and shutil.which("taskset") and (os.cpu_count() or 1) > 1:
        command = ["taskset", "-c", "0", sys.executable, __file__, "--pinned"]
        return subprocess.run(command, check=False).returncode
    print(
        f"{'gap ms':>7}{'work us CPU':>13}{'x back to back':>16}{'commit us CPU':>15}"
        f"{'x back to back':>16}{'sleep+wake us CPU':>19}"
    )
    base = base_commit = 0.0
    with tempfile.TemporaryDirectory() as directory:
        db = ledger(directory)
        for gap_ms in GAPS_MS:
            work_us, commit_us, wake_us = measure(gap_ms / 1000, db)
            base = base or work_us
            base_commit = base_commit or commit_us
            print(
                f"{gap_ms:>7.0f}{work_us:>13.1f}{work_us / base:>16.2f}{commit_us:>15.1f}"
                f"{commit_us / base_commit:>16.2f}{wake_us:>19.1f}"
            )
        db.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
