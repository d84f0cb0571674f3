"""Reads run at once, each keeping its error, raised afterwards in a fixed order.

Input: ``Read`` values (where each stands in the error order, the work). Output: each
``Read`` holds its error; ``raise_first_error`` raises the first in order. A ``fatal`` read
that fails cancels the reads still running: nothing more is sent for a run that ends.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field

import anyio

__all__ = ["Read", "all_at_once", "raise_first_error"]


@dataclass(slots=True, eq=False)
class Read:
    """One read: where it stands in the error order, its work, its outcome."""

    order: tuple[int, int]
    work: Callable[[], Awaitable[None]]
    fatal: bool = False
    """When it fails, the reads still running are cancelled."""
    done: anyio.Event = field(default_factory=anyio.Event)
    error: Exception | None = None


async def all_at_once(reads: Sequence[Read], *, workers: int) -> None:
    """Run the reads in their order, ``workers`` at a time; each keeps its error."""
    queue = list(reads)
    queue.reverse()

    async def worker(group: anyio.abc.TaskGroup) -> None:
        while queue:
            read = queue.pop()
            try:
                await read.work()
            except Exception as exc:  # noqa: BLE001 - raised in order by raise_first_error
                read.error = exc
                if read.fatal:
                    group.cancel_scope.cancel()
            finally:
                read.done.set()

    async with anyio.create_task_group() as group:
        for _ in range(min(workers, len(queue))):
            group.start_soon(worker, group)


def raise_first_error(reads: Iterable[Read]) -> None:
    """Raise the error of the first read, in their fixed order, that failed."""
    failed = [read for read in reads if read.error is not None]
    if failed:
        first = min(failed, key=lambda read: read.order)
        assert first.error is not None
        raise first.error
