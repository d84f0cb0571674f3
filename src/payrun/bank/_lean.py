"""What payrun's own HTTP clients (aiohttp, pyreqwest) share: answers, headers, plumbing.

Imports nothing heavy, so a run loads only the HTTP stack it uses.
"""

from __future__ import annotations

from types import TracebackType
from typing import Self

__all__ = ["Answer", "LeanClient", "MaskedHeaders"]


class Answer:
    """A response: status code and body bytes (``text`` decodes them)."""

    __slots__ = ("content", "status_code")

    def __init__(self, status_code: int, content: bytes) -> None:
        self.status_code = status_code
        self.content = content

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
