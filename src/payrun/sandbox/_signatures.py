"""The sandbox's check of HTTP message signatures (RFC 9421, Ed25519), in live mode.

``SignatureCheck`` holds the public keys registered with the bank (by key id) and the
nonces already used. ``SignatureCheck.problem(message, now)`` says why a request's
signature does not verify, or returns None (and remembers its nonce). A signature
verifies when its key id is registered, ``alg`` (if given) is ``ed25519``, it covers
``REQUIRED`` (and ``"@query"`` when the request has a query), ``created`` is within
``MAX_AGE_SECONDS`` of the bank's clock, its ``nonce`` was never seen, ``Content-Digest``
matches the body, and the Ed25519 signature of the rebuilt signature base is right. Of
several signatures on one request, one that verifies is enough (key rotation).

Written on its own, not on ``payrun.bank.signing``: the sandbox models the bank, so a
mistake in the client's signer cannot be copied into the check.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

# cryptography loads only once a key is registered (a test-mode sandbox starts without it)
if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

__all__ = ["MAX_AGE_SECONDS", "REQUIRED", "SignatureCheck", "SignedMessage", "public_key"]

REQUIRED = (
    "@method",
    "@authority",
    "@path",
    "content-type",
    "content-length",
    "date",
    "content-digest",
)
"""Components every signature must cover."""
MAX_AGE_SECONDS = 300
"""How far ``created`` may be from the bank's clock, either way."""

_KEY = re.compile(r"[a-z*][a-z0-9_.*-]*")
_TOKEN = re.compile(r"[A-Za-z*][!#$%&'*+.^_`|~:/A-Za-z0-9-]*")
_INTEGER = re.compile(r"-?[0-9]{1,15}")
_DIGESTS = {"sha-512": hashlib.sha512, "sha-256": hashlib.sha256}
_Value = int | str | bool | bytes
_Params = dict[str, _Value]


class _Malformed(ValueError):
    """A structured field that cannot be read."""


@dataclass(frozen=True, slots=True)
class SignedMessage:
    """A request as received: method, raw path and query, headers (lower-case names)."""

    method: str
    path: str
    query: str
    headers: Sequence[tuple[bytes, bytes]]
    body: bytes

    def field(self, name: str) -> str | None:
        """The header's values joined by ``, `` (None when absent)."""
        wanted = name.encode()
        values = [v.decode("latin-1").strip() for k, v in self.headers if k.lower() == wanted]
        return ", ".join(values) if values else None


