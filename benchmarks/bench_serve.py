"""How fast the review page answers with a 10,000-row batch's plan (the target: < 100 ms).

Starts the sandbox bank in a thread and ``payrun serve`` as its own process (as a user
would), signs in over loopback HTTP, uploads a batch of ``--rows`` rows (payees from the
sandbox's Confirmation of Payee directory), requests approval (the dry run makes the plan),
then times GETs of the plan page (first and last page of rows), the Plans list and the
verdict page, and the plan page while the run pays (it then reads every ledger row too).
Prints the median and the slowest of ``--repeats`` requests each, in ms.

    python benchmarks/bench_serve.py                 # 10,000 rows, 30 requests per page
    python benchmarks/bench_serve.py --rows 2000 --repeats 10
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

import payrun.sandbox
from payrun.sandbox import serve_in_thread
from payrun.serve import add_user

PASSWORD = "bench password"  # noqa: S105 - a throwaway user's
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def _batch(path: Path, rows: int) -> Path:
    directory = Path(payrun.sandbox.__file__).with_name("directory.csv")
    with directory.open(encoding="utf-8") as handle:
        payees = list(csv.DictReader(handle))
    stamp = int(time.time()) % 100_000
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            ["payee_name", "sort_code", "account_number", "amount", "reference", "source_account"]
        )
        for i in range(rows):
            payee = payees[i % len(payees)]
            amount = f"{1 + i % 50}.{i % 100:02d}"
            reference = f"B{stamp}-{i:06d}"
            writer.writerow(
                [payee["account_holder"], payee["sort_code"], payee["account_number"], amount,
                 reference, "040004 30000001"]
            )  # fmt: skip
    return path


def _server(root: Path, base_url: str) -> tuple[subprocess.Popen[str], str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAYRUN_")}
    env.update(PAYRUN_BASE_URL=base_url, PAYRUN_SETTLE_WAIT="1")
    command = [sys.executable, "-m", "payrun", "serve", "--port", "0", "--ledger-dir", str(root),
               "--api-key-file", str(root / "api-key")]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)  # noqa: S603
    assert process.stdout is not None
    return process, process.stdout.readline().strip().partition("=")[2]


def _csrf(client: httpx.Client, url: str) -> str:
    found = _CSRF.search(client.get(url).text)
    assert found is not None
    return found.group(1)


def _signed_in(base: str, name: str) -> httpx.Client:
    client = httpx.Client(base_url=base, timeout=600)
    form = {"name": name, "password": PASSWORD, "csrf": _csrf(client, "/sign-in")}
    assert client.post("/sign-in", data=form).status_code == 303
    return client


def _time(client: httpx.Client, url: str, repeats: int) -> tuple[float, float]:
    taken = []
    for _ in range(repeats):
        start = time.perf_counter()
        answer = client.get(url)
        taken.append((time.perf_counter() - start) * 1000)
        assert answer.status_code == 200, answer.status_code
    return statistics.median(taken), max(taken)


def main() -> None:
    """Make the plan, then time the pages."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder, serve_in_thread() as sandbox:
        root = Path(folder) / "desk"
        root.mkdir()
        (root / "api-key").write_text(sandbox.api_key, encoding="ascii")
        add_user(root / "users.json", "carol", "maker", PASSWORD)
        add_user(root / "users.json", "alice", "approver", PASSWORD)
        process, base = _server(root, sandbox.base_url)
        try:
            _measure(base, _batch(Path(folder) / "big.csv", args.rows), args.rows, args.repeats)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)
            if process.stdout is not None:
                process.stdout.close()


def _measure(base: str, batch: Path, rows: int, repeats: int) -> None:
    maker = _signed_in(base, "carol")
    with batch.open("rb") as handle:
        files = {"batch": ("big.csv", handle, "text/csv")}
        start = time.perf_counter()
        verdict = maker.post("/upload", data={"csrf": _csrf(maker, "/upload")}, files=files)
    print(f"upload and check of {rows:,} rows: {time.perf_counter() - start:.2f} s")  # noqa: T201
    verdict_url = verdict.headers["location"]
    start = time.perf_counter()
    made = maker.post(verdict_url + "/plan", data={"csrf": _csrf(maker, verdict_url)})
    print(f"request approval (dry run, plan): {time.perf_counter() - start:.2f} s")  # noqa: T201
    assert made.status_code == 303, re.sub(r"<[^>]+>", " ", made.text)[-600:]
    plan = made.headers["location"]
    first, _ = _time(maker, plan, 1)
    name = "plan page, first view"
    print(f"{name:32} {first:6.1f} ms (the plan read from the ledger; cached after)")  # noqa: T201
    pages = {
        "plan page (rows 1-200)": plan,
        f"plan page (last of {-(-rows // 200)})": f"{plan}?page={-(-rows // 200)}",
        "Plans list": "/plans",
        "verdict page": verdict_url,
    }
    for name, url in pages.items():
        median, slowest = _time(maker, url, repeats)
        print(f"{name:32} median {median:6.1f} ms  slowest {slowest:6.1f} ms")  # noqa: T201
    approver = _signed_in(base, "alice")
    approver.post(plan + "/approve", data={"csrf": _csrf(approver, plan)})
    approver.post(plan + "/pay", data={"csrf": _csrf(approver, plan)})
    median, slowest = _time(approver, plan, repeats)
    name = "plan page while paying"
    print(f"{name:32} median {median:6.1f} ms  slowest {slowest:6.1f} ms")  # noqa: T201


if __name__ == "__main__":
    main()
