"""Benchmark: `payrun validate` end to end on 100k-row CSV, a 100k-credit Bacs Standard 18
file, 100k-row .xlsx, 1M-row CSV.

Generates the files in a temporary directory, then validates each in a fresh Python
process (so peak memory is that run's alone) and prints wall time of the validate call,
the whole process time, and peak RSS. Goals (issue 2): 100k CSV < 1 s, 100k .xlsx < 1.5 s,
1M CSV < 8 s with peak memory < 150 MB; (issue 28) 100k Standard 18 credits < 1.5 s (a full
file: labels, credits, contra, UTL1, all checked).

    python benchmarks/bench_intake.py [--quick]    (--quick: the two 100k text files)
The machine is shared and noisy: the CPU time of the validate call is printed beside its
wall time, and the 1-minute load average before each case, so runs can be compared.
"""

from __future__ import annotations

import csv
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["main"]

HEADER = [
    "row_id",
    "payee_name",
    "sort_code",
    "account_number",
    "amount",
    "reference",
    "source_account",
]
NAMES = [
    "Oliver Smith",
    "Amelia Jones",
    "George Taylor",
    "Isla Brown",
    "Harry Williams",
    "Ava Wilson",
    "Noah Johnson",
    "Mia Davies",
    "Thomas O'Brien",
    "Daisy Patel-Shah",
]

_CHILD = """
import io, json, resource, sys, time, contextlib
start = time.perf_counter()
from payrun.cli import main
imported = time.perf_counter()
out = io.StringIO()
cpu = time.process_time()
with contextlib.redirect_stdout(out):
    code = main(["validate", sys.argv[1], "--format", "json"])
done = time.perf_counter()
cpu = time.process_time() - cpu
doc = json.loads(out.getvalue())
print(json.dumps({"code": code, "rows": doc["rows"], "valid": doc["valid"],
                  "validate_s": done - imported, "cpu_s": cpu, "import_s": imported - start,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _rows(count: int) -> Iterator[list[str]]:
    rng = random.Random(count)
    for i in range(count):
        yield [
            f"E{i:07d}-2026-11",
            NAMES[i % len(NAMES)],
            f"{rng.randrange(1_000_000):06d}",
            f"{i:08d}",
            f"{rng.randrange(100, 450_000) / 100:.2f}",
            "SALARY NOV 2026",
            "040004 30000001",
        ]


def write_csv(path: Path, count: int) -> Path:
    """Write a valid CSV batch of ``count`` rows."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(HEADER)
        writer.writerows(_rows(count))
    return path


def write_bacs18(path: Path, count: int) -> Path:
    """Write a full Bacs Standard 18 file of ``count`` credits (labels, contra, UTL1)."""
    origin, total = "04000430000001", 0
    lines = [
        "VOL1000001".ljust(41) + "123456".ljust(38) + "1",
        "HDR1A123456S  1123456000001000100010001        25357  25357".ljust(80),
        "HDR2F0200000100".ljust(80),
        "UHL1 25357999999    000000001 DAILY  001".ljust(80),
    ]
    for row in _rows(count):
        pence = round(float(row[4]) * 100)
        total += pence
        name, reference = row[1].upper().replace("'", "")[:18], row[5][:18]
        lines.append(
            f"{row[2]}{row[3]}099{origin}    {pence:011d}{'PAYROLL LTD':18}{reference:18}{name:18}"
        )
    lines.append(f"{origin}017{origin}    {total:011d}{'CONTRA':18}{'CONTRA':18}{'PAYROLL':18}")
    lines += [
        "EOF1A123456S  1123456000001000100010001        25357  25357".ljust(80),
        "EOF2F0200000100".ljust(80),
        f"UTL1{total:013d}{total:013d}{1:07d}{count:07d}".ljust(80),
    ]
    path.write_text("\r\n".join(lines) + "\r\n", encoding="ascii")
    return path


def write_xlsx(path: Path, count: int) -> Path:
    """Write a valid .xlsx batch of ``count`` rows (text cells, amount as a number)."""
    from openpyxl import Workbook  # type: ignore[import-untyped]

    book = Workbook(write_only=True)
    sheet = book.create_sheet("payments")
    sheet.append(HEADER)
    for row in _rows(count):
        sheet.append([*row[:4], float(row[4]), *row[5:]])
    book.save(path)
    return path


def measure(path: Path) -> dict[str, float]:
    """Validate ``path`` in a fresh process; return its timings and peak RSS."""
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True, check=True
    )
    measured: dict[str, float] = json.loads(result.stdout)
    measured["process_s"] = time.perf_counter() - started
    return measured


def calibrate(path: Path) -> str:
    """Plain csv.reader speed on ``path``; PERF-NOTES measured 1.2 M rows/s on a quiet machine."""
    started = time.process_time(), time.perf_counter()
    with path.open(newline="", encoding="utf-8") as handle:
        rows = sum(1 for _ in csv.reader(handle))
    cpu, wall = time.process_time() - started[0], time.perf_counter() - started[1]
    return (
        f"calibration: csv.reader {rows / wall / 1e6:.2f} M rows/s wall,"
        f" {rows / cpu / 1e6:.2f} M rows/s CPU (quiet machine: 1.2 M rows/s)"
    )


def _line(label: str, result: dict[str, float], goals: tuple[float, float | None]) -> str:
    goal_s, goal_mb = goals
    ok = result["validate_s"] < goal_s and (goal_mb is None or result["peak_rss_mb"] < goal_mb)
    memory = f" (goal < {goal_mb:.0f} MB)" if goal_mb else ""
    return (
        f"{label:>10}: {result['rows']:>9,.0f} rows: validate {result['validate_s']:.2f} s"
        f" (goal < {goal_s} s), CPU {result['cpu_s']:.2f} s, whole process"
        f" {result['process_s']:.2f} s, peak RSS {result['peak_rss_mb']:.0f} MB{memory}:"
        f" {'ok' if ok else 'MISSED'}"
    )


def main() -> int:
    """Generate the files, validate each, print one line per case; exit 1 if a goal is missed."""
    cases = [
        ("100k CSV", "csv", 100_000, (1.0, None)),
        ("100k Std18", "txt", 100_000, (1.5, None)),
        ("100k xlsx", "xlsx", 100_000, (1.5, None)),
        ("1M CSV", "csv", 1_000_000, (8.0, 150.0)),
    ]
    if "--quick" in sys.argv:
        cases = cases[:2]
    missed = 0
    with tempfile.TemporaryDirectory(prefix="payrun-bench-") as temp:
        for label, fmt, count, goals in cases:
            path = Path(temp) / f"batch-{count}.{fmt}"
            {"csv": write_csv, "txt": write_bacs18, "xlsx": write_xlsx}[fmt](path, count)
            if fmt == "csv" and count == 100_000:
                print(calibrate(path), flush=True)
            load = os.getloadavg()[0]
            result = measure(path)
            line = _line(label, result, goals)
            missed += line.endswith("MISSED") or result["valid"] != count
            print(f"{line} [{path.stat().st_size / 1e6:.1f} MB file, load {load:.1f}]", flush=True)
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