def public_key(pem: str) -> Ed25519PublicKey:
    """The Ed25519 public key of a PEM text; ``ValueError`` says what is wrong with it."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    try:
        key = load_pem_public_key(pem.encode())
    except (ValueError, UnsupportedAlgorithm) as exc:
        message = "is not a PEM public key (-----BEGIN PUBLIC KEY-----)"
        raise ValueError(message) from exc
    if not isinstance(key, Ed25519PublicKey):
        message = "is not an Ed25519 public key"
        raise ValueError(message)
    return key


class SignatureCheck:
    """Registered public keys by key id, and the nonces already used."""

    def __init__(self, keys: Mapping[str, Ed25519PublicKey]) -> None:
        self.keys = dict(keys)
        self._nonces: set[str] = set()
        # (created, nonce) in the order seen, to forget nonces past the age limit
        self._seen: deque[tuple[int, str]] = deque()

    def problem(self, message: SignedMessage, now: float) -> str | None:
        """Why ``message``'s signature does not verify at ``now``, or None when it does."""
        inputs, signatures = message.field("signature-input"), message.field("signature")
        if inputs is None or signatures is None:
            return "the request has no Signature-Input and Signature headers"
        try:
            parsed_inputs = _dictionary(inputs)
            parsed_signatures = _dictionary(signatures)
        except _Malformed as exc:
            return f"the signature headers cannot be read ({exc})"
        problems = []
        for label, (covered, params) in parsed_inputs.items():
            signature = parsed_signatures.get(label, (None, {}))[0]
            problem = self._label_problem(message, now, covered, params, signature)
            if problem is None:
                self._remember(str(params["nonce"]), int(params["created"]), now)
                return None
            problems.append(f"{label}: {problem}")
        return "; ".join(problems) or "the request has no signature"

    def _label_problem(
        self,
        message: SignedMessage,
        now: float,
        covered: object,
        params: _Params,
        signature: object,
    ) -> str | None:
        if not isinstance(covered, list) or not isinstance(signature, bytes):
            return "not a list of components with a byte-sequence signature"
        key = self.keys.get(str(params.get("keyid")))
        if key is None:
            return "unknown key id"
        problem = self._params_problem(message, now, covered, params)
        if problem is not None:
            return problem
        digest_problem = _digest_problem(message)
        if digest_problem is not None:
            return digest_problem
        base = _signature_base(message, covered, params)
        if base is None:
            return "it covers a component the request does not have"
        from cryptography.exceptions import InvalidSignature

        try:
            key.verify(signature, base)
        except InvalidSignature:
            return "the signature does not match the request"
        return None

    def _params_problem(
        self, message: SignedMessage, now: float, covered: list[Any], params: _Params
    ) -> str | None:
        """What is wrong with the algorithm, coverage, created time or nonce, if anything."""
        if params.get("alg", "ed25519") != "ed25519":
            return "the algorithm is not ed25519"
        names = [name for name, _ in covered]
        required = [*REQUIRED, "@query"] if message.query else list(REQUIRED)
        missing = [name for name in required if name not in names]
        if missing:
            return f"it does not cover {' '.join(missing)}"
        created, nonce = params.get("created"), params.get("nonce")
        if not isinstance(created, int) or isinstance(created, bool):
            return "no created time"
        if abs(now - created) > MAX_AGE_SECONDS:
            return f"created {int(now - created)} seconds from the bank's time (over 5 minutes)"
        if not isinstance(nonce, str) or not nonce:
            return "no nonce"
        if nonce in self._nonces:
            return "its nonce was used before (a replayed request)"
        return None

    def _remember(self, nonce: str, created: int, now: float) -> None:
        self._nonces.add(nonce)
        self._seen.append((created, nonce))
        # Past the age limit a replay is refused by its created time anyway
        while self._seen and self._seen[0][0] < now - 2 * MAX_AGE_SECONDS:
            self._nonces.discard(self._seen.popleft()[1])


def _digest_problem(message: SignedMessage) -> str | None:
    """Why ``Content-Digest`` does not match the body, or None when it does."""
    header = message.field("content-digest")
    if header is None:
        return "no Content-Digest header"
    try:
        digests = _dictionary(header)
    except _Malformed:
        return "the Content-Digest header cannot be read"
    known = {name: value for name, (value, _) in digests.items() if name in _DIGESTS}
    if not known:
        return "Content-Digest has no sha-512 or sha-256 digest"
    for name, value in known.items():
        if value != _DIGESTS[name](message.body).digest():
            return "Content-Digest does not match the body"
    return None


def _signature_base(
    message: SignedMessage, covered: list[tuple[_Value, _Params]], params: _Params
) -> bytes | None:
    """The signature base of RFC 9421 section 2.5, or None for a component not there."""
    lines, names = [], []
    for name, component_params in covered:
        if not isinstance(name, str) or component_params:
            return None
        value = _component(message, name)
        if value is None:
            return None
        lines.append(f'"{name}": {value}')
        names.append(f'"{name}"')
    lines.append(f'"@signature-params": ({" ".join(names)}){_serialize_params(params)}')
    return "\n".join(lines).encode("latin-1")


def _component(message: SignedMessage, name: str) -> str | None:
    derived = {
        "@method": message.method,
        "@authority": (message.field("host") or "").lower() or None,
        "@path": message.path or "/",
        "@query": f"?{message.query}",
    }
    if name.startswith("@"):
        return derived.get(name)
    return message.field(name)


def _serialize_params(params: _Params) -> str:
    text = ""
    for name, value in params.items():
        if value is True:
            text += f";{name}"
        elif isinstance(value, str):
            escaped = value.replace("\\", "\\\\").replace('"', '\\"')
            text += f';{name}="{escaped}"'
        elif isinstance(value, bytes):
            text += f";{name}=:{base64.b64encode(value).decode()}:"
        else:
            text += f";{name}={'?0' if value is False else value}"
    return text


