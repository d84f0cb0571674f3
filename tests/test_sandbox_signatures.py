"""The sandbox in live mode: every request needing the API key must be signed (RFC 9421),
and it serves the bank's signature check. Over real loopback HTTP."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from payrun.bank import PreparedRequest
from payrun.bank.signing import RequestSigner
from payrun.cli import main
from payrun.config import SigningKey
from payrun.sandbox import (
    MAX_PUBLIC_KEY_FILE_BYTES,
    MAX_SEED_BYTES,
    RunningSandbox,
    SeedError,
    load_seed,
    serve_in_thread,
)

KEY_ID = "payrun-live-1"
VERIFY = "/v0/security/message-signature/verify"


def _public_pem(key: Ed25519PrivateKey) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


@pytest.fixture
def private_key() -> Ed25519PrivateKey:
    """A fresh Ed25519 key, registered with the live sandbox under KEY_ID."""
    return Ed25519PrivateKey.generate()


@pytest.fixture
def live_bank(private_key: Ed25519PrivateKey) -> Iterator[RunningSandbox]:
    """A sandbox that requires signatures by ``private_key``."""
    with serve_in_thread(signature_keys={KEY_ID: _public_pem(private_key)}) as bank:
        yield bank


class _Client:
    """Sends signed (or unsigned, or altered) requests to a sandbox with httpx."""

    def __init__(self, bank: RunningSandbox, key: Ed25519PrivateKey, key_id: str = KEY_ID):
        self.bank = bank
        self.signer = RequestSigner(SigningKey(key_id, key))

    def prepare(self, method: str, path: str, body: Any = None) -> PreparedRequest:
        content = b"" if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"ServiceAPIKey {self.bank.api_key}"}
        return PreparedRequest(method, self.bank.base_url + path, headers, content)

    def send(self, request: PreparedRequest) -> httpx.Response:
        return httpx.request(
            request.method,
            request.url,
            headers=dict(request.headers),
            content=request.body,
            timeout=10,
        )

    def signed(self, method: str, path: str, body: Any = None) -> httpx.Response:
        return self.send(self.signer(self.prepare(method, path, body)))


def _payee_path(bank: RunningSandbox) -> str:
    return f"/v0/legal-persons/{bank.state.own_legal_person_id}/bank/payees"


_NEW_PAYEE = {"account-holder": "Mia Davies", "bank-id": "110001", "account-number": "22039287"}


def test_signed_requests_are_served_and_the_organization_is_live(
    live_bank: RunningSandbox, private_key: Ed25519PrivateKey
) -> None:
    """A signed GET (with a query) and a signed POST are served; the organization is live."""
    client = _Client(live_bank, private_key)
    index = client.signed("GET", "/v0/index")
    assert index.status_code == 200
    org = client.signed("GET", index.json()["organization-url"]).json()
    assert org["organization-mode"] == "live-mode"
    listed = client.signed("GET", _payee_path(live_bank) + "?page%5Bsize%5D=5")
    assert listed.status_code == 200
    before = len(live_bank.state.payees)
    created = client.signed("POST", _payee_path(live_bank), _NEW_PAYEE)
    assert created.status_code == 201, created.text
    assert len(live_bank.state.payees) == before + 1


def _tampered_body(client: _Client) -> PreparedRequest:
    signed = client.signer(client.prepare("POST", _payee_path(client.bank), _NEW_PAYEE))
    changed = json.dumps({**_NEW_PAYEE, "account-number": "99999999"}).encode()
    return PreparedRequest(signed.method, signed.url, signed.headers, changed)


def _without_query_coverage(client: _Client) -> PreparedRequest:
    # Signed without its query, which is then added: @query is required and not covered
    signed = client.signer(client.prepare("POST", _payee_path(client.bank), _NEW_PAYEE))
    return PreparedRequest(signed.method, signed.url + "?x=1", signed.headers, signed.body)


def _stale(client: _Client) -> PreparedRequest:
    old = RequestSigner(client.signer._key, clock=lambda: time.time() - 301)
    return old(client.prepare("POST", _payee_path(client.bank), _NEW_PAYEE))


def _future(client: _Client) -> PreparedRequest:
    ahead = RequestSigner(client.signer._key, clock=lambda: time.time() + 400)
    return ahead(client.prepare("POST", _payee_path(client.bank), _NEW_PAYEE))


def _unknown_key_id(client: _Client) -> PreparedRequest:
    other = RequestSigner(SigningKey("someone-else", client.signer._key.private_key))
    return other(client.prepare("POST", _payee_path(client.bank), _NEW_PAYEE))


def _wrong_key(client: _Client) -> PreparedRequest:
    stranger = RequestSigner(SigningKey(KEY_ID, Ed25519PrivateKey.generate()))
    return stranger(client.prepare("POST", _payee_path(client.bank), _NEW_PAYEE))


def _unsigned(client: _Client) -> PreparedRequest:
    return client.prepare("POST", _payee_path(client.bank), _NEW_PAYEE)


def _no_digest(client: _Client) -> PreparedRequest:
    signed = client.signer(client.prepare("POST", _payee_path(client.bank), _NEW_PAYEE))
    headers = {k: v for k, v in signed.headers.items() if k != "Content-Digest"}
    return PreparedRequest(signed.method, signed.url, headers, signed.body)


def _garbled(client: _Client) -> PreparedRequest:
    signed = client.signer(client.prepare("POST", _payee_path(client.bank), _NEW_PAYEE))
    return signed.with_headers({"Signature-Input": 'sig1=("@method" nonsense'})


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (_unsigned, "no Signature-Input and Signature headers"),
        (_tampered_body, "Content-Digest does not match the body"),
        (_wrong_key, "the signature does not match the request"),
        (_unknown_key_id, "unknown key id"),
        (_stale, "over 5 minutes"),
        (_future, "over 5 minutes"),
        (_without_query_coverage, "does not cover @query"),
        (_no_digest, "no Content-Digest header"),
        (_garbled, "cannot be read"),
    ],
    ids=lambda v: getattr(v, "__name__", "")[1:] or None,
)
def test_a_bad_signature_is_refused_with_401_and_nothing_is_created(
    live_bank: RunningSandbox, private_key: Ed25519PrivateKey, make: Any, reason: str
) -> None:
    """Unsigned, tampered body, wrong key, unknown key id, stale or future created, a
    component left out, unreadable headers: 401 with a JSON error body, no payee made."""
    client = _Client(live_bank, private_key)
    before = len(live_bank.state.payees)
    answer = client.send(make(client))
    assert answer.status_code == 401
    (error,) = answer.json()["errors"]
    assert error["title"] == "unauthorized" and reason in error["detail"], error
    assert len(live_bank.state.payees) == before


def test_a_replayed_request_is_refused_and_acts_once(
    live_bank: RunningSandbox, private_key: Ed25519PrivateKey
) -> None:
    """The same signed request sent twice: the first creates a payee, the replay is 401."""
    client = _Client(live_bank, private_key)
    before = len(live_bank.state.payees)
    request = client.signer(client.prepare("POST", _payee_path(live_bank), _NEW_PAYEE))
    assert client.send(request).status_code == 201
    replay = client.send(request)
    assert replay.status_code == 401
    assert "nonce was used before" in replay.json()["errors"][0]["detail"]
    assert len(live_bank.state.payees) == before + 1


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "PATCH", "DELETE"])
def test_the_signature_check_answers_any_method_without_an_api_key(
    live_bank: RunningSandbox, private_key: Ed25519PrivateKey, method: str
) -> None:
    """/v0/security/message-signature/verify: 200 {message, busy} when the signature
    verifies, 401 with the same shape when it does not; no API key needed."""
    client = _Client(live_bank, private_key)
    request = client.signer(PreparedRequest(method, live_bank.base_url + VERIFY, {}))
    verified = client.send(request)
    assert verified.status_code == 200
    assert set(verified.json()) == {"message", "busy"} and verified.json()["busy"] is False
    unsigned = httpx.request(method, live_bank.base_url + VERIFY, timeout=10)
    assert unsigned.status_code == 401 and set(unsigned.json()) == {"message", "busy"}
    assert client.send(request).status_code == 401


def test_a_test_mode_sandbox_needs_no_signature_and_its_check_refuses() -> None:
    """Without registered keys the organization is test-mode, unsigned requests are served,
    and the signature check answers 401 (no key to verify with)."""
    with serve_in_thread() as bank:
        headers = {"Authorization": f"ServiceAPIKey {bank.api_key}"}
        assert httpx.get(bank.base_url + "/v0/index", headers=headers).status_code == 200
        assert httpx.get(bank.base_url + VERIFY).status_code == 401


def test_a_seed_file_registers_keys_from_a_pem_file_beside_it(
    tmp_path: Path, private_key: Ed25519PrivateKey
) -> None:
    """message-signature-keys with public-key-file (relative to the seed) makes the seed's
    organization live-mode and enforcing."""
    (tmp_path / "public.pem").write_text(_public_pem(private_key))
    seed = tmp_path / "seed.json"
    seed.write_text(
        json.dumps(
            {"message-signature-keys": [{"key-id": KEY_ID, "public-key-file": "public.pem"}]}
        )
    )
    with serve_in_thread(seed=seed) as bank:
        assert bank.state.org_mode == "live-mode"
        headers = {"Authorization": f"ServiceAPIKey {bank.api_key}"}
        assert httpx.get(bank.base_url + "/v0/index", headers=headers).status_code == 401
        assert _Client(bank, private_key).signed("GET", "/v0/index").status_code == 200


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({"key-id": "k", "public-key": "not a key"}, "is not a PEM public key"),
        ({"key-id": "k"}, "needs a non-empty string 'public-key'"),
        ({"public-key": "x"}, "needs a non-empty string 'key-id'"),
        ({"key-id": "k", "public-key-file": "absent.pem"}, "cannot read"),
    ],
)
def test_a_bad_signature_key_in_a_seed_file_is_a_seed_error(
    tmp_path: Path, entry: dict[str, str], expected: str
) -> None:
    """A seed's signature key must name a key id and an Ed25519 public key."""
    seed = tmp_path / "seed.json"
    seed.write_text(json.dumps({"message-signature-keys": [entry]}))
    with pytest.raises(SeedError, match=expected):
        load_seed(seed)


