"""The HTTP client the bank client talks through, on a swappable transport.

``BankClient`` needs only what ``HttpClient`` names, which ``httpx.AsyncClient`` has (tests
bind it to the sandbox with ``httpx.ASGITransport`` and to single faults with
``MockTransport``). ``make_http_client`` builds one for a real bank (base URL,
``Authorization`` and ``Accept`` headers, timeout, a pool sized for the in-flight cap):

- ``"aiohttp"`` (default): straight on aiohttp, about 0.25 ms of CPU per request;
- ``"httpx-aiohttp"``: ``httpx.AsyncClient`` on the aiohttp transport, about 0.5 ms;
- ``"httpx"``: httpx's own pool, 3-5 ms at 50 concurrent requests
  (benchmarks/bench_transport.py, benchmarks/bench_run.py).

``never_sent`` tells, for every transport, whether a transport error proves that no byte
of the request reached the bank. httpx is imported only when an httpx transport is chosen
(or a test brings its own ``httpx.AsyncClient``): the default run never loads it (0.1 s).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Protocol, Self

import aiohttp

from payrun.bank._aiohttp import AiohttpClient
from payrun.config import Settings

if TYPE_CHECKING:
    import httpx

__all__ = [
    "DEFAULT_TRANSPORT",
    "HttpAnswer",
    "HttpClient",
    "TransportName",
    "is_transport_error",
    "is_unsupported_protocol",
    "make_http_client",
    "never_sent",
]

TransportName = Literal["aiohttp", "httpx-aiohttp", "httpx"]
DEFAULT_TRANSPORT: TransportName = "aiohttp"

# httpx-aiohttp maps every aiohttp connection error to httpx.ConnectTimeout, including a
# reset after the request was sent; only the original aiohttp exception tells them apart.
_AIOHTTP_NOT_SENT = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)

# Idle connections are dropped before common server keep-alive timeouts (uvicorn: 5 s), so a
# write is rarely sent on a connection the server is closing (that would be an unknown outcome).
_KEEPALIVE_SECONDS = 3.0

_TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    aiohttp.ClientError,  # also the few aiohttp errors httpx-aiohttp does not map
    OSError,  # includes TimeoutError and connection resets leaking from any transport
)


def _httpx() -> Any:
    """The httpx module if something has loaded it (an httpx transport, a test), else None."""
    return sys.modules.get("httpx")


def is_transport_error(exc: BaseException) -> bool:
    """True when a request failed in the exchange itself (no HTTP answer), on any transport."""
    if isinstance(exc, _TRANSPORT_ERRORS):
        return True
    httpx_module = _httpx()
    return httpx_module is not None and isinstance(exc, httpx_module.TransportError)


def is_unsupported_protocol(exc: BaseException) -> bool:
    """True for httpx's refusal of a URL scheme it cannot speak (a configuration error)."""
    httpx_module = _httpx()
    return httpx_module is not None and isinstance(exc, httpx_module.UnsupportedProtocol)


def make_http_client(
    settings: Settings,
    *,
    transport: TransportName = DEFAULT_TRANSPORT,
    max_connections: int = 50,
    timeout: float = 30.0,
) -> HttpClient:
    """Return an HTTP client for the bank; close it with ``aclose()``."""
    headers = {
        "Authorization": f"{settings.auth_scheme} {settings.api_key.reveal()}",
        "Accept": "application/json",
    }
    if transport == "aiohttp":
        return AiohttpClient(
            settings.base_url,
            headers=headers,
            timeout=timeout,
            max_connections=max_connections,
            keepalive_seconds=_KEEPALIVE_SECONDS,
        )
    if transport not in ("httpx-aiohttp", "httpx"):
        msg = f"unknown HTTP transport {transport!r}: use 'aiohttp', 'httpx-aiohttp' or 'httpx'"
        raise ValueError(msg)
    import httpx  # noqa: PLC0415 - only these transports need it
    from httpx_aiohttp import HttpxAiohttpClient  # noqa: PLC0415

    limits = httpx.Limits(
        max_connections=max_connections,
        max_keepalive_connections=max_connections,
        keepalive_expiry=_KEEPALIVE_SECONDS,
    )
    if transport == "httpx-aiohttp":
        return HttpxAiohttpClient(
            base_url=settings.base_url, headers=headers, timeout=timeout, limits=limits
        )
    return httpx.AsyncClient(
        base_url=settings.base_url, headers=headers, timeout=timeout, limits=limits
    )


class HttpAnswer(Protocol):
    """What the bank client reads of a response."""

    @property
    def status_code(self) -> int:
        """The HTTP status."""
        ...

    @property
    def content(self) -> bytes:
        """The body."""
        ...

    @property
    def text(self) -> str:
        """The body as text."""
        ...


class HttpClient(Protocol):
    """What the bank client uses of an HTTP client (``httpx.AsyncClient`` fits)."""

    @property
    def base_url(self) -> httpx.URL | str:
        """The bank's base address."""
        ...

    @property
    def headers(self) -> Mapping[str, str]:
        """Headers sent with every request."""
        ...

    async def request(
        self, method: str, url: str, *, params: dict[str, str] | None = ..., json: Any = ...
    ) -> HttpAnswer:
        """Send one request and read its whole body."""
        ...

    async def aclose(self) -> None:
        """Close connections."""
        ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None: ...


def never_sent(exc: BaseException) -> bool:
    """True when ``exc`` proves the request never reached the bank (safe to resend).

    That is a failed or timed-out connect, or a wait for a pooled connection that timed
    out. Read/write timeouts, resets and protocol errors are not: the bank may have
    acted on the request.
    """
    if isinstance(exc, aiohttp.ClientError):  # raised straight by the aiohttp client
        return isinstance(exc, _AIOHTTP_NOT_SENT)
    cause = exc.__cause__
    if isinstance(cause, aiohttp.ClientError):
        return isinstance(cause, _AIOHTTP_NOT_SENT)
    httpx_module = _httpx()
    return httpx_module is not None and isinstance(
        exc, (httpx_module.ConnectError, httpx_module.ConnectTimeout, httpx_module.PoolTimeout)
    )
