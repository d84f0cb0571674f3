"""The HTTP client the bank client talks through, on a swappable transport.

``BankClient`` needs only what ``HttpClient`` names, which ``httpx.AsyncClient`` has (tests
bind it to the sandbox with ``httpx.ASGITransport`` and to single faults with
``MockTransport``). ``make_http_client`` builds one for a real bank (base URL,
``Authorization`` and ``Accept`` headers, timeout, a pool sized for the in-flight cap).
Client CPU per request at 50 in flight, this machine (benchmarks/bench_transport.py):

- ``"pyreqwest"`` (default): Rust's reqwest on its own thread, 0.15 ms at full speed and
  0.12-0.27 ms at 50 ms latency;
- ``"aiohttp"``: straight on aiohttp, 0.15 ms at full speed and 0.22-0.32 ms at 50 ms;
- ``"httpx-aiohttp"``: ``httpx.AsyncClient`` on the aiohttp transport, about 0.5 ms;
- ``"httpx"``: httpx's own pool, 3-5 ms.

Every transport follows no redirect and reads no answer past ``MAX_ANSWER_BYTES`` (16 MB).
``never_sent`` tells, for every transport, whether a transport error proves that no byte
of the request reached the bank. Each stack is imported only when chosen (or when a test
brings its own ``httpx.AsyncClient``), and the error checks look only at the stacks that
are loaded: the default run loads neither aiohttp (0.2 s) nor httpx (0.1 s).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Protocol, Self

from payrun.config import Settings

if TYPE_CHECKING:
    import httpx

    from payrun.bank._aiohttp import AiohttpClient
    from payrun.bank._pyreqwest import PyreqwestClient

__all__ = [
    "DEFAULT_TRANSPORT",
    "HttpAnswer",
    "HttpClient",
    "TRANSPORTS",
    "TransportName",
    "REQUEST_TIMEOUT",
    "describe",
    "is_timeout",
    "is_transport_error",
    "is_unsupported_protocol",
    "make_http_client",
    "never_sent",
]

TransportName = Literal["pyreqwest", "aiohttp", "httpx-aiohttp", "httpx"]
DEFAULT_TRANSPORT: TransportName = "pyreqwest"
TRANSPORTS: tuple[TransportName, ...] = ("pyreqwest", "aiohttp", "httpx-aiohttp", "httpx")

# Idle connections are dropped before common server keep-alive timeouts (uvicorn: 5 s), so a
# write is rarely sent on a connection the server is closing (that would be an unknown outcome).
_KEEPALIVE_SECONDS = 3.0
REQUEST_TIMEOUT = 30.0
"""How long a request waits for the bank's answer."""


def _loaded(name: str) -> Any:
    """A module if something has loaded it (its transport was chosen, a test), else None."""
    return sys.modules.get(name)


def is_transport_error(exc: BaseException) -> bool:
    """True when a request failed in the exchange itself (no HTTP answer), on any transport."""
    # TimeoutError and connection resets leaking from any stack
    if isinstance(exc, OSError):
        return True
    pyreqwest_errors = _loaded("pyreqwest.exceptions")
    if pyreqwest_errors is not None and isinstance(exc, pyreqwest_errors.RequestError):
        return True
    # Also the few errors httpx-aiohttp does not map
    aiohttp_module = _loaded("aiohttp")
    if aiohttp_module is not None and isinstance(exc, aiohttp_module.ClientError):
        return True
    httpx_module = _loaded("httpx")
    return httpx_module is not None and isinstance(exc, httpx_module.TransportError)


def is_unsupported_protocol(exc: BaseException) -> bool:
    """True for httpx's refusal of a URL scheme it cannot speak (a configuration error)."""
    httpx_module = _loaded("httpx")
    return httpx_module is not None and isinstance(exc, httpx_module.UnsupportedProtocol)


