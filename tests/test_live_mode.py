"""`payrun run` against a live-mode organization: signed requests pay everything through a
sandbox that enforces signatures; no signing key configured is refused before any create.
Every run is the real CLI in its own process, over loopback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from _run_helpers import assert_exactly_once, make_rows, run, write_batch
from payrun.sandbox import RunningSandbox, default_seed, serve_in_thread

KEY_ID = "payrun-live-1"


@pytest.fixture
def key_files(tmp_path: Path) -> tuple[Path, str]:
    """A private key file for the client and the public key PEM for the bank."""
    key = Ed25519PrivateKey.generate()
    private = tmp_path / "signing.pem"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    # Readable by its owner only, or payrun refuses it
    private.chmod(0o600)
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private, public.decode()


@pytest.fixture
def live_bank(key_files: tuple[Path, str]) -> Iterator[RunningSandbox]:
    """A live-mode sandbox that refuses unsigned requests."""
    with serve_in_thread(signature_keys={KEY_ID: key_files[1]}, deliver_after_ms=20) as bank:
        yield bank


def _signing_env(key_files: tuple[Path, str]) -> dict[str, str]:
    return {"PAYRUN_SIGNING_KEY_FILE": str(key_files[0]), "PAYRUN_SIGNING_KEY_ID": KEY_ID}


def test_a_signed_run_pays_every_row_once_through_an_enforcing_bank(
    live_bank: RunningSandbox, key_files: tuple[Path, str], tmp_path: Path
) -> None:
    """Every request of a whole run (payees, payments, submissions, --wait) is signed and
    accepted: every row is paid exactly once, and a rerun pays nothing more."""
    rows = make_rows(1, 40, payees=8, tag="S")
    batch = write_batch(tmp_path / "pay.csv", rows)
    ledger = tmp_path / "pay.ledger.sqlite"
    done = run(live_bank, batch, ledger, "--wait", "--yes", env=_signing_env(key_files))
    assert done.returncode == 0, done.describe()
    assert_exactly_once(live_bank, rows, ledger, done.describe())
    again = run(live_bank, batch, ledger, "--yes", env=_signing_env(key_files))
    assert again.returncode == 0, again.describe()
    assert_exactly_once(live_bank, rows, ledger, again.describe())


def test_a_run_refuses_a_signing_key_other_users_can_read(
    live_bank: RunningSandbox, key_files: tuple[Path, str], tmp_path: Path
) -> None:
    """A 0644 signing key: exit 2, one line with the chmod that fixes it, nothing made."""
    key_files[0].chmod(0o644)
    payees = len(live_bank.state.payees)
    batch = write_batch(tmp_path / "pay.csv", make_rows(5, 2, tag="O"))
    done = run(
        live_bank, batch, tmp_path / "pay.ledger.sqlite", "--yes", env=_signing_env(key_files)
    )
    assert done.returncode == 2, done.describe()
    (line,) = done.stderr.strip().splitlines()
    assert "can be read by other users (permissions 0644)" in line, line
    assert f"run `chmod 600 {key_files[0]}`" in line, line
    assert not live_bank.state.payments and len(live_bank.state.payees) == payees


def test_an_enforcing_bank_refuses_an_unsigned_run_before_anything_is_made(
    live_bank: RunningSandbox, tmp_path: Path
) -> None:
    """Without a signing key the bank answers 401: exit 2, one line naming the signing
    settings, and no payee or payment exists."""
    payees = len(live_bank.state.payees)
    batch = write_batch(tmp_path / "pay.csv", make_rows(2, 4, tag="U"))
    done = run(live_bank, batch, tmp_path / "pay.ledger.sqlite")
    assert done.returncode == 2, done.describe()
    (line,) = done.stderr.strip().splitlines()
    assert "PAYRUN_SIGNING_KEY_FILE" in line and "PAYRUN_SIGNING_KEY_ID" in line
    assert not live_bank.state.payments and len(live_bank.state.payees) == payees


@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry-run"])
def test_a_live_organization_without_a_signing_key_is_refused_before_any_create(
    tmp_path: Path, dry_run: bool
) -> None:
    """A live-mode organization whose bank does not (yet) enforce signatures: the run and
    the dry run still refuse with exit 2 and one line naming both settings; nothing made."""
    seed = default_seed()
    seed["organization"] = {**seed["organization"], "organization-mode": "live-mode"}
    with serve_in_thread(seed=seed) as bank:
        payees = len(bank.state.payees)
        batch = write_batch(tmp_path / "pay.csv", make_rows(3, 4, tag="L"))
        extra = ["--dry-run"] if dry_run else []
        done = run(bank, batch, tmp_path / "pay.ledger.sqlite", *extra)
        assert done.returncode == 2, done.describe()
        (line,) = done.stderr.strip().splitlines()
        assert "live-mode organization" in line and "nothing was created" in line
        assert "PAYRUN_SIGNING_KEY_FILE and PAYRUN_SIGNING_KEY_ID" in line
        assert not bank.state.payments and len(bank.state.payees) == payees
        assert not bank.state.cop_requests


def test_json_logs_carry_the_live_mode_refusal_as_one_object(tmp_path: Path) -> None:
    """With --log-format json the refusal is the error object on stdout (exit 2)."""
    seed = default_seed()
    seed["organization"] = {**seed["organization"], "organization-mode": "live-mode"}
    with serve_in_thread(seed=seed) as bank:
        batch = write_batch(tmp_path / "pay.csv", make_rows(4, 2, tag="J"))
        done = run(bank, batch, tmp_path / "l.sqlite", "--log-format", "json")
    assert done.returncode == 2, done.describe()
    error = json.loads(done.stdout)
    assert error["exit_code"] == 2 and "PAYRUN_SIGNING_KEY_ID" in error["message"]


def test_an_unsigned_run_names_the_missing_signing_key_first(
    live_bank: RunningSandbox, tmp_path: Path
) -> None:
    """A 401 to a run with no signing key names the missing signing key first, not 'the
    bank refused the API key' (which sent a user after a key that was fine)."""
    batch = write_batch(tmp_path / "pay.csv", make_rows(5, 2, tag="K"))
    done = run(live_bank, batch, tmp_path / "pay.ledger.sqlite")
    assert done.returncode == 2, done.describe()
    (line,) = done.stderr.strip().splitlines()
    assert "no signing key is configured" in line[:90], line
    assert "refused the API key" not in line, line


def test_a_bare_401_without_a_signing_key_names_the_signing_key_before_the_api_key() -> None:
    """A 401 that says nothing of signatures, to an unsigned request: the signing key
    settings come before the API key's."""
    from payrun.bank._refusals import error_from_response  # noqa: PLC0415

    error = error_from_response("GET", "/v0/index", 401, "{}", signed=False)
    text = str(error)
    assert text.startswith("the bank refused the request (HTTP 401 on GET /v0/index)"), text
    assert text.index("PAYRUN_SIGNING_KEY_FILE") < text.index("PAYRUN_API_KEY"), text
