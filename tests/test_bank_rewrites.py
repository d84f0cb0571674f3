"""What the bank rewrites or settles on its own, and exactly-once around it (issue 4).

- A payee whose Confirmation of Payee request carries secondary reference data (SRD): the
  bank writes the SRD on every payment to it instead of the row's reference, so matching
  by reference alone would never find the payment (reconciliation would create it again,
  and a fresh ledger's repeat guard would let the row be paid twice).
- A payment approved in the bank's app whose submission failed is recorded failed, not
  submitted; and a payment that failed is no repeat, so the row can be paid in a new file.

Real CLI runs against the sandbox bank over loopback HTTP, as in ``test_resume``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from _run_helpers import BatchRow, account_urls, ledger_rows, refuse, run, write_batch
from payrun.sandbox import RunningSandbox, serve_in_thread

SOURCE = "040004 30000001"
SRD = "ROLL 0042-7"


@pytest.fixture
def bank() -> Iterator[RunningSandbox]:
    """A fresh sandbox bank for one test."""
    with serve_in_thread(rng_seed=3) as sandbox:
        yield sandbox


def _api(bank: RunningSandbox) -> httpx.Client:
    return httpx.Client(
        base_url=bank.base_url,
        headers={"Authorization": f"ServiceAPIKey {bank.api_key}"},
        timeout=30,
    )


def _srd_payee(bank: RunningSandbox) -> None:
    """A payee with SRD on its CoP request, as one made in the bank's app would be."""
    with _api(bank) as api:
        org_url = api.get("/v0/index").json()["organization-url"]
        found = api.post(f"{org_url}/bank/accounts/search", json={"search-query": "30000001"})
        owner = found.json()["search-results"][0]["owner-url"]
        cop = api.post(
            f"{org_url}/cop-request",
            json={
                "account-number": "55509999",
                "bank-id": "201234",
                "account-classification": "personal",
                "name": "Jane Saver",
                "requester-legal-person-url": owner,
                "secondary-reference-data": SRD,
            },
        )
        cop.raise_for_status()
        api.post(
            f"{owner}/bank/payees",
            json={
                "account-holder": "Jane Saver",
                "account-number": "55509999",
                "bank-id": "201234",
                "cop-request-url": cop.json()["cop-request-url"],
            },
        ).raise_for_status()


SAVER = BatchRow(
    row_id="S1",
    payee_name="Jane Saver",
    sort_code="201234",
    account_number="55509999",
    amount="250.00",
    reference="SALARY-JUNE",
    source_account=SOURCE,
)
PLAIN = BatchRow(
    row_id="P1",
    payee_name="Joe Plain",
    sort_code="201234",
    account_number="55508888",
    amount="300.00",
    reference="SALARY-JUNE",
    source_account=SOURCE,
)


def _payments_to(bank: RunningSandbox, account_number: str) -> list[object]:
    return [
        p for p in list(bank.state.payments.values()) if p.creditor_account_number == account_number
    ]


SHAPES = pytest.mark.parametrize("bare", [False, True], ids=["payee-creditor", "bare-account"])
"""The bank shows a payment to a payee as the payee (the spec) or as a bare uk-domestic
account (api-facts section 3.3 infers the real bank does)."""


@SHAPES
def test_lost_create_answers_to_an_srd_payee_are_found_not_made_again(
    bank: RunningSandbox, tmp_path: Path, bare: bool
) -> None:
    """Every create answers 500 or drops after doing its work; the rerun finds the payment
    under the SRD the bank wrote, so the row is paid with one payment (whether the bank
    shows the payment's creditor as the payee or as a bare account)."""
    _srd_payee(bank)
    bank.state.bare_payee_creditors = bare
    batch = write_batch(tmp_path / "b.csv", [SAVER])
    ledger = tmp_path / "b.ledger.sqlite"
    bank.app.fault_rate = 1.0
    run(bank, batch, ledger)
    bank.app.fault_rate = 0.0
    finished = run(bank, batch, ledger)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    payments = _payments_to(bank, "55509999")
    assert len(payments) == 1
    assert [p.reference for p in payments] == [SRD]  # type: ignore[attr-defined]
    # Delivered when the rerun came after the rows in doubt waited out the settle wait
    assert [r["status"] for r in ledger_rows(ledger)] in (["submitted"], ["delivered"])


@SHAPES
def test_a_fresh_ledger_holds_a_row_paid_to_an_srd_payee(
    bank: RunningSandbox, tmp_path: Path, bare: bool
) -> None:
    """The same file through a fresh ledger: the SRD row is a possible repeat like the plain
    one, although the bank's payment carries the SRD, not the row's reference."""
    _srd_payee(bank)
    bank.state.bare_payee_creditors = bare
    batch = write_batch(tmp_path / "b.csv", [SAVER, PLAIN])
    assert run(bank, batch, tmp_path / "first.ledger.sqlite").returncode == 0
    again = run(bank, batch, tmp_path / "second.ledger.sqlite")
    assert again.returncode == 1
    rows = ledger_rows(tmp_path / "second.ledger.sqlite")
    assert [r["status"] for r in rows] == ["held", "held"]
    assert all("possible repeat" in r["error"] for r in rows)
    assert "submitted (" in rows[0]["error"]
    assert len(_payments_to(bank, "55509999")) == 1


