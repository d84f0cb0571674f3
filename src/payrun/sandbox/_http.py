"""The HTTP edge of the sandbox: requests, replies and the error envelope.

A handler receives a ``Request`` whose body has already been read (at most ``MAX_BODY``
bytes) and returns a ``Reply``; to refuse, it raises ``ApiError``, which becomes
``{"errors": [{"status", "title", "detail", "source"?}]}`` with ``application/json``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple
from urllib.parse import parse_qsl

__all__ = [
    "MAX_BODY",
    "ApiError",
    "Reply",
    "Request",
    "error_body",
    "reply",
]

MAX_BODY = 1_000_000
"""Largest request body accepted, in bytes; a larger one gets 413 without being read."""

Headers = list[tuple[bytes, bytes]]


class ApiError(RuntimeError):
    """Raised by a handler to answer with an error; nothing has been changed yet."""

    def __init__(
        self,
        status: int,
        title: str,
        detail: str,
        *,
        pointer: str | None = None,
        parameter: str | None = None,
        headers: Headers | None = None,
    ) -> None:
        super().__init__(f"{status} {title}: {detail}")
        self.status = status
        self.title = title
        self.detail = detail
        self.source: dict[str, str] | None = None
        if pointer is not None:
            self.source = {"pointer": pointer}
        elif parameter is not None:
            self.source = {"parameter": parameter}
        self.headers = headers or []

    def body(self) -> dict[str, Any]:
        """Return the JSON error envelope for this error."""
        return error_body(self.status, self.title, self.detail, self.source)


def error_body(
    status: int, title: str, detail: str, source: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Build ``{"errors": [...]}`` with one error."""
    error: dict[str, Any] = {"status": str(status), "title": title, "detail": detail}
    if source:
        error["source"] = dict(source)
    return {"errors": [error]}


class Reply(NamedTuple):
    """What a handler answers: status, JSON body (or None for no body), extra headers."""

    status: int
    body: Any
    headers: Headers


def reply(body: Any, status: int = 200, headers: Headers | None = None) -> Reply:
    """Make a ``Reply``; ``body=None`` sends no body (204)."""
    return Reply(status, body, headers or [])


def _reject_constant(name: str) -> Any:
    detail = f"{name} is not valid JSON"
    raise ValueError(detail)


# Once: loads() makes one a call
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


@dataclass(slots=True)
class Request:
    """One request, body already read: method, path, raw query, headers, body bytes."""

    method: str
    path: str
    query_string: bytes
    headers: Headers
    body: bytes

    def query(self) -> list[tuple[str, str]]:
        """Parse the query string into (name, value) pairs, blanks kept."""
        try:
            text = self.query_string.decode("utf-8")
            return parse_qsl(text, keep_blank_values=True, errors="strict")
        except (UnicodeDecodeError, ValueError) as exc:
            raise ApiError(400, "bad-request", "the query string is not valid UTF-8") from exc

    def header(self, name: bytes) -> bytes | None:
        """Return the first header called ``name`` (lower-case), if any."""
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return None

    def json(self) -> dict[str, Any]:
        """Parse the body as one JSON object, or raise a 400/415 ``ApiError``."""
        content_type = self.header(b"content-type")
        if content_type is not None and b"json" not in content_type.lower():
            raise ApiError(415, "unsupported-media-type", "Content-Type must be application/json")
        if not self.body.strip():
            raise ApiError(400, "bad-request", "a JSON object body is required", pointer="")
        try:
            parsed = _DECODER.decode(self.body.decode("utf-8"))
        except (ValueError, RecursionError) as exc:
            # UnicodeDecodeError is a ValueError
            raise ApiError(400, "bad-request", "the body is not valid JSON", pointer="") from exc
        if not isinstance(parsed, dict):
            raise ApiError(400, "incorrect-type", "the body must be a JSON object", pointer="")
        return parsed
