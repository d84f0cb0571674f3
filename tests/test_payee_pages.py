"""Paying while the payee list is still read (issue 32): rows whose payee is already in the
pages read go out before the last page comes; nothing the later pages could change does.

A real `payrun run` over loopback against a sandbox bank whose legal person has 250 payees
(two pages of 200, newest first); the second page is held back for a second.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from _run_helpers import BatchRow, run, stats, write_batch
from payrun.sandbox import RunningSandbox, serve_in_thread

_PAYEES = 250
_HOLD_S = 1.0
_A, _B = "040004 50000000", "040004 50000001"
# Seeded first, so the oldest: on the second page (the list is newest first)
_LATE = ("Late Supplier", "71000000")
_LONG = ("Abcdefghijklmnopqrstu", "71000001")
_OLD = ("Old Name Ltd", "71000002")
# Seeded later: on the first page
_CUT = ("Abcdefghijklmnopqr", "71000001")
_NEW = ("New Name Ltd", "71000002")


def _seed(owner: str, balance: str = "1000000.00") -> dict[str, Any]:
    """One legal person owning two accounts (``balance`` each) and ``_PAYEES`` payees: the
    organization's own (``org``) or another."""
    named = [_LATE, _LONG, _OLD]
    named += [(f"Supplier {i}", f"{72000000 + i:08d}") for i in range(len(named), 200)]
    named += [_CUT, _NEW]
    named += [(f"Supplier {i}", f"{72000000 + i:08d}") for i in range(len(named), _PAYEES)]
    return {
        "legal-persons": [] if owner == "org" else [{"key": owner, "display-name": "Owner Ltd"}],
        "accounts": [
            {
                "display-name": f"Pages {a}",
                "sort-code": "040004",
                "account-number": f"{50000000 + a:08d}",
                "balance": balance,
                "owner": owner,
            }
            for a in range(2)
        ],
        "payees": [
            {"owner": owner, "account-holder": name, "sort-code": "200000", "account-number": n}
            for name, n in named
        ],
    }


def _row(row_id: str, payee: tuple[str, str], source: str, amount: str, ref: str) -> BatchRow:
    return BatchRow(row_id, payee[0], "200000", payee[1], amount, ref, source)


@pytest.fixture(params=["org", "other"])
def bank(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[RunningSandbox]:
    """The sandbox seeded with ``_seed(owner)``, answering at once."""
    seed = tmp_path / "seed.json"
    seed.write_text(json.dumps(_seed(request.param)), "utf-8")
    with serve_in_thread(seed=seed, latency_ms=0) as running:
        yield running


def _hold_later_pages(bank: RunningSandbox, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Hold every payee page but the first ``_HOLD_S`` seconds; returns the log of
    (time answered, method, path, query) of every API request."""
    serve_api = bank.app._serve_api  # noqa: SLF001 - the server's own request handler
    log: list[tuple[float, str, str, bytes]] = []

    async def handle(scope: Any, receive: Any, send: Any) -> None:
        method, path, query = scope["method"], scope["path"], scope["query_string"]
        later = b"page%5Bafter%5D" in query or b"page[after]" in query
        if method == "GET" and path.endswith("/bank/payees") and later:
            await anyio.sleep(_HOLD_S)
        await serve_api(scope, receive, send)
        log.append((time.monotonic(), method, path, query))

    monkeypatch.setattr(bank.app, "_serve_api", handle)
    return log


def _payee_of(bank: RunningSandbox, reference: str) -> list[str]:
    """The holders of the payees the bank's payments with ``reference`` were made to."""
    state = bank.state
    return [
        state.payees[p.payee_id].account_holder
        for p in state.payments.values()
        if p.reference == reference and p.payee_id
    ]


def test_rows_go_out_while_later_payee_pages_are_read_and_nothing_those_pages_change(
    bank: RunningSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows paying payees of the first page are created before the second page comes; a
    row whose payee is on the second page reuses it (no payee created), one whose exact
    name is there is not paid to a cut form of it on the first page, and a row matching a
    payment made earlier to a payee of the second page (same bank details, which the
    payment shows only through that payee) is held as a repeat, not paid."""
    earlier = write_batch(tmp_path / "earlier.csv", [_row("E1", _OLD, _B, "12.34", "REP-1")])
    done = run(bank, earlier, tmp_path / "earlier.ledger.sqlite")
    assert done.returncode == 0, done.describe()
    # The bank shows that payment's creditor by its payee only: its bank details are known
    # once that payee is read, on the second page
    for payment in bank.state.payments.values():
        payment.creditor = {k: v for k, v in payment.creditor.items() if "payee" in k}
    log = _hold_later_pages(bank, monkeypatch)
    early = [
        _row(f"S{i}", (f"Supplier {i}", f"{72000000 + i:08d}"), _A, "5.00", f"S-{i}")
        for i in range(210, 220)
    ]
    rows = [
        *early,
        _row("LATE", _LATE, _A, "7.00", "LATE-1"),
        _row("LONG", _LONG, _A, "8.00", "LONG-1"),
        _row("REPEAT", _NEW, _B, "12.34", "REP-1"),
    ]
    batch = write_batch(tmp_path / "pay.csv", rows)
    started = time.monotonic()
    done = run(bank, batch, tmp_path / "pay.ledger.sqlite")
    assert done.returncode == 1, done.describe()
    assert "possible repeat" in done.stdout + done.stderr, done.describe()

    last_page = max(t for t, m, p, q in log if m == "GET" and p.endswith("/bank/payees"))
    creates = [t for t, m, p, q in log if m == "POST" and p.endswith("/payments")]
    assert creates, done.describe()
    assert min(creates) < last_page - _HOLD_S / 2, (
        f"first create {min(creates) - started:.2f} s, last payee page"
        f" {last_page - started:.2f} s: no payment went out while the list was read"
    )
    assert len(bank.state.payees) == _PAYEES, "a payee was created though the list had it"
    assert _payee_of(bank, "LATE-1") == [_LATE[0]]
    assert _payee_of(bank, "LONG-1") == [_LONG[0]]
    assert _payee_of(bank, "REP-1") == [_OLD[0]], "the repeat was paid again"
    groups = {g["reference"]: g for g in stats(bank)["payments"]}
    for row in early:
        assert groups[row.reference]["payments"] == 1, row
        assert groups[row.reference]["submissions"] == 1, row


def test_an_account_whose_balance_cannot_cover_all_its_rows_pays_none_early(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows whose payees are on the first page, of an account whose balance is short of all
    its rows (one on the second page included): none is created while the list is read,
    nor after; every row fails with the balance's reason, as when the list is read first."""
    seed = tmp_path / "seed.json"
    seed.write_text(json.dumps(_seed("other", balance="40.00")), "utf-8")
    with serve_in_thread(seed=seed, latency_ms=0) as bank:
        log = _hold_later_pages(bank, monkeypatch)
        rows = [
            _row(f"S{i}", (f"Supplier {i}", f"{72000000 + i:08d}"), _A, "4.00", f"S-{i}")
            for i in range(210, 220)
        ]
        rows.append(_row("LATE", _LATE, _A, "4.00", "LATE-1"))
        batch = write_batch(tmp_path / "pay.csv", rows)
        done = run(bank, batch, tmp_path / "pay.ledger.sqlite")
        assert done.returncode == 1, done.describe()
        creates = [t for t, m, p, q in log if m == "POST" and p.endswith("/payments")]
        assert not creates, f"{len(creates)} payments created: {done.describe()}"
        assert not bank.state.payments
        assert "available balance" in done.stdout + done.stderr, done.describe()
