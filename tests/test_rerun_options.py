"""A rerun of one ledger with other validation options (issue 4: resume, the same batch).

Rows the ledger never sent to the bank follow the rerun's options (a corrected
``--source-account``, ``--allow-duplicates`` after the run named the duplicate); a row
already sent never changes: a rerun that would change one is refused with exit 2 and
nothing is sent. Real CLI runs against a sandbox bank over loopback HTTP.
"""

from __future__ import annotations

import dataclasses
import signal
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from _run_helpers import (
    ACCOUNTS,
    FIELDS,
    BatchRow,
    assert_exactly_once,
    count_status,
    finish,
    kill_group,
    ledger_rows,
    make_rows,
    run,
    start_run,
    stats,
    wait_until,
    write_batch,
)
from payrun.sandbox import RunningSandbox, serve_in_thread

FIRST, SECOND = ACCOUNTS
NO_SUCH_ACCOUNT = "999999 12345678"


@pytest.fixture(scope="module")
def bank() -> Iterator[RunningSandbox]:
    """A bank slow enough (40 ms) for a run of 120 rows to be stopped part way."""
    with serve_in_thread(latency_ms=40, jitter_ms=10, rng_seed=9) as sandbox:
        yield sandbox


def _write_without_source(path: Path, rows: list[BatchRow]) -> Path:
    """A batch with no source_account column: the account comes from --source-account."""
    return write_batch(path, rows, fields=[f for f in FIELDS if f != "source_account"])


def _from(rows: list[BatchRow], account: str) -> list[BatchRow]:
    return [dataclasses.replace(row, source_account=account) for row in rows]


def _payments(bank: RunningSandbox, rows: list[BatchRow]) -> int:
    references = {row.reference for row in rows}
    return sum(g["payments"] for g in stats(bank)["payments"] if g["reference"] in references)


def _stop_after_some_submitted(
    bank: RunningSandbox, batch: Path, ledger: Path, *extra: str
) -> None:
    """Start a run, SIGTERM it once 5 rows are submitted, and check it stopped with exit 3.

    The bank holds the run's payments after 20 until the signal: the run cannot end first,
    however slow the machine (the held ones are in flight: the stopping run lets them end).
    """
    started = time.monotonic()
    with bank.app.hold_payments(after=20, longest_s=60):
        process = start_run(bank, batch, ledger, *extra)
        try:
            wait_until(
                lambda: count_status(ledger, "submitted") >= 5 and bank.app.payments_held > 0,
                60,
                "5 submitted rows, the next payments held",
            )
        finally:
            kill_group(process, signal.SIGTERM)
    stopped = finish(process, started)
    assert stopped.returncode == 3, stopped.describe()


def test_another_source_account_after_rows_were_sent_is_refused(
    bank: RunningSandbox, tmp_path: Path
) -> None:
    """Rows already paid from one account: a rerun naming another exits 2 and sends nothing."""
    rows = _from(make_rows(1, 120, tag="SA"), FIRST)
    batch = _write_without_source(tmp_path / "batch.csv", rows)
    ledger = tmp_path / "batch.ledger.sqlite"
    _stop_after_some_submitted(bank, batch, ledger, "--source-account", FIRST)
    paid = _payments(bank, rows)
    assert 0 < paid < len(rows)

    for extra in ((), ("--dry-run",)):
        refused = run(bank, batch, ledger, "--source-account", SECOND, *extra)
        assert refused.returncode == 2, refused.describe()
        assert "--source-account" in refused.stderr, refused.describe()
        assert FIRST in refused.stderr and SECOND in refused.stderr, refused.describe()
        assert "Traceback" not in refused.stderr, refused.describe()
        assert len(refused.stderr.strip().splitlines()) == 1, refused.describe()
        assert _payments(bank, rows) == paid, "the refused run paid something"

    again = run(bank, batch, ledger, "--source-account", FIRST)
    assert again.returncode == 0, again.describe()
    assert_exactly_once(bank, rows, ledger, "finished from the first account")


