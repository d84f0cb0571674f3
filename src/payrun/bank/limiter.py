"""The organization-wide in-flight request limit, adapted to the bank's 429 answers.

``AdaptiveLimiter`` is shared by every request a run sends (reads, writes and retries):
``async with limiter.slot():`` holds one slot while a request is on the wire. It is an
AIMD window: ``on_rate_limited()`` halves the limit
(never below 1), ``on_success()`` grows it by one after ``grow_after`` consecutive
successes (never above ``cap``). ``slot()`` yields the window's generation: a 429 for a
request sent before the last cut is part of the burst that cut caused, so it does not
halve again (one halving per burst, as TCP does per window, instead of collapsing to 1).
Lowering the limit never interrupts holders; new
requests wait until the holders drop below it, so no slot is granted above the limit.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Coroutine
from types import TracebackType
from typing import Any

import anyio
import anyio.lowlevel

__all__ = ["DEFAULT_GROW_AFTER", "AdaptiveLimiter"]

DEFAULT_GROW_AFTER = 20
"""Consecutive successes before the limit grows back by one slot."""


class AdaptiveLimiter:
    """At most ``limit`` requests in flight; the limit halves on 429 and creeps back up."""

    __slots__ = (
        "_cap",
        "_generation",
        "_grow_after",
        "_held",
        "_limit",
        "_peak",
        "_streak",
        "_urgent",
        "_waiting",
    )

    def __init__(self, cap: int, *, grow_after: int = DEFAULT_GROW_AFTER) -> None:
        if cap < 1:
            msg = f"the in-flight cap must be at least 1, not {cap}"
            raise ValueError(msg)
        if grow_after < 1:
            msg = f"grow_after must be at least 1, not {grow_after}"
            raise ValueError(msg)
        self._cap = cap
        self._grow_after = grow_after
        self._limit = cap
        self._held = 0
        # FIFO, served after every urgent waiter
        self._waiting: deque[anyio.Event] = deque()
        self._urgent: deque[anyio.Event] = deque()
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
        return self._limit

    @property
    def in_flight(self) -> int:
        """How many slots are held now."""
        return self._held

    @property
    def peak(self) -> int:
        """The most slots ever held at once."""
        return self._peak

    def slot(self, *, urgent: bool = False) -> _Slot:
        """Hold one slot for the body of an ``async with``, which gets the window generation.

        Waiters are served in order, every ``urgent`` one before any other: a request
        never overtakes one that waits, except an urgent one overtaking an ordinary one.
        """
        return _Slot(self, urgent)

    async def _take(self, urgent: bool) -> int:  # noqa: FBT001 - private, called per request
        """Take a slot (at once when one is free and nobody waits ahead); its generation."""
        # Never start a request once cancelled
        await anyio.lowlevel.checkpoint_if_cancelled()
        if self._held < self._limit and not self._urgent and (urgent or not self._waiting):
            # A free slot is taken without a trip through the event loop
            self._held += 1
        else:
            await self._wait(self._urgent if urgent else self._waiting)
        if self._held > self._peak:
            self._peak = self._held
        return self._generation

    async def _wait(self, queue: deque[anyio.Event]) -> None:
        """Wait in ``queue`` until a releasing holder hands this waiter its slot."""
        granted = anyio.Event()
        queue.append(granted)
        try:
            await granted.wait()
        except BaseException:
            # Handed a slot just as it was cancelled: pass it on
            if granted.is_set():
                self._release()
            else:
                queue.remove(granted)
            raise

    def _release(self) -> None:
        self._held -= 1
        self._grant()

    def _grant(self) -> None:
        """Hand free slots to waiters, urgent ones first (each counted as held at once)."""
        while self._held < self._limit and (self._urgent or self._waiting):
            queue = self._urgent or self._waiting
            self._held += 1
            queue.popleft().set()

    def on_rate_limited(self, generation: int | None = None) -> None:
        """The bank answered 429: halve the limit (never below 1) and restart the streak.

        ``generation`` is what ``slot()`` yielded for the refused request; a request sent
        before the last halving does not halve again.
        """
        self._streak = 0
        if generation is not None and generation != self._generation:
            return
        self._generation += 1
        self._limit = max(1, self._limit // 2)

    def on_success(self) -> None:
        """A request was not rate limited: after ``grow_after`` in a row, grow by one."""
        self._streak += 1
        if self._streak >= self._grow_after:
            self._streak = 0
            if self._limit < self._cap:
                self._limit += 1
                self._grant()


class _Slot:
    """``async with limiter.slot():`` (a class, not a generator: it is entered per request)."""

    __slots__ = ("_limiter", "_urgent")

    def __init__(self, limiter: AdaptiveLimiter, urgent: bool) -> None:  # noqa: FBT001
        self._limiter = limiter
        self._urgent = urgent

    def __aenter__(self) -> Coroutine[Any, Any, int]:
        # ``_take``'s own coroutine, not one awaiting it: a frame less per request
        return self._limiter._take(self._urgent)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._limiter._release()
