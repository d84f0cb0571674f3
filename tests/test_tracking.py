"""`--wait` (tracking) over real loopback HTTP against the sandbox bank: returns after
delivery."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from _run_helpers import (
    bank_problems,
    count_status,
    finish,
    ledger_rows,
    make_rows,
    return_submission,
    start_run,
    wait_until,
    write_batch,
)
from payrun.cli import main
from payrun.sandbox import RunningSandbox, serve_in_thread

StartBank = Callable[..., RunningSandbox]


@pytest.fixture
def start_bank(monkeypatch: pytest.MonkeyPatch) -> Iterator[StartBank]:
    """Start a fresh sandbox bank (a real uvicorn server) and point PAYRUN_* at it."""
    with ExitStack() as stack:

        def start(**options: Any) -> RunningSandbox:
            options.setdefault("deliver_after_ms", 20)
            running = stack.enter_context(serve_in_thread(**options))
            monkeypatch.setenv("PAYRUN_BASE_URL", running.base_url)
            monkeypatch.setenv("PAYRUN_API_KEY", running.api_key)
            return running

        yield start


def run(batch: Path, ledger: Path, *extra: str) -> int:
    """`payrun run` in-process (new payees are created without Confirmation of Payee)."""
    return main(["run", str(batch), "--ledger", str(ledger), "--no-confirm-payees", *extra])


def statuses(ledger: Path) -> list[str]:
    """Each row's status in the ledger, in row order."""
    return [r["status"] for r in ledger_rows(ledger)]


def test_a_return_after_delivery_during_the_wait_ends_the_row_returned(tmp_path: Path) -> None:
    """Delivered, then returned while `--wait` follows: the rows end returned, exit 1, each
    named with the bank's reason (`returned` can follow `delivered`)."""
    rows = make_rows(1, 3, tag="RET")
    batch = write_batch(tmp_path / "r3.csv", rows)
    ledger = tmp_path / "ret.sqlite"
    with serve_in_thread(deliver_after_ms=600_000) as bank:  # nothing delivers by itself
        process = start_run(bank, batch, ledger, "--wait", "--wait-timeout", "60")
        started = time.monotonic()
        wait_until(lambda: count_status(ledger, "submitted") == 3 or process.poll() is not None,
                   60, "3 rows submitted")
        for row in ledger_rows(ledger):
            return_submission(bank, row["submission_url"])  # events: delivered, then returned
        done = finish(process, started)
        assert bank_problems(bank, rows) == []
    assert done.returncode == 1, done.describe()
    assert statuses(ledger) == ["returned"] * 3, done.describe()
    assert all("returned: account-closed" in r["error"] for r in ledger_rows(ledger))
    assert done.stdout.count(": returned: the bank reports the payment returned") == 3


def test_a_rerun_with_wait_notices_a_return_of_a_delivered_row(
    start_bank: StartBank, tmp_path: Path
) -> None:
    """A row recorded delivered and returned afterwards: the next `--wait` run reads the
    events from the batch start and ends it returned (exit 1), paying nothing again; a
    later run leaves it returned."""
    bank = start_bank()
    rows = make_rows(2, 3, tag="RRN")
    batch = write_batch(tmp_path / "pay.csv", rows)
    ledger = tmp_path / "pay.sqlite"
    assert run(batch, ledger, "--wait") == 0
    assert statuses(ledger) == ["delivered"] * 3
    return_submission(bank, ledger_rows(ledger)[1]["submission_url"], "beneficiary-deceased")
    for _ in range(2):
        assert run(batch, ledger, "--wait") == 1
        assert statuses(ledger) == ["delivered", "returned", "delivered"]
    assert "beneficiary-deceased" in ledger_rows(ledger)[1]["error"]
    assert bank_problems(bank, rows) == []

