"""Signed requests (RFC 9421, Ed25519): the signer, its test vector, and the signing key's
configuration (PAYRUN_SIGNING_KEY_FILE / PAYRUN_SIGNING_KEY_ID)."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.rsa import generate_private_key
from http_message_signatures import HTTPMessageVerifier, InvalidSignature, algorithms
from http_message_signatures.resolvers import MappingKeyResolver

from payrun.bank import Answer, BankClient, PreparedRequest, RetryPolicy
from payrun.bank.signing import COMPONENTS, RequestSigner, content_digest, signature_headers
from payrun.config import Secret, Settings, SigningKey, load_settings
from payrun.errors import ConfigError

# RFC 9421 Appendix B.1.4, test-key-ed25519
RFC_PRIVATE_PEM = b"""-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIJ+DYvh6SEqVTm50DFtMDoQikTmiCqirVv9mWG9qfSnF
-----END PRIVATE KEY-----
"""
RFC_PUBLIC_PEM = b"""-----BEGIN PUBLIC KEY-----
MCowBQYDK2VwAyEAJrQLj5P/89iXES9+vFgrIy29clF9CC/oPPsw3c5D0bs=
-----END PUBLIC KEY-----
"""
BASE = {"PAYRUN_BASE_URL": "https://bank.example", "PAYRUN_API_KEY": "g-test-key"}


def _key_file(tmp_path: Path, pem: bytes, name: str = "signing.pem") -> Path:
    path = tmp_path / name
    path.write_bytes(pem)
    # Readable by its owner only, or payrun refuses it
    path.chmod(0o600)
    return path


def _new_key_pem() -> bytes:
    return Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _signing_key(pem: bytes = RFC_PRIVATE_PEM, key_id: str = "test-key-ed25519") -> SigningKey:
    key = serialization.load_pem_private_key(pem, password=None)
    assert isinstance(key, Ed25519PrivateKey)
    return SigningKey(key_id, key)


def _verify(request: PreparedRequest, public_pem: bytes, key_id: str) -> list[Any]:
    """Verify ``request`` with http-message-signatures, the independent verifier."""
    public = serialization.load_pem_public_key(public_pem)
    assert isinstance(public, Ed25519PublicKey)
    verifier = HTTPMessageVerifier(
        signature_algorithm=algorithms.ED25519,
        key_resolver=MappingKeyResolver(private_keys={}, public_keys={key_id: public}),
    )
    message = SimpleNamespace(method=request.method, url=request.url, headers=request.headers)
    required = [*COMPONENTS, "@query"] if "?" in request.url else list(COMPONENTS)
    results: list[Any] = verifier.verify(message, require_components=required, body=request.body)
    return results


def test_rfc_9421_b26_ed25519_vector_is_reproduced_byte_for_byte(tmp_path: Path) -> None:
    """RFC 9421 B.2.6: the key read as payrun reads a signing key file signs the RFC's
    request into exactly the RFC's Signature-Input and Signature."""
    environ = {
        **BASE,
        "PAYRUN_SIGNING_KEY_FILE": str(_key_file(tmp_path, RFC_PRIVATE_PEM)),
        "PAYRUN_SIGNING_KEY_ID": "test-key-ed25519",
    }
    signing = load_settings(environ=environ).signing
    assert signing is not None
    components = [
        ("date", "Tue, 20 Apr 2021 02:07:55 GMT"),
        ("@method", "POST"),
        ("@path", "/foo"),
        ("@authority", "example.com"),
        ("content-type", "application/json"),
        ("content-length", "18"),
    ]
    params = (("created", 1618884473), ("keyid", "test-key-ed25519"))
    headers = signature_headers(signing.private_key, components, params, label="sig-b26")
    assert headers == {
        "Signature-Input": 'sig-b26=("date" "@method" "@path" "@authority" "content-type"'
        ' "content-length");created=1618884473;keyid="test-key-ed25519"',
        "Signature": "sig-b26=:wqcAqbmYJ2ji2glfAMaRy4gruYYnx2nEFN2HN6jrnDnQCK1u02Gb04v9EDgwUPiu"
        "4A0w6vuQv5lIp5WPpBKRCw==:",
    }


