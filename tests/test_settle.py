"""Rows in doubt: their settle time, which may be checked now, which pending rows wait with them."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from payrun._models import BatchInfo, LedgerRow, RowStatus, utc_now
from payrun.config import RunOptions, parse_settle_wait, settle_wait_from_env
from payrun.errors import ConfigError
from payrun.ledger import Ledger
from payrun.run import _book
from payrun.run._doubt import InDoubt
from payrun.run._settle import doubt_until
from payrun.sandbox import create_app

T0 = datetime(2026, 11, 21, 9, 0, tzinfo=UTC)
ACCOUNT = "/v0/bank/accounts/ba.one"


def _row(
    number: int,
    status: RowStatus = RowStatus.CREATING,
    *,
    creditor: str = "11112222",
    amount: str = "100.00",
    account: str = ACCOUNT,
    intent: datetime | None = T0,
) -> LedgerRow:
    return LedgerRow(
        row=number,
        row_id=None,
        payee_name="Ada",
        sort_code="200000",
        account_number=creditor,
        amount=Decimal(amount),
        reference=f"R{number}",
        source_account="040004 30000001",
        status=status,
        account_url=account,
        payee_url=f"/v0/payees/{creditor}",
        intent_at=intent,
    )


def test_a_row_in_doubt_is_let_go_only_at_its_settle_time() -> None:
    """Held until its time: not ready a second before, ready at it, and let go once."""
    doubt = InDoubt()
    until = T0 + timedelta(seconds=60)
    rows = [_row(2), _row(3, RowStatus.SUBMITTING, creditor="33334444")]
    doubt.add(rows, until)
    assert doubt.ready(rows, until - timedelta(seconds=1)) == []
    assert doubt.waiting(T0) == {2: until, 3: until}
    assert (doubt.next_due(T0), doubt.last_due(T0)) == (until, until)
    assert doubt.ready(rows, until) == rows
    assert doubt.ready(rows, until) == rows  # not held any more: ready whenever asked
    assert doubt.waiting(T0) == {}
    assert doubt.next_due(T0) is None


def test_a_row_in_doubt_not_held_is_ready_at_once() -> None:
    """A row left mid-call whose request cannot be carried out any more is checked now."""
    assert InDoubt().ready([_row(2)], T0) == [_row(2)]


def test_a_row_keeps_its_later_settle_time() -> None:
    """Held again with an earlier time, a row keeps the later one (never checked too soon)."""
    doubt = InDoubt()
    doubt.add([_row(2)], T0 + timedelta(seconds=60))
    doubt.add([_row(2)], T0 + timedelta(seconds=5))
    assert doubt.waiting(T0) == {2: T0 + timedelta(seconds=60)}


def test_rows_not_in_doubt_are_not_held() -> None:
    """Only creating and submitting rows can be in doubt."""
    doubt = InDoubt()
    doubt.add([_row(2, RowStatus.PENDING), _row(3, RowStatus.CREATED)], T0 + timedelta(hours=1))
    assert len(doubt) == 0


def test_rows_that_could_be_taken_for_one_another_are_checked_together() -> None:
    """Two creating rows to the same creditor for the same amount, held until different
    times, are both checked once the later time comes (a payment the bank makes for the
    later one could otherwise be given to the earlier)."""
    doubt = InDoubt()
    first, second = _row(2), _row(3)
    doubt.add([first], T0 + timedelta(seconds=10))
    doubt.add([second], T0 + timedelta(seconds=60))
    assert doubt.ready([first, second], T0 + timedelta(seconds=30)) == []
    assert doubt.ready([first, second], T0 + timedelta(seconds=60)) == [first, second]


def test_other_creditors_and_amounts_are_checked_on_their_own_time() -> None:
    """Another creditor, amount or source account: no reason to wait for the other row."""
    doubt = InDoubt()
    early = [
        _row(2, creditor="99998888"),
        _row(3, amount="100.01"),
        _row(4, account="/v0/bank/accounts/ba.two"),
    ]
    late = _row(5)
    doubt.add(early, T0 + timedelta(seconds=10))
    doubt.add([late], T0 + timedelta(seconds=60))
    assert doubt.ready([*early, late], T0 + timedelta(seconds=30)) == early


def test_a_pending_row_that_could_be_taken_for_a_row_in_doubt_waits_with_it() -> None:
    """A pending row with the same source account, creditor and amount as a creating row still
    held is not created before that row's settle time; every other pending row is, and a
    submitting row holds none (its submission cannot be taken for a new payment)."""
    doubt = InDoubt()
    until = T0 + timedelta(seconds=60)
    doubt.add([_row(2), _row(3, RowStatus.SUBMITTING, creditor="33334444")], until)
    twin = _row(10, RowStatus.PENDING)
    others = [
        _row(11, RowStatus.PENDING, creditor="55556666"),
        _row(12, RowStatus.PENDING, amount="99.99"),
        _row(13, RowStatus.PENDING, creditor="33334444"),
    ]
    assert doubt.may_create([twin, *others], T0) == others
    assert doubt.may_create([twin, *others], until) == [twin, *others]


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    """An empty ledger with its batch record."""
    opened = Ledger.open(tmp_path / "b.ledger.sqlite")
    opened.start(
        BatchInfo(file_path="/b.csv", file_sha256="ab" * 32, valid_count=0, valid_total=Decimal(0)),
        [],
    )
    yield opened
    opened.close()


def test_after_a_kill_rows_in_doubt_wait_the_settle_wait_after_the_last_sign_of_life(
    ledger: Ledger,
) -> None:
    """A killed run's last sign of life (alive_at, or a later intent) plus the time between
    signs plus the settle wait: kept in the ledger as late_until before anything is sent."""
    now = utc_now()
    alive = now - timedelta(seconds=10)
    ledger.set_batch(alive_at=alive)
    rows = [_row(2, intent=alive - timedelta(seconds=20))]
    until = doubt_until(ledger, rows, settle_wait=30)
    expected = alive + timedelta(seconds=_book.ALIVE_SECONDS + 30)
    assert until == expected
    batch = ledger.batch()
    assert batch is not None and batch.late_until == expected
    # Settled long ago: nothing to wait for
    assert doubt_until(ledger, rows, settle_wait=1) == expected  # the ledger's time stays
    ledger.set_batch(late_until=None)
    assert doubt_until(ledger, rows, settle_wait=1) is None


def test_after_a_normal_end_only_late_answers_are_waited_for(ledger: Ledger) -> None:
    """Signs of life before the last normal end count for nothing; late_until still does."""
    now = utc_now()
    ledger.set_batch(alive_at=now - timedelta(seconds=5), ended_at=now - timedelta(seconds=1))
    rows = [_row(2, intent=now - timedelta(seconds=6))]
    assert doubt_until(ledger, rows, settle_wait=60) is None
    later = now + timedelta(seconds=20)
    ledger.set_batch(late_until=later)
    assert doubt_until(ledger, rows, settle_wait=60) == later


def test_a_sign_of_life_in_the_future_counts_as_now(ledger: Ledger) -> None:
    """A clock set back since the kill: the wait is never longer than it can need to be."""
    before = utc_now()
    ledger.set_batch(alive_at=before + timedelta(hours=5))
    until = doubt_until(ledger, [_row(2, intent=None)], settle_wait=60)
    assert until is not None
    most = timedelta(seconds=_book.ALIVE_SECONDS + 60)
    assert before + most <= until <= utc_now() + most


@pytest.mark.parametrize("text", ["-1", "abc", "nan", "inf", "", "1e9"])
def test_a_settle_wait_that_is_not_seconds_is_refused(text: str) -> None:
    """Negative, non-numeric, infinite or above a day: a ConfigError (exit 2) naming the
    option, never a crash or a silent default."""
    with pytest.raises(ConfigError, match="--settle-wait must be a number of seconds"):
        parse_settle_wait(text)
    with pytest.raises(ConfigError, match="PAYRUN_SETTLE_WAIT must be a number of seconds"):
        settle_wait_from_env({"PAYRUN_SETTLE_WAIT": text or "x"})
    with pytest.raises(ConfigError):
        RunOptions(settle_wait=float("nan"))


def test_a_settle_wait_in_seconds_is_taken() -> None:
    """0, fractions and whole seconds; an unset or blank variable is no value."""
    assert parse_settle_wait("0") == 0
    assert parse_settle_wait(" 1.5 ") == 1.5
    assert settle_wait_from_env({"PAYRUN_SETTLE_WAIT": "120"}) == 120
    assert settle_wait_from_env({"PAYRUN_SETTLE_WAIT": " "}) is None
    assert settle_wait_from_env({}) is None
    assert RunOptions().settle_wait == 60


def test_the_option_wins_then_the_embedded_sandbox_then_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--settle-wait, else --sandbox's own bound, else PAYRUN_SETTLE_WAIT, else 60."""
    from payrun.cli._run import _settle_wait_of

    monkeypatch.setenv("PAYRUN_SETTLE_WAIT", "7")
    assert _settle_wait_of(argparse.Namespace(settle_wait=3.0), 1.2) == 3.0
    assert _settle_wait_of(argparse.Namespace(settle_wait=None), 1.2) == 1.2
    assert _settle_wait_of(argparse.Namespace(settle_wait=None), None) == 7
    monkeypatch.delenv("PAYRUN_SETTLE_WAIT")
    assert _settle_wait_of(argparse.Namespace(settle_wait=None), None) == 60


def test_the_sandbox_states_its_own_bound() -> None:
    """The sandbox carries out a request right after its latency sleep or never: its bound
    is the longest sleep plus a margin for a busy event loop."""
    app = create_app(latency_ms=200, jitter_ms=50)
    assert app.settle_wait_s == pytest.approx(0.25 + 1.0)
    assert create_app().settle_wait_s == pytest.approx(1.0)
