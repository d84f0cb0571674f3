"""How many requests `payrun run --wait` sends while it waits, against the sandbox bank.

Pays ROWS rows, then waits ``--wait-timeout`` seconds for deliveries the sandbox never
makes, and counts what the wait asked the bank: event reads, and single-submission reads
(the fallback), with the events readable and with the events refused (404). Every request
counts toward the organization's 50 in flight, so the fallback must stay a fallback.

    python benchmarks/bench_wait.py                     # 200 rows, a 20 s wait
    python benchmarks/bench_wait.py --rows 1000 --wait 60
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from payrun.cli import main
from payrun.sandbox import serve_in_thread

NEVER = 3_600_000  # ms: the sandbox delivers nothing during the benchmark


def one_run(rows: int, wait: float, *, events: bool, folder: Path) -> dict[str, int]:
    """Pay ``rows`` rows, wait ``wait`` s; count the wait's requests by kind."""
    counts = {"events": 0, "submission reads": 0}
    with serve_in_thread(deliver_after_ms=NEVER) as bank:
        serve = bank.app._serve_api  # noqa: SLF001 - the server's own request handler
        refused = json.dumps({"errors": [{"status": "404", "title": "not-found"}]}).encode()

        async def counting(scope: Any, receive: Any, send: Any) -> None:
            path = scope["path"]
            if scope["method"] == "GET" and path.endswith("/events"):
                counts["events"] += 1
                if not events:
                    headers = [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(refused)).encode()),
                    ]
                    await send({"type": "http.response.start", "status": 404, "headers": headers})
                    await send({"type": "http.response.body", "body": refused})
                    return
            elif scope["method"] == "GET" and path.startswith("/v0/submissions/"):
                counts["submission reads"] += 1
            await serve(scope, receive, send)

        bank.app._serve_api = counting  # type: ignore[method-assign]  # noqa: SLF001
        os.environ["PAYRUN_BASE_URL"], os.environ["PAYRUN_API_KEY"] = bank.base_url, bank.api_key
        batch = folder / f"pay-{events}.csv"
        lines = ["payee_name,sort_code,account_number,amount,reference,source_account"]
        lines += [
            f"Payee {n},200000,{10000000 + n},1.00,WAIT {n},040004 30000001" for n in range(rows)
        ]
        batch.write_text("\n".join(lines) + "\n", encoding="utf-8")
        code = main(
            [
                "run",
                str(batch),
                "--no-confirm-payees",
                "--log-format",
                "json",
                "--wait",
                "--wait-timeout",
                str(wait),
            ]
        )
        if code != 3:
            msg = f"expected the wait to run out (exit 3), got {code}"
            raise RuntimeError(msg)
    return counts


def run(args: argparse.Namespace) -> None:
    """Both cases; print the requests per row."""
    with tempfile.TemporaryDirectory() as folder:
        results = {
            events: one_run(args.rows, args.wait, events=events, folder=Path(folder))
            for events in (True, False)
        }
    print(f"\n{args.rows} rows waiting {args.wait:g} s for deliveries that never come:")
    for events, counts in results.items():
        kind = "events readable" if events else "events refused (404)"
        print(
            f"  {kind:<22} {counts['events']:>6} event reads,"
            f" {counts['submission reads']:>6} submission reads"
            f" ({counts['submission reads'] / args.rows:.1f} per row)"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--wait", type=float, default=20.0)
    run(parser.parse_args())