def test_content_digest_is_sha512_of_the_exact_body() -> None:
    """Content-Digest is sha-512 of the body bytes; an empty body has the empty digest."""
    body = b'{"hello": "world"}'
    expected = base64.b64encode(hashlib.sha512(body).digest()).decode()
    assert content_digest(body) == f"sha-512=:{expected}:"
    assert content_digest(b"") == (
        "sha-512=:z4PhNX7vuL3xVChQ1m2AB9Yg5AULVxXcg/SpIdNs6c5H0NE8XYXysP+DGNKHfuwvY7kxvUdBeoGlODJ6"
        "+SfaPg==:"
    )


@pytest.mark.parametrize(
    ("method", "url", "body"),
    [
        ("GET", "https://bank.example/v0/index", b""),
        ("GET", "https://bank.example/v0/payees?page%5Bsize%5D=200&include=cop-requests", b""),
        ("POST", "https://Bank.Example:443/v0/bank/accounts/ba.x/payments", b'{"a":"\\u00a3"}'),
        ("POST", "http://127.0.0.1:8080/v0/payments/pm.1/submissions", b'{"payment-scheme":"fps"}'),
    ],
)
def test_signed_requests_verify_with_an_independent_library(
    method: str, url: str, body: bytes
) -> None:
    """http-message-signatures verifies payrun's signature over the required components,
    with @query when the URL has one and the Content-Digest of the exact body."""
    pem = _new_key_pem()
    key = _signing_key(pem, "kid-1")
    public = key.private_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    request = PreparedRequest(method, url, {"Authorization": "ServiceAPIKey k"}, body)
    signed = RequestSigner(key)(request)
    headers = signed.headers
    assert headers["Content-Type"] == "application/json"
    assert headers["Content-Length"] == str(len(body))
    assert headers["Content-Digest"] == content_digest(body)
    assert headers["Date"].endswith(" GMT")
    assert headers["Signature-Input"].startswith('sig1=("@method" "@authority" "@path"')
    assert ";alg=" not in headers["Signature-Input"]
    assert ('"@query"' in headers["Signature-Input"]) == ("?" in url)
    (result,) = _verify(signed, public, "kid-1")
    assert result.label == "sig1" and result.parameters["keyid"] == "kid-1"
    assert len(str(result.nonce)) == 36
    # The same request with its body changed no longer verifies
    tampered = PreparedRequest(signed.method, signed.url, signed.headers, body + b" ")
    with pytest.raises(InvalidSignature):
        _verify(tampered, public, "kid-1")


def test_each_call_signs_afresh_with_a_new_nonce_and_the_clock_s_time() -> None:
    """Two signatures of one request differ in nonce; created is the clock's second."""
    times = iter([1_700_000_000.7, 1_700_000_005.2])
    signer = RequestSigner(_signing_key(), clock=lambda: next(times))
    request = PreparedRequest("GET", "https://bank.example/v0/index", {})
    first, second = signer(request), signer(request)
    assert ";created=1700000000;" in first.headers["Signature-Input"]
    assert ";created=1700000005;" in second.headers["Signature-Input"]
    nonce = first.headers["Signature-Input"].split('nonce="')[1]
    assert nonce not in second.headers["Signature-Input"]
    assert first.headers["Date"] == "Tue, 14 Nov 2023 22:13:20 GMT"


class _RateLimitedOnce:
    """A transport that answers 429 to the first attempt and 200 after, keeping each request."""

    def __init__(self) -> None:
        self.sent: list[PreparedRequest] = []

    async def send(self, request: PreparedRequest) -> Answer:
        self.sent.append(request)
        if len(self.sent) == 1:
            return Answer(429, b'{"errors": []}')
        return Answer(200, b'{"message": "ok", "busy": false}')

    async def aclose(self) -> None:
        """Nothing to close."""


async def test_the_client_signs_every_attempt_afresh_when_settings_carry_a_key() -> None:
    """A retried request is signed again (new nonce), and signed last, over what is sent."""
    transport = _RateLimitedOnce()
    settings = Settings("https://bank.example", Secret("k"), signing=_signing_key())
    retry = RetryPolicy.no_wait(attempts=3)
    with anyio.fail_after(10):
        async with BankClient(transport, settings, retry=retry) as bank:
            assert await bank.signature_verified()
    first, second = transport.sent
    assert first.headers["Signature"] != second.headers["Signature"]
    for request in (first, second):
        (result,) = _verify(request, RFC_PUBLIC_PEM, "test-key-ed25519")
        assert result.covered_components['"@path"'] == "/v0/security/message-signature/verify"


