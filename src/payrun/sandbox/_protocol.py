"""uvicorn's httptools protocol, writing each response in one piece.

uvicorn writes a response's status line and headers (``http.response.start``) and then its
body, each straight to the socket: two ``write`` calls and two TCP segments on loopback,
so the client wakes up twice for one answer. ``OneWriteProtocol`` hands its requests a
transport that holds what a started response writes until the response is complete
(``on_response_complete``) or the connection closes, then writes it at once. Anything
written outside a response (a ``100 Continue``, a 400 for a bad request) goes out as
before, and nothing waits for an ``await``: the sandbox's app sends start and body one
after the other.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["OneWriteProtocol"]


class _HeldWrites:
    """A connection's transport whose writes wait while its protocol's response is open."""

    __slots__ = ("_held", "_protocol", "_transport")

    def __init__(self, transport: asyncio.Transport, protocol: OneWriteProtocol) -> None:
        self._transport = transport
        self._protocol = protocol
        self._held: list[bytes] = []

    def write(self, data: bytes) -> None:
        """Hold ``data`` while a response is being written, else write it now."""
        cycle = self._protocol.cycle
        if cycle is not None and cycle.response_started and not cycle.response_complete:
            self._held.append(data)
        else:
            self.flush()
            self._transport.write(data)

    def flush(self) -> None:
        """Write what is held, in one piece."""
        if self._held:
            data = b"".join(self._held)
            self._held.clear()
            self._transport.write(data)

    def close(self) -> None:
        """Write what is held, then close (the transport sends it before closing)."""
        if not self._transport.is_closing():
            self.flush()
        self._held.clear()
        self._transport.close()

    def is_closing(self) -> bool:
        """Tell whether the connection is closing or closed."""
        return self._transport.is_closing()

    def pause_reading(self) -> None:
        """Stop reading from the socket (flow control)."""
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        """Read from the socket again (flow control)."""
        self._transport.resume_reading()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class OneWriteProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol; each response goes to the socket in one write."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Serve the connection through a transport that holds a response's writes."""
        self._held_writes = _HeldWrites(transport, self)
        super().connection_made(self._held_writes)  # type: ignore[arg-type]

    def on_response_complete(self) -> None:
        """Write the finished response, then go on as uvicorn does."""
        self._held_writes.flush()
        super().on_response_complete()