def test_a_wrong_source_account_is_corrected_on_the_rerun(
    bank: RunningSandbox, tmp_path: Path
) -> None:
    """Nothing sent from a mistyped account: the rerun with the right one pays every row."""
    rows = _from(make_rows(2, 12, tag="SW"), SECOND)
    batch = _write_without_source(tmp_path / "batch.csv", rows)
    ledger = tmp_path / "batch.ledger.sqlite"
    wrong = run(bank, batch, ledger, "--source-account", NO_SUCH_ACCOUNT)
    assert wrong.returncode == 1, wrong.describe()
    assert _payments(bank, rows) == 0
    assert {r["status"] for r in ledger_rows(ledger)} == {"failed"}

    before = ledger_rows(ledger)
    totals_wrong = run(bank, batch, ledger, "--source-account", SECOND, "--expect-count", "99")
    assert totals_wrong.returncode == 2, totals_wrong.describe()
    assert ledger_rows(ledger) == before, "a refused rerun changed the ledger"
    dry = run(bank, batch, ledger, "--source-account", SECOND, "--dry-run", "--expect-count", "99")
    assert dry.returncode == 2, dry.describe()
    assert "control totals" in dry.stderr, dry.describe()

    right = run(bank, batch, ledger, "--source-account", SECOND)
    assert right.returncode == 0, right.describe()
    assert_exactly_once(bank, rows, ledger, "after correcting --source-account")
    assert {r["source_account"] for r in ledger_rows(ledger)} == {SECOND}
    plan = run(bank, batch, ledger, "--source-account", SECOND, "--dry-run")
    assert plan.returncode == 0, plan.describe()
    assert f"{len(rows)} rows already paid" in plan.stdout, plan.describe()
    assert "submitted: None" not in plan.stdout, plan.describe()


def test_allow_duplicates_on_the_rerun_pays_the_duplicate_once(
    bank: RunningSandbox, tmp_path: Path
) -> None:
    """A duplicate row, then --allow-duplicates on the rerun: paid once; dropping it: refused."""
    rows = make_rows(3, 6, tag="DU")
    twin = dataclasses.replace(rows[2], row_id="DU-twin")
    batch = tmp_path / "batch.csv"
    write_batch(batch, [*rows, twin])
    ledger = tmp_path / "batch.ledger.sqlite"

    first = run(bank, batch, ledger)
    assert first.returncode == 1, first.describe()
    last = ledger_rows(ledger)[-1]
    assert last["status"] == "invalid", last
    assert "--allow-duplicates" in last["error"], last
    assert _payments(bank, rows) == len(rows)

    allowed = run(bank, batch, ledger, "--allow-duplicates")
    assert allowed.returncode == 0, allowed.describe()
    assert {r["status"] for r in ledger_rows(ledger)} == {"submitted"}
    groups = {g["reference"]: g for g in stats(bank)["payments"]}
    assert groups[twin.reference]["payments"] == 2, groups[twin.reference]
    assert _payments(bank, rows) == len(rows) + 1

    again = run(bank, batch, ledger, "--allow-duplicates")
    assert again.returncode == 0, again.describe()
    refused = run(bank, batch, ledger)
    assert refused.returncode == 2, refused.describe()
    assert "--allow-duplicates given then, not given now" in refused.stderr, refused.describe()
    assert "run it again with those options" in refused.stderr, refused.describe()
    assert _payments(bank, rows) == len(rows) + 1, "a rerun paid something again"


def test_a_ledger_from_before_options_were_recorded_resumes(
    bank: RunningSandbox, tmp_path: Path
) -> None:
    """A ledger with no options column (an older payrun) gets one and finishes the batch."""
    rows = make_rows(4, 120, tag="OL")
    batch = write_batch(tmp_path / "batch.csv", rows)
    ledger = tmp_path / "batch.ledger.sqlite"
    _stop_after_some_submitted(bank, batch, ledger)
    connection = sqlite3.connect(ledger)
    connection.execute("ALTER TABLE batch DROP COLUMN options")
    connection.commit()
    connection.close()

    again = run(bank, batch, ledger)
    assert again.returncode == 0, again.describe()
    assert_exactly_once(bank, rows, ledger, "an old ledger resumed")
