"""The one HTTP stack payrun sends through: a ``Transport`` on aiohttp, and what it exchanges.

``BankClient`` builds each ``PreparedRequest`` once (method, URL, headers, body as bytes),
passes it through its per-attempt hook, and hands it to ``Transport.send``, which returns
an ``Answer`` or raises ``NotSent`` / ``MaybeSent``: the only HTTP outcomes the client
reads. ``make_transport`` builds the aiohttp one for a real bank: a pool sized for the
in-flight cap, idle connections dropped after ``KEEPALIVE_SECONDS``, answers waited for
``REQUEST_TIMEOUT``. aiohttp is imported only when a transport is made, so commands that
never talk to the bank do not load it. Tests bring their own transports (in-process ASGI,
scripted answers) through the same protocol.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from payrun.bank._transport._errors import MaybeSent, NotSent, NotSentReason
from payrun.bank._transport._exchange import Answer, AttemptHook, PreparedRequest, Transport
from payrun.bank._transport._size import (
    MAX_ANSWER_BYTES,
    AnswerTooLargeError,
    check_length,
    read_capped,
)
from payrun.config import REQUEST_TIMEOUT

if TYPE_CHECKING:
    from payrun.bank._transport._aiohttp import AiohttpTransport

__all__ = [
    "KEEPALIVE_SECONDS",
    "MAX_ANSWER_BYTES",
    "REQUEST_TIMEOUT",
    "Answer",
    "AnswerTooLargeError",
    "AttemptHook",
    "MaybeSent",
    "NotSent",
    "NotSentReason",
    "PreparedRequest",
    "Transport",
    "check_length",
    "make_transport",
    "read_capped",
]


# Under common server keep-alive timeouts (uvicorn: 5 s), so a write is rarely sent on a
# connection the server is closing (that would be an unknown outcome).
KEEPALIVE_SECONDS = 3.0
"""How long an idle connection is kept for the next request."""


def make_transport(*, max_connections: int = 50, timeout: float | None = None) -> AiohttpTransport:
    """The aiohttp transport for a real bank, with at most ``max_connections`` open and
    answers waited for ``timeout`` seconds (``REQUEST_TIMEOUT`` unless told otherwise);
    close it with ``aclose()``."""
    from payrun.bank._transport._aiohttp import AiohttpTransport

    return AiohttpTransport(
        timeout=REQUEST_TIMEOUT if timeout is None else timeout,
        max_connections=max_connections,
        keepalive_seconds=KEEPALIVE_SECONDS,
    )
