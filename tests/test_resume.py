"""Exactly-once proof for `payrun run` (issue 4): kill -9, faults, signals, lock, changed file.

Every test runs the real CLI as a subprocess (its own process group) against a sandbox bank
served over real loopback HTTP, then checks the bank's own counters: one payment group per
row, each with exactly one payment and one submission, and the ledger recording each row as
submitted with that very payment and submission. The exactly-once core (kill -9 trials,
faults, 429s, signals, the lock, a changed file, a fresh ledger) runs on both ledgers
(``ledger_for``: the SQLite file, and the batch in a PostgreSQL database).
"""

from __future__ import annotations

import dataclasses
import os
import random
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from _run_helpers import (
    RUN_TIMEOUT_S,
    BatchRow,
    Finished,
    LedgerFor,
    LedgerRef,
    assert_exactly_once,
    count_status,
    finish,
    kill_group,
    ledger_rows,
    make_rows,
    run,
    run_args,
    run_env,
    start_run,
    stats,
    wait_until,
    write_batch,
)
from payrun.sandbox import RunningSandbox, serve_in_thread

KILL_TRIALS = 5 if os.environ.get("CI") == "true" else 10
"""kill -9 trials on each ledger backend: 10 locally, 5 when CI=true. Each backend's trials
have seeds of their own, so the two backends together try 20 (10) different kill schedules."""
KILL_SEED = 20261114
"""Base seed of the kill -9 trials (``_kill_seed``): a failure names its trial and seed."""
KILL_BANK = {"latency_ms": 20, "jitter_ms": 10, "deliver_after_ms": 50}
"""A bank slow enough that a run of ~100 rows lasts a second or two after start-up."""
CALIBRATION_ROWS = 100
MAX_KILLS = 3


def _bank_totals(bank: RunningSandbox) -> tuple[int, int]:
    """Payments and submissions the bank holds, all batches together."""
    groups = stats(bank)["payments"]
    return sum(g["payments"] for g in groups), sum(g["submissions"] for g in groups)


def _batch(
    tmp_path: Path,
    rows: list[BatchRow],
    name: str = "batch",
    ledger_for: LedgerFor | None = None,
) -> tuple[Path, LedgerRef]:
    """The batch file of ``rows`` and its ledger (``ledger_for``'s backend; a file by default)."""
    batch = write_batch(tmp_path / f"{name}.csv", rows)
    if ledger_for is not None:
        return batch, ledger_for(batch)
    return batch, tmp_path / f"{name}.ledger.sqlite"


# ---- 1. kill -9 at random instants ---------------------------------------------------------


@pytest.fixture(scope="module")
def full_run_seconds(tmp_path_factory: pytest.TempPathFactory) -> float:
    """Wall time of one uninterrupted run of CALIBRATION_ROWS rows (start-up included)."""
    tmp = tmp_path_factory.mktemp("calibrate")
    with serve_in_thread(**KILL_BANK, rng_seed=KILL_SEED) as bank:
        rows = make_rows(99, CALIBRATION_ROWS, tag="C")
        batch, ledger = _batch(tmp, rows)
        done = run(bank, batch, ledger)
        assert done.returncode == 0, done.describe()
        assert_exactly_once(bank, rows, ledger, "calibration run")
    return done.seconds


def _kill_seed(trial: int, ledger_for: LedgerFor) -> int:
    """The seed of a kill -9 trial: the SQLite ledger's trials count up from ``KILL_SEED``,
    the PostgreSQL ledger's from ``KILL_SEED + 1000``."""
    return KILL_SEED + trial + (0 if ledger_for.url is None else 1000)


