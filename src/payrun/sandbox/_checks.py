"""Schema checks for request bodies and query values; each failure is a 400 with a pointer.

Plain functions over parsed JSON (no pydantic on the hot path): ``check_keys`` refuses
missing and unknown keys, ``text`` / ``choice`` / ``flag`` read typed fields, ``money``
reads the strict ``{currency, value}`` object into integer pence, ``url_id`` turns a
resource URL into its id.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from datetime import UTC, datetime
from typing import Any

from payrun.sandbox._http import ApiError

__all__ = [
    "ACCOUNT_NUMBER",
    "SORT_CODE",
    "check_keys",
    "choice",
    "flag",
    "money",
    "parse_time",
    "text",
    "url_id",
]

SORT_CODE = re.compile(r"\d{6}")
ACCOUNT_NUMBER = re.compile(r"\d{8}")
_MONEY_VALUE = re.compile(r"(0|[1-9]\d{0,14})(\.\d{1,2})?")
_MONEY_KEYS = frozenset({"currency", "value"})


def _pointer(base: str, key: str) -> str:
    return f"{base}/{key}"


def check_keys(
    body: Mapping[str, Any],
    *,
    required: Collection[str],
    optional: Collection[str] = (),
    base: str = "",
) -> None:
    """Refuse a missing required key or any key that is neither required nor optional."""
    for key in required:
        if key not in body:
            raise ApiError(400, "missing-field", f"{key} is required", pointer=_pointer(base, key))
    for key in body:
        if key not in required and key not in optional:
            detail = f"{key} is not an allowed field here"
            raise ApiError(400, "unknown-field", detail, pointer=_pointer(base, str(key)))


def text(
    body: Mapping[str, Any],
    key: str,
    *,
    base: str = "",
    pattern: re.Pattern[str] | None = None,
    max_len: int | None = None,
) -> str:
    """Read a non-empty string field, optionally matching ``pattern`` in full."""
    value = body.get(key)
    pointer = _pointer(base, key)
    if not isinstance(value, str):
        raise ApiError(400, "incorrect-type", f"{key} must be a string", pointer=pointer)
    if not value:
        raise ApiError(400, "incomplete-value", f"{key} must not be empty", pointer=pointer)
    if max_len is not None and len(value) > max_len:
        detail = f"{key} must be at most {max_len} characters"
        raise ApiError(400, "invalid-value", detail, pointer=pointer)
    if pattern is not None and not pattern.fullmatch(value):
        detail = f"{key} must match {pattern.pattern}"
        raise ApiError(400, "invalid-value", detail, pointer=pointer)
    return value


def choice(body: Mapping[str, Any], key: str, options: Collection[str], *, base: str = "") -> str:
    """Read a string field that must be one of ``options``."""
    value = body.get(key)
    if not isinstance(value, str) or value not in options:
        detail = f"{key} must be one of: {', '.join(sorted(options))}"
        raise ApiError(400, "invalid-enum-value", detail, pointer=_pointer(base, key))
    return value


def flag(value: str, parameter: str) -> bool:
    """Read a boolean query value (``true`` or ``false``)."""
    if value in {"true", "false"}:
        return value == "true"
    raise ApiError(400, "incorrect-type", f"{parameter} must be true or false", parameter=parameter)


def money(value: Any, pointer: str, *, positive: bool = True) -> int:
    """Read strict money ``{"currency": "GBP", "value": "12.34"}`` into integer pence."""
    if not isinstance(value, dict):
        raise ApiError(400, "incorrect-type", "money must be an object", pointer=pointer)
    check_keys(value, required=_MONEY_KEYS, base=pointer)
    if value["currency"] != "GBP":
        detail = "currency must be GBP"
        raise ApiError(400, "invalid-enum-value", detail, pointer=f"{pointer}/currency")
    amount = value["value"]
    if not isinstance(amount, str) or not _MONEY_VALUE.fullmatch(amount):
        detail = "value must be a decimal string with at most 2 decimal places, e.g. 12.34"
        raise ApiError(400, "invalid-value", detail, pointer=f"{pointer}/value")
    whole, _, part = amount.partition(".")
    pence = int(whole) * 100 + int(part.ljust(2, "0") or "0")
    if positive and pence <= 0:
        raise ApiError(400, "invalid-value", "value must be above 0", pointer=f"{pointer}/value")
    return pence


def parse_time(value: str, parameter: str) -> datetime:
    """Parse an ISO 8601 date-time query value; a naive one is taken as UTC."""
    # A client that forgot to percent-encode "+01:00" sends a space: forgive it.
    try:
        moment = datetime.fromisoformat(value.strip().replace(" ", "+"))
    except ValueError as exc:
        detail = f"{parameter} must be an ISO 8601 date-time"
        raise ApiError(400, "invalid-datetime", detail, parameter=parameter) from exc
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def url_id(value: Any, collection: str, prefix: str, pointer: str) -> str:
    """Turn ``/v0/<collection>/<prefix>.x`` (or the bare ``<prefix>.x``) into its id."""
    if not isinstance(value, str) or not value:
        raise ApiError(400, "incorrect-type", "a resource URL string is expected", pointer=pointer)
    path: str = value
    if path.startswith(("http://", "https://")):
        # An absolute URL: keep only its path
        path = "/" + path.split("/", 3)[-1]
    ident = path.removeprefix(f"/v0/{collection}/")
    if not ident.startswith(f"{prefix}.") or "/" in ident:
        detail = f"expected a URL like /v0/{collection}/{prefix}.<id>"
        raise ApiError(400, "invalid-value", detail, pointer=pointer)
    return ident