def _fail_an_approval(bank: RunningSandbox, payment_url: str) -> None:
    """The approver submits the payment in the bank's app while the account is empty."""
    account = account_urls(bank)[SOURCE].rsplit("/", 1)[-1]
    with _api(bank) as api:
        api.post(f"/__sandbox/accounts/{account}/balance", json={"value": "0.00"})
        submitted = api.post(f"{payment_url}/submissions", json={"payment-scheme": "fps"})
        submitted.raise_for_status()
        api.post("/__sandbox/settle").raise_for_status()
        status = api.get(submitted.json()["submission-url"]).json()["submission-status"]
        assert status == "failed"
        api.post(f"/__sandbox/accounts/{account}/balance", json={"value": "1000000.00"})


def test_an_approval_that_failed_is_recorded_failed_and_a_new_file_pays_the_row(
    bank: RunningSandbox, tmp_path: Path
) -> None:
    """After --create-only, the approval in the app fails for lack of funds: the next run
    records the row failed (exit 1), not submitted; the row alone in a new file, as the
    message says, is paid, not held as a repeat of the payment that failed."""
    batch = write_batch(tmp_path / "b.csv", [PLAIN])
    ledger = tmp_path / "b.ledger.sqlite"
    assert run(bank, batch, ledger, "--create-only").returncode == 0
    _fail_an_approval(bank, ledger_rows(ledger)[0]["payment_url"])
    rerun = run(bank, batch, ledger)
    assert rerun.returncode == 1, rerun.stdout
    [row] = ledger_rows(ledger)
    assert row["status"] == "failed" and "failed" in row["error"]
    assert "new file" in row["error"]
    retry = write_batch(tmp_path / "retry.csv", [PLAIN])
    paid = run(bank, retry, tmp_path / "retry.ledger.sqlite")
    assert paid.returncode == 0, paid.stdout
    assert [r["status"] for r in ledger_rows(tmp_path / "retry.ledger.sqlite")] == ["submitted"]


def test_a_row_left_creating_on_an_account_the_bank_no_longer_shows_needs_attention(
    bank: RunningSandbox, tmp_path: Path
) -> None:
    """A row left creating whose source account has gone from the bank cannot be checked:
    the rerun says so on the row (exit 3) and creates nothing."""
    batch = write_batch(tmp_path / "b.csv", [PLAIN])
    ledger = tmp_path / "b.ledger.sqlite"
    assert run(bank, batch, ledger, "--create-only").returncode == 0
    with sqlite3.connect(ledger) as db:
        db.execute(
            "UPDATE rows SET status = 'creating', payment_url = NULL,"
            " intent_at = '2026-11-22T09:00:00+00:00'"
        )
    account = account_urls(bank)[SOURCE].rsplit("/", 1)[-1]
    del bank.state.accounts[account]
    bank.state.by_owner["accounts"].remove(account)
    rerun = run(bank, batch, ledger)
    assert rerun.returncode == 3, rerun.stdout + rerun.stderr
    [row] = ledger_rows(ledger)
    assert row["status"] == "creating"
    assert "no longer shows the source account" in row["error"]
    assert "no longer shows the source account" in rerun.stdout
    assert len(_payments_to(bank, "55508888")) == 1


def _bound_to_its_payee(
    bank: RunningSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, Path]:
    """A one-row batch whose first run found or made its payee, then had its create refused
    (insufficient funds, exit 1): the ledger binds the row to that payee, nothing paid."""
    batch = write_batch(tmp_path / "b.csv", [PLAIN])
    ledger = tmp_path / "b.ledger.sqlite"
    stop = refuse(
        bank,
        monkeypatch,
        422,
        "insufficient-funds",
        lambda method, path: method == "POST" and path.endswith("/payments"),
    )
    assert run(bank, batch, ledger).returncode == 1
    stop()
    return batch, ledger


