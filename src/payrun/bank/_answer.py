"""What every lean HTTP client of the bank hands back, and its masked default headers.

Shared by the aiohttp and pyreqwest clients; imports nothing heavy, so a run loads only
the HTTP stack it uses.
"""

from __future__ import annotations

__all__ = ["Answer", "MaskedHeaders"]


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
