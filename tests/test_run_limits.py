"""`payrun run` never breaks the bank's limits (issue 4), by the sandbox's own counters.

A quiet organization (no other clients): at most 50 requests in flight, at most 3 submits in
flight per account, and not one 429; with ``--max-in-flight 10 --per-account-submits 1`` the
peaks respect those numbers instead. Each run is the real CLI over loopback HTTP.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from _run_helpers import assert_exactly_once, make_rows, run, stats, write_batch
from payrun.sandbox import ACCOUNT_SUBMITS_CAP, ORG_IN_FLIGHT_CAP, serve_in_thread


@pytest.mark.parametrize(
    ("options", "count", "in_flight", "submits"),
    [
        ((), 300, ORG_IN_FLIGHT_CAP, ACCOUNT_SUBMITS_CAP),
        (("--max-in-flight", "10", "--per-account-submits", "1"), 120, 10, 1),
    ],
    ids=["300-rows-defaults-50-3", "120-rows-max-in-flight-10-submits-1"],
)
def test_limits_never_exceeded_and_no_429_on_a_quiet_organization(
    options: tuple[str, ...], count: int, in_flight: int, submits: int, tmp_path: Path
) -> None:
    """Rows over 2 accounts at 20 ms: peaks within the limits, zero 429s, each row paid once."""
    rows = make_rows(in_flight, count, tag="M")
    batch = write_batch(tmp_path / "big.csv", rows)
    ledger = tmp_path / "big.ledger.sqlite"
    with serve_in_thread(latency_ms=20, deliver_after_ms=50, rng_seed=3) as bank:
        done = run(bank, batch, ledger, *options)
        seen = stats(bank)
        peaks = {k: seen[k] for k in ("max_in_flight", "max_concurrent_submits", "rate_limited")}
        assert done.returncode == 0, f"{peaks}\n{done.describe()}"
        assert seen["max_in_flight"] <= in_flight, peaks
        assert len(seen["max_concurrent_submits"]) == 2, peaks
        assert all(n <= submits for n in seen["max_concurrent_submits"].values()), peaks
        assert seen["rate_limited"] == {"org_in_flight": 0, "account_submits": 0, "injected": 0}, (
            peaks
        )
        # The limits are used, not just respected: each account's submit slots were all busy.
        assert all(n == submits for n in seen["max_concurrent_submits"].values()), peaks
        assert_exactly_once(bank, rows, ledger, f"peaks {peaks}")