@pytest.mark.slow
@pytest.mark.parametrize("trial", range(KILL_TRIALS))
def test_kill_9_at_random_instants_then_rerun_pays_each_row_once(
    trial: int,
    tmp_path: Path,
    full_run_seconds: float,
    request: pytest.FixtureRequest,
    ledger_for: LedgerFor,
) -> None:
    """SIGKILL the run's process group at random instants (up to 3 times); the rerun pays once."""
    seed = _kill_seed(trial, ledger_for)
    rng = random.Random(seed)
    rows = make_rows(trial, rng.randint(60, 150), tag="T" + ledger_for.tag)
    batch, ledger = _batch(tmp_path, rows, ledger_for=ledger_for)
    history: list[str] = []
    with serve_in_thread(**KILL_BANK, rng_seed=seed) as bank:
        final: Finished | None = None
        for attempt in range(MAX_KILLS + 1):
            kill = attempt == 0 or (attempt < MAX_KILLS and rng.random() < 0.5)
            delay = rng.uniform(0, 1.1 * full_run_seconds) if kill else None
            started = time.monotonic()
            process = start_run(bank, batch, ledger)
            if delay is not None:
                try:
                    process.wait(timeout=delay)
                except subprocess.TimeoutExpired:
                    kill_group(process, signal.SIGKILL)
            done = finish(process, started)
            counts = {
                s: count_status(ledger, s)
                for s in ("pending", "creating", "created", "submitting", "submitted")
            }
            history.append(
                f"attempt {attempt}: kill after {delay}s -> exit {done.returncode}"
                f" at {done.seconds:.2f}s; ledger {counts}"
            )
            if delay is None or done.returncode != -signal.SIGKILL:
                final = done
                if done.returncode == 0 or delay is None:
                    break
        context = f"trial {trial} (seed {seed}, {len(rows)} rows):\n" + "\n".join(history)
        request.node.user_properties.append(("history", context))  # --junitxml, xunit1
        assert final is not None, context
        assert final.returncode == 0, f"{context}\n{final.describe()}"
        assert_exactly_once(bank, rows, ledger, context)


@pytest.mark.slow
def test_after_kill_9_with_the_default_settle_wait_rows_never_sent_are_paid_within_seconds(
    tmp_path: Path,
) -> None:
    """Killed after about 60 payments, rerun at once with the default settle wait (60 s):
    every row never sent is paid within seconds, a row in doubt whose payment or submission
    the bank already shows is recorded and finished at once too, and the other rows in
    doubt are created or submitted only from their settle time on (the bank's creation
    times against the rerun's start and the ledger's late_until); one payment per row."""
    rows = make_rows(70, 400, tag="W")
    batch, ledger = _batch(tmp_path, rows)
    with serve_in_thread(**KILL_BANK, rng_seed=KILL_SEED) as bank:
        started = time.monotonic()
        process = start_run(bank, batch, ledger)
        try:
            wait_until(
                lambda: _bank_totals(bank)[1] >= 60 or process.poll() is not None,
                RUN_TIMEOUT_S,
                "60 payments",
            )
        finally:
            kill_group(process, signal.SIGKILL)
        killed = finish(process, started)
        assert killed.returncode == -signal.SIGKILL, killed.describe()
        wait_until(lambda: stats(bank)["in_flight"] == 0, 10, "the killed run's requests to end")
        at_kill = {r["reference"]: r["status"] for r in ledger_rows(ledger)}
        had_payment = {p.reference for p in bank.state.payments.values()}
        had_submission = {
            bank.state.payments[s.payment_id].reference for s in bank.state.submissions.values()
        }
        rerun_start = datetime.now(UTC)
        done = run(bank, batch, ledger, env={"PAYRUN_SETTLE_WAIT": "60"})
        assert done.returncode == 0, done.describe()
        assert_exactly_once(bank, rows, ledger, f"ledger at the kill: {at_kill}")
        assert isinstance(ledger, Path)
        until = _late_until(ledger)
        assert until - rerun_start > timedelta(seconds=50), (until, rerun_start)
        created = {p.reference: p.created_at for p in bank.state.payments.values()}
        submitted = {
            bank.state.payments[s.payment_id].reference: s.created_at
            for s in bank.state.submissions.values()
        }
        soon = rerun_start + timedelta(seconds=20)
        counts = {
            "never sent": [r for r, s in at_kill.items() if s in ("pending", "created")],
            "in doubt, found": [
                r
                for r, s in at_kill.items()
                if (s == "creating" and r in had_payment)
                or (s == "submitting" and r in had_submission)
            ],
            "in doubt, waited": [
                r
                for r, s in at_kill.items()
                if (s == "creating" and r not in had_payment)
                or (s == "submitting" and r not in had_submission)
            ],
        }
        assert counts["never sent"] and counts["in doubt, waited"], at_kill
        for reference in counts["never sent"] + counts["in doubt, found"]:
            assert submitted[reference] < soon, (reference, at_kill[reference], done.stderr)
        for reference in counts["in doubt, waited"]:
            waited = created if at_kill[reference] == "creating" else submitted
            assert waited[reference] >= until, (reference, at_kill[reference])
        assert "rows in doubt until" in done.stderr, done.stderr


