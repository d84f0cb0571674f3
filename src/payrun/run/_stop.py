"""How a run is asked to stop: a flag the command line sets from its signal handlers.

``StopSignal`` counts stop requests (Ctrl-C, SIGTERM): after the first, a run starts
nothing new and lets in-flight requests finish; after the second, or 30 s after the first,
it cuts them off. Nothing here touches process signals: ``payrun.cli`` installs plain
handlers that only call ``request()``, so a signal never lands as an exception in the
middle of an import, a ledger write or the event loop. This module imports nothing heavy,
because the command line needs it in its first milliseconds.
"""

from __future__ import annotations

import time

__all__ = ["STOP_GRACE_SECONDS", "StopSignal"]

STOP_GRACE_SECONDS = 30.0
"""How long in-flight requests may finish after the first stop request."""


class StopSignal:
    """Stop requests so far, and when the first one came."""

    __slots__ = ("_count", "_first")

    def __init__(self) -> None:
        self._count = 0
        self._first: float | None = None

    def request(self) -> None:
        """Ask the run to stop (safe to call from a signal handler)."""
        self._count += 1
        if self._first is None:
            self._first = time.monotonic()

    def is_set(self) -> bool:
        """True once a stop was asked for: start nothing new."""
        return self._count > 0

    def must_cut_off(self) -> bool:
        """True after a second request, or once the grace period after the first is over."""
        if self._first is None:
            return False
        return self._count > 1 or time.monotonic() - self._first > STOP_GRACE_SECONDS

    async def wait_until(self, deadline: float) -> bool:
        """Sleep until ``deadline`` (anyio's clock) unless a stop is asked for first.

        True when the deadline came; False when the run must stop instead.
        """
        import anyio

        # a signal handler sets the flag, and cannot set an anyio Event: look 4 times a second
        while not self.is_set() and (left := deadline - anyio.current_time()) > 0:  # noqa: ASYNC110
            await anyio.sleep(min(left, 0.25))
        return not self.is_set()