def test_a_payee_deactivated_after_an_earlier_run_is_looked_up_again(
    bank: RunningSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row bound to its payee by an earlier run, whose payee is then deactivated: the run
    sees it before any create and says to add the payee again; once it is added again in
    the bank's app, the next run finds the new payee and pays the row."""
    batch, ledger = _bound_to_its_payee(bank, tmp_path, monkeypatch)
    [row] = ledger_rows(ledger)
    old_payee = row["payee_url"]
    with _api(bank) as api:
        api.patch(old_payee, json={"payee-status": "deactivated"}).raise_for_status()
    assert run(bank, batch, ledger).returncode == 1
    [row] = ledger_rows(ledger)
    assert row["status"] == "failed" and "add them again in the bank's app" in row["error"], row
    with _api(bank) as api:  # the fix the message asks for, made in the bank's app
        owner = api.get(old_payee).json()["legal-person-url"]
        api.post(
            f"{owner}/bank/payees",
            json={
                "account-holder": PLAIN.payee_name,
                "account-number": PLAIN.account_number,
                "bank-id": PLAIN.sort_code,
            },
        ).raise_for_status()
    assert run(bank, batch, ledger).returncode == 0
    [row] = ledger_rows(ledger)
    assert row["status"] == "submitted" and row["payee_url"] != old_payee
    assert len(_payments_to(bank, PLAIN.account_number)) == 1


def test_a_failed_approval_submitted_again_in_the_app_is_recorded(
    bank: RunningSandbox, tmp_path: Path
) -> None:
    """The approval failed for lack of funds and the row was recorded failed; the approver
    then submits the payment again in the app: the next run records that submission (the
    row is paid, exit 0), and a rerun with the row in a new file holds it as a repeat."""
    batch = write_batch(tmp_path / "b.csv", [PLAIN])
    ledger = tmp_path / "b.ledger.sqlite"
    assert run(bank, batch, ledger, "--create-only").returncode == 0
    payment_url = ledger_rows(ledger)[0]["payment_url"]
    _fail_an_approval(bank, payment_url)
    assert run(bank, batch, ledger, "--create-only").returncode == 1
    assert ledger_rows(ledger)[0]["status"] == "failed"
    with _api(bank) as api:  # the approver tries again, the account funded
        again = api.post(f"{payment_url}/submissions", json={"payment-scheme": "fps"})
        again.raise_for_status()
    rerun = run(bank, batch, ledger)
    assert rerun.returncode == 0, rerun.stdout
    [row] = ledger_rows(ledger)
    assert row["status"] in {"submitted", "delivered"} and row["error"] is None, row
    assert row["submission_url"] == again.json()["submission-url"]
    retry = run(bank, write_batch(tmp_path / "retry.csv", [PLAIN]), tmp_path / "r.sqlite")
    assert retry.returncode == 1
    assert ledger_rows(tmp_path / "r.sqlite")[0]["status"] == "held"
    assert len(_payments_to(bank, PLAIN.account_number)) == 1


def test_a_row_bound_to_a_payee_deactivated_since_takes_the_payee_added_again(
    bank: RunningSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An earlier run bound the row to its payee; the payee is deactivated and added again
    in the bank's app before the next run: that run pays through the new payee at once."""
    batch, ledger = _bound_to_its_payee(bank, tmp_path, monkeypatch)
    old_payee = ledger_rows(ledger)[0]["payee_url"]
    with _api(bank) as api:
        api.patch(old_payee, json={"payee-status": "deactivated"}).raise_for_status()
        owner = api.get(old_payee).json()["legal-person-url"]
        api.post(
            f"{owner}/bank/payees",
            json={
                "account-holder": PLAIN.payee_name,
                "account-number": PLAIN.account_number,
                "bank-id": PLAIN.sort_code,
            },
        ).raise_for_status()
    assert run(bank, batch, ledger, "--dry-run").returncode == 0
    assert run(bank, batch, ledger).returncode == 0
    [row] = ledger_rows(ledger)
    assert row["status"] == "submitted" and row["payee_url"] != old_payee


def test_a_payee_deactivated_after_its_payment_was_created_says_what_works(
    bank: RunningSandbox, tmp_path: Path
) -> None:
    """After --create-only the payee is deactivated: the submit is refused, and the advice
    is the one that works (reject it, add the payee again, a new file), not 'run again'."""
    batch = write_batch(tmp_path / "b.csv", [PLAIN])
    ledger = tmp_path / "b.ledger.sqlite"
    assert run(bank, batch, ledger, "--create-only").returncode == 0
    with _api(bank) as api:
        api.patch(
            ledger_rows(ledger)[0]["payee_url"], json={"payee-status": "deactivated"}
        ).raise_for_status()
    assert run(bank, batch, ledger).returncode == 1
    [row] = ledger_rows(ledger)
    assert row["status"] == "failed" and "payee-deactivated" in row["error"], row
    assert "reject the payment in the bank's app" in row["error"], row


def test_a_create_only_rerun_leaves_payments_waiting_for_approval_whatever_the_balance(
    bank: RunningSandbox, tmp_path: Path
) -> None:
    """A --create-only rerun spends nothing on payments waiting for approval, so a short
    balance does not fail them (it did: 'failed: payment created but not submitted'); a
    normal run, which would submit them, still refuses to."""
    batch = write_batch(tmp_path / "b.csv", [PLAIN])
    ledger = tmp_path / "b.ledger.sqlite"
    assert run(bank, batch, ledger, "--create-only").returncode == 0
    account = account_urls(bank)[SOURCE].rsplit("/", 1)[-1]
    with _api(bank) as api:
        api.post(f"/__sandbox/accounts/{account}/balance", json={"value": "0.00"})
    again = run(bank, batch, ledger, "--create-only")
    assert again.returncode == 0, again.stdout
    assert ledger_rows(ledger)[0]["status"] == "created"
    assert run(bank, batch, ledger).returncode == 1
    [row] = ledger_rows(ledger)
    assert row["status"] == "failed" and "available balance" in row["error"], row
