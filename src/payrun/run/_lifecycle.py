"""A run's lifecycle: the bank client it holds, its open ledger (closed, or removed when
a first run is refused), the garbage collector tuned while it pays, and the stop request
that cuts it off."""

from __future__ import annotations

import gc
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import anyio

from payrun._models import LedgerRow, utc_now
from payrun.errors import InterruptedRunError, first_payrun_error
from payrun.ledger import LedgerStore, discard_if_refused
from payrun.run._book import RowBook
from payrun.run._outcome import RunOutcome
from payrun.run._state import Caller
from payrun.run._stop import StopSignal

# Imported at run time only when a bank is called (keeps `validate` fast)
if TYPE_CHECKING:
    from payrun.bank import BankClient

__all__ = ["event_loop_options", "pay_ledger", "with_client"]

# Each wake-up costs CPU; a quarter second is prompt enough
_STOP_POLL_SECONDS = 0.25
_GC_YOUNG_THRESHOLD = 50_000

_Pay = Callable[[Caller, "BankClient", LedgerStore, RowBook], Awaitable[RunOutcome]]
"""A run's payment of an open ledger's rows, with the bank client it holds."""


async def pay_ledger(ledger: LedgerStore, caller: Caller, pay: _Pay) -> RunOutcome:
    """``pay`` the open ledger's rows (stopped when the caller asks), then close it; a
    refused first run removes it. The outcome counts the rows whose status changed."""
    changed = 0

    def row_changed(before: LedgerRow, after: LedgerRow) -> None:
        nonlocal changed
        changed += before.status is not after.status
        caller.watcher.row_changed(before, after)

    try:
        book = RowBook(ledger.rows(), ledger=ledger, on_change=row_changed)
        with _collector_tuned():
            outcome = await with_client(
                caller,
                lambda client: _guarded(caller.stop, lambda: pay(caller, client, ledger, book)),
            )
        ledger.check_in_place()
        ledger.set_batch(ended_at=utc_now())
    except BaseException as exc:
        if ledger.created:
            # A refused first run leaves no ledger behind
            discard_if_refused(ledger, exc)
        raise
    finally:
        ledger.close()
    outcome.changed = changed
    return outcome


@contextmanager
def _collector_tuned() -> Iterator[None]:
    """Collect garbage less often while paying, then restore the caller's settings.

    Each request makes short-lived containers (JSON, HTTP state) and the book holds every
    row: with the default thresholds, garbage collection took about 20% of a 100,000-row
    run's CPU, mostly re-scanning objects that live for the whole run.
    """
    previous = gc.get_threshold()
    gc.set_threshold(_GC_YOUNG_THRESHOLD, *previous[1:])
    # What exists now (the book, the indexes) lives for the whole run
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*previous)


async def with_client(
    caller: Caller, body: Callable[[BankClient], Awaitable[RunOutcome]]
) -> RunOutcome:
    """Run ``body`` with a bank client for the caller's settings and limits."""
    from payrun.bank import AdaptiveLimiter, BankClient, make_transport

    options = caller.options
    transport = make_transport(max_connections=options.max_in_flight)
    limiter = AdaptiveLimiter(options.max_in_flight)
    async with BankClient(transport, caller.settings, limiter=limiter) as client:
        return await body(client)


async def _guarded(stop: StopSignal, body: Callable[[], Awaitable[RunOutcome]]) -> RunOutcome:
    """Run ``body``; once ``stop`` must cut off (a second request, or 30 s), cancel it."""
    result: list[RunOutcome] = []
    try:
        async with anyio.create_task_group() as group:

            async def main() -> None:
                result.append(await body())
                group.cancel_scope.cancel()

            async def watch() -> None:
                # The flag is set by a signal handler, which cannot touch an anyio Event.
                while not stop.must_cut_off():  # noqa: ASYNC110
                    await anyio.sleep(_STOP_POLL_SECONDS)
                group.cancel_scope.cancel()

            group.start_soon(main)
            group.start_soon(watch)
    except BaseExceptionGroup as errors:
        _raise_first(errors)
        raise
    if not result:
        msg = (
            "stopped: nothing more was sent (a request already sent got its answer), and a"
            " request whose answer was not recorded is checked with the bank first; run the"
            " same command again to resume"
        )
        raise InterruptedRunError(msg)
    return result[0]


def event_loop_options() -> dict[str, bool]:
    """anyio's backend options for a run: uvloop where it is installed (a faster event loop
    for the same code)."""
    try:
        import uvloop  # noqa: F401
    except ImportError:  # pragma: no cover - uvloop is a dependency except on Windows
        return {}
    return {"use_uvloop": True}


def _raise_first(error: BaseException) -> None:
    """Unwrap an exception group to the first payrun error it holds."""
    found = first_payrun_error(error)
    if found is not None:
        raise found
