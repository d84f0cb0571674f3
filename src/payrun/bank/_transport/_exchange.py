"""One exchange with the bank: the request as sent (``PreparedRequest``), the ``Answer``, and
the ``Transport`` that carries one to the other.

``BankClient`` builds each request once, with every byte it will send: method, absolute
URL (already percent-encoded), headers and body. A transport sends exactly those, adding
only what HTTP/1.1 derives from them (``Host`` from the URL, ``Content-Length`` from the
body), and follows no redirect. An ``AttemptHook`` sees (and may replace) the request
before every attempt, retries included: the one place to sign what is sent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

__all__ = ["Answer", "AttemptHook", "PreparedRequest", "Transport"]

_HIDDEN = frozenset({"authorization"})


@dataclass(frozen=True, slots=True, repr=False)
class PreparedRequest:
    """A request as it goes on the wire: ``headers`` are read-only (make a new request with
    ``with_headers``), ``body`` is empty when there is none."""

    method: str
    url: str
    headers: Mapping[str, str]
    body: bytes = b""

    def __repr__(self) -> str:
        shown = {
            name: "[secure]" if name.lower() in _HIDDEN else value
            for name, value in self.headers.items()
        }
        return (
            f"PreparedRequest({self.method!r}, {self.url!r}, headers={shown!r},"
            f" body={len(self.body)} bytes)"
        )

    def with_headers(self, headers: Mapping[str, str]) -> PreparedRequest:
        """This request with ``headers`` added (or replacing those of the same name)."""
        return dataclasses.replace(self, headers={**self.headers, **headers})


AttemptHook = Callable[[PreparedRequest], PreparedRequest]
"""Called with the request before every attempt (retries included); what it returns is
sent (the place to sign the exact bytes sent)."""


class Answer:
    """A response: status, body bytes (``text`` decodes them) and the ``date`` header (the
    bank's clock), read whole and under the size cap."""

    __slots__ = ("content", "date", "status")

    def __init__(self, status: int, content: bytes, date: str | None = None) -> None:
        self.status = status
        self.content = content
        self.date = date

    def __repr__(self) -> str:
        return f"Answer({self.status}, {len(self.content)} bytes)"

    @property
    def text(self) -> str:
        """The body as text (UTF-8, undecodable bytes replaced)."""
        return self.content.decode("utf-8", "replace")


class Transport(Protocol):
    """What ``BankClient`` needs of an HTTP stack.

    ``send`` sends one prepared request and reads its whole answer. It raises only
    ``NotSent`` (nothing reached the bank), ``MaybeSent`` (it may have), or a ``BankError``
    from the answer size cap or for a request it cannot form; never its library's own
    exceptions.
    """

    async def send(self, request: PreparedRequest) -> Answer:
        """Send ``request``; return the bank's answer."""
        ...

    async def aclose(self) -> None:
        """Close connections."""
        ...