def _late_until(ledger: Path) -> datetime:
    """The batch's late_until: until when the rows in doubt were held."""
    connection = sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)
    try:
        (text,) = connection.execute("SELECT late_until FROM batch").fetchone()
    finally:
        connection.close()
    return datetime.fromisoformat(text)


# ---- 2. and 3. faults and injected 429s ----------------------------------------------------


def test_fault_rate_one_run_pays_each_row_once(tmp_path: Path, ledger_for: LedgerFor) -> None:
    """With 10% of creates and submits answered 500 or dropped after the fact, one run pays once."""
    rows = make_rows(1, 100, tag="F" + ledger_for.tag)
    batch, ledger = _batch(tmp_path, rows, ledger_for=ledger_for)
    with serve_in_thread(latency_ms=5, fault_rate=0.1, deliver_after_ms=50, rng_seed=7) as bank:
        done = run(bank, batch, ledger)
        faults = stats(bank)["faults"]
        assert sum(faults.values()) > 0, faults
        assert done.returncode == 0, done.describe()
        assert_exactly_once(bank, rows, ledger, f"faults {faults}")


def test_injected_429s_complete_and_pay_each_row_once(
    tmp_path: Path, ledger_for: LedgerFor
) -> None:
    """With 20% of requests refused 429, the run still completes (exit 0) and pays once."""
    rows = make_rows(1, 100, tag="R" + ledger_for.tag)
    batch, ledger = _batch(tmp_path, rows, ledger_for=ledger_for)
    with serve_in_thread(latency_ms=5, extra_429_rate=0.2, deliver_after_ms=50, rng_seed=8) as bank:
        done = run(bank, batch, ledger)
        limited = stats(bank)["rate_limited"]
        assert limited["injected"] > 0, limited
        assert done.returncode == 0, done.describe()
        assert_exactly_once(bank, rows, ledger, f"rate limited {limited}")


# ---- 5. SIGTERM and Ctrl-C ------------------------------------------------------------------


@pytest.fixture(scope="module")
def slow_bank() -> Iterator[RunningSandbox]:
    """A bank with 40 ms latency: a run of ~100 rows lasts long enough to be stopped mid-way."""
    with serve_in_thread(latency_ms=40, jitter_ms=10, deliver_after_ms=50, rng_seed=5) as bank:
        yield bank


_LET_THROUGH = 20
"""Payments the bank makes before it holds a run's next ones (``_mid_run``)."""


def _mid_run(bank: RunningSandbox, ledger: LedgerRef) -> bool:
    """The run has submitted 5 rows and the bank holds its next payments: it is mid-run
    however slow the machine (under ``hold_payments(after=_LET_THROUGH)``)."""
    return count_status(ledger, "submitted") >= 5 and bank.app.payments_held > 0


def _kill_mid_run(bank: RunningSandbox, batch: Path, ledger: LedgerRef) -> None:
    """Run ``batch`` and kill -9 it once it is mid-run (``_mid_run``), however slow the
    machine: the payments the bank holds then are never made."""
    started = time.monotonic()
    with bank.app.hold_payments(after=_LET_THROUGH):
        process = start_run(bank, batch, ledger)
        try:
            wait_until(lambda: _mid_run(bank, ledger), 60, "5 submitted rows")
        finally:
            kill_group(process, signal.SIGKILL)
            finish(process, started)


