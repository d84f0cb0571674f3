"""Answers about another payment than the one asked for (issue 17, D4).

A create answer replayed for the next create (a stale answer), a create answer whose
details differ from the request, a submit answer naming another payment, and a "get
payment" answer for another payment: each is an unknown outcome, settled with the bank,
never recorded as the row's own. The ledger itself refuses one payment URL for two rows.

Real CLI runs against the sandbox bank over loopback HTTP, with ``rewrite_answers``
changing answers after the bank acted on the request.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from _run_helpers import (
    BatchRow,
    assert_exactly_once,
    ledger_rows,
    make_rows,
    rewrite_answers,
    run,
    write_batch,
)
from payrun.sandbox import RunningSandbox, serve_in_thread

_CREATE = re.compile(r"^/v0/bank/accounts/[^/]+/payments$")
_SUBMIT = re.compile(r"^/v0/payments/[^/]+/submissions$")
_PAYMENT = re.compile(r"^/v0/payments/[^/]+$")


@pytest.fixture
def bank() -> Iterator[RunningSandbox]:
    """A fresh sandbox bank for one test."""
    with serve_in_thread(rng_seed=17, deliver_after_ms=50) as sandbox:
        yield sandbox


def _rows(count: int) -> list[BatchRow]:
    """``count`` rows of different payees and amounts, row 2 for £1.00."""
    rows = make_rows(17, count, tag="W")
    rows[1] = BatchRow(**{**_fields(rows[1]), "amount": "1.00"})
    return rows


def _fields(row: BatchRow) -> dict[str, str]:
    return {name: getattr(row, name) for name in BatchRow.__slots__}


def _api(bank: RunningSandbox) -> httpx.Client:
    return httpx.Client(
        base_url=bank.base_url,
        timeout=30,
        headers={"Authorization": f"ServiceAPIKey {bank.api_key}"},
    )


def _no_url_twice(ledger: Path) -> None:
    """No payment URL and no submission URL is recorded for two rows."""
    rows = ledger_rows(ledger)
    for column in ("payment_url", "submission_url"):
        counts = Counter(r[column] for r in rows if r[column])
        assert all(n == 1 for n in counts.values()), (column, counts)


def _replay_first(pattern: re.Pattern[str], method: str = "POST") -> object:
    """A rewrite giving the second answer to ``pattern`` the first one's body."""
    first: list[bytes] = []
    answered = [0]

    def rewrite(verb: str, path: str, status: int, body: bytes) -> tuple[int, bytes] | None:
        if verb != method or not pattern.match(path) or status >= 300:  # noqa: PLR2004
            return None
        answered[0] += 1
        if not first:
            first.append(body)
            return None
        if answered[0] == 2:  # noqa: PLR2004 - the second answer only
            return status, first[0]
        return None

    return rewrite


