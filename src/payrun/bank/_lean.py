"""What payrun's own HTTP clients share: answers, headers, the size cap, plumbing.

Every transport reads an answer's body through ``read_capped``: an answer that says (by its
Content-Length) or turns out to be larger than ``MAX_ANSWER_BYTES`` raises
``AnswerTooLargeError`` as soon as that is known, and the rest is never read.
Imports nothing heavy, so a run loads only the HTTP stack it uses.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import TracebackType
from typing import Self

from payrun.errors import BankError

__all__ = [
    "MAX_ANSWER_BYTES",
    "Answer",
    "AnswerTooLargeError",
    "LeanClient",
    "MaskedHeaders",
    "check_length",
    "read_capped",
]

MAX_ANSWER_BYTES = 16 * 1024 * 1024
"""The largest answer payrun reads (a page of 200 payments is about 0.3 MB)."""


class AnswerTooLargeError(BankError):
    """The bank's answer is larger than ``MAX_ANSWER_BYTES``; the rest of it was not read."""


def check_length(content_length: int | str | None, limit: int = MAX_ANSWER_BYTES) -> None:
    """Refuse an answer whose Content-Length already says it is over ``limit``."""
    try:
        declared = int(content_length) if content_length is not None else 0
    except ValueError:
        return
    if declared > limit:
        msg = f"the bank's answer is {declared} bytes, over payrun's limit of {limit}"
        raise AnswerTooLargeError(msg)


async def read_capped(chunks: AsyncIterator[bytes], limit: int = MAX_ANSWER_BYTES) -> bytes:
    """The body from ``chunks``; stop reading and raise once it passes ``limit`` bytes."""
    parts: list[bytes] = []
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            msg = f"the bank's answer is over payrun's limit of {limit} bytes"
            raise AnswerTooLargeError(msg)
        parts.append(chunk)
    return b"".join(parts)


_NO_HEADERS: dict[str, str] = {}


class Answer:
    """A response: status code, body bytes (``text`` decodes them) and the one header
    payrun reads (``date``: the bank's clock), under its lower-case name."""

    __slots__ = ("content", "headers", "status_code")

    def __init__(self, status_code: int, content: bytes, date: str | None = None) -> None:
        self.status_code = status_code
        self.content = content
        self.headers = {"date": date} if date else _NO_HEADERS

    @property
    def text(self) -> str:
        """The body as text (UTF-8, undecodable bytes replaced)."""
        return self.content.decode("utf-8", "replace")


class MaskedHeaders(dict[str, str]):
    """Default headers under lower-case names; the repr hides the Authorization value."""

    def __init__(self, headers: dict[str, str]) -> None:
        super().__init__({name.lower(): value for name, value in headers.items()})

    def __repr__(self) -> str:
        shown = {
            name: "[secure]" if name == "authorization" else value for name, value in self.items()
        }
        return f"Headers({shown!r})"


class LeanClient:
    """A base URL, masked default headers, and ``async with`` closing through ``aclose``."""

    def __init__(self, base_url: str, headers: dict[str, str]) -> None:
        self.base_url = base_url
        self.headers = MaskedHeaders(headers)
        self._base = base_url.rstrip("/")

    def _target(self, url: str) -> str:
        """A full URL as is; a path joined to the base URL."""
        return url if url.startswith(("http://", "https://")) else self._base + url

    async def aclose(self) -> None:
        """Close connections (each client closes its own)."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        await self.aclose()
