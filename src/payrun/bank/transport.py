"""The ``httpx.AsyncClient`` the bank client talks through, on a swappable transport.

``make_http_client`` builds the client (base URL, ``Authorization`` and ``Accept``
headers, timeout, connection pool sized for the in-flight cap). The default transport
is aiohttp under the httpx API (package httpx-aiohttp): plain httpx costs several ms of
CPU per request at 50 concurrent requests (benchmarks/bench_transport.py). ``"httpx"``
selects httpx's own pool. ``never_sent`` tells, for either transport, whether a
transport error proves that no byte of the request reached the bank.
"""

from __future__ import annotations

from typing import Literal

import aiohttp
import httpx
from httpx_aiohttp import HttpxAiohttpClient

from payrun.config import Settings

__all__ = [
    "DEFAULT_TRANSPORT",
    "TRANSPORT_ERRORS",
    "TransportName",
    "make_http_client",
    "never_sent",
]

TransportName = Literal["aiohttp", "httpx"]
DEFAULT_TRANSPORT: TransportName = "aiohttp"

# httpx-aiohttp maps every aiohttp connection error to httpx.ConnectTimeout, including a
# reset after the request was sent; only the original aiohttp exception tells them apart.
_AIOHTTP_NOT_SENT = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)
_HTTPX_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)

# Idle connections are dropped before common server keep-alive timeouts (uvicorn: 5 s), so a
# write is rarely sent on a connection the server is closing (that would be an unknown outcome).
_KEEPALIVE_SECONDS = 3.0

TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    httpx.TransportError,
    aiohttp.ClientError,  # the few aiohttp errors httpx-aiohttp does not map
    OSError,  # includes TimeoutError and connection resets leaking from either transport
)
"""What a request on either transport raises when the exchange itself failed."""


def make_http_client(
    settings: Settings,
    *,
    transport: TransportName = DEFAULT_TRANSPORT,
    max_connections: int = 50,
    timeout: float = 30.0,
) -> httpx.AsyncClient:
    """Return an ``httpx.AsyncClient`` for the bank; close it with ``aclose()``."""
    headers = {
        "Authorization": f"{settings.auth_scheme} {settings.api_key.reveal()}",
        "Accept": "application/json",
    }
    limits = httpx.Limits(
        max_connections=max_connections,
        max_keepalive_connections=max_connections,
        keepalive_expiry=_KEEPALIVE_SECONDS,
    )
    if transport == "aiohttp":
        return HttpxAiohttpClient(
            base_url=settings.base_url, headers=headers, timeout=timeout, limits=limits
        )
    if transport == "httpx":
        return httpx.AsyncClient(
            base_url=settings.base_url, headers=headers, timeout=timeout, limits=limits
        )
    msg = f"unknown HTTP transport {transport!r}: use 'aiohttp' or 'httpx'"
    raise ValueError(msg)


def never_sent(exc: BaseException) -> bool:
    """True when ``exc`` proves the request never reached the bank (safe to resend).

    That is a failed or timed-out connect, or a wait for a pooled connection that timed
    out. Read/write timeouts, resets and protocol errors are not: the bank may have
    acted on the request.
    """
    cause = exc.__cause__
    if isinstance(cause, aiohttp.ClientError):
        return isinstance(cause, _AIOHTTP_NOT_SENT)
    return isinstance(exc, _HTTPX_NOT_SENT)
