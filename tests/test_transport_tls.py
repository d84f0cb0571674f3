"""The aiohttp transport over TLS: an https bank is verified with the CA certificates the
machine trusts (``SSL_CERT_FILE`` included), a bank whose certificate is not trusted is
never sent to, and an http bank loads no CA certificate at all (start-up CPU)."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp.web
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from _run_helpers import fresh_python
from payrun.bank import NotSent, PreparedRequest, make_transport


def _self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 signed by its own key: (certificate, key) PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "payrun test bank")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "bank.pem", folder / "bank.key"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


@pytest.fixture
async def https_bank(tmp_path: Path) -> AsyncIterator[tuple[str, Path]]:
    """An https server on 127.0.0.1 answering ``{}``: its base URL and its certificate."""
    cert_file, key_file = _self_signed(tmp_path)
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert_file, key_file)

    async def answer(request: aiohttp.web.Request) -> aiohttp.web.Response:
        return aiohttp.web.json_response({})

    app = aiohttp.web.Application()
    app.router.add_get("/v0/index", answer)
    runner = aiohttp.web.AppRunner(app, access_log=None)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_tls)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"https://127.0.0.1:{port}", cert_file
    finally:
        await runner.cleanup()


def _index(base_url: str) -> PreparedRequest:
    return PreparedRequest("GET", f"{base_url}/v0/index", {"Accept": "application/json"})


async def test_an_https_bank_is_verified_with_the_certificates_ssl_cert_file_names(
    https_bank: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bank whose certificate SSL_CERT_FILE names is talked to over https."""
    base_url, certificate = https_bank
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate))
    transport = make_transport(max_connections=2)
    try:
        answer = await transport.send(_index(base_url))
    finally:
        await transport.aclose()
    assert (answer.status, answer.content) == (200, b"{}")


async def test_an_https_bank_whose_certificate_is_not_trusted_is_never_sent_to(
    https_bank: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A self-signed certificate the machine does not trust: not sent, for a TLS reason."""
    base_url, _ = https_bank
    (tmp_path / "other").mkdir()
    other, _ = _self_signed(tmp_path / "other")
    monkeypatch.setenv("SSL_CERT_FILE", str(other))
    transport = make_transport(max_connections=2)
    try:
        with pytest.raises(NotSent) as refused:
            await transport.send(_index(base_url))
    finally:
        await transport.aclose()
    assert refused.value.reason == "tls"


def test_an_http_bank_loads_no_ca_certificate() -> None:
    """Importing the transport, making it and sending over http load no CA certificate:
    aiohttp's import made two contexts that loaded them all (25 ms of CPU each)."""
    code = (
        "import ssl, sys\n"
        "loads = []\n"
        "real = ssl.SSLContext.set_default_verify_paths\n"
        "def counted(self):\n"
        "    loads.append(1)\n"
        "    return real(self)\n"
        "ssl.SSLContext.set_default_verify_paths = counted\n"
        "real_file = ssl.SSLContext.load_verify_locations\n"
        "def counted_file(self, *a, **k):\n"
        "    loads.append(1)\n"
        "    return real_file(self, *a, **k)\n"
        "ssl.SSLContext.load_verify_locations = counted_file\n"
        "import payrun.bank\n"
        "payrun.bank.make_transport()\n"
        "print(len(loads), 'aiohttp' in sys.modules)\n"
    )
    assert fresh_python(code).split() == ["0", "True"]
