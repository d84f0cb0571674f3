"""The organization-wide in-flight request limit, adapted to the bank's 429 answers.

``AdaptiveLimiter`` is shared by every request a run sends (reads, writes and retries):
``async with limiter.slot():`` holds one slot while a request is on the wire. It is an
AIMD window over an anyio ``CapacityLimiter``: ``on_rate_limited()`` halves the limit
(never below 1), ``on_success()`` grows it by one after ``grow_after`` consecutive
successes (never above ``cap``). ``slot()`` yields the window's generation: a 429 for a
request sent before the last cut is part of the burst that cut caused, so it does not
halve again (one halving per burst, as TCP does per window, instead of collapsing to 1).
Lowering the limit never interrupts holders; new
requests wait until the holders drop below it, so no slot is granted above the limit.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.lowlevel

__all__ = ["DEFAULT_GROW_AFTER", "AdaptiveLimiter"]

DEFAULT_GROW_AFTER = 20
"""Consecutive successes before the limit grows back by one slot."""


class AdaptiveLimiter:
    """At most ``limit`` requests in flight; the limit halves on 429 and creeps back up."""

    __slots__ = ("_cap", "_generation", "_grow_after", "_inner", "_peak", "_streak")

    def __init__(self, cap: int, *, grow_after: int = DEFAULT_GROW_AFTER) -> None:
        if cap < 1:
            msg = f"the in-flight cap must be at least 1, not {cap}"
            raise ValueError(msg)
        if grow_after < 1:
            msg = f"grow_after must be at least 1, not {grow_after}"
            raise ValueError(msg)
        self._cap = cap
        self._grow_after = grow_after
        self._inner = anyio.CapacityLimiter(cap)
        self._streak = 0
        self._peak = 0
        self._generation = 0

    def __repr__(self) -> str:
        return (
            f"AdaptiveLimiter(cap={self._cap}, limit={self.limit},"
            f" in_flight={self.in_flight}, peak={self._peak})"
        )

    @property
    def cap(self) -> int:
        """The limit never grows above this."""
        return self._cap

    @property
    def limit(self) -> int:
        """How many requests may be in flight now."""
        return int(self._inner.total_tokens)

    @property
    def in_flight(self) -> int:
        """How many slots are held now."""
        return self._inner.borrowed_tokens

    @property
    def peak(self) -> int:
        """The most slots ever held at once."""
        return self._peak

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[int]:
        """Hold one slot for the body of the ``async with``; yields the window generation."""
        token = object()
        await anyio.lowlevel.checkpoint_if_cancelled()  # never start a request once cancelled
        try:  # a free slot is taken without a trip through the event loop
            self._inner.acquire_on_behalf_of_nowait(token)
        except anyio.WouldBlock:
            await self._inner.acquire_on_behalf_of(token)
        try:
            held = self._inner.borrowed_tokens
            if held > self._peak:
                self._peak = held
            yield self._generation
        finally:
            self._inner.release_on_behalf_of(token)

    def on_rate_limited(self, generation: int | None = None) -> None:
        """The bank answered 429: halve the limit (never below 1) and restart the streak.

        ``generation`` is what ``slot()`` yielded for the refused request; a request sent
        before the last halving does not halve again.
        """
        self._streak = 0
        if generation is not None and generation != self._generation:
            return
        self._generation += 1
        current = self.limit
        if current > 1:
            self._inner.total_tokens = max(1, current // 2)

    def on_success(self) -> None:
        """A request was not rate limited: after ``grow_after`` in a row, grow by one."""
        self._streak += 1
        if self._streak >= self._grow_after:
            self._streak = 0
            current = self.limit
            if current < self._cap:
                self._inner.total_tokens = current + 1