def make_http_client(
    settings: Settings,
    *,
    transport: TransportName = DEFAULT_TRANSPORT,
    max_connections: int = 50,
    timeout: float | None = None,
) -> HttpClient:
    """Return an HTTP client for the bank (waiting ``REQUEST_TIMEOUT`` for an answer unless
    told otherwise); close it with ``aclose()``."""
    timeout = REQUEST_TIMEOUT if timeout is None else timeout
    headers = {
        "Authorization": f"{settings.auth_scheme} {settings.api_key.reveal()}",
        "Accept": "application/json",
    }
    if transport not in TRANSPORTS:
        msg = f"unknown HTTP transport {transport!r}: use one of {', '.join(TRANSPORTS)}"
        raise ValueError(msg)
    if transport in ("pyreqwest", "aiohttp"):
        lean: type[PyreqwestClient | AiohttpClient]
        if transport == "pyreqwest":
            from payrun.bank._pyreqwest import PyreqwestClient as lean
        else:
            from payrun.bank._aiohttp import AiohttpClient as lean
        return lean(
            settings.base_url,
            headers=headers,
            timeout=timeout,
            max_connections=max_connections,
            keepalive_seconds=_KEEPALIVE_SECONDS,
        )
    import httpx
    from httpx_aiohttp import HttpxAiohttpClient

    limits = httpx.Limits(
        max_connections=max_connections,
        max_keepalive_connections=max_connections,
        keepalive_expiry=_KEEPALIVE_SECONDS,
    )
    from payrun.bank._httpx import CappedHttpxClient

    kind = HttpxAiohttpClient if transport == "httpx-aiohttp" else httpx.AsyncClient
    return CappedHttpxClient(
        kind(base_url=settings.base_url, headers=headers, timeout=timeout, limits=limits)
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

    @property
    def headers(self) -> Mapping[str, str]:
        """The answer's headers (payrun reads ``date``: the bank's clock)."""
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
    pyreqwest_errors = _loaded("pyreqwest.exceptions")
    if pyreqwest_errors is not None and isinstance(exc, pyreqwest_errors.RequestError):
        return _pyreqwest_never_sent(exc, pyreqwest_errors)
    aiohttp_module = _loaded("aiohttp")
    if aiohttp_module is not None:
        # httpx-aiohttp maps every aiohttp connection error to httpx.ConnectTimeout, even a
        # reset after the request was sent: only the original aiohttp exception tells.
        not_sent = (aiohttp_module.ClientConnectorError, aiohttp_module.ConnectionTimeoutError)
        for error in (exc, exc.__cause__):
            if isinstance(error, aiohttp_module.ClientError):
                return isinstance(error, not_sent)
    httpx_module = _loaded("httpx")
    return httpx_module is not None and isinstance(
        exc, (httpx_module.ConnectError, httpx_module.ConnectTimeout, httpx_module.PoolTimeout)
    )


def is_timeout(exc: BaseException) -> bool:
    """True when the wait for an answer ran out (the bank may still be working on it)."""
    aiohttp_module = _loaded("aiohttp")
    if aiohttp_module is not None and isinstance(exc.__cause__, aiohttp_module.ClientError):
        # Httpx-aiohttp names every aiohttp error ConnectTimeout: not so
        exc = exc.__cause__
    return isinstance(exc, TimeoutError) or any("Timeout" in c.__name__ for c in type(exc).__mro__)


def describe(exc: BaseException) -> str:
    """A few words on what failed: pyreqwest's innermost cause, else the exception's class.

    pyreqwest's class names mislead (a hang-up after sending is a ``ConnectError``).
    """
    if _loaded("pyreqwest.exceptions") is not None:
        from payrun.bank._pyreqwest import error_causes

        causes = error_causes(exc)
        if causes:
            return causes[-1]
    return type(exc).__name__


def _pyreqwest_never_sent(exc: Any, errors: Any) -> bool:
    """pyreqwest's class alone does not tell: trust only hyper's connect-phase marker.

    pyreqwest raises ``ConnectError`` both for a refused connection and for a server that
    hung up after reading the whole request ("client error (SendRequest)"), and
    ``ConnectTimeoutError`` for a request timeout after sending. Only an error whose causes
    name hyper's connect phase ("client error (Connect)"), and never the send phase, proves
    no byte was sent; anything else counts as maybe sent (reconciled, never resent).
    """
    # No connection was ever given to it
    if isinstance(exc, errors.PoolTimeoutError):
        return True
    if not isinstance(exc, (errors.ConnectError, errors.ConnectTimeoutError)):
        return False
    from payrun.bank._pyreqwest import error_causes

    messages = error_causes(exc)
    return _CONNECT_PHASE in messages and not any(_SEND_PHASE in m for m in messages)


_CONNECT_PHASE = "client error (Connect)"
_SEND_PHASE = "SendRequest"
