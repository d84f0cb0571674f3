"""Tracking (``--wait``): follow submitted payments to delivered, failed or returned.

Input: the book's ``submitted`` and ``delivered`` rows and the time the batch started.
Output: those rows moved to their final status. The organization's ``submission-updated``
events are read from the batch start, oldest first, deduplicated by event URL (delivery
is at least once and unordered); a submission the events have not settled after a while is
read directly, and so is every one when the events cannot be read (404, 5xx, or a 403:
a role that may pay but not read events).

``returned`` can follow ``delivered`` (the payee's bank sends the money back), so a
delivered row is not final here: a later ``returned`` event for its submission moves it to
``returned``, in the same run or in a rerun (the events are read from the batch start, so a
rerun with ``--wait`` reads the events once even when no row is still waiting). Nothing
moves a row back from ``returned`` or ``failed``. Returns are noticed through the events;
when the events are refused, each delivered row's submission is read once instead.

When ``wait_seconds`` run out, the run is told how many payments are still submitted and
not final; running the same command again keeps following them. A 401/403 on reading a
submission stops the run with a ``RefusedMidRunError`` that says what was done.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import anyio

from payrun.domain import RowStatus
from payrun.errors import AuthError, BankError
from payrun.records import RowBook
from payrun.refusal import refused_mid_run

if TYPE_CHECKING:  # the bank client is imported only by runs that talk to a bank
    from payrun.bank import BankClient, Organization

__all__ = ["FINAL_SUBMISSION_STATUSES", "final_error", "follow_submissions", "wait_ran_out"]

FINAL_SUBMISSION_STATUSES = {
    "delivered": RowStatus.DELIVERED,
    "failed": RowStatus.FAILED,
    "returned": RowStatus.RETURNED,
}
_POLL_EVERY_ROUNDS = 5
_POLL_WORKERS = 20
_FORBIDDEN = 403


def final_error(status: str, reason: str | None) -> str | None:
    """What a row's report says of a submission's final status (None when delivered)."""
    if status == "delivered":
        return None
    return (
        f"the bank reports the payment {status}"
        + (f": {reason}" if reason else "")
        + "; it is final for this file: to pay it once the cause is fixed, put the row in"
        " a new file of its own and pay that (and let nobody submit the old payment again in"
        " the bank's app)"
    )


def _moves(current: RowStatus, final: RowStatus) -> bool:
    """Whether a submission's final status changes its row: submitted to any, delivered to
    returned (a return follows a delivery), never back from returned or failed."""
    return current is RowStatus.SUBMITTED or (
        current is RowStatus.DELIVERED and final is RowStatus.RETURNED
    )


class _Tracker:
    def __init__(
        self, client: BankClient, org: Organization, book: RowBook, since: datetime
    ) -> None:
        self.client = client
        self.org = org
        self.book = book
        self.since = since - timedelta(minutes=1)
        self.seen: set[str] = set()
        self.events_refused = False  # 403 on the events: poll from then on
        self.polls_refused = False  # 403 on a submission while the events work: events only
        self.delivered_read = False  # delivered rows read directly once (events refused)
        self.refused: AuthError | None = None
        self.tracked = {  # every submission whose row a later status may still change
            row.submission_url: row.row
            for row in book.in_status(RowStatus.SUBMITTED, RowStatus.DELIVERED)
            if row.submission_url
        }
        self.waiting = {
            url
            for url, number in self.tracked.items()
            if book.get(number).status is RowStatus.SUBMITTED
        }

    def settle(self, submission_url: str, status: str, reason: str | None = None) -> None:
        final = FINAL_SUBMISSION_STATUSES.get(status)
        number = self.tracked.get(submission_url)
        if final is None or number is None:
            return
        self.waiting.discard(submission_url)
        if not _moves(self.book.get(number).status, final):
            return
        self.book.set(number, status=final, error=final_error(status, reason))

    async def read_events(self) -> bool:
        """Apply new submission-updated events; False when the events cannot be read."""
        if self.events_refused:
            return False
        latest = self.since
        try:
            async for event in self.client.events(
                self.org, event_type="submission-updated", created_since=self.since
            ):
                latest = max(latest, event.created_at)
                if event.url in self.seen:
                    continue
                self.seen.add(event.url)
                payload = event.payload
                url, status = payload.get("submission-url"), payload.get("submission-status")
                if isinstance(url, str) and isinstance(status, str):
                    reason = payload.get("submission-status-reason")
                    self.settle(url, status, reason if isinstance(reason, str) else None)
        except AuthError as exc:
            if exc.status != _FORBIDDEN or self.polls_refused:  # 401, or nothing can be read
                raise
            self.events_refused = True  # this role may pay but not read events: poll
            return False
        except BankError:
            return False
        self.since = latest - timedelta(seconds=5)  # overlap; duplicates are dropped by URL
        return True

    def delivered_unread(self) -> bool:
        """True while delivered rows' submissions still need one direct read (events refused:
        a return after delivery can be seen only there)."""
        return self.events_refused and not self.delivered_read

    async def poll(self) -> None:
        """Read each still-waiting submission directly (delivered ones too, once, when the
        events are refused)."""
        urls = list(self.waiting)
        if self.delivered_unread():
            self.delivered_read = True
            urls += [url for url in self.tracked if url not in self.waiting]

        async def worker() -> None:
            while urls:
                url = urls.pop()
                try:
                    submission = await self.client.get_submission(url)
                except AuthError as exc:
                    if exc.status == _FORBIDDEN and not self.events_refused:
                        self.polls_refused = True  # the role reads events, not submissions
                    else:
                        self.refused = self.refused or exc
                    urls.clear()
                    return
                except BankError:
                    continue
                self.settle(url, submission.status, submission.reason)

        async with anyio.create_task_group() as group:
            for _ in range(min(_POLL_WORKERS, len(urls))):
                group.start_soon(worker)
        if self.refused is not None:
            raise self.refused


async def follow_submissions(
    client: BankClient,
    org: Organization,
    book: RowBook,
    *,
    since: datetime,
    wait_seconds: float,
    interval: float = 1.0,
    stop: object | None = None,
    note: Callable[[str], None] = lambda message: None,
) -> int:
    """Wait until every submitted row is final or ``wait_seconds`` pass; return rows still open.

    The events are read at least once even when no row is waiting, so that a return of a
    row delivered before is noticed. ``note`` is told when the wait begins and runs out.
    """
    tracker = _Tracker(client, org, book, since)
    if not tracker.tracked:
        return 0
    if tracker.waiting:
        note("waiting for the bank to deliver the submitted payments")
    stopped: Callable[[], bool] = getattr(stop, "is_set", lambda: False)
    try:
        with anyio.move_on_after(wait_seconds):
            rounds = 0
            while not stopped():
                events_ok = await tracker.read_events()
                rounds += 1
                polling = not events_ok or rounds % _POLL_EVERY_ROUNDS == 0
                unread = tracker.waiting or tracker.delivered_unread()
                if unread and polling and not tracker.polls_refused:
                    await tracker.poll()
                if not tracker.waiting:
                    break
                await anyio.sleep(interval)
    except AuthError as exc:
        raise refused_mid_run(exc, book.all(), reading=True) from exc
    if tracker.waiting and not stopped():
        note(wait_ran_out(wait_seconds, len(tracker.waiting)))
    return len(tracker.waiting)


def wait_ran_out(seconds: float, open_rows: int) -> str:
    """What to say when ``--wait-timeout`` ran out with ``open_rows`` not yet final."""
    shown = f"{seconds:.0f}" if seconds.is_integer() else f"{seconds:g}"
    unit = "second" if seconds == 1 else "seconds"
    payments = f"{open_rows} {'payment' if open_rows == 1 else 'payments'}"
    return (
        f"the wait ran out after {shown} {unit} (--wait-timeout) with {payments} submitted"
        " and not yet final (delivered, failed or returned); run the same command again to"
        " keep following them (nothing will be paid twice)"
    )
