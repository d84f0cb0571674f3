"""Signs every request to the bank: RFC 9421 HTTP Message Signatures with Ed25519.

``RequestSigner`` is the client's per-attempt hook when a signing key is configured. Before
every attempt, retries included, it adds ``Date``, ``Content-Type: application/json``,
``Content-Length`` (0 without a body) and ``Content-Digest`` (SHA-512 of the exact body
bytes), then ``Signature-Input`` and ``Signature`` under the label ``sig1``: parameters
``created``, ``keyid`` and a fresh ``nonce`` (a UUID4), no ``alg``, covering ``COMPONENTS``
and ``"@query"`` when the URL has a query. ``signature_headers`` signs given component
values (RFC 9421 section 2.5's signature base); the private key never leaves it.
"""

from __future__ import annotations

import base64
import hashlib
import time
import uuid
from collections.abc import Callable, Sequence
from email.utils import formatdate
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from payrun.bank._transport import PreparedRequest

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from payrun.config import SigningKey

__all__ = ["COMPONENTS", "LABEL", "RequestSigner", "content_digest", "signature_headers"]

COMPONENTS = (
    "@method",
    "@authority",
    "@path",
    "content-type",
    "content-length",
    "date",
    "content-digest",
)
"""What every signature covers (``"@query"`` follows when the URL has a query)."""
LABEL = "sig1"
"""The signature's label in ``Signature-Input`` and ``Signature``."""

_DEFAULT_PORTS = {"http": ":80", "https": ":443"}


def content_digest(body: bytes) -> str:
    """The ``Content-Digest`` of ``body``: ``sha-512=:<base64>:``."""
    return f"sha-512=:{base64.b64encode(hashlib.sha512(body).digest()).decode()}:"


def signature_headers(
    private_key: Ed25519PrivateKey,
    components: Sequence[tuple[str, str]],
    params: Sequence[tuple[str, int | str]],
    *,
    label: str = LABEL,
) -> dict[str, str]:
    """``Signature-Input`` and ``Signature`` over ``components`` (name, value as sent),
    with signature ``params`` (name, integer or string) in the order given."""
    covered = " ".join(f'"{name}"' for name, _ in components)
    signature_params = f"({covered})" + "".join(
        f";{name}={value}" if isinstance(value, int) else f';{name}="{value}"'
        for name, value in params
    )
    lines = [f'"{name}": {value}' for name, value in components]
    lines.append(f'"@signature-params": {signature_params}')
    signature = private_key.sign("\n".join(lines).encode("ascii"))
    return {
        "Signature-Input": f"{label}={signature_params}",
        "Signature": f"{label}=:{base64.b64encode(signature).decode()}:",
    }


class RequestSigner:
    """The per-attempt hook that signs each request with ``key`` (see the module).

    ``clock`` gives the time of ``created`` and ``Date`` (seconds since the epoch);
    ``nonce`` a fresh nonce per call.
    """

    __slots__ = ("_clock", "_key", "_nonce")

    def __init__(
        self,
        key: SigningKey,
        *,
        clock: Callable[[], float] = time.time,
        nonce: Callable[[], str] = lambda: str(uuid.uuid4()),
    ) -> None:
        self._key = key
        self._clock = clock
        self._nonce = nonce

    def __repr__(self) -> str:
        return f"RequestSigner(key_id={self._key.key_id!r})"

    def __call__(self, request: PreparedRequest) -> PreparedRequest:
        """``request`` with its signature and the headers it covers."""
        now = self._clock()
        body = request.body
        headers = {
            "Date": formatdate(now, usegmt=True),
            "Content-Type": "application/json",
            "Content-Length": str(len(body)),
            "Content-Digest": content_digest(body),
        }
        url = urlsplit(request.url)
        authority = url.netloc.lower().removesuffix(_DEFAULT_PORTS.get(url.scheme, "\0"))
        components = [
            ("@method", request.method),
            ("@authority", authority),
            ("@path", url.path or "/"),
            ("content-type", headers["Content-Type"]),
            ("content-length", headers["Content-Length"]),
            ("date", headers["Date"]),
            ("content-digest", headers["Content-Digest"]),
        ]
        if url.query:
            components.append(("@query", f"?{url.query}"))
        params = (("created", int(now)), ("keyid", self._key.key_id), ("nonce", self._nonce()))
        signed = signature_headers(self._key.private_key, components, params)
        return request.with_headers({**headers, **signed})