def test_a_seed_or_public_key_file_over_its_cap_is_refused_unread(tmp_path: Path) -> None:
    """A seed over MAX_SEED_BYTES, or a public-key-file over its cap: a SeedError at once."""
    seed = tmp_path / "seed.json"
    with seed.open("w") as handle:
        handle.write('{"payees": [' + " " * MAX_SEED_BYTES + "]}")
    with pytest.raises(SeedError, match=r"seed .* is over 8,192 KiB"):
        load_seed(seed)
    (tmp_path / "big.pem").write_text("x" * (MAX_PUBLIC_KEY_FILE_BYTES + 1))
    entry = {"key-id": "k", "public-key-file": "big.pem"}
    seed.write_text(json.dumps({"message-signature-keys": [entry]}))
    with pytest.raises(SeedError, match=r"public-key-file big.pem is over 64 KiB"):
        load_seed(seed)


def test_a_seed_file_s_organization_mode_is_one_of_two_words(tmp_path: Path) -> None:
    """organization-mode is test-mode or live-mode."""
    seed = tmp_path / "seed.json"
    seed.write_text(json.dumps({"organization": {"display-name": "X", "organization-mode": "x"}}))
    with pytest.raises(SeedError, match="organization-mode must be test-mode or live-mode"):
        load_seed(seed)


@pytest.mark.parametrize(
    "extra",
    [["--require-signatures", "public.pem"], ["--signing-key-id", "k"]],
)
def test_the_sandbox_command_needs_both_signature_options(
    extra: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """--require-signatures and --signing-key-id go together (exit 2, one line)."""
    assert main(["sandbox", "--port", "0", *extra]) == 2
    assert "go together" in capsys.readouterr().err


def test_the_sandbox_command_refuses_a_private_key_as_the_public_one(
    tmp_path: Path, private_key: Ed25519PrivateKey, capsys: pytest.CaptureFixture[str]
) -> None:
    """Handing --require-signatures the private key is a configuration error (exit 2)."""
    pem = private_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    (tmp_path / "private.pem").write_bytes(pem)
    argv = ["sandbox", "--port", "0", "--require-signatures", str(tmp_path / "private.pem")]
    assert main([*argv, "--signing-key-id", "k"]) == 2
    err = capsys.readouterr().err
    assert "is not a PEM public key" in err and "PRIVATE" not in err
