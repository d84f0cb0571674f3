"""Serving the sandbox over real HTTP with uvicorn (httptools + uvloop when available).

With httptools, uvicorn's protocol is ``_protocol.OneWriteProtocol``: each response goes
to the socket in one write (status line, headers and body in one TCP segment).

- ``serve_in_thread(**create_app_kwargs)``: a context manager that starts uvicorn on
  ``127.0.0.1`` port 0 in a background thread, yields a ``RunningSandbox`` (``base_url``,
  ``api_key``, ``state``, ``app``) once it accepts connections, and stops it on exit.
- ``serve(app, host=..., port=..., on_ready=...)``: serve in the calling (main) thread until
  SIGINT/SIGTERM; ``on_ready(base_url)`` runs once the socket accepts connections.
"""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import uvicorn

from payrun.sandbox.app import InjectedDropError, SandboxApp, create_app
from payrun.sandbox.state import SandboxState

__all__ = ["RunningSandbox", "serve", "serve_in_thread"]

_START_TIMEOUT_S = 10.0
_GC_YOUNG_THRESHOLD = 7_000


class _HideInjectedDrops(logging.Filter):
    """Keep uvicorn quiet about connections the sandbox dropped on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, InjectedDropError)


_DROP_FILTER = _HideInjectedDrops()


@dataclass(frozen=True, slots=True)
class RunningSandbox:
    """A sandbox bank being served: where it is, its key, its state and app."""

    base_url: str
    api_key: str
    state: SandboxState
    app: SandboxApp


class _Server(uvicorn.Server):
    """A uvicorn server that reports its address once it accepts connections."""

    def __init__(self, config: uvicorn.Config, on_ready: Callable[[str], None] | None) -> None:
        super().__init__(config)
        self.on_ready = on_ready
        self.base_url = ""

    def handle_exit(self, sig: int, frame: Any) -> None:
        """Stop gracefully; unlike plain uvicorn, do not re-raise the signal afterwards."""
        super().handle_exit(sig, frame)
        # A stopped sandbox is a clean exit (status 0), not a death by SIGTERM.
        captured = getattr(self, "_captured_signals", None)
        if isinstance(captured, list):
            captured.clear()

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets=sockets)
        if not self.started:
            return
        host, port = self.servers[0].sockets[0].getsockname()[:2]
        if host in {"0.0.0.0", "::"}:
            host = "127.0.0.1"
        shown = f"[{host}]" if ":" in host else host
        self.base_url = f"http://{shown}:{port}"
        if self.on_ready is not None:
            self.on_ready(self.base_url)


def _config(app: SandboxApp, host: str, port: int) -> uvicorn.Config:
    logging.getLogger("uvicorn.error").addFilter(_DROP_FILTER)
    fast = (
        importlib.util.find_spec("uvloop") is not None
        and importlib.util.find_spec("httptools") is not None
    )
    http: type[asyncio.Protocol] | str = "h11"
    if fast:
        # httptools is there: uvicorn's protocol for it, one write per response
        from payrun.sandbox._protocol import OneWriteProtocol

        http = OneWriteProtocol
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        loop="uvloop" if fast else "asyncio",
        http=http,
        lifespan="off",
        ws="none",
        access_log=False,
        # The app reads no client address or scheme: no X-Forwarded-* to apply per request
        proxy_headers=False,
        log_level="warning",
        server_header=False,
        date_header=False,
        backlog=4096,
        timeout_keep_alive=30,
    )


def serve(
    app: SandboxApp,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve ``app`` in this thread until SIGINT or SIGTERM.

    The process is the bank's alone, so its garbage collector is set for it: what exists
    now (the code, the seeded bank) is frozen out of the collector's passes, and the young
    generation is collected after 7,000 allocations instead of 700 (an answer allocates a
    few hundred objects, and the records a payment adds outlive it anyway).
    """
    gc.freeze()
    gc.set_threshold(_GC_YOUNG_THRESHOLD)
    _Server(_config(app, host, port), on_ready).run()


@contextmanager
def serve_in_thread(**create_app_kwargs: Any) -> Iterator[RunningSandbox]:
    """Run a sandbox on ``127.0.0.1`` port 0 in a thread; yield it; stop it on exit."""
    app = create_app(**create_app_kwargs)
    ready = threading.Event()
    server = _Server(_config(app, "127.0.0.1", 0), lambda _url: ready.set())
    thread = threading.Thread(target=server.run, name="payrun-sandbox", daemon=True)
    thread.start()
    try:
        deadline = _START_TIMEOUT_S
        while not ready.wait(0.05) and thread.is_alive() and deadline > 0:
            deadline -= 0.05
        if not server.base_url:
            message = "the sandbox server did not start"
            raise RuntimeError(message)
        yield RunningSandbox(server.base_url, app.api_key, app.sandbox, app)
    finally:
        server.should_exit = True
        thread.join(_START_TIMEOUT_S)
