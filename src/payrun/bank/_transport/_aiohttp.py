"""The bank's HTTP transport on aiohttp, mapping aiohttp's exceptions to payrun's.

``AiohttpTransport.send`` sends a ``PreparedRequest`` as built (the URL is not re-quoted;
no ``Accept-Encoding`` or other header is added besides ``Host`` and ``Content-Length``),
follows no redirect, keeps no cookies, takes no proxy from the environment, and reads no
answer past ``MAX_ANSWER_BYTES``. Its failures leave it only as ``NotSent`` (the connect
failed or timed out, including the wait for a pooled connection: safe to resend) or
``MaybeSent`` (anything after: the bank may have acted; ``late`` when the wait for the
answer ran out).

An https bank is verified with a TLS context of the transport's own (the system's CA
certificates, or where ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` point), made on the first https
request; an http one (the sandbox) never loads the certificates. aiohttp itself makes two
default contexts when imported, each loading every CA certificate of the system (about
25 ms of CPU apiece, before a run's first request): they are made without certificates
(``_no_certificates_loaded``), so that aiohttp's own defaults, never used by this
transport, verify nothing rather than cost start-up.
"""

from __future__ import annotations

import re
import ssl
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import chain

from yarl import URL

from payrun.bank._transport._errors import MaybeSent, NotSent, NotSentReason
from payrun.bank._transport._exchange import Answer, PreparedRequest
from payrun.bank._transport._size import check_length, read_capped
from payrun.errors import BankError, ConfigError


@contextmanager
def _no_certificates_loaded() -> Iterator[None]:
    """While aiohttp is first imported: a TLS context loads no CA certificates (its default
    contexts, which this transport never uses, then trust nothing)."""
    load = ssl.SSLContext.set_default_verify_paths
    ssl.SSLContext.set_default_verify_paths = _load_nothing  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        ssl.SSLContext.set_default_verify_paths = load  # type: ignore[method-assign]


def _load_nothing(context: ssl.SSLContext) -> None:
    """``SSLContext.set_default_verify_paths`` while aiohttp is first imported."""


if "aiohttp" in sys.modules:
    import aiohttp
else:
    with _no_certificates_loaded():
        import aiohttp

__all__ = ["AiohttpTransport"]

# A connect that hangs fails as a connect (never sent), well before the answer's timeout
_CONNECT_SECONDS = 10.0
# What aiohttp would add on its own: every other header comes from the request as built
_NO_AUTO_HEADERS = ("Accept", "Accept-Encoding", "User-Agent")
_SCHEMES = frozenset({"http", "https"})
_HEADER_BREAK = re.compile("[\r\n\x00]")
# aiohttp's connect timeout also bounds the wait for a pooled connection: both never sent
_NEVER_SENT = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)


class AiohttpTransport:
    """An aiohttp session (opened on first use) sized for ``max_connections`` in flight.

    A machine where no CA certificates can be found (the system's, or where
    ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` point) fails when it is made, before anything is
    sent, with a ``ConfigError`` that says so.
    """

    __slots__ = ("_keepalive", "_max_connections", "_session", "_timeout", "_tls")

    def __init__(self, *, timeout: float, max_connections: int, keepalive_seconds: float) -> None:
        _check_ca_certificates()
        self._timeout = aiohttp.ClientTimeout(total=timeout, connect=min(timeout, _CONNECT_SECONDS))
        self._max_connections = max_connections
        self._keepalive = keepalive_seconds
        self._session: aiohttp.ClientSession | None = None
        self._tls: ssl.SSLContext | None = None

    def __repr__(self) -> str:
        return f"AiohttpTransport(max_connections={self._max_connections})"

    def _open(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            limit=self._max_connections, keepalive_timeout=self._keepalive
        )
        self._session = aiohttp.ClientSession(
            timeout=self._timeout,
            connector=connector,
            cookie_jar=aiohttp.DummyCookieJar(),
            skip_auto_headers=_NO_AUTO_HEADERS,
        )
        return self._session

    async def send(self, request: PreparedRequest) -> Answer:
        """Send ``request`` as built and read the whole answer (at most the size cap)."""
        url = _checked_url(request)
        session = self._session or self._open()
        # An http bank needs no TLS context (aiohttp ignores it)
        tls = (self._tls or self._verifying()) if url.scheme == "https" else True
        try:
            async with session.request(
                request.method,
                url,
                headers=request.headers,
                data=request.body or None,
                allow_redirects=False,
                ssl=tls,
            ) as response:
                check_length(response.content_length)
                body = await read_capped(response.content.iter_any())
                return Answer(response.status, body, response.headers.get("Date"))
        except _NEVER_SENT as exc:
            raise NotSent(str(exc), kind=type(exc).__name__, reason=_reason(exc)) from exc
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            # TimeoutError is an OSError: the wait for the answer ran out
            late = isinstance(exc, TimeoutError)
            raise MaybeSent(str(exc), kind=type(exc).__name__, late=late) from exc

    def _verifying(self) -> ssl.SSLContext:
        """The TLS context an https bank is verified with: the system's CA certificates (or
        ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``), made once, on the first https request."""
        context = ssl.create_default_context()
        context.set_alpn_protocols(("http/1.1",))
        self._tls = context
        return context

    async def aclose(self) -> None:
        """Close the session and its connections."""
        if self._session is not None:
            await self._session.close()
            self._session = None


def _reason(exc: Exception) -> NotSentReason:
    """Why a connection failed: its host name, its TLS handshake, or the connection itself."""
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return "no-such-host"
    if isinstance(exc, aiohttp.ClientSSLError):
        return "tls"
    return "connect"


def _checked_url(request: PreparedRequest) -> URL:
    """The request's URL, once it and the headers are known to be sendable as built.

    A request that is not (a bad port, a scheme other than HTTP, a line break in a header)
    is a ``BankError`` before anything is sent; the message quotes no header value.
    """
    problem = None
    try:
        url = URL(request.url, encoded=True)
        if url.scheme not in _SCHEMES or not url.host:
            problem = "not an http or https URL"
        # yarl reads the port only when asked: an out-of-range one raises here
        url.port  # noqa: B018
    except ValueError as exc:
        problem = str(exc)
    # One search over every header (per request); the loop only to name the one at fault
    if _HEADER_BREAK.search("".join(chain.from_iterable(request.headers.items()))):
        for name, value in request.headers.items():
            if _HEADER_BREAK.search(name) or _HEADER_BREAK.search(value):
                problem = f"its {name} header has a line break or a NUL character"
    if problem is not None:
        msg = f"cannot send {request.method} {request.url}: {problem}"
        raise BankError(msg)
    return url


def _check_ca_certificates() -> None:
    """Refuse a machine where OpenSSL would find no CA certificates to trust."""
    # The standard library resolves SSL_CERT_FILE / SSL_CERT_DIR, keeping only what exists
    paths = ssl.get_default_verify_paths()
    if paths.cafile is None and paths.capath is None:
        msg = (
            "cannot set up the HTTP client: no CA certificates can be loaded; check that"
            " SSL_CERT_FILE or SSL_CERT_DIR, if set, name CA certificates (or unset them to use"
            " the system's)"
        )
        raise ConfigError(msg)