async def test_an_unsigned_client_adds_no_signature_headers() -> None:
    """Without a signing key, requests carry no Signature, Date or Content-Digest."""
    transport = _RateLimitedOnce()
    settings = Settings("https://bank.example", Secret("k"))
    async with BankClient(transport, settings, retry=RetryPolicy.no_wait(attempts=3)) as bank:
        await bank.signature_verified()
    names = {name.lower() for request in transport.sent for name in request.headers}
    assert not names & {"signature", "signature-input", "date", "content-digest"}


# -- configuration ------------------------------------------------------------------------


def test_both_settings_give_a_signing_key_shown_by_its_id_only(tmp_path: Path) -> None:
    """The file and id (environment or options) make a SigningKey whose repr hides the key."""
    path = _key_file(tmp_path, RFC_PRIVATE_PEM)
    by_env = load_settings(
        environ={**BASE, "PAYRUN_SIGNING_KEY_FILE": str(path), "PAYRUN_SIGNING_KEY_ID": " k-1 "}
    )
    by_option = load_settings(environ=BASE, signing_key_file=path, signing_key_id="k-1")
    for settings in (by_env, by_option):
        assert settings.signing is not None and settings.signing.key_id == "k-1"
        assert "PRIVATE" not in repr(settings) and "MC4CAQ" not in repr(settings)
    assert load_settings(environ=BASE).signing is None


_SECRET_TEXT = ("MC4CAQAwBQYDK2VwBCIEIJ", "BEGIN", "key-material")


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "cannot read the signing key file named by PAYRUN_SIGNING_KEY_FILE"),
        (b"", "is not a PEM private key (PKCS#8)"),
        (b"MC4CAQAwBQYDK2VwBCIEIJ+DYvh6SEqVTm50DFtMDoQikTmiCqirVv9mWG9qfSnF", "not a PEM"),
        (RFC_PUBLIC_PEM, "holds a public key: give the private half"),
        ("encrypted", "is encrypted with a passphrase"),
        ("rsa", "holds an RSA key, not an Ed25519 one"),
        ("openssh", "is not a PEM private key (PKCS#8)"),
    ],
    ids=["missing", "empty", "bare-base64", "public", "encrypted", "rsa", "openssh"],
)
def test_an_unusable_key_file_is_one_line_that_never_shows_the_key(
    tmp_path: Path, content: bytes | str | None, expected: str
) -> None:
    """Missing, empty, public, encrypted, RSA or OpenSSH-format keys: a ConfigError (exit 2)
    naming the setting, never quoting the file's name or content."""
    path = tmp_path / "key-material.pem"
    key = Ed25519PrivateKey.generate()
    if content == "encrypted":
        path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.BestAvailableEncryption(b"passphrase"),
            )
        )
    elif content == "rsa":
        rsa = generate_private_key(public_exponent=65537, key_size=2048)
        path.write_bytes(
            rsa.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    elif content == "openssh":
        path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.OpenSSH,
                serialization.NoEncryption(),
            )
        )
    elif isinstance(content, bytes):
        path.write_bytes(content)
    if path.exists():
        path.chmod(0o600)
    environ = {**BASE, "PAYRUN_SIGNING_KEY_FILE": str(path), "PAYRUN_SIGNING_KEY_ID": "k"}
    with pytest.raises(ConfigError) as info:
        load_settings(environ=environ)
    message = str(info.value)
    assert expected in message and "\n" not in message
    assert not any(text in message for text in _SECRET_TEXT), message
    assert info.value.__cause__ is None


def test_a_folder_for_a_key_file_is_unreadable(tmp_path: Path) -> None:
    """A key file that is a folder cannot be read: said in one line."""
    with pytest.raises(ConfigError, match="cannot read the signing key file named by"):
        load_settings(environ=BASE, signing_key_file=tmp_path, signing_key_id="k")


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"PAYRUN_SIGNING_KEY_FILE": "x.pem"}, "no signing key id: set PAYRUN_SIGNING_KEY_ID"),
        ({"PAYRUN_SIGNING_KEY_ID": "k"}, "no signing key file: set PAYRUN_SIGNING_KEY_FILE"),
        (
            {"PAYRUN_SIGNING_KEY_FILE": "x.pem", "PAYRUN_SIGNING_KEY_ID": 'a"b'},
            "the signing key id has a space, quote",
        ),
    ],
)
def test_one_setting_without_the_other_is_a_config_error(
    environ: dict[str, str], expected: str
) -> None:
    """The key file and the key id go together, and the id must fit in a header."""
    with pytest.raises(ConfigError, match=expected):
        load_settings(environ={**BASE, **environ})
