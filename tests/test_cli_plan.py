"""`payrun plan`, `payrun approve` and `payrun run --plan` end to end, in process, over real
loopback HTTP to a sandbox bank, on the SQLite file and the PostgreSQL ledger."""

from __future__ import annotations

import csv
import json
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import openpyxl  # type: ignore[import-untyped]
import pytest

from _exports import Credit, bacs18_data
from _run_helpers import (
    DatabaseLedgerRef,
    LedgerFor,
    LedgerRef,
    assert_exactly_once,
    count_status,
    finish,
    kill_group,
    ledger_rows,
    make_rows,
    run,
    start_run,
    wait_until,
)
from _run_helpers import write_batch as write_trial_batch
from payrun._models import AuditEntry
from payrun.approval._keys import rejection_verifies
from payrun.cli import main
from payrun.config import database_url
from payrun.ledger import DatabaseLedger, LedgerLocation, open_ledger
from payrun.sandbox import RunningSandbox, serve_in_thread

# In the sandbox's directory of true names; the first two are existing payees
EMPLOYEES = [
    ("Oliver Smith", "309089", "00705473"),
    ("Amelia Jones", "601613", "37704964"),
    ("Mia Davies", "110001", "22039287"),
]
SOURCE = "040004 30000001"

StartBank = Callable[[], RunningSandbox]


@pytest.fixture
def bank(monkeypatch: pytest.MonkeyPatch) -> Iterator[RunningSandbox]:
    """A fresh sandbox bank (a real uvicorn server), with PAYRUN_* pointing at it."""
    with ExitStack() as stack:
        running = stack.enter_context(serve_in_thread(deliver_after_ms=20))
        monkeypatch.setenv("PAYRUN_BASE_URL", running.base_url)
        monkeypatch.setenv("PAYRUN_API_KEY", running.api_key)
        monkeypatch.setenv("PAYRUN_SETTLE_WAIT", "1")
        yield running


def write_batch(path: Path, amounts: list[str], *, payees: list[tuple[str, str, str]]) -> Path:
    """A batch paying each payee the amount at the same position."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            ["row_id", "payee_name", "sort_code", "account_number", "amount", "reference"]
            + ["source_account"]
        )
        for number, (amount, (name, sort_code, account)) in enumerate(
            zip(amounts, payees, strict=True)
        ):
            writer.writerow([f"E{number}", name, sort_code, account, amount, "NOV PAY", SOURCE])
    return path


def approver_key(tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]) -> str:
    """Make NAME's key with `payrun approver-key`; its [[approver]] entry."""
    assert main(["approver-key", name, "-o", str(tmp_path / f"{name}.pem")]) == 0
    return capsys.readouterr().out


def write_policy(tmp_path: Path, rules: str, entries: list[str]) -> Path:
    """A policy file only its owner can change."""
    path = tmp_path / "policy.toml"
    path.write_text(f"[approval]\n{rules}\n" + "\n".join(entries), encoding="utf-8")
    path.chmod(0o600)
    return path


def location(ledger: LedgerRef) -> LedgerLocation:
    """The payrun location of a test's ledger."""
    if isinstance(ledger, DatabaseLedgerRef):
        url = database_url(ledger.url)
        assert url is not None
        return DatabaseLedger(url, ledger.name)
    return ledger


def audit(ledger: LedgerRef) -> list[AuditEntry]:
    """The ledger's audit trail, read the way payrun reads it."""
    with open_ledger(location(ledger), readonly=True) as store:
        return store.audit_trail()


def payments(bank: RunningSandbox) -> list[dict[str, Any]]:
    """The payments the bank holds, grouped per creditor, amount and reference."""
    found: list[dict[str, Any]] = httpx.get(f"{bank.base_url}/__sandbox/stats").json()["payments"]
    return found


def make_plan(
    batch: Path, ledger: LedgerRef, capsys: pytest.CaptureFixture[str], *extra: str
) -> dict[str, Any]:
    """`payrun plan --format json` as carol; the printed plan."""
    args = ["plan", str(batch), "--ledger", str(ledger), "--as", "carol", "--format", "json"]
    code = main([*args, "--no-confirm-payees", *extra])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    document: dict[str, Any] = json.loads(out)
    return document


