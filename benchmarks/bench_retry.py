"""The CPU cost of entering the retry policy on the success path (one per bank request).

Each bank request runs under ``RetryPolicy.call``, which enters ``tenacity.AsyncRetrying``;
a payment makes about two requests (create, submit). This times a request that succeeds at
once, against awaiting the same coroutine function directly, on uvloop as a run does.

    python benchmarks/bench_retry.py            # 100,000 calls, best of 5
"""

from __future__ import annotations

import argparse
import asyncio
import time

import uvloop

from payrun.bank import DEFAULT_RETRY


async def _answer() -> int:
    return 1


def _never(exc: BaseException) -> bool:
    return False


async def _direct(calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        await _answer()
    return time.perf_counter() - started


async def _policy(calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        await DEFAULT_RETRY.call(_answer, retry_if=_never)
    return time.perf_counter() - started


def main() -> None:
    """Print the microseconds per successful call, direct and under the policy."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    uvloop.install()
    direct = min(asyncio.run(_direct(args.calls)) for _ in range(args.repeats))
    policy = min(asyncio.run(_policy(args.calls)) for _ in range(args.repeats))
    per_call = 1e6 / args.calls
    print(f"direct await:       {direct * per_call:6.2f} us per call")
    print(f"RetryPolicy.call:   {policy * per_call:6.2f} us per call")
    print(f"cost of the policy: {(policy - direct) * per_call:6.2f} us per request")


if __name__ == "__main__":
    main()
