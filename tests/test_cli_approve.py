"""`payrun approve` on a real pseudo-terminal: the plan's summary, then its first 8 hex
digits typed to approve; type-ahead is thrown away before the question, so keys pressed
before the plan was shown never approve it."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from _run_helpers import run_env
from _terminal import Terminal, on_terminal
from payrun.cli import main
from payrun.ledger import open_ledger
from payrun.sandbox import RunningSandbox, serve_in_thread

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")

QUESTION = b"to approve it: "


@dataclass(frozen=True)
class _Planned:
    """A recorded plan waiting for approval."""

    bank: RunningSandbox
    batch: Path
    ledger: Path
    plan: str
    key: Path


@pytest.fixture
def planned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[_Planned]:
    """A batch of two rows planned by carol, and alice's approver key."""
    batch = tmp_path / "pay.csv"
    batch.write_text(
        "payee_name,sort_code,account_number,amount,reference,source_account\n"
        "Oliver Smith,309089,00705473,10.00,NOV PAY,040004 30000001\n"
        "Amelia Jones,601613,37704964,20.00,NOV PAY,040004 30000001\n",
        encoding="utf-8",
    )
    ledger = tmp_path / "pay.csv.ledger.sqlite"
    with serve_in_thread() as bank:
        monkeypatch.setenv("PAYRUN_BASE_URL", bank.base_url)
        monkeypatch.setenv("PAYRUN_API_KEY", bank.api_key)
        assert main(["approver-key", "alice", "-o", str(tmp_path / "alice.pem")]) == 0
        assert main(["plan", str(batch), "--as", "carol", "--format", "json"]) == 0
        plan = capsys.readouterr().out.split('"plan": "')[1][:64]
        yield _Planned(bank, batch, ledger, plan, tmp_path / "alice.pem")


def _events(ledger: Path) -> list[str]:
    with open_ledger(ledger, readonly=True) as store:
        return [entry.event for entry in store.audit_trail()]


@contextlib.contextmanager
def _on_terminal(planned: _Planned) -> Iterator[Terminal]:
    """Start ``payrun approve`` as alice with a pseudo-terminal as stdin, stdout, stderr."""
    args = ["approve", str(planned.batch), "--plan", planned.plan[:12]]
    args += ["--as", "alice", "--key", str(planned.key)]
    with on_terminal(args, run_env(planned.bank), planned.batch.parent) as terminal:
        yield terminal


def test_typing_the_plans_first_8_hex_digits_approves_it(planned: _Planned) -> None:
    """The terminal shows the plan's summary; its first 8 hex digits record the approval."""
    with _on_terminal(planned) as terminal:
        terminal.wait_for(QUESTION)
        shown = terminal.text
        assert _events(planned.ledger) == ["plan"]
        terminal.type(planned.plan[:8].encode() + b"\n")
        assert terminal.finish() == 0, terminal.text
    assert f"plan {planned.plan[:12]}: 2 row(s), £30.00 in all" in shown
    assert "made by carol" in shown
    assert f"type the plan's first 8 hex digits ({planned.plan[:8]})" in shown
    assert _events(planned.ledger) == ["plan", "approve"]


def test_anything_else_or_end_of_input_records_nothing(planned: _Planned) -> None:
    """Other digits, or Ctrl-D, refuse (exit 2) and record nothing."""
    for keys in (b"deadbeef\n", b"\x04"):
        with _on_terminal(planned) as terminal:
            terminal.wait_for(QUESTION)
            terminal.type(keys)
            assert terminal.finish() == 2, terminal.text
        assert "not confirmed" in terminal.text
    assert _events(planned.ledger) == ["plan"]


def test_keys_typed_before_the_question_do_not_approve(planned: _Planned) -> None:
    """The right digits typed before the plan is shown are thrown away: the question still
    waits, and Ctrl-D then records nothing."""
    with _on_terminal(planned) as terminal:
        terminal.type(planned.plan[:8].encode() + b"\n")
        terminal.wait_for(QUESTION)
        # Had the early line been read, payrun would have approved and ended by now
        time.sleep(1.0)
        assert terminal.process.poll() is None, terminal.text
        terminal.type(b"\x04")
        assert terminal.finish() == 2, terminal.text
    assert _events(planned.ledger) == ["plan"]