@pytest.fixture
def own_slow_bank() -> Iterator[RunningSandbox]:
    """A bank like ``slow_bank`` for one test whose big batches would drain the shared one."""
    with serve_in_thread(latency_ms=40, jitter_ms=10, deliver_after_ms=50, rng_seed=6) as bank:
        yield bank


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_mid_run_exits_3_then_rerun_pays_each_row_once(
    sig: signal.Signals,
    slow_bank: RunningSandbox,
    tmp_path: Path,
    ledger_for: LedgerFor,
) -> None:
    """SIGTERM or Ctrl-C mid-run: exit 3 within 30 s, no traceback, nothing unknown; rerun pays."""
    rows = make_rows(int(sig), 120, tag="S" + ledger_for.tag)
    batch, ledger = _batch(tmp_path, rows, ledger_for=ledger_for)
    started = time.monotonic()
    # The run cannot end before the signal; the payments held are in flight, and finish
    with slow_bank.app.hold_payments(after=_LET_THROUGH):
        process = start_run(slow_bank, batch, ledger)
        try:
            wait_until(lambda: _mid_run(slow_bank, ledger), 60, "5 submitted rows")
        except AssertionError:
            kill_group(process)
            raise AssertionError(finish(process, started).describe()) from None
        kill_group(process, sig)
        signalled = time.monotonic()
    stopped = finish(process, started, timeout=45)
    took = time.monotonic() - signalled
    assert stopped.returncode == 3, stopped.describe()
    assert took < 30, f"took {took:.1f}s to stop\n{stopped.describe()}"
    assert "Traceback" not in stopped.stderr + stopped.stdout, stopped.describe()
    unknown = count_status(ledger, "creating", "submitting")
    assert unknown == 0, f"{unknown} rows left creating/submitting after a graceful stop"
    unpaid = len(rows) - count_status(ledger, "submitted")
    again = run(slow_bank, batch, ledger)
    assert again.returncode == 0, again.describe()
    assert_exactly_once(slow_bank, rows, ledger, f"{unpaid} rows were unpaid after {sig.name}")


@pytest.mark.parametrize(
    "sig",
    [
        pytest.param(signal.SIGTERM, id="SIGTERM"),
        pytest.param(signal.SIGINT, id="SIGINT"),
    ],
)
def test_signal_repeated_every_20_ms_still_exits_3(
    sig: signal.Signals, slow_bank: RunningSandbox, tmp_path: Path
) -> None:
    """Ctrl-C held down (or SIGTERM every 20 ms) mid-run: exit 3, no traceback; rerun pays once."""
    rows = make_rows(int(sig), 120, tag="H")
    batch, ledger = _batch(tmp_path, rows)
    started = time.monotonic()
    try:
        # The run cannot end before the signals (the second cuts the held payments off)
        with slow_bank.app.hold_payments(after=_LET_THROUGH):
            process = start_run(slow_bank, batch, ledger)
            wait_until(lambda: _mid_run(slow_bank, ledger), 60, "5 submitted rows")
            deadline = time.monotonic() + 40
            while process.poll() is None and time.monotonic() < deadline:
                kill_group(process, sig)
                time.sleep(0.02)
    finally:
        kill_group(process)
        stopped = finish(process, started)
    again = run(slow_bank, batch, ledger)
    assert again.returncode == 0, again.describe()
    assert_exactly_once(slow_bank, rows, ledger, f"after repeated {sig.name}")
    assert "Traceback" not in stopped.stderr, stopped.describe()
    assert stopped.returncode == 3, stopped.describe()


START_UP_POINTS = [
    # payrun.__main__'s own first imports: Python's handler was still in (before the fix
    # a KeyboardInterrupt traceback, exit -2)
    "payrun._signals",
    "payrun.run._stop",
    # the command line, the run command, the run itself, and the bank's transport (made
    # in the event loop before the first request)
    "payrun.cli",
    "payrun.cli._run",
    "payrun.run._pipeline",
    "payrun.bank.client",
    "payrun.bank._transport._aiohttp",
]
"""Modules payrun loads on its way to the first request, in the order it loads them."""