def approve(batch: Path, ledger: LedgerRef, plan: str, name: str, key: Path, *extra: str) -> int:
    """`payrun approve ... --yes` as NAME with KEY."""
    words = ["approve", str(batch), "--ledger", str(ledger), "--plan", plan, "--as", name]
    return main([*words, "--key", str(key), "--yes", *extra])


def pay(ledger: LedgerRef, batch: Path, *extra: str) -> int:
    """`payrun run BATCH --ledger L ...`, quietly."""
    return main(["run", str(batch), "--ledger", str(ledger), "-q", *extra])


def test_plan_approve_and_run_pay_exactly_the_plan(
    bank: RunningSandbox,
    tmp_path: Path,
    ledger_for: LedgerFor,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The happy path on each ledger: plan, one approval, run --plan pays the plan's rows;
    every step is in the audit trail, and the report names the plan, maker and approver."""
    alice = approver_key(tmp_path, "alice", capsys)
    policy = write_policy(tmp_path, "required = true", [alice])
    batch = write_batch(tmp_path / "pay.csv", ["10.00", "20.00"], payees=EMPLOYEES[:2])
    ledger = ledger_for(batch)
    plan = make_plan(batch, ledger, capsys, "--policy", str(policy))
    assert plan["rows"] == 2 and plan["total"] == "30.00" and plan["maker"] == "carol"
    assert plan["accounts"] == [{"source_account": SOURCE, "rows": 2, "total": "30.00"}]
    assert len(plan["plan"]) == 64 and plan["new_payees"] == 0
    short = plan["plan"][:12]
    assert (
        approve(batch, ledger, short, "alice", tmp_path / "alice.pem", "--policy", str(policy)) == 0
    )
    run_report = tmp_path / "run.xlsx"
    paid = pay(ledger, batch, "--plan", short, "--policy", str(policy), "--report", str(run_report))
    assert paid == 0, capsys.readouterr()
    assert {r["status"] for r in ledger_rows(ledger)} == {"submitted"}
    assert sum(group["payments"] for group in payments(bank)) == 2
    trail = audit(ledger)
    assert [(e.event, e.actor) for e in trail][:2] == [("plan", "carol"), ("approve", "alice")]
    assert trail[2].event == "run" and {e.plan_id for e in trail} == {plan["plan"]}
    capsys.readouterr()
    assert main(["report", str(batch), "--ledger", str(ledger), "--audit", "--format", "json"]) == 0
    exported = json.loads(capsys.readouterr().out)
    assert [(e["event"], e["actor"]) for e in exported][:2] == [
        ("plan", "carol"),
        ("approve", "alice"),
    ]
    workbook = tmp_path / "report.xlsx"
    assert main(["report", str(batch), "--ledger", str(ledger), "-o", str(workbook)]) == 0
    for written in (workbook, run_report):
        summary = openpyxl.load_workbook(written)["summary"]
        lines = {row[0]: row[1] for row in summary.iter_rows(values_only=True)}
        named = (lines["plan"], lines["maker"], lines["approvers"])
        assert named == (plan["plan"], "carol", "alice")


def test_refused_approvals_record_nothing(
    bank: RunningSandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The maker, an unknown approver and a wrong key are refused (exit 2, one line), and
    nothing is added to the audit trail."""
    entries = [approver_key(tmp_path, name, capsys) for name in ("alice", "carol")]
    approver_key(tmp_path, "mallory", capsys)
    policy = str(write_policy(tmp_path, "", entries))
    batch = write_batch(tmp_path / "pay.csv", ["10.00"], payees=EMPLOYEES[:1])
    ledger = tmp_path / "pay.ledger.sqlite"
    plan = make_plan(batch, ledger, capsys)["plan"]
    tries = [
        ("carol", "carol.pem", "made plan"),
        ("dave", "alice.pem", "not an approver"),
        ("alice", "mallory.pem", "is not alice's"),
    ]
    for name, key, why in tries:
        assert approve(batch, ledger, plan, name, tmp_path / key, "--policy", policy) == 2
        err = capsys.readouterr().err
        assert why in err and len(err.strip().splitlines()) == 1
    assert [e.event for e in audit(ledger)] == ["plan"]


def test_a_file_changed_after_approval_is_refused_before_anything_is_created(
    bank: RunningSandbox, tmp_path: Path, ledger_for: LedgerFor, capsys: pytest.CaptureFixture[str]
) -> None:
    """One amount changed after the approval: run --plan exits 2 naming the row, and the
    bank has no payment."""
    batch = write_batch(tmp_path / "pay.csv", ["10.00", "20.00"], payees=EMPLOYEES[:2])
    ledger = ledger_for(batch)
    approver_key(tmp_path, "alice", capsys)
    plan = make_plan(batch, ledger, capsys)["plan"]
    assert approve(batch, ledger, plan, "alice", tmp_path / "alice.pem") == 0
    write_batch(batch, ["10.00", "2000.00"], payees=EMPLOYEES[:2])
    capsys.readouterr()
    assert pay(ledger, batch, "--plan", plan) == 2
    assert "row 3 amount 20.00 -> 2000.00" in capsys.readouterr().err
    assert payments(bank) == []
    assert all(r["status"] != "submitted" for r in ledger_rows(ledger))
    assert approve(batch, ledger, plan, "alice", tmp_path / "alice.pem") == 2


def test_an_expired_plan_can_be_neither_approved_nor_run(
    bank: RunningSandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A plan past its policy's expiry: approve and run --plan exit 2 saying it expired."""
    alice = approver_key(tmp_path, "alice", capsys)
    policy = str(write_policy(tmp_path, "expires_after_days = 0.00002", [alice]))
    batch = write_batch(tmp_path / "pay.csv", ["10.00"], payees=EMPLOYEES[:1])
    ledger = tmp_path / "pay.ledger.sqlite"
    plan = make_plan(batch, ledger, capsys, "--policy", policy)["plan"]
    time.sleep(2)
    assert approve(batch, ledger, plan, "alice", tmp_path / "alice.pem", "--policy", policy) == 2
    assert "expired" in capsys.readouterr().err
    assert pay(ledger, batch, "--plan", plan, "--policy", policy) == 2
    assert "expired" in capsys.readouterr().err
    assert payments(bank) == []


@pytest.mark.parametrize(
    ("rules", "amounts", "payees"),
    [
        ('second_approver_above = "25.00"', ["10.00", "20.00"], EMPLOYEES[:2]),
        ("second_approver_for_new_payees = true", ["10.00"], EMPLOYEES[2:3]),
    ],
    ids=["above-threshold", "new-payee"],
)
def test_one_approver_is_too_few_above_the_threshold_or_with_a_new_payee(
    bank: RunningSandbox,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    rules: str,
    amounts: list[str],
    payees: list[tuple[str, str, str]],
) -> None:
    """A plan at or above second_approver_above, or paying a new payee, needs a second
    approver: with one, run --plan is refused; with two, it pays."""
    entries = [approver_key(tmp_path, name, capsys) for name in ("alice", "bob")]
    policy = str(write_policy(tmp_path, rules, entries))
    batch = write_batch(tmp_path / "pay.csv", amounts, payees=payees)
    ledger = tmp_path / "pay.ledger.sqlite"
    plan = make_plan(batch, ledger, capsys, "--policy", policy)["plan"]
    assert approve(batch, ledger, plan, "alice", tmp_path / "alice.pem", "--policy", policy) == 0
    capsys.readouterr()
    assert pay(ledger, batch, "--plan", plan, "--policy", policy, "--no-confirm-payees") == 2
    assert "needs 2 approval(s)" in capsys.readouterr().err
    assert payments(bank) == []
    assert approve(batch, ledger, plan, "bob", tmp_path / "bob.pem", "--policy", policy) == 0
    assert pay(ledger, batch, "--plan", plan, "--policy", policy, "--no-confirm-payees") == 0


def test_a_policy_writable_by_others_is_refused(
    bank: RunningSandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """plan, approve and run refuse a policy file others can change (exit 2)."""
    policy = write_policy(tmp_path, "required = true", [])
    policy.chmod(0o666)
    batch = write_batch(tmp_path / "pay.csv", ["10.00"], payees=EMPLOYEES[:1])
    for words in (["plan", str(batch)], ["run", str(batch)]):
        assert main([*words, "--policy", str(policy)]) == 2
        assert "chmod go-w" in capsys.readouterr().err
    assert payments(bank) == []


def test_a_run_without_a_plan_is_refused_when_the_policy_requires_one(
    bank: RunningSandbox,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """required = true (here through PAYRUN_POLICY_FILE): a plain run is refused, exit 2,
    a dry run is not; without a policy the same run pays as before."""
    monkeypatch.setenv("PAYRUN_POLICY_FILE", str(write_policy(tmp_path, "required = true", [])))
    batch = write_batch(tmp_path / "pay.csv", ["10.00"], payees=EMPLOYEES[:1])
    assert pay(tmp_path / "pay.ledger.sqlite", batch) == 2
    assert "requires an approved plan" in capsys.readouterr().err
    assert payments(bank) == []
    # A dry run pays nothing, and needs no plan
    assert pay(tmp_path / "pay.ledger.sqlite", batch, "--dry-run") == 0
    monkeypatch.delenv("PAYRUN_POLICY_FILE")
    assert pay(tmp_path / "pay.ledger.sqlite", batch) == 0


def test_rows_above_max_payment_are_held_and_never_paid(
    bank: RunningSandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A row above max_payment is left out of the plan (held), and run --plan holds it."""
    alice = approver_key(tmp_path, "alice", capsys)
    policy = str(write_policy(tmp_path, 'max_payment = "15.00"', [alice]))
    batch = write_batch(tmp_path / "pay.csv", ["10.00", "20.00"], payees=EMPLOYEES[:2])
    ledger = tmp_path / "pay.ledger.sqlite"
    plan = make_plan(batch, ledger, capsys, "--policy", policy)
    assert (plan["rows"], plan["held"], plan["total"]) == (1, 1, "10.00")
    assert (
        approve(batch, ledger, plan["plan"], "alice", tmp_path / "alice.pem", "--policy", policy)
        == 0
    )
    assert pay(ledger, batch, "--plan", plan["plan"], "--policy", policy) == 1
    statuses = {r["row"]: r["status"] for r in ledger_rows(ledger)}
    assert statuses == {2: "submitted", 3: "held"}
    assert sum(group["payments"] for group in payments(bank)) == 1


def test_a_rejected_plan_is_not_run(
    bank: RunningSandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """approve --reject records a rejection; the plan can then be neither approved nor run."""
    approver_key(tmp_path, "alice", capsys)
    batch = write_batch(tmp_path / "pay.csv", ["10.00"], payees=EMPLOYEES[:1])
    ledger = tmp_path / "pay.ledger.sqlite"
    plan = make_plan(batch, ledger, capsys)["plan"]
    words = ["approve", str(batch), "--ledger", str(ledger), "--plan", plan, "--as", "bob"]
    words += ["--yes", "--reject"]
    assert main([*words, "--note", "wrong month"]) == 0
    assert approve(batch, ledger, plan, "alice", tmp_path / "alice.pem") == 2
    assert pay(ledger, batch, "--plan", plan) == 2
    assert "rejected by bob (wrong month)" in capsys.readouterr().err
    assert [e.event for e in audit(ledger)] == ["plan", "reject"]


def test_a_payee_gone_since_the_plan_is_refused_before_it_is_created(
    bank: RunningSandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A payee the plan reused is gone at run time: the run would create a payee the plan
    did not count as new, so it is refused (exit 2) before any payee or payment is made."""
    approver_key(tmp_path, "alice", capsys)
    batch = write_batch(tmp_path / "pay.csv", ["10.00"], payees=EMPLOYEES[:1])
    ledger = tmp_path / "pay.ledger.sqlite"
    plan = make_plan(batch, ledger, capsys)
    assert plan["new_payees"] == 0
    assert approve(batch, ledger, plan["plan"], "alice", tmp_path / "alice.pem") == 0
    state = bank.state
    before = len(state.payees)
    for owner, ids in state.by_owner.items():
        if owner.startswith("payees:"):
            ids[:] = [i for i in ids if state.payees[i].account_holder != EMPLOYEES[0][0]]
    capsys.readouterr()
    assert pay(ledger, batch, "--plan", plan["plan"], "--no-confirm-payees") == 2
    assert "did not count as new" in capsys.readouterr().err
    assert payments(bank) == [] and len(state.payees) == before


def test_a_run_of_a_plan_killed_with_kill_9_resumes_and_pays_each_row_once(
    tmp_path: Path,
    ledger_for: LedgerFor,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kill -9 of `payrun run --plan` mid-run (some rows submitted): the same command again
    pays every planned row exactly once, and each start is in the audit trail."""
    rows = make_rows(29, 120, tag="A" + ledger_for.tag)
    batch = write_trial_batch(tmp_path / "plan.csv", rows)
    ledger = ledger_for(batch)
    slow = {"latency_ms": 20, "jitter_ms": 10, "deliver_after_ms": 50}
    with serve_in_thread(**slow, rng_seed=29) as sandbox:
        monkeypatch.setenv("PAYRUN_BASE_URL", sandbox.base_url)
        monkeypatch.setenv("PAYRUN_API_KEY", sandbox.api_key)
        approver_key(tmp_path, "alice", capsys)
        plan = make_plan(batch, ledger, capsys)["plan"]
        assert approve(batch, ledger, plan, "alice", tmp_path / "alice.pem") == 0
        started = time.monotonic()
        # Killed mid-run however slow the machine: the bank holds the payments after 20
        # (never made: the client is gone when they go on)
        with sandbox.app.hold_payments(after=20):
            process = start_run(sandbox, batch, ledger, "--plan", plan)
            try:
                wait_until(
                    lambda: (
                        count_status(ledger, "submitted") >= 10 and sandbox.app.payments_held > 0
                    ),
                    60,
                    "10 rows submitted and the next payments held",
                )
            finally:
                kill_group(process, signal.SIGKILL)
                killed = finish(process, started)
        assert killed.returncode == -signal.SIGKILL, killed.describe()
        assert count_status(ledger, "submitted") < len(rows), "the run ended before the kill"
        done = run(sandbox, batch, ledger, "--plan", plan)
        assert done.returncode == 0, done.describe()
        assert_exactly_once(sandbox, rows, ledger, done.describe())
    assert [e.event for e in audit(ledger)] == ["plan", "approve", "run", "run"]


def test_changed_bank_details_are_held_or_counted_in_the_plan(
    bank: RunningSandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A known payee name with new bank details: held (not planned) by default; with
    --accept-changed-details planned, and counted as a changed and a new payee."""
    changed = [("Oliver Smith", "110001", "22039287")]
    batch = write_batch(tmp_path / "pay.csv", ["10.00"], payees=changed)
    ledger = tmp_path / "pay.ledger.sqlite"
    args = ["plan", str(batch), "--ledger", str(ledger), "--format", "json", "--no-confirm-payees"]
    assert main(args) == 2
    assert "nothing to plan" in capsys.readouterr().err
    plan = make_plan(batch, ledger, capsys, "--accept-changed-details")
    assert (plan["rows"], plan["changed_details"], plan["new_payees"]) == (1, 1, 1)


def test_an_unknown_plan_is_refused(
    bank: RunningSandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """run --plan and approve with an id the ledger does not hold, or no plan at all, or a
    word that is not an id: exit 2, one line, nothing paid."""
    approver_key(tmp_path, "alice", capsys)
    batch = write_batch(tmp_path / "pay.csv", ["10.00"], payees=EMPLOYEES[:1])
    ledger = tmp_path / "pay.ledger.sqlite"
    assert pay(ledger, batch, "--plan", "0123456789ab") == 2
    assert "no plans in the ledger" in capsys.readouterr().err
    make_plan(batch, ledger, capsys)
    for given, says in (("0123456789ab", "no plan 0123456789ab"), ("abc", "not a plan id")):
        assert pay(ledger, batch, "--plan", given) == 2
        assert says in capsys.readouterr().err
        assert approve(batch, ledger, given, "alice", tmp_path / "alice.pem") == 2
        assert says in capsys.readouterr().err
    assert payments(bank) == []


def named_policy(tmp_path: Path, name: str, rules: str, entries: list[str]) -> str:
    """A policy file called NAME.toml only its owner can change; its path."""
    path = tmp_path / f"{name}.toml"
    path.write_text(f"[approval]\n{rules}\n" + "\n".join(entries), encoding="utf-8")
    path.chmod(0o600)
    return str(path)


def test_a_plan_made_under_another_policy_is_neither_approved_nor_run(
    bank: RunningSandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A £500 row planned under a lax policy (no max_payment): approve and run --plan under
    the real one (max_payment 100.00) are refused (exit 2, one line), nothing is paid."""
    alice = approver_key(tmp_path, "alice", capsys)
    lax = named_policy(tmp_path, "lax", "", [alice])
    real = named_policy(tmp_path, "real", 'max_payment = "100.00"', [alice])
    batch = write_batch(tmp_path / "b.csv", ["500.00"], payees=EMPLOYEES[:1])
    ledger = tmp_path / "b.ledger.sqlite"
    plan = make_plan(batch, ledger, capsys, "--policy", lax)
    assert plan["rows"] == 1
    key = tmp_path / "alice.pem"
    assert approve(batch, ledger, plan["plan"], "alice", key, "--policy", real) == 2
    err = capsys.readouterr().err
    assert "made under another policy" in err and len(err.strip().splitlines()) == 1
    assert approve(batch, ledger, plan["plan"], "alice", key, "--policy", lax) == 0
    capsys.readouterr()
    assert pay(ledger, batch, "--plan", plan["plan"], "--policy", real) == 2
    err = capsys.readouterr().err
    assert "made under another policy" in err and len(err.strip().splitlines()) == 1
    assert payments(bank) == []
    assert [e.event for e in audit(ledger)] == ["plan", "approve"]


def test_run_plan_pays_on_the_approved_pay_date_only(
    bank: RunningSandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A plan approved to pay on a future day: run --plan before it, with --pay-now, or
    with another --pay-date is refused (exit 2, one line), nothing paid, no run recorded."""
    approver_key(tmp_path, "alice", capsys)
    batch = write_batch(tmp_path / "pay.csv", ["10.00"], payees=EMPLOYEES[:1])
    ledger = tmp_path / "pay.ledger.sqlite"
    day = (date.today() + timedelta(days=30)).isoformat()  # noqa: DTZ011 - as payrun's
    plan = make_plan(batch, ledger, capsys, "--pay-date", day)["plan"]
    assert approve(batch, ledger, plan, "alice", tmp_path / "alice.pem") == 0
    today = date.today().isoformat()  # noqa: DTZ011 - as payrun's
    tries = [
        ([], "and today is"),
        (["--pay-now"], "--pay-now cannot pay it before"),
        (["--pay-date", today], "not"),
    ]
    capsys.readouterr()
    for extra, says in tries:
        assert pay(ledger, batch, "--plan", plan, *extra) == 2
        err = capsys.readouterr().err
        assert says in err and "approved to pay on" in err, err
        assert len(err.strip().splitlines()) == 1
    assert payments(bank) == []
    assert [e.event for e in audit(ledger)] == ["plan", "approve"]


def test_a_run_that_started_before_the_plan_expired_resumes_after(
    bank: RunningSandbox,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """run --plan exits 3 (the bank away), the plan expires, the same command again
    resumes and pays (expiry stops only a plan's first run)."""
    alice = approver_key(tmp_path, "alice", capsys)
    policy = named_policy(tmp_path, "short", "expires_after_days = 0.00015", [alice])
    batch = write_batch(tmp_path / "pay.csv", ["10.00"], payees=EMPLOYEES[:1])
    ledger = tmp_path / "pay.ledger.sqlite"
    plan = make_plan(batch, ledger, capsys, "--policy", policy)
    key = tmp_path / "alice.pem"
    assert approve(batch, ledger, plan["plan"], "alice", key, "--policy", policy) == 0
    monkeypatch.setenv("PAYRUN_BASE_URL", "http://127.0.0.1:9")
    assert pay(ledger, batch, "--plan", plan["plan"], "--policy", policy) == 3
    expires = datetime.fromisoformat(plan["expires_at"])
    time.sleep(max(0.0, (expires - datetime.now(UTC)).total_seconds()) + 0.5)
    monkeypatch.setenv("PAYRUN_BASE_URL", bank.base_url)
    capsys.readouterr()
    assert pay(ledger, batch, "--plan", plan["plan"], "--policy", policy) == 0, capsys.readouterr()
    assert sum(group["payments"] for group in payments(bank)) == 1
    assert [e.event for e in audit(ledger)] == ["plan", "approve", "run", "run"]


def test_the_report_names_only_approvers_whose_signatures_verified(
    bank: RunningSandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An approval entry with a bad signature (written into the ledger by hand) is not
    named as an approver in the report: the run's audit entry names the verified ones."""
    entries = [approver_key(tmp_path, name, capsys) for name in ("alice", "mallory")]
    policy = named_policy(tmp_path, "policy", "", entries)
    batch = write_batch(tmp_path / "pay.csv", ["10.00"], payees=EMPLOYEES[:1])
    ledger = tmp_path / "pay.ledger.sqlite"
    plan = make_plan(batch, ledger, capsys, "--policy", policy)["plan"]
    assert approve(batch, ledger, plan, "alice", tmp_path / "alice.pem", "--policy", policy) == 0
    forged = {"note": None, "signature": "AAAA", "public_key": audit_key(ledger)}
    with open_ledger(location(ledger)) as store:
        store.append_audit(
            AuditEntry(datetime.now(UTC), "approve", "mallory", plan, json.dumps(forged))
        )
    assert pay(ledger, batch, "--plan", plan, "--policy", policy) == 0
    workbook = tmp_path / "report.xlsx"
    assert main(["report", str(batch), "--ledger", str(ledger), "-o", str(workbook)]) == 0
    summary = openpyxl.load_workbook(workbook)["summary"]
    lines = {row[0]: row[1] for row in summary.iter_rows(values_only=True)}
    assert lines["approvers"] == "alice"
    assert json.loads(audit(ledger)[-1].detail)["approvers"] == ["alice"]


def audit_key(ledger: LedgerRef) -> str:
    """The public key the ledger's first approval was recorded with."""
    detail: dict[str, str] = json.loads(audit(ledger)[1].detail)
    return detail["public_key"]


def test_a_rejection_under_a_policy_needs_an_approver_and_their_key(
    bank: RunningSandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """approve --reject under a policy: someone it does not list, or an approver without
    their key or with another's, is refused (exit 2, nothing recorded); with their own key
    the rejection is recorded, signed."""
    entries = [approver_key(tmp_path, name, capsys) for name in ("alice", "bob")]
    policy = named_policy(tmp_path, "policy", "", entries)
    batch = write_batch(tmp_path / "pay.csv", ["10.00"], payees=EMPLOYEES[:1])
    ledger = tmp_path / "pay.ledger.sqlite"
    plan = make_plan(batch, ledger, capsys, "--policy", policy)["plan"]
    words = ["approve", str(batch), "--ledger", str(ledger), "--plan", plan, "--yes"]
    words += ["--reject", "--note", "wrong month", "--policy", policy]
    tries = [
        (["--as", "mallory"], "not an approver"),
        (["--as", "bob"], "needs bob's approver key"),
        (["--as", "bob", "--key", str(tmp_path / "alice.pem")], "needs bob's approver key"),
    ]
    for extra, says in tries:
        assert main([*words, *extra]) == 2
        err = capsys.readouterr().err
        assert says in err and len(err.strip().splitlines()) == 1
    assert [e.event for e in audit(ledger)] == ["plan"]
    assert main([*words, "--as", "bob", "--key", str(tmp_path / "bob.pem")]) == 0
    rejection = audit(ledger)[-1]
    detail = json.loads(rejection.detail)
    assert (rejection.event, rejection.actor) == ("reject", "bob")
    assert rejection_verifies(detail["public_key"], plan, detail["signature"])


def test_a_plan_read_with_an_explicit_input_format_is_approved_and_run(
    bank: RunningSandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file auto-detection cannot read (it reads two ways), planned with --input-format
    bacs18: approve and run --plan read it the plan's way, and it is paid."""
    credit = Credit("MIA,AMOUNT", "110001", "22039287", 1000, "NOV PAY")
    batch = tmp_path / "pay.txt"
    batch.write_text(bacs18_data(credit) + "\n", encoding="ascii")
    assert main(["validate", str(batch)]) == 2
    assert "reads both" in capsys.readouterr().err
    approver_key(tmp_path, "alice", capsys)
    ledger = tmp_path / "pay.ledger.sqlite"
    plan = make_plan(batch, ledger, capsys, "--input-format", "bacs18")
    assert plan["rows"] == 1
    assert approve(batch, ledger, plan["plan"], "alice", tmp_path / "alice.pem") == 0
    assert pay(ledger, batch, "--plan", plan["plan"], "--no-confirm-payees") == 0
    assert sum(group["payments"] for group in payments(bank)) == 1


# Not in the sandbox's directory under this name: Confirmation of Payee says no-match
STRANGER = ("Peter Nobody", "401276", "15487605")


def test_a_plan_asks_cop_for_new_payees_and_its_run_creates_them_with_that_answer(
    bank: RunningSandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`payrun plan` asks Confirmation of Payee about each new payee: the directory's match
    is planned, a no-match is held out of the plan with the run's reason; run --plan then
    creates the planned payee with the plan's CoP request and asks the bank no second time."""
    approver_key(tmp_path, "alice", capsys)
    payees = [EMPLOYEES[0], EMPLOYEES[2], STRANGER]
    batch = write_batch(tmp_path / "pay.csv", ["10.00", "20.00", "30.00"], payees=payees)
    ledger = tmp_path / "pay.ledger.sqlite"
    state = bank.state
    asked = len(state.cop_requests)
    code = main(["plan", str(batch), "--ledger", str(ledger), "--as", "carol"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "Confirmation of Payee: 1 new payee(s) matched; 1 row(s) held" in out
    assert "Peter Nobody, row(s) 4: no-match (no-match-name): held" in out
    assert len(state.cop_requests) == asked + 2
    short = out.split()[1].rstrip(":")
    with open_ledger(ledger, readonly=True) as store:
        [(plan_id, text)] = store.plans()
    assert plan_id.startswith(short)
    document = json.loads(text)
    assert document["held"] == [4] and document["new_payee_rows"] == [3]
    checks = {check["payee_name"]: check for check in document["cop"]}
    assert checks["Mia Davies"]["result"] == "match" and not checks["Mia Davies"]["held"]
    assert checks["Peter Nobody"]["result"] == "no-match" and checks["Peter Nobody"]["held"]
    assert approve(batch, ledger, short, "alice", tmp_path / "alice.pem") == 0
    asked = len(state.cop_requests)
    assert pay(ledger, batch, "--plan", short) == 1, capsys.readouterr().err
    assert len(state.cop_requests) == asked
    created = [p for p in state.payees.values() if p.account_holder == "Mia Davies"]
    assert [f"/v0/cop-requests/{p.cop_request_id}" for p in created] == [
        checks["Mia Davies"]["cop_request_url"]
    ]
    statuses = {r["row"]: r["status"] for r in ledger_rows(ledger)}
    assert statuses == {2: "submitted", 3: "submitted", 4: "held"}


def test_a_plan_honours_accept_close_match_and_no_confirm_payees(
    bank: RunningSandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A close match is planned with --accept-close-match (the bank's name shown), held
    without it; with --no-confirm-payees the plan asks Confirmation of Payee nothing."""
    close = ("Grace Turnor", "086086", "83231350")
    state = bank.state
    outs = []
    for number, extra in enumerate(([], ["--accept-close-match"], ["--no-confirm-payees"])):
        batch = write_batch(tmp_path / f"pay{number}.csv", ["10.00"], payees=[close])
        asked = len(state.cop_requests)
        code = main(["plan", str(batch), "--as", "carol", *extra])
        outs.append((code, capsys.readouterr(), len(state.cop_requests) - asked))
    (held, held_io, held_asked), (took, took_io, took_asked), (plain, plain_io, none) = outs
    assert (held, held_asked) == (2, 1) and "nothing to plan" in held_io.err
    assert "Confirmation of Payee held 1 row(s) (row 2: Confirmation of Payee: close" in held_io.err
    assert (took, took_asked) == (0, 1)
    assert "Confirmation of Payee: 1 new payee(s) matched; 0 row(s) held" in took_io.out
    assert "close-match (close-match-name), the bank says 'Grace Turner': accepted" in took_io.out
    assert (plain, none) == (0, 0) and "Confirmation of Payee" not in plain_io.out
