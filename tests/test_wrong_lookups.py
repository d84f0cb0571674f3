"""Answers about another resource than the one asked for (issue 27, M1).

The batch names its source account by URL (or by sort code and account number); the bank
answers the read (or the search) with another account's record: nothing is paid from
either account, no payee is made, and the run ends on one line with exit 3 (a bank
error), as does `payrun check`. A payee create answered with another payee, a payees list
answered with another legal person's payees and a payments list answered with another
account's payments are bank errors too, never paid to or from what the bank named.

Real CLI runs against the sandbox bank over loopback HTTP, with ``rewrite_answers``
changing answers after the bank acted on the request, as in ``test_wrong_answers``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from _run_helpers import (
    ACCOUNTS,
    Finished,
    account_urls,
    assert_exactly_once,
    ledger_rows,
    make_rows,
    rewrite_answers,
    run,
    write_batch,
)
from payrun.cli import main
from payrun.sandbox import RunningSandbox, default_seed, serve_in_thread

_ACCOUNT = re.compile(r"^/v0/bank/accounts/[^/]+$")
_SEARCH = re.compile(r"^/v0/organizations/[^/]+/bank/accounts/search$")
_PAYEES = re.compile(r"^/v0/legal-persons/[^/]+/bank/payees$")
_PAYMENTS = re.compile(r"^/v0/bank/accounts/[^/]+/payments$")


@pytest.fixture
def bank() -> Iterator[RunningSandbox]:
    """A fresh sandbox bank for one test."""
    with serve_in_thread(rng_seed=27, deliver_after_ms=50) as sandbox:
        yield sandbox


def _api(bank: RunningSandbox) -> httpx.Client:
    return httpx.Client(
        base_url=bank.base_url,
        timeout=30,
        headers={"Authorization": f"ServiceAPIKey {bank.api_key}"},
    )


def _one_line(finished: Finished) -> str:
    """The run's error: exactly one line on stderr, no traceback; returned."""
    assert "Traceback" not in finished.stdout + finished.stderr, finished.describe()
    lines = [line for line in finished.stderr.splitlines() if "error" in line.lower()]
    assert len(lines) == 1, finished.describe()
    return lines[0]


def _nothing_made(bank: RunningSandbox, payees_before: int) -> None:
    """No payment from any account, no payee created."""
    assert bank.state.payments == {}
    assert len(bank.state.payees) == payees_before


def _account_as(bank: RunningSandbox, other: str) -> Any:
    """A rewrite answering every read of a single account with ``other``'s record."""
    with _api(bank) as api:
        record = api.get(other).content

    def rewrite(method: str, path: str, status: int, body: bytes) -> tuple[int, bytes] | None:
        if method == "GET" and _ACCOUNT.match(path) and path != other:
            return 200, record
        return None

    return rewrite