@pytest.mark.parametrize("module", START_UP_POINTS)
def test_ctrl_c_during_start_up_exits_3_and_pays_nothing(
    slow_bank: RunningSandbox, tmp_path: Path, module: str
) -> None:
    """Ctrl-C while payrun's start-up is held just before it loads ``module`` (a gate, not
    a sleep: the signal lands there however slow the machine): exit 3, no traceback,
    nothing paid."""
    rows = make_rows(START_UP_POINTS.index(module), 10, tag="U")
    batch, ledger = _batch(tmp_path, rows)
    paused, go = tmp_path / "paused", tmp_path / "go"
    gate = {"AFTER_KILL_PAUSE_AT": module, "AFTER_KILL_PAUSED": str(paused)}
    started = time.monotonic()
    process = start_run(slow_bank, batch, ledger, env={**gate, "AFTER_KILL_GO": str(go)})
    try:
        wait_until(lambda: paused.exists() or process.poll() is not None, 60, module)
        assert paused.exists(), f"payrun ended before it loaded {module}"
        kill_group(process, signal.SIGINT)
    finally:
        go.touch()
        stopped = finish(process, started)
    references = {row.reference for row in rows}
    paid = sum(g["payments"] for g in stats(slow_bank)["payments"] if g["reference"] in references)
    assert stopped.returncode == 3, stopped.describe()
    assert "interrupted" in stopped.stdout + stopped.stderr, stopped.describe()
    assert "Traceback" not in stopped.stderr, stopped.describe()
    assert "Exception ignored" not in stopped.stderr, stopped.describe()
    assert paid == 0, f"{paid} payments after Ctrl-C before {module}; {stopped.describe()}"


def test_ctrl_c_while_new_payees_are_created_starts_no_more_of_them(tmp_path: Path) -> None:
    """Ctrl-C while 150 new payees are being created: the payees not yet started are not
    created, the run exits 3 at once, and the rerun finishes the batch exactly once."""
    rows = make_rows(8, 150, payees=150, tag="P")
    batch, ledger = _batch(tmp_path, rows)
    with serve_in_thread(latency_ms=100, deliver_after_ms=50) as bank:
        before = len(bank.state.payees)
        started = time.monotonic()
        process = start_run(bank, batch, ledger)
        try:
            wait_until(lambda: len(bank.state.payees) - before >= 20, 60, "20 new payees")
        finally:
            kill_group(process, signal.SIGINT)
            stopped = finish(process, started)
        created = len(bank.state.payees) - before
        assert stopped.returncode == 3, stopped.describe()
        assert created <= 60, f"{created} payees created after Ctrl-C at 20: it kept going"
        assert _bank_totals(bank) == (0, 0), "a payment was made after Ctrl-C"
        again = run(bank, batch, ledger)
        assert again.returncode == 0, again.describe()
        assert_exactly_once(bank, rows, ledger, "after Ctrl-C among the payees")
        assert len(bank.state.payees) - before == len(rows), "a payee was created twice"


# ---- 6. lock ---------------------------------------------------------------------------------