# -- RFC 8941 structured fields: the dictionaries these headers are --------------------


def _dictionary(text: str) -> dict[str, tuple[_Value | list[tuple[_Value, _Params]], _Params]]:
    """An RFC 8941 dictionary whose members are items or inner lists of items."""
    reader = _Reader(text)
    members: dict[str, tuple[_Value | list[tuple[_Value, _Params]], _Params]] = {}
    reader.skip(" \t")
    while not reader.done():
        key = reader.match(_KEY, "a key")
        value: _Value | list[tuple[_Value, _Params]] = True
        if reader.take("="):
            value = reader.inner_list() if reader.peek() == "(" else reader.bare_item()
        members[key] = (value, reader.params())
        reader.skip(" \t")
        if reader.done():
            break
        reader.expect(",")
        reader.skip(" \t")
        if reader.done():
            msg = "a trailing comma"
            raise _Malformed(msg)
    return members


class _Reader:
    """A cursor over a structured field's text."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0

    def done(self) -> bool:
        return self.at >= len(self.text)

    def peek(self) -> str:
        return self.text[self.at : self.at + 1]

    def take(self, char: str) -> bool:
        if self.peek() == char:
            self.at += 1
            return True
        return False

    def expect(self, char: str) -> None:
        if not self.take(char):
            msg = f"expected {char!r} at character {self.at}"
            raise _Malformed(msg)

    def skip(self, chars: str) -> None:
        while not self.done() and self.text[self.at] in chars:
            self.at += 1

    def match(self, pattern: re.Pattern[str], what: str) -> str:
        found = pattern.match(self.text, self.at)
        if found is None:
            msg = f"expected {what} at character {self.at}"
            raise _Malformed(msg)
        self.at = found.end()
        return found.group()

    def inner_list(self) -> list[tuple[_Value, _Params]]:
        self.expect("(")
        items: list[tuple[_Value, _Params]] = []
        self.skip(" ")
        while not self.take(")"):
            if self.done():
                msg = "an inner list without ')'"
                raise _Malformed(msg)
            items.append((self.bare_item(), self.params()))
            if self.peek() not in (" ", ")"):
                msg = f"expected ' ' or ')' at character {self.at}"
                raise _Malformed(msg)
            self.skip(" ")
        return items

    def params(self) -> _Params:
        params: _Params = {}
        while self.take(";"):
            self.skip(" ")
            key = self.match(_KEY, "a parameter name")
            params[key] = self.bare_item() if self.take("=") else True
        return params

    def bare_item(self) -> _Value:
        first = self.peek()
        if first == '"':
            return self._string()
        if first == ":":
            self.at += 1
            end = self.text.find(":", self.at)
            if end < 0:
                msg = "a byte sequence without its closing ':'"
                raise _Malformed(msg)
            encoded, self.at = self.text[self.at : end], end + 1
            try:
                return base64.b64decode(encoded, validate=True)
            except binascii.Error as exc:
                msg = "a byte sequence that is not base64"
                raise _Malformed(msg) from exc
        if first == "?":
            self.at += 1
            return self.match(re.compile("[01]"), "?0 or ?1") == "1"
        if first == "-" or first.isdigit():
            return int(self.match(_INTEGER, "an integer"))
        return self.match(_TOKEN, "an item")

    def _string(self) -> str:
        self.expect('"')
        chars = []
        while not self.take('"'):
            if self.done():
                msg = "a string without its closing quote"
                raise _Malformed(msg)
            char = self.text[self.at]
            if char == "\\":
                self.at += 1
                char = self.peek()
                if char not in ('"', "\\"):
                    msg = "a bad escape in a string"
                    raise _Malformed(msg)
            elif not " " <= char <= "~":
                msg = "a control or non-ASCII character in a string"
                raise _Malformed(msg)
            chars.append(char)
            self.at += 1
        return "".join(chars)
