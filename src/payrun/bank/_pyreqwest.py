"""The bank's HTTP client on pyreqwest: Rust's reqwest and hyper, driven from asyncio.

``BankClient`` needs ``request``, ``aclose``, ``base_url`` and ``headers``. The HTTP work
(connection pool, request writing, response parsing) runs in Rust on pyreqwest's own
thread. At 50 in flight and 50 ms, a bare request costs this process 0.12-0.16 ms of CPU
against aiohttp's 0.22-0.32 with the client pinned to one core (0.27 against 0.31
unpinned), a whole run about a quarter less per payment, and the import 3 ms against
200 (benchmarks/bench_transport.py, benchmarks/bench_run.py --transport).

It is set up as the aiohttp client is: no proxy from the environment, no redirects
followed (a bank answering 3xx is an unexpected answer, never silently re-sent elsewhere),
no cookies, idle connections dropped after ``keepalive_seconds``, and no answer read past
``MAX_ANSWER_BYTES`` (the response is streamed and dropped once it passes the cap).
pyreqwest's exceptions propagate unchanged: ``transport.never_sent`` tells a failed connect
(safe to resend) from a failure after sending (outcome unknown).

On Linux pyreqwest's I/O thread runs under ``SCHED_BATCH`` (see ``_io_thread_yields``):
it no longer preempts the event loop each time it wakes, which on a shared core cut the
process's CPU per payment by 10-19% at equal speed (benchmarks/bench_run.py).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

import anyio
from pyreqwest.client import Client, ClientBuilder
from pyreqwest.exceptions import BuilderError
from pyreqwest.response import Response, ResponseBodyReader

from payrun.bank._lean import Answer, LeanClient, check_length, read_capped
from payrun.errors import BankError, ConfigError

__all__ = ["PyreqwestClient", "error_causes"]

_CONNECT_SECONDS = 10.0
"""A connect that takes longer fails as a connect error: provably never sent, so retried."""


class PyreqwestClient(LeanClient):
    """A pyreqwest client with a base URL and default headers.

    It is built at once, so a machine whose CA certificates cannot be loaded (pyreqwest
    reads the system's, or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``) fails before anything
    is sent, with a ``ConfigError`` that says so.
    """

    def __init__(
        self,
        base_url: str,
        *,
        headers: dict[str, str],
        timeout: float,
        max_connections: int,
        keepalive_seconds: float,
    ) -> None:
        super().__init__(base_url, headers)
        try:
            builder = (
                ClientBuilder()
                .default_headers(headers)
                .user_agent("payrun")
                .timeout(timedelta(seconds=timeout))
                .connect_timeout(timedelta(seconds=min(timeout, _CONNECT_SECONDS)))
                .max_connections(max_connections)
                .pool_idle_timeout(timedelta(seconds=keepalive_seconds))
                .http1_only()
                .follow_redirects(False)  # noqa: FBT003 - pyreqwest's builder takes a bare bool
                .default_cookie_store(False)  # noqa: FBT003
                .no_proxy()
                .tcp_nodelay(True)  # noqa: FBT003
            )
            # The first client starts pyreqwest's I/O thread
            with _io_thread_yields():
                self._client: Client | None = builder.build()
        except BuilderError as exc:
            msg = (
                f"cannot set up the HTTP client: {_reason(exc)}; check that SSL_CERT_FILE or"
                " SSL_CERT_DIR, if set, name CA certificates (or unset them to use the system's)"
            )
            raise ConfigError(msg) from exc
        except ValueError:
            # A header value pyreqwest refuses; its message quotes the value
            msg = "cannot set up the HTTP client: the API key has characters a header cannot carry"
            raise ConfigError(msg) from None

    async def request(
        self,
        method: str,
        url: str,
        *,
        params: dict[str, str] | None = None,
        json: Any = None,
    ) -> Answer:
        """Send one request (a path is joined to the base URL) and read the whole body."""
        client = self._client
        if client is None:
            msg = "the HTTP client is closed"
            raise RuntimeError(msg)
        target = self._target(url)
        try:
            builder = client.request(method, target)
            if params:
                builder = builder.query(params)
            if json is not None:
                builder = builder.body_json(json)
            sending = builder.build_streamed()
        except (ValueError, TypeError) as exc:
            # A URL or body it cannot send: nothing was sent
            msg = f"cannot send {method} {url}: {exc}"
            raise BankError(msg) from exc
        # Never cancelled half way: pyreqwest carries on with a request whose await was
        # cancelled (and may send it later), and such leftovers can abort the interpreter
        # at exit. So a cancelled caller waits for the answer (at most ``timeout``), which
        # the caller then records.
        with anyio.CancelScope(shield=True):
            async with sending as response:
                answer = Answer(
                    response.status, await _read_body(response), response.get_header("date")
                )
        return answer

    async def aclose(self) -> None:
        """Close the client and its connections."""
        if self._client is not None:
            await self._client.close()
            self._client = None


async def _read_body(response: Response) -> bytes:
    """The body, read only while it stays under ``MAX_ANSWER_BYTES``.

    With a Content-Length under the cap, hyper reads no more than it says, in one call.
    """
    length = response.get_header("content-length")
    if length is not None:
        check_length(length)
        return bytes(await response.bytes())
    return await read_capped(_chunks(response.body_reader))


async def _chunks(reader: ResponseBodyReader) -> AsyncIterator[bytes]:
    while (chunk := await reader.read_chunk()) is not None:
        yield bytes(chunk)


@contextlib.contextmanager
def _io_thread_yields() -> Iterator[None]:
    """Threads started inside run under ``SCHED_BATCH``, which never preempts on wake-up.

    pyreqwest starts its I/O thread when the first client is built, and a new thread takes
    the policy of the thread that starts it: so the calling thread switches to
    ``SCHED_BATCH`` for the build and back afterwards. The I/O thread's work is short and
    it still runs as soon as the event loop waits; what it no longer does is take the core
    from the event loop in the middle of a burst of work, once per request, then hand it
    back. A best effort: elsewhere than Linux, or where the switch is not allowed (a thread
    already under another policy), nothing changes.
    """
    try:
        switch = os.sched_getscheduler(0) == os.SCHED_OTHER
        if switch:
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except (AttributeError, OSError):
        # Not Linux, or not allowed here
        switch = False
    try:
        yield
    finally:
        if switch:
            with contextlib.suppress(OSError):
                os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))


def error_causes(exc: BaseException) -> list[str]:
    """The messages of a pyreqwest error's causes, outermost first (none for others)."""
    details = getattr(exc, "details", None)
    causes = details.get("causes") if isinstance(details, dict) else None
    return [str(c.get("message", "")) for c in causes or () if isinstance(c, dict)]


def _reason(exc: BuilderError) -> str:
    """The innermost cause pyreqwest gives (its top-level text is just "builder error")."""
    messages = error_causes(exc)
    return messages[-1] if messages else str(exc)