@pytest.mark.parametrize("extra", [(), ("--dry-run",)], ids=["run", "dry-run"])
def test_a_ledger_being_paid_refuses_a_second_run_naming_the_holder(
    tmp_path: Path, extra: tuple[str, ...], ledger_for: LedgerFor
) -> None:
    """While one run holds the ledger, a second run of it exits 2 and names the holder's
    pid; so does a dry run, which would otherwise call the payments in flight repeats from
    outside the ledger."""
    rows = make_rows(1, 20, tag=("L" if not extra else "D") + ledger_for.tag)
    batch, ledger = _batch(tmp_path, rows, ledger_for=ledger_for)
    with serve_in_thread(latency_ms=250, deliver_after_ms=50) as bank:
        started = time.monotonic()
        try:
            with bank.app.hold_payments():  # the first run cannot end, however slow this is
                first = start_run(bank, batch, ledger)
                wait_until(lambda: bank.app.payments_held > 0, 60, "the first run's payments")
                second = run(bank, batch, ledger, *extra)
                assert first.poll() is None, "the first run ended before the second one tried"
        finally:
            first_done = finish(first, started)
        assert second.returncode == 2, second.describe()
        assert str(first.pid) in second.stderr, second.describe()
        assert "Traceback" not in second.stderr, second.describe()
        assert first_done.returncode == 0, first_done.describe()
        assert_exactly_once(bank, rows, ledger, "the run that held the lock")


_PAID_BEFORE_HOLD = 20
"""The first run's payments the bank lets through before it holds the rest, so that the
first run is paying (some rows submitted) and cannot end while the second one tries."""


def _paying_then_held(bank: RunningSandbox, ledger: LedgerRef) -> bool:
    """The first run has submitted a payment and the bank holds its next ones."""
    return count_status(ledger, "submitted") >= 1 and bank.app.payments_held > 0