def test_a_create_answer_replayed_for_the_next_create_is_not_recorded_as_its_payment(
    bank: RunningSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first create answer given again for the second create: that row's payment is
    found at the bank and paid once; no row is recorded with another row's payment."""
    rows = _rows(4)
    batch = write_batch(tmp_path / "b.csv", rows)
    ledger = tmp_path / "b.ledger.sqlite"
    rewrite_answers(bank, monkeypatch, _replay_first(_CREATE))  # type: ignore[arg-type]
    done = run(bank, batch, ledger, "--max-in-flight", "1")
    assert done.returncode == 0, done.describe()
    _no_url_twice(ledger)
    assert_exactly_once(bank, rows, ledger, done.describe())
    again = run(bank, batch, ledger)
    assert again.returncode == 0, again.describe()
    assert_exactly_once(bank, rows, ledger, again.describe())


def test_a_create_answer_for_a_payment_made_elsewhere_is_checked_with_the_bank(
    bank: RunningSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A create answer naming a payment this ledger never made (another file's, to another
    payee for another amount) is an unknown outcome: the row's own payment is looked up at
    the bank and paid once, and the other payment is left unsubmitted."""
    other = make_rows(18, 1, tag="X")
    elsewhere = tmp_path / "other.ledger.sqlite"
    made = run(bank, write_batch(tmp_path / "other.csv", other), elsewhere, "--create-only")
    assert made.returncode == 0, made.describe()
    other_url = ledger_rows(elsewhere)[0]["payment_url"]
    with _api(bank) as api:
        other_answer = api.get(other_url).content
    rows = _rows(3)
    batch = write_batch(tmp_path / "b.csv", rows)
    ledger = tmp_path / "b.ledger.sqlite"
    changed: list[bool] = []

    def rewrite(method: str, path: str, status: int, body: bytes) -> tuple[int, bytes] | None:
        if method != "POST" or not _CREATE.match(path) or changed or status >= 300:  # noqa: PLR2004
            return None
        changed.append(True)
        return status, other_answer

    rewrite_answers(bank, monkeypatch, rewrite)
    done = run(bank, batch, ledger)
    assert done.returncode == 0, done.describe()
    assert changed
    assert_exactly_once(bank, rows, ledger, done.describe())
    assert other_url not in {r["payment_url"] for r in ledger_rows(ledger)}
    assert not bank.state.payments[other_url.rsplit("/", 1)[-1]].submission_ids


def test_a_submit_answer_naming_another_payment_is_checked_with_the_bank(
    bank: RunningSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first submit answer given again for the second submit: that row's submission is
    looked up at the bank; each row records its own submission, each payment submitted once."""
    rows = _rows(4)
    batch = write_batch(tmp_path / "b.csv", rows)
    ledger = tmp_path / "b.ledger.sqlite"
    rewrite_answers(bank, monkeypatch, _replay_first(_SUBMIT))  # type: ignore[arg-type]
    done = run(bank, batch, ledger, "--max-in-flight", "1")
    assert done.returncode == 0, done.describe()
    _no_url_twice(ledger)
    assert_exactly_once(bank, rows, ledger, done.describe())


def test_a_payment_read_answered_with_another_payment_changes_no_row(
    bank: RunningSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After --create-only, one payment is rejected in the bank's app; every read of a
    payment is then answered with that rejected payment: only its own row is rejected."""
    rows = _rows(2)
    batch = write_batch(tmp_path / "b.csv", rows)
    ledger = tmp_path / "b.ledger.sqlite"
    first = run(bank, batch, ledger, "--create-only")
    assert first.returncode == 0, first.describe()
    rejected_url = ledger_rows(ledger)[0]["payment_url"]
    with _api(bank) as api:
        api.patch(rejected_url, json={"rejection-reason": "wrong"}).raise_for_status()
        rejected = api.get(rejected_url).content

    def rewrite(method: str, path: str, status: int, body: bytes) -> tuple[int, bytes] | None:
        if method == "GET" and _PAYMENT.match(path):
            return 200, rejected
        return None

    rewrite_answers(bank, monkeypatch, rewrite)
    again = run(bank, batch, ledger, "--create-only")
    statuses = [r["status"] for r in ledger_rows(ledger)]
    assert statuses == ["rejected", "created"], again.describe()


def test_a_submissions_list_of_another_payment_is_not_adopted(
    bank: RunningSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After --create-only, row 1's payment is approved in the bank's app; every list of a
    payment's submissions is then answered with row 1's: row 2 does not take row 1's
    submission as its own, and the run submits row 2's payment (each paid once)."""
    rows = _rows(2)
    batch = write_batch(tmp_path / "b.csv", rows)
    ledger = tmp_path / "b.ledger.sqlite"
    first = run(bank, batch, ledger, "--create-only")
    assert first.returncode == 0, first.describe()
    approved = ledger_rows(ledger)[0]["payment_url"]
    with _api(bank) as api:
        api.post(f"{approved}/submissions", json={"payment-scheme": "fps"}).raise_for_status()
        listed = api.get(f"{approved}/submissions").content

    def rewrite(method: str, path: str, status: int, body: bytes) -> tuple[int, bytes] | None:
        if method == "GET" and _SUBMIT.match(path):
            return 200, listed
        return None

    rewrite_answers(bank, monkeypatch, rewrite)
    again = run(bank, batch, ledger)
    assert again.returncode == 0, again.describe()
    _no_url_twice(ledger)
    assert_exactly_once(bank, rows, ledger, again.describe())


def _srd_payee(bank: RunningSandbox, row: BatchRow, srd: str) -> None:
    """A payee for ``row`` made in the bank's app with SRD on its CoP request: the bank
    writes the SRD on every payment to it instead of the payment's reference."""
    with _api(bank) as api:
        org_url = api.get("/v0/index").json()["organization-url"]
        found = api.post(
            f"{org_url}/bank/accounts/search", json={"search-query": row.source_account.split()[1]}
        )
        owner = found.json()["search-results"][0]["owner-url"]
        cop = api.post(
            f"{org_url}/cop-request",
            json={
                "account-number": row.account_number,
                "bank-id": row.sort_code,
                "account-classification": "personal",
                "name": row.payee_name,
                "requester-legal-person-url": owner,
                "secondary-reference-data": srd,
            },
        )
        cop.raise_for_status()
        api.post(
            f"{owner}/bank/payees",
            json={
                "account-holder": row.payee_name,
                "account-number": row.account_number,
                "bank-id": row.sort_code,
                "cop-request-url": cop.json()["cop-request-url"],
            },
        ).raise_for_status()


def test_a_create_answer_that_cannot_be_matched_is_never_made_again(
    bank: RunningSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bank writes an SRD payrun cannot see (its payees list leaves out the CoP
    requests) on the row's payment: the create answer's reference differs from the row's
    and reconciliation finds no payment with the row's reference; the row is left for a
    person (exit 3), never created a second time."""
    row = _rows(2)[0]
    _srd_payee(bank, row, "ROLL 0042-7")
    batch = write_batch(tmp_path / "b.csv", [row])
    ledger = tmp_path / "b.ledger.sqlite"

    def no_cop_requests(
        method: str, path: str, status: int, body: bytes
    ) -> tuple[int, bytes] | None:
        if method == "GET" and path.endswith("/bank/payees") and status == 200:  # noqa: PLR2004
            page = json.loads(body)
            page.pop("included", None)
            return status, json.dumps(page).encode()
        return None

    rewrite_answers(bank, monkeypatch, no_cop_requests)
    done = run(bank, batch, ledger)
    assert done.returncode == 3, done.describe()
    [recorded] = ledger_rows(ledger)
    assert recorded["status"] == "creating", recorded
    assert "bank's app" in recorded["error"], recorded
    made = [
        p
        for p in list(bank.state.payments.values())
        if p.creditor_account_number == row.account_number
    ]
    assert len(made) == 1, made
