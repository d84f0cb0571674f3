"""Turn a bank error answer (status and body) into the right ``BankError``.

``answer_object`` reads a 2xx answer, raising a plain ``BankError`` (``OutcomeUnknownError``
to a write) when it is not a JSON object, as when a proxy's HTML page answers instead.

The bank documents no error body (api-facts §2.1); errors probably come as
``{"errors": [{"title", "detail", "code"?, "links"?}]}``. The refusal code is looked
for defensively: a known payment code anywhere in the text first, then ``code``, then a
kebab-case ``title``. Every text taken from the bank (its detail, code, a URL it named, a
field it sent) is masked with the caller's ``Secrets`` after it is decoded and before it
is cut short, so an echoed API key never reaches a message in any spelling. A body that is
not JSON (an HTML error page) is shown as one short line of its text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, TypeVar

from payrun.bank._masking import Secrets
from payrun.errors import (
    AuthError,
    BankError,
    BankRejectedError,
    OutcomeUnknownError,
    RateLimitedError,
)

__all__ = [
    "KNOWN_CODES",
    "answer_object",
    "decode_answer",
    "error_from_response",
    "unreadable_answer",
]

T = TypeVar("T")
_PARSE_ERRORS = (KeyError, TypeError, ValueError, ArithmeticError, AttributeError)
_UNDECODABLE = (ValueError, RecursionError)
"""What ``json.loads`` raises for bytes that are not JSON, or JSON nested too deep to decode."""
_NO_SECRETS = Secrets()
_DECODER = json.JSONDecoder()

KNOWN_CODES = (
    "payment-amount-exceeds-scheme-limit",
    "insufficient-funds",
    "account-restricted",
    "payee-deactivated",
    "bank-account-closed",
)
"""The payment refusal codes the bank documents (create or submit, HTTP 422)."""

_KEBAB = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_MAX_DETAIL = 300
_MAX_TEXT_DETAIL = 120
"""A body that is not JSON (an HTML page, say) shows this many characters, on one line."""
_HIDDEN_HTML = re.compile(r"<(script|style|head)\b.*?</\1\s*>", re.IGNORECASE | re.DOTALL)
_HTML_TAG = re.compile(r"<[^>]*>")
_HTTP_CLIENT_ERROR = 400
_HTTP_UNAUTHORIZED = 401
_HTTP_FORBIDDEN = 403
_HTTP_TOO_MANY = 429
_HTTP_SERVER_ERROR = 500
_GATEWAY_GAVE_UP = frozenset({504, 524})
"""A gateway stopped waiting for the bank (504; Cloudflare's 524): the bank may still finish."""


def _unauthorized(where: str, *, signed: bool, detail: str | None = None) -> str:
    """What a 401 asks the user to check: the API key, and the signature or its absence.
    Unsigned, the missing signing key comes first: a live-mode organization refuses every
    unsigned request, however good the key (and a bank that says so is taken at its word)."""
    if not signed and "signature" in (detail or "").lower():
        return (
            f"the bank wants every request signed, and no signing key is configured (HTTP 401"
            f" on {where}: {detail}): set PAYRUN_SIGNING_KEY_FILE and PAYRUN_SIGNING_KEY_ID"
            " (see docs/live-mode.md); the answer is about the signature, not the API key"
        )
    if not signed:
        return (
            f"the bank refused the request (HTTP 401 on {where}), and no signing key is"
            " configured: a live-mode organization refuses every unsigned request, so set"
            " PAYRUN_SIGNING_KEY_FILE and PAYRUN_SIGNING_KEY_ID (see docs/live-mode.md); for"
            " a test-mode organization, check the API key (PAYRUN_API_KEY or"
            " PAYRUN_API_KEY_FILE) and PAYRUN_AUTH_SCHEME for the Authorization scheme word"
        )
    return (
        f"the bank refused the API key or the request's signature (HTTP 401 on {where}):"
        " check PAYRUN_API_KEY or PAYRUN_API_KEY_FILE, and that PAYRUN_SIGNING_KEY_ID is"
        " the id the bank issued for the public half of PAYRUN_SIGNING_KEY_FILE (payrun"
        " check tests the signature)"
    )


def error_from_response(
    method: str,
    path: str,
    status: int,
    text: str,
    *,
    secrets: Secrets = _NO_SECRETS,
    write: bool = False,
    signed: bool = False,
) -> BankError:
    """Return the ``BankError`` subclass for a non-2xx answer (the caller raises it).

    A redirect is never followed; to a write it is an unknown outcome (the bank may have
    acted before pointing elsewhere), to a read a refusal. ``signed``: the request carried
    a message signature, which a 401 may be about as well as the API key.
    """
    errors = _error_items(text)
    code = secrets.mask_optional(_find_code(errors, text))
    detail = _find_detail(errors, text, secrets)
    where = secrets.mask(f"{method} {path}")
    if status == _HTTP_UNAUTHORIZED:
        return AuthError(
            _unauthorized(where, signed=signed, detail=detail),
            status=status,
            code=code,
            detail=detail,
        )
    if status == _HTTP_FORBIDDEN:
        msg = f"the bank refused this API key's role (HTTP 403 on {where}): {detail or 'forbidden'}"
        return AuthError(msg, status=status, code=code, detail=detail)
    if status == _HTTP_TOO_MANY:
        msg = f"the bank is rate limiting (HTTP 429 on {where}): too many requests in flight"
        return RateLimitedError(msg, status=status, code=code, detail=detail)
    if status >= _HTTP_SERVER_ERROR:
        msg = (
            f"the bank failed (HTTP {status} on {where}); the request may or may not have"
            " taken effect"
            if write
            else f"the bank failed (HTTP {status} on {where}); run the same command again"
            " later (nothing will be paid twice)"
        )
        failed = OutcomeUnknownError(msg, status=status, code=code, detail=detail)
        # The bank behind it may still finish
        failed.late = status in _GATEWAY_GAVE_UP
        return failed
    if status < _HTTP_CLIENT_ERROR and write:
        msg = (
            f"the bank answered {where} with a redirect (HTTP {status}), which payrun does not"
            " follow; the request may or may not have taken effect"
        )
        return OutcomeUnknownError(msg, status=status, code=code, detail=detail)
    reason = code or detail or "no reason given"
    msg = f"the bank refused {where} (HTTP {status}): {reason}"
    return BankRejectedError(msg, status=status, code=code, detail=detail)


def answer_object(
    content: bytes, method: str, url: str, *, write: bool, secrets: Secrets = _NO_SECRETS
) -> dict[str, Any]:
    """The JSON object of a 2xx answer to ``method`` ``url`` (``{}`` if empty); else a
    ``BankError``."""
    try:
        data = _loads(content) if content else {}
    except ValueError:
        # An HTML page from a proxy, or bytes that are not even text
        problem = "was not JSON"
    except RecursionError:
        problem = "was JSON nested too deep to read"
    else:
        if isinstance(data, dict):
            return data
        problem = "was JSON but not an object"
    msg = f"the bank's answer to {secrets.mask(f'{method} {url}')} {problem}"
    # The bank may have acted before its answer went wrong
    if write:
        msg = f"{msg}; it may or may not have taken effect"
    raise (OutcomeUnknownError if write else BankError)(msg)


def _loads(content: bytes) -> Any:
    """``json.loads(content)``: an object's bytes (``{`` then anything but NUL, which
    ``json.loads`` reads as UTF-8) go straight to the decoder, without its encoding sniff."""
    if content[:1] == b"{" and content[1:2] != b"\x00":
        return _DECODER.decode(content.decode("utf-8", "surrogatepass"))
    return json.loads(content)


def _error_items(text: str) -> list[dict[str, Any]]:
    try:
        body = json.loads(text)
    except _UNDECODABLE:
        return []
    if not isinstance(body, dict):
        return []
    items = body.get("errors")
    if isinstance(items, list):
        return [item for item in items if isinstance(item, dict)]
    return [body]


def _find_code(errors: list[dict[str, Any]], text: str) -> str | None:
    for known in KNOWN_CODES:
        if known in text:
            return known
    for item in errors:
        code = item.get("code")
        if isinstance(code, str) and code:
            return code
    for item in errors:
        title = item.get("title")
        if isinstance(title, str) and _KEBAB.match(title):
            return title
    return None


def _find_detail(errors: list[dict[str, Any]], text: str, secrets: Secrets) -> str | None:
    """The bank's words on an error, masked before they are cut (a cut key is still a leak)."""
    for item in errors:
        for key in ("detail", "title", "message"):
            value = item.get(key)
            if isinstance(value, str) and value.strip():
                return _one_line(secrets.mask(value), _MAX_DETAIL)
    # An HTML page: its words, not its markup
    if text.lstrip().startswith("<"):
        # masked first too: stripping tags out of a key holding ``<...>`` leaves it in pieces
        text = _HTML_TAG.sub(" ", _HIDDEN_HTML.sub(" ", secrets.mask(text)))
    return _one_line(secrets.mask(text), _MAX_DETAIL if errors else _MAX_TEXT_DETAIL)


def _one_line(text: str, limit: int) -> str | None:
    """``text`` with every run of whitespace as one space, cut to ``limit`` characters."""
    flat = " ".join(text.split())
    if len(flat) > limit:
        flat = flat[: limit - 3].rstrip() + "..."
    return flat or None


def decode_answer(
    parse: Callable[[Any], T],
    data: Any,
    what: str,
    *,
    write: bool = False,
    secrets: Secrets = _NO_SECRETS,
) -> T:
    """Parse an answer; a write whose answer cannot be read has an unknown outcome."""
    try:
        return parse(data)
    except _PARSE_ERRORS as exc:
        raise unreadable_answer(what, secrets.mask(_unreadable(exc)), write=write) from exc


def unreadable_answer(what: str, why: str, *, write: bool) -> BankError:
    """The error for an answer payrun cannot use (``why`` already masked)."""
    msg = f"the bank's answer ({what}) could not be read: {why}"
    return (OutcomeUnknownError if write else BankError)(msg)


def _unreadable(exc: BaseException) -> str:
    """Why an answer could not be read, in words rather than a Python exception's name."""
    if isinstance(exc, KeyError):
        return f"it has no {exc.args[0]!r} field" if exc.args else "a field is missing"
    # Decimal's text is a list of its classes
    if isinstance(exc, ArithmeticError):
        return "an amount is not a number"
    detail = str(exc).strip()
    return f"a field has an unexpected value ({detail})" if detail else "a field is malformed"