@pytest.mark.parametrize("spelling", ["same", "localhost", "no ~/.cache"])
def test_the_same_file_through_another_ledger_at_once_is_refused(
    own_slow_bank: RunningSandbox, tmp_path: Path, spelling: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy of the file paid through a second ledger while the first run pays 300 rows
    (the bank's address written the same way, or as localhost; or a home folder whose
    ~/.cache cannot be used, where the lock was once skipped and both runs paid every row):
    exit 2, nothing sent; afterwards that ledger holds every row as a possible repeat."""
    if spelling == "no ~/.cache":  # a file where the folder would be: the lock goes to /tmp
        (tmp_path / "home").mkdir()
        (tmp_path / "home" / ".cache").write_text("not a folder", encoding="utf-8")
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
    rows = make_rows(6 + len(spelling), 300, tag="C")
    batch, ledger = _batch(tmp_path, rows)
    copy_folder = tmp_path / "copy"
    copy_folder.mkdir()
    copy = copy_folder / "payroll (1).csv"
    copy.write_bytes(batch.read_bytes())
    other = own_slow_bank
    if spelling == "localhost":
        other = dataclasses.replace(
            own_slow_bank, base_url=own_slow_bank.base_url.replace("127.0.0.1", "localhost")
        )
    started = time.monotonic()
    try:
        with own_slow_bank.app.hold_payments(after=_PAID_BEFORE_HOLD):
            first = start_run(own_slow_bank, batch, ledger)
            wait_until(lambda: _paying_then_held(own_slow_bank, ledger), 60, "the first payments")
            second = run(other, copy, copy_folder / "copy.ledger.sqlite")
            assert first.poll() is None, "the first run ended before the second one tried"
    finally:
        first_done = finish(first, started)
    assert second.returncode == 2, second.describe()
    assert "same content" in second.stderr and str(first.pid) in second.stderr, second.describe()
    left = sorted(p.name for p in copy_folder.iterdir() if "ledger" in p.name)
    assert left == [], f"the refused run left its new ledger behind: {left}"
    assert first_done.returncode == 0, first_done.describe()
    assert_exactly_once(own_slow_bank, rows, ledger, "two ledgers of one file at once")
    later = run(other, copy, copy_folder / "copy.ledger.sqlite")
    assert later.returncode == 1, later.describe()
    assert {r["status"] for r in ledger_rows(copy_folder / "copy.ledger.sqlite")} == {"held"}
    assert_exactly_once(own_slow_bank, rows, ledger, "after the refused copy ran again")


_SECOND_RUNS = [
    "byte copy, HOME=/nonexistent",
    "one more newline",
    "LF line endings",
    "overlapping rows",
]


@pytest.mark.parametrize("second", _SECOND_RUNS)
def test_a_second_run_of_the_same_rows_at_once_is_refused_however_the_file_reads(
    own_slow_bank: RunningSandbox, tmp_path: Path, second: str
) -> None:
    """While a run pays 300 rows, a second run through another ledger of the same rows (a
    byte copy run with no home folder, as cron; one more newline; LF line endings; or a
    file sharing 40 of its payments under other row ids) exits 2 naming the first run's
    process, sends nothing, and no row is paid twice."""
    index = _SECOND_RUNS.index(second)
    rows = make_rows(30 + index, 300, tag="W")
    batch, ledger = _batch(tmp_path, rows)
    copy_folder = tmp_path / "copy"
    copy_folder.mkdir()
    copy = copy_folder / "payroll (1).csv"
    data = batch.read_bytes()
    assert data.count(b"\r\n") == len(rows) + 1, "the original is written with CRLF"
    own_rows = make_rows(40 + index, 30, tag="V")
    if second == "overlapping rows":
        shared = [dataclasses.replace(r, row_id=f"again-{r.row_id}") for r in rows[250:290]]
        write_batch(copy, [*own_rows, *shared])
    else:
        copy.write_bytes(
            {
                "one more newline": data + b"\r\n",
                "LF line endings": data.replace(b"\r\n", b"\n"),
            }.get(second, data)
        )
    no_home = {"HOME": "/nonexistent"} if "HOME" in second else None
    started = time.monotonic()
    try:
        with own_slow_bank.app.hold_payments(after=_PAID_BEFORE_HOLD):
            first = start_run(own_slow_bank, batch, ledger)
            wait_until(lambda: _paying_then_held(own_slow_bank, ledger), 60, "the first payments")
            again = run(own_slow_bank, copy, copy_folder / "copy.ledger.sqlite", env=no_home)
            overlapped = first.poll() is None
    finally:
        first_done = finish(first, started)
    assert_exactly_once(own_slow_bank, rows, ledger, f"a second run ({second}) at once")
    assert again.returncode == 2, again.describe()
    assert overlapped, "the first run ended before the second one tried"
    said = "40 of these 70 rows" if second == "overlapping rows" else "same content"
    assert said in again.stderr and f"process {first.pid} " in again.stderr, again.describe()
    errors = [line for line in again.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "Traceback" not in again.stderr, again.describe()
    assert first_done.returncode == 0, first_done.describe()
    references = {r.reference for r in own_rows}
    sent = [g for g in stats(own_slow_bank)["payments"] if g["reference"] in references]
    assert sent == [], "the refused run paid its own rows"
    assert not [p for p in copy_folder.iterdir() if "ledger" in p.name]


def test_a_dry_run_of_a_copy_while_the_original_pays_says_a_run_is_paying_it(
    own_slow_bank: RunningSandbox, tmp_path: Path
) -> None:
    """A dry run of a copy (LF line endings) while the original pays would count the
    payments in flight as still to pay: it exits 2 saying which process is paying it."""
    rows = make_rows(50, 300, tag="Y")
    batch, ledger = _batch(tmp_path, rows)
    copy = tmp_path / "copy.csv"
    copy.write_bytes(batch.read_bytes().replace(b"\r\n", b"\n"))
    started = time.monotonic()
    try:
        with own_slow_bank.app.hold_payments(after=_PAID_BEFORE_HOLD):
            first = start_run(own_slow_bank, batch, ledger)
            wait_until(lambda: _paying_then_held(own_slow_bank, ledger), 60, "the first payments")
            dry = run(own_slow_bank, copy, tmp_path / "copy.ledger.sqlite", "--dry-run")
            overlapped = first.poll() is None
    finally:
        first_done = finish(first, started)
    assert dry.returncode == 2, dry.describe()
    assert overlapped, "the first run ended before the dry run looked"
    assert f"process {first.pid} " in dry.stderr and "is paying" in dry.stderr, dry.describe()
    assert "would pay" not in dry.stdout, dry.describe()
    assert first_done.returncode == 0, first_done.describe()
    assert_exactly_once(own_slow_bank, rows, ledger, "a dry run of a copy meanwhile")


def test_a_ledger_disk_filling_up_mid_run_exits_3_and_the_rerun_pays_each_row_once(
    slow_bank: RunningSandbox, tmp_path: Path
) -> None:
    """Ledger writes fail mid-run (a 1.2 MB file size limit stands in for a full disk):
    exit 3 with one line saying to run again; the rerun finishes exactly once."""
    import resource

    rows = make_rows(7, 200, tag="F")
    batch, ledger = _batch(tmp_path, rows)

    def small_disk() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (1_200_000, 1_200_000))

    started = time.monotonic()
    process = subprocess.Popen(
        run_args(batch, ledger),
        env=run_env(slow_bank),
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=small_disk,  # noqa: PLW1509 - a limit for this child only, before exec
    )
    full = finish(process, started)
    assert full.returncode == 3, full.describe()
    assert "run the same command again" in full.stderr, full.describe()
    assert "Traceback" not in full.stderr, full.describe()
    # Mid-run: the bank has some of the payments (the ledger may not have recorded every
    # one it sent as submitted before its writes failed; the rerun must find them)
    references = {row.reference for row in rows}
    made = sum(g["payments"] for g in stats(slow_bank)["payments"] if g["reference"] in references)
    assert 0 < made < len(rows), f"{made} payments made; {full.describe()}"
    again = run(slow_bank, batch, ledger)
    assert again.returncode == 0, again.describe()
    assert_exactly_once(slow_bank, rows, ledger, "after the disk filled up")


# ---- 7. resume with a changed file ---------------------------------------------------------


def test_changed_file_after_interruption_is_refused_until_restored(
    slow_bank: RunningSandbox, tmp_path: Path, ledger_for: LedgerFor
) -> None:
    """After kill -9 an edited batch is refused (exit 2, says how to proceed); restored, it ends."""
    rows = make_rows(2, 100, tag="E" + ledger_for.tag)
    batch, ledger = _batch(tmp_path, rows, ledger_for=ledger_for)
    original = batch.read_bytes()
    _kill_mid_run(slow_bank, batch, ledger)
    paid_before = _bank_totals(slow_bank)
    batch.write_bytes(original.replace(rows[-1].amount.encode(), b"1.23", 1))
    refused = run(slow_bank, batch, ledger)
    assert refused.returncode == 2, refused.describe()
    assert "restore the original file" in refused.stderr, refused.describe()
    assert "new file of their own" in refused.stderr, refused.describe()
    assert "Traceback" not in refused.stderr, refused.describe()
    assert _bank_totals(slow_bank) == paid_before, "the refused run paid something"
    batch.write_bytes(original)
    again = run(slow_bank, batch, ledger)
    assert again.returncode == 0, again.describe()
    assert_exactly_once(slow_bank, rows, ledger, "after restoring the file")


def test_rerun_with_a_fresh_ledger_after_interruption_pays_no_row_twice(
    slow_bank: RunningSandbox, tmp_path: Path, ledger_for: LedgerFor
) -> None:
    """kill -9, then the file on a fresh ledger: paid rows held as repeats, no row paid twice."""
    rows = make_rows(5, 100, tag="N" + ledger_for.tag)
    batch, ledger = _batch(tmp_path, rows, ledger_for=ledger_for)
    _kill_mid_run(slow_bank, batch, ledger)
    fresh = run(slow_bank, batch, tmp_path / "fresh.ledger.sqlite")
    records = ledger_rows(tmp_path / "fresh.ledger.sqlite")
    held = [r for r in records if r["status"] == "held"]
    assert fresh.returncode == 1, fresh.describe()
    assert len(held) >= 5, fresh.describe()
    assert all(r["status"] in {"held", "submitted"} for r in records), records
    by_reference = {g["reference"]: g for g in stats(slow_bank)["payments"]}
    for row in rows:
        group = by_reference.get(row.reference)
        assert group is not None, f"row {row.row_id} has no payment"
        assert group["payments"] == 1, group
        assert group["submissions"] <= 1, group
