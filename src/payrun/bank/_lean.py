"""What payrun's own HTTP clients (aiohttp, pyreqwest) share: answers, headers, plumbing.

Imports nothing heavy, so a run loads only the HTTP stack it uses.
"""

from __future__ import annotations

from types import TracebackType
from typing import Self

__all__ = ["Answer", "LeanClient", "MaskedHeaders"]


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