@pytest.mark.parametrize("mode", ["paying", "create-only", "dry-run"])
def test_an_account_read_answered_with_another_account_pays_from_neither(
    bank: RunningSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """The batch names account P by URL; the bank answers its read with account Q's record:
    exit 3 on one line naming both, no payment from P or Q, no payee created."""
    urls = account_urls(bank)
    asked, other = urls[ACCOUNTS[0]], urls[ACCOUNTS[1]]
    rows = [replace(row, source_account=asked) for row in make_rows(27, 6, tag="M")]
    payees_before = len(bank.state.payees)
    rewrite_answers(bank, monkeypatch, _account_as(bank, other))
    extra = {"paying": (), "create-only": ("--create-only",), "dry-run": ("--dry-run",)}[mode]
    ledger = tmp_path / "b.ledger.sqlite"
    finished = run(bank, write_batch(tmp_path / "b.csv", rows), ledger, *extra)
    assert finished.returncode == 3, finished.describe()
    line = _one_line(finished)
    assert f"asked for the account {asked}" in line, line
    assert f"with the account {other}" in line, line
    _nothing_made(bank, payees_before)
    if mode != "dry-run":
        assert {r["account_url"] for r in ledger_rows(ledger)} <= {asked, None}


def test_an_account_search_with_two_accounts_at_the_same_details_pays_from_neither(
    bank: RunningSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The search for P's sort code and account number answers with Q dressed in P's
    details, then P: which one is P is not known, so nothing is paid (exit 3)."""
    rows = make_rows(27, 4, tag="S")
    rows = [replace(row, source_account=ACCOUNTS[0]) for row in rows]
    other = account_urls(bank)[ACCOUNTS[1]]
    payees_before = len(bank.state.payees)

    def rewrite(method: str, path: str, status: int, body: bytes) -> tuple[int, bytes] | None:
        if method != "POST" or not _SEARCH.match(path) or status != 200:  # noqa: PLR2004
            return None
        page = json.loads(body)
        [found] = page["search-results"]
        # Q first: taking the first match would pay from Q
        page["search-results"].insert(0, {**found, "account-url": other})
        return status, json.dumps(page).encode()

    rewrite_answers(bank, monkeypatch, rewrite)
    finished = run(bank, write_batch(tmp_path / "b.csv", rows), tmp_path / "b.ledger.sqlite")
    assert finished.returncode == 3, finished.describe()
    line = _one_line(finished)
    assert "more than one account" in line, line
    _nothing_made(bank, payees_before)


def test_check_with_an_account_read_answered_with_another_account_is_a_bank_error(
    bank: RunningSandbox,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`payrun check --source-account P` whose read answers with Q: exit 3 on one line,
    never "Q can pay"."""
    urls = account_urls(bank)
    asked, other = urls[ACCOUNTS[0]], urls[ACCOUNTS[1]]
    monkeypatch.setenv("PAYRUN_BASE_URL", bank.base_url)
    monkeypatch.setenv("PAYRUN_API_KEY", bank.api_key)
    rewrite_answers(bank, monkeypatch, _account_as(bank, other))
    capsys.readouterr()
    assert main(["check", "--source-account", asked]) == 3
    out, err = capsys.readouterr()
    assert "can pay" not in out, out
    assert f"asked for the account {asked}" in err and len(err.strip().splitlines()) == 1, err


def _owner_payee(bank: RunningSandbox) -> dict[str, Any]:
    """An active payee the default seed gives the accounts' owner (to a directory employee)."""
    with _api(bank) as api:
        account = api.get(account_urls(bank)[ACCOUNTS[0]]).json()
        listed = api.get(f"{account['owner-url']}/bank/payees").json()["payees"]
    payee: dict[str, Any] = next(p for p in listed if p["payee-status"] == "active")
    return payee


def _paid_to(bank: RunningSandbox, account_number: str) -> list[object]:
    return [
        p for p in list(bank.state.payments.values()) if p.creditor_account_number == account_number
    ]


def test_a_payee_create_answered_with_another_payee_pays_nobody_to_it(
    bank: RunningSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every payee create is answered with an existing payee of other details: no row is
    paid to that payee (the run ends with exit 3, rows unpaid); once the bank answers
    truly, the next run pays every row once, to its own payee."""
    existing = _owner_payee(bank)
    record = json.dumps(existing).encode()
    rows = make_rows(27, 4, payees=2, tag="P")

    def rewrite(method: str, path: str, status: int, body: bytes) -> tuple[int, bytes] | None:
        if method == "POST" and _PAYEES.match(path) and status == 201:  # noqa: PLR2004
            return status, record
        return None

    stop = rewrite_answers(bank, monkeypatch, rewrite)
    batch = write_batch(tmp_path / "b.csv", rows)
    ledger = tmp_path / "b.ledger.sqlite"
    first = run(bank, batch, ledger)
    assert first.returncode == 3, first.describe()
    assert "another payee" in first.stdout + first.stderr, first.describe()
    assert _paid_to(bank, existing["account-number"]) == []
    assert bank.state.payments == {}
    assert all(r["payee_url"] != existing["payee-url"] for r in ledger_rows(ledger))
    stop()
    again = run(bank, batch, ledger)
    assert again.returncode == 0, again.describe()
    assert_exactly_once(bank, rows, ledger, again.describe())


def test_a_payees_list_of_another_legal_person_is_a_bank_error(
    bank: RunningSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The owner's payees list answers with payees of another legal person: exit 3 on one
    line, nothing paid to them (nor to anyone)."""
    existing = _owner_payee(bank)
    row = replace(
        make_rows(27, 1, tag="L")[0],
        payee_name=existing["account-holder"],
        sort_code=existing["bank-id"],
        account_number=existing["account-number"],
    )

    def rewrite(method: str, path: str, status: int, body: bytes) -> tuple[int, bytes] | None:
        if method != "GET" or not _PAYEES.match(path) or status != 200:  # noqa: PLR2004
            return None
        page = json.loads(body)
        for payee in page["payees"]:
            payee["legal-person-url"] = "/v0/legal-persons/lp.someone-else"
        return status, json.dumps(page).encode()

    rewrite_answers(bank, monkeypatch, rewrite)
    finished = run(bank, write_batch(tmp_path / "b.csv", [row]), tmp_path / "b.ledger.sqlite")
    assert finished.returncode == 3, finished.describe()
    line = _one_line(finished)
    assert "a payee of /v0/legal-persons/lp.someone-else" in line, line
    assert bank.state.payments == {}


def test_a_payments_list_of_another_account_is_a_bank_error(
    bank: RunningSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Account P's payments list answers with account Q's payments (which this ledger's
    rows would be matched against): exit 3 on one line, nothing paid from P."""
    urls = account_urls(bank)
    asked, other = urls[ACCOUNTS[0]], urls[ACCOUNTS[1]]
    paid_from_q = [replace(make_rows(28, 1, tag="Q")[0], source_account=ACCOUNTS[1])]
    made = run(bank, write_batch(tmp_path / "q.csv", paid_from_q), tmp_path / "q.ledger.sqlite")
    assert made.returncode == 0, made.describe()
    with _api(bank) as api:
        listed = api.get(f"{other}/payments").content
    assert b"payment-url" in listed
    before = len(bank.state.payments)

    def rewrite(method: str, path: str, status: int, body: bytes) -> tuple[int, bytes] | None:
        if method == "GET" and path == f"{asked}/payments" and status == 200:  # noqa: PLR2004
            return status, listed
        return None

    rewrite_answers(bank, monkeypatch, rewrite)
    rows = [replace(row, source_account=ACCOUNTS[0]) for row in make_rows(27, 3, tag="R")]
    finished = run(bank, write_batch(tmp_path / "b.csv", rows), tmp_path / "b.ledger.sqlite")
    assert finished.returncode == 3, finished.describe()
    line = _one_line(finished)
    assert f"a payment from the account {other}" in line, line
    assert len(bank.state.payments) == before


def test_a_confirmation_of_payee_answered_for_another_name_creates_no_payee(
    bank: RunningSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every Confirmation of Payee is answered with an earlier one's "match" for another
    person: the row's own name (which the bank would call no match) gets no payee and no
    payment; the run ends with exit 3, the row left for the next run to check again."""
    with _api(bank) as api:
        account = api.get(account_urls(bank)[ACCOUNTS[0]]).json()
        org_url = api.get("/v0/index").json()["organization-url"]
        matched = api.post(
            f"{org_url}/cop-request",
            json={
                "account-number": "22039287",
                "bank-id": "110001",
                "account-classification": "personal",
                "name": "Mia Davies",
                "requester-legal-person-url": account["owner-url"],
            },
        )
    assert matched.json()["cop-response"]["result"] == "match", matched.text
    row = replace(
        make_rows(27, 1, tag="C")[0],
        payee_name="Jack Smith",
        sort_code="609242",
        account_number="48863219",
        source_account=ACCOUNTS[0],
    )
    payees_before = len(bank.state.payees)

    def rewrite(method: str, path: str, status: int, body: bytes) -> tuple[int, bytes] | None:
        if method == "POST" and path.endswith("/cop-request") and status == 201:  # noqa: PLR2004
            return status, matched.content
        return None

    rewrite_answers(bank, monkeypatch, rewrite)
    ledger = tmp_path / "b.ledger.sqlite"
    finished = run(bank, write_batch(tmp_path / "b.csv", [row]), ledger, "--confirm-payees")
    assert finished.returncode == 3, finished.describe()
    assert "Confirmation of Payee" in finished.stdout + finished.stderr, finished.describe()
    assert bank.state.payments == {}
    assert len(bank.state.payees) == payees_before
    [recorded] = ledger_rows(ledger)
    assert recorded["payee_url"] is None, recorded


def test_a_restrictions_list_of_another_account_is_a_bank_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Account Q is frozen; P's restrictions list answers with Q's freeze: exit 3 on one
    line, never "P is frozen" (nor anything paid)."""
    seed = default_seed()
    seed["accounts"][1]["restrictions"] = [
        {
            "restriction-type": "freeze",
            "restriction-reason-code": "sanctions",
            "restriction-legal-status": "not-applicable",
            "applied-by": "user",
        }
    ]
    with serve_in_thread(seed=seed, rng_seed=27) as bank:
        urls = account_urls(bank)
        asked, other = urls[ACCOUNTS[0]], urls[ACCOUNTS[1]]
        with _api(bank) as api:
            frozen = api.get(f"{other}/restrictions").content
        assert b"freeze" in frozen

        def rewrite(method: str, path: str, status: int, body: bytes) -> tuple[int, bytes] | None:
            if method == "GET" and path == f"{asked}/restrictions":
                return 200, frozen
            return None

        rewrite_answers(bank, monkeypatch, rewrite)
        rows = [replace(row, source_account=ACCOUNTS[0]) for row in make_rows(27, 2, tag="Z")]
        ledger = tmp_path / "b.ledger.sqlite"
        finished = run(bank, write_batch(tmp_path / "b.csv", rows), ledger)
        assert finished.returncode == 3, finished.describe()
        line = _one_line(finished)
        assert f"a restriction of the account {other}" in line, line
        assert "frozen" not in finished.stdout + finished.stderr, finished.describe()
        assert bank.state.payments == {}
