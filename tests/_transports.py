"""Test-side transports for ``BankClient``: the sandbox in process, and scripted answers.

Both wrap an httpx transport (``httpx.ASGITransport`` calling the sandbox app, or
``httpx.MockTransport`` calling a handler) behind payrun's ``Transport`` protocol, and map
httpx's exceptions to payrun's as the aiohttp transport maps aiohttp's: a failed or timed
out connect, or no pooled connection, is ``NotSent``; a timeout after that is
``MaybeSent(late=True)``; any other failure of the exchange (a reset, a hang-up, the
sandbox's injected drop) is ``MaybeSent(late=False)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from payrun.bank import Answer, MaybeSent, NotSent, PreparedRequest
from payrun.errors import BankError

__all__ = ["HttpxTransport", "asgi_transport", "mock_transport"]

_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


class HttpxTransport:
    """payrun's ``Transport`` over any httpx transport; ``requests`` records what was sent."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.requests: list[PreparedRequest] = []

    async def send(self, request: PreparedRequest) -> Answer:
        """Send ``request`` through the httpx transport and read the whole answer."""
        self.requests.append(request)
        outgoing = httpx.Request(
            request.method, request.url, headers=request.headers, content=request.body or None
        )
        try:
            response = await self.inner.handle_async_request(outgoing)
            content = await response.aread()
        except httpx.UnsupportedProtocol as exc:
            msg = f"cannot send {request.method} {request.url}: {exc}"
            raise BankError(msg) from exc
        except _NOT_SENT as exc:
            raise NotSent(str(exc), kind=type(exc).__name__) from exc
        except httpx.TimeoutException as exc:
            raise MaybeSent(str(exc), kind=type(exc).__name__, late=True) from exc
        except (httpx.TransportError, OSError) as exc:
            late = isinstance(exc, TimeoutError)
            raise MaybeSent(str(exc), kind=type(exc).__name__, late=late) from exc
        return Answer(response.status_code, content, response.headers.get("date"))

    async def aclose(self) -> None:
        """Close the httpx transport."""
        await self.inner.aclose()


def asgi_transport(app: Any) -> HttpxTransport:
    """A transport calling an ASGI app (the sandbox) in process."""
    return HttpxTransport(httpx.ASGITransport(app=app))


def mock_transport(handler: Callable[[httpx.Request], httpx.Response]) -> HttpxTransport:
    """A transport answering every request with ``handler(request)`` (which may raise)."""
    return HttpxTransport(httpx.MockTransport(handler))
