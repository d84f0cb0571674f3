"""`payrun run` of each payroll export against the sandbox bank: the line that says what
was read, the pay date (refused before it, --pay-now, a warning after it), exactly once."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from _exports import Credit, bacs18_file, bankline_file, barclays_file
from payrun.cli import main
from payrun.sandbox import RunningSandbox, serve_in_thread

SOURCE = "040004 30000001"
STAFF = [
    Credit("OLIVER SMITH", "309089", "00705473", 210000, "SALARY"),
    Credit("AMELIA JONES", "601613", "37704964", 198765, "SALARY"),
    Credit("MIA DAVIES", "110001", "22039287", 1, "SALARY"),
]
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


def payments(bank: RunningSandbox) -> list[dict[str, Any]]:
    """The sandbox's payments, grouped per creditor, amount and reference."""
    groups: list[dict[str, Any]] = httpx.get(f"{bank.base_url}/__sandbox/stats").json()["payments"]
    return groups


def pay(path: Path, *extra: str) -> int:
    """`payrun run` of ``path`` (no Confirmation of Payee round: names are the file's)."""
    return main(["run", str(path), "--no-confirm-payees", *extra])


def paid_once(bank: RunningSandbox, count: int) -> bool:
    """Every credit paid and submitted exactly once."""
    groups = payments(bank)
    return len(groups) == count and all(
        g["payments"] == 1 and g["submissions"] == 1 for g in groups
    )


FILES: dict[str, Callable[[date], tuple[str, str]]] = {
    "bacs18": lambda day: ("pay.txt", bacs18_file(STAFF, processing=day)),
    "bankline": lambda day: ("pay.csv", bankline_file(STAFF, credit_date=day)),
}


@pytest.mark.parametrize("kind", ["bacs18", "bankline", "barclays"])
def test_each_export_pays_exactly_once(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """Each format, run twice against the sandbox, pays every credit exactly once; the run
    says what it read first, and (the file's pay date being past) warns once."""
    bank = start_bank()
    extra: tuple[str, ...] = ()
    if kind == "barclays":
        name, text = "pay.csv", barclays_file(STAFF)
        extra = ("--source-account", SOURCE)
    else:
        name, text = FILES[kind](date(2025, 12, 23))
    path = tmp_path / name
    path.write_text(text, newline="")
    capsys.readouterr()
    assert pay(path, *extra) == 0
    err = capsys.readouterr().err
    assert err.startswith("read as "), err
    assert "3 credits, £4,087.66" in err.splitlines()[0], err
    assert (err.count("has passed") == 1) is (kind != "barclays"), err
    assert paid_once(bank, 3)
    assert pay(path, *extra) == 0
    assert paid_once(bank, 3)


@pytest.mark.parametrize("kind", ["bacs18", "bankline"])
def test_a_run_before_the_pay_date_is_refused_and_creates_nothing(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """Before the pay date: exit 2, one line naming the date and --pay-now, no ledger, no
    request; --pay-now then pays at once, exactly once."""
    bank = start_bank()
    name, text = FILES[kind](date.today() + timedelta(days=20))
    path = tmp_path / name
    path.write_text(text, newline="")
    capsys.readouterr()
    assert pay(path) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and err[0].startswith("read as "), err
    assert "is to be paid on" in err[1] and "--pay-now" in err[1], err
    assert not list(tmp_path.glob("*.ledger*"))
    assert payments(bank) == []
    assert pay(path, "--pay-now") == 0
    assert paid_once(bank, 3)


def test_pay_date_option_sets_a_payrun_file_s_date(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A payrun-format file has no pay date unless --pay-date gives one: a future one is
    refused, nothing created."""
    bank = start_bank()
    path = tmp_path / "pay.csv"
    path.write_text(
        "payee_name,sort_code,account_number,amount,source_account\n"
        f"Oliver Smith,309089,00705473,10.00,{SOURCE}\n"
    )
    future = (date.today() + timedelta(days=3)).isoformat()
    capsys.readouterr()
    assert pay(path, "--pay-date", future) == 2
    assert "--pay-now" in capsys.readouterr().err
    assert payments(bank) == []
    assert pay(path) == 0
    assert paid_once(bank, 1)


def test_contra_mismatch_refuses_the_run_before_anything_is_created(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Standard 18 file whose UTL1 disagrees: exit 2, one line, no ledger, no payment."""
    bank = start_bank()
    total = sum(c.pence for c in STAFF)
    path = tmp_path / "pay.txt"
    path.write_text(bacs18_file(STAFF, trailer=(total, total, 1, 2)))
    capsys.readouterr()
    assert pay(path, "--pay-now") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "UTL1 (line 11)" in err[0], err
    assert not list(tmp_path.glob("*.ledger*"))
    assert payments(bank) == []


def test_the_ledger_keeps_the_file_s_line_numbers(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The rows of a Standard 18 run are numbered by their lines in the file."""
    start_bank()
    path = tmp_path / "pay.txt"
    path.write_text(bacs18_file(STAFF))
    assert pay(path) == 0
    with sqlite3.connect(tmp_path / "pay.txt.ledger.sqlite") as db:
        rows = [row for (row,) in db.execute("SELECT row FROM rows ORDER BY row")]
    assert rows == [5, 6, 7]


def test_a_dry_run_before_the_pay_date_says_a_run_would_be_refused(
    start_bank: StartBank, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dry run creates nothing whatever the date, and says a run today would be refused."""
    bank = start_bank()
    name, text = FILES["bacs18"](date.today() + timedelta(days=20))
    path = tmp_path / name
    path.write_text(text, newline="")
    capsys.readouterr()
    assert pay(path, "--dry-run") == 0
    err = capsys.readouterr().err
    assert "warning: a run today would be refused" in err and "--pay-now" in err, err
    assert payments(bank) == []
