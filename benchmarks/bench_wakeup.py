"""What a sleep costs on this machine: the same Python work, back to back and after sleeps.

A client waiting on a slow bank sleeps between answers. On a VM, waking costs CPU of its
own, and the work done right after a wake-up runs on cold caches. This prints, for gaps of
0, 1, 5 and 20 ms: the CPU of a fixed piece of work (JSON round trips, about what handling
one answer costs) done right after the gap, and the CPU of a bare sleep-and-wake.

    python benchmarks/bench_wakeup.py
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

REPEATS = 1000
GAPS_MS = (0.0, 1.0, 5.0, 20.0)


def work() -> None:
    """A fixed piece of work: 20 JSON round trips of a small answer."""
    answer = {"payment-url": "/v0/payments/pm.x", "status": "created", "amounts": [1, 2, 3]}
    for _ in range(20):
        json.loads(json.dumps(answer))


def measure(gap_s: float) -> tuple[float, float]:
    """(CPU us of ``work`` after each gap, CPU us of one bare sleep-and-wake)."""
    spent = 0
    for _ in range(REPEATS):
        if gap_s:
            time.sleep(gap_s)
        started = time.thread_time_ns()
        work()
        spent += time.thread_time_ns() - started
    cpu0 = time.process_time()
    for _ in range(REPEATS // 4):
        if gap_s:
            time.sleep(gap_s)
    wake = (time.process_time() - cpu0) / (REPEATS // 4) * 1e6
    return spent / REPEATS / 1000, wake


def main() -> int:
    """Print the table (pinned to core 0 when taskset is there, as bench_run's client is)."""
    if "--pinned" not in sys.argv and shutil.which("taskset") and (os.cpu_count() or 1) > 1:
        command = ["taskset", "-c", "0", sys.executable, __file__, "--pinned"]
        return subprocess.run(command, check=False).returncode
    print(f"{'gap ms':>7}{'work us CPU':>13}{'x back to back':>16}{'sleep+wake us CPU':>19}")
    base = 0.0
    for gap_ms in GAPS_MS:
        work_us, wake_us = measure(gap_ms / 1000)
        base = base or work_us
        print(f"{gap_ms:>7.0f}{work_us:>13.1f}{work_us / base:>16.2f}{wake_us:>19.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
