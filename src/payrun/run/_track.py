"""Tracking (``--wait``): follow submitted payments to delivered, failed or returned.

Input: the book's ``submitted`` and ``delivered`` rows and the time the batch started
(read on the bank's clock, ``client.clock``, as the events' ``created-at`` are).
Output: those rows moved to their final status, and why the wait ended with rows still
open (``Followed``). The organization's ``submission-updated`` events are read from the
batch start, oldest first, deduplicated by event URL (delivery is at least once and
unordered), once a second. Reading a submission directly is the fallback, paced per
submission so that a large batch never turns into a stream of reads: one the events have
not settled within ``_FIRST_READ_SECONDS`` is read, then again after twice as long, and
so on up to ``_LONGEST_GAP_SECONDS``; once the events cannot be read (404, 5xx, or a 403:
a role that may pay but not read events), every waiting submission is read after
``_FALLBACK_FIRST_SECONDS``, with the same doubling gaps.

``returned`` can follow ``delivered`` (the payee's bank sends the money back), so a
delivered row is not final here: a later ``returned`` event for its submission moves it to
``returned``, in the same run or in a rerun (the events are read from the batch start, so a
rerun with ``--wait`` reads the events once even when no row is still waiting). Nothing
moves a row back from ``returned`` or ``failed``. Returns are noticed through the events;
when the events are refused, each delivered row's submission is read once instead.

The wait ends when every row is final, when ``wait_seconds`` run out, when the bank has
answered nothing for ``_NO_ANSWER_SECONDS`` (unreachable, or only 5xx), or at a stop
request (Ctrl-C, SIGTERM): then no new request starts, and what is in flight finishes.
Every ``_PROGRESS_SECONDS`` the run is told how the wait goes. A 401/403 on reading a
submission stops the run with a ``RefusedMidRunError`` that says what was done.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import anyio

from payrun._models import RowStatus
from payrun.errors import AuthError, BankError, BankRejectedError, RateLimitedError
from payrun.run._book import RowBook
from payrun.run._refusal import refused_mid_run
from payrun.run._submissions import FINAL_SUBMISSION_STATUSES, final_error

# The bank client is imported only by runs that talk to a bank
if TYPE_CHECKING:
    from payrun.bank import BankClient, Organization
    from payrun.run._state import RunState

__all__ = [
    "Followed",
    "follow_submissions",
    "wait_ran_out",
]

# The events work: a submission they leave open this long is read
_FIRST_READ_SECONDS = 30.0
# The events cannot be read: each submission is read this soon
_FALLBACK_FIRST_SECONDS = 1.0
# Between two reads of one submission (the gap doubles up to it)
_LONGEST_GAP_SECONDS = 60.0
# Every request failed this long (unreachable, 5xx): stop waiting
_NO_ANSWER_SECONDS = 60.0
# How often the run is told how the wait goes
_PROGRESS_SECONDS = 30.0
_POLL_WORKERS = 20
_FORBIDDEN = 403


@dataclass(frozen=True, slots=True)
class Followed:
    """How a wait ended: rows still submitted and not final, and what to tell the user
    when some are (the wait ran out, or the bank stopped answering); None when stopped."""

    open_rows: int = 0
    ended: str | None = None


def _moves(current: RowStatus, final: RowStatus) -> bool:
    """Whether a submission's final status changes its row: submitted to any, delivered to
    returned (a return follows a delivery), never back from returned or failed."""
    return current is RowStatus.SUBMITTED or (
        current is RowStatus.DELIVERED and final is RowStatus.RETURNED
    )


def _no_answer(error: BankError) -> bool:
    """A failure that says nothing came back from the bank: unreachable, lost, 5xx (a
    refusal such as 404, or a 429 from a busy organization, is an answer: the bank is there)."""
    return not isinstance(error, BankRejectedError | AuthError | RateLimitedError)


class _Tracker:
    def __init__(
        self,
        client: BankClient,
        org: Organization,
        book: RowBook,
        since: datetime,
        stopped: Callable[[], bool],
    ) -> None:
        self.client = client
        self.org = org
        self.book = book
        # Events carry the bank's created-at: the batch start is read on the bank's clock.
        self.since = client.clock.to_bank(since) - timedelta(minutes=1)
        self.stopped = stopped
        self.seen: set[str] = set()
        # 403 on the events: poll from then on
        self.events_refused = False
        # The events could not be read once: the fallback is on
        self.events_failed = False
        # 403 on a submission while the events work: events only
        self.polls_refused = False
        # Delivered rows read directly once (events refused)
        self.delivered_read = False
        self.refused: AuthError | None = None
        # The bank's last answer (or the wait's start)
        self.answered_at = anyio.current_time()
        # The last request got no answer
        self.failing = False
        self.last_failure = ""
        # Every submission whose row a later status may still change
        self.tracked = {
            row.submission_url: row.row
            for row in book.in_status(RowStatus.SUBMITTED, RowStatus.DELIVERED)
            if row.submission_url
        }
        now = anyio.current_time()
        # Submission URL -> (when it is next read directly, the gap then)
        self.waiting = {
            url: (now + _FIRST_READ_SECONDS, _FIRST_READ_SECONDS)
            for url, number in self.tracked.items()
            if book.get(number).status is RowStatus.SUBMITTED
        }

    def settle(self, submission_url: str, status: str, reason: str | None = None) -> None:
        final = FINAL_SUBMISSION_STATUSES.get(status)
        number = self.tracked.get(submission_url)
        if final is None or number is None:
            return
        self.waiting.pop(submission_url, None)
        if not _moves(self.book.get(number).status, final):
            return
        self.book.set(number, status=final, error=final_error(status, reason))

    def answered(self) -> None:
        self.answered_at, self.failing = anyio.current_time(), False

    def failed(self, error: BankError) -> None:
        if _no_answer(error):
            # Not its advice
            self.failing, self.last_failure = True, str(error).split(";")[0]
        else:
            # A refusal is an answer: the bank is there
            self.answered()

    def silent_for(self) -> float:
        """Since when the bank has given no answer, while the last request got none (its
        retries included); 0 when the last request was answered."""
        return anyio.current_time() - self.answered_at if self.failing else 0.0

    async def read_events(self) -> bool:
        """Apply new submission-updated events; False when the events cannot be read."""
        if self.events_refused:
            return False
        latest = self.since
        try:
            async for event in self.client.events(
                self.org, event_type="submission-updated", created_since=self.since
            ):
                # A page came: a long read that fails later was no silence
                self.answered()
                latest = max(latest, event.created_at)
                if event.url not in self.seen:
                    self.seen.add(event.url)
                    payload = event.payload
                    url, status = payload.get("submission-url"), payload.get("submission-status")
                    if isinstance(url, str) and isinstance(status, str):
                        reason = payload.get("submission-status-reason")
                        self.settle(url, status, reason if isinstance(reason, str) else None)
                # No next page
                if self.stopped():
                    return True
        except AuthError as exc:
            # 401, or nothing can be read
            if exc.status != _FORBIDDEN or self.polls_refused:
                raise
            # This role may pay but not read events: poll
            self.events_refused = True
            self.answered()
            return self._fall_back()
        except BankError as exc:
            # A busy organization (429) gets no extra reads: next round
            self.failed(exc)
            return False if isinstance(exc, RateLimitedError) else self._fall_back()
        self.answered()
        # Overlap; duplicates are dropped by URL
        self.since = latest - timedelta(seconds=5)
        return True

    def _fall_back(self) -> bool:
        """The events cannot be read: from now on, read each waiting submission soon."""
        if not self.events_failed:
            self.events_failed = True
            soon = anyio.current_time() + _FALLBACK_FIRST_SECONDS
            for url, (due, _) in self.waiting.items():
                if due > soon:
                    self.waiting[url] = (soon, _FALLBACK_FIRST_SECONDS)
        return False

    def delivered_unread(self) -> bool:
        """True while delivered rows' submissions still need one direct read (events refused:
        a return after delivery can be seen only there)."""
        return self.events_refused and not self.delivered_read

    def due(self) -> list[str]:
        """The submissions to read directly now: waiting ones whose time came (and delivered
        ones, once, when the events are refused)."""
        if self.polls_refused:
            return []
        now = anyio.current_time()
        urls = [url for url, (at, _) in self.waiting.items() if at <= now]
        if self.delivered_unread():
            self.delivered_read = True
            urls += [url for url in self.tracked if url not in self.waiting]
        return urls

    async def poll(self, urls: list[str]) -> None:
        """Read these submissions directly, 20 at a time; nothing new once stopped."""

        async def worker() -> None:
            while urls and not self.stopped():
                url = urls.pop()
                try:
                    submission = await self.client.get_submission(url)
                except AuthError as exc:
                    if exc.status == _FORBIDDEN and not self.events_refused:
                        # The role reads events, not submissions
                        self.polls_refused = True
                    else:
                        self.refused = self.refused or exc
                    urls.clear()
                    return
                except BankError as exc:
                    self.failed(exc)
                else:
                    self.answered()
                    # An answer about another submission settles nothing.
                    if submission.url == url:
                        self.settle(url, submission.status, submission.reason)
                self._read_later(url)

        async with anyio.create_task_group() as group:
            for _ in range(min(_POLL_WORKERS, len(urls))):
                group.start_soon(worker)
        if self.refused is not None:
            raise self.refused

    def _read_later(self, url: str) -> None:
        """Still waiting after a read: the next one comes after twice the last gap."""
        if url in self.waiting:
            gap = min(2 * self.waiting[url][1], _LONGEST_GAP_SECONDS)
            self.waiting[url] = (anyio.current_time() + gap, gap)


async def follow_submissions(run: RunState, *, since: datetime, interval: float = 1.0) -> Followed:
    """Wait until every submitted row is final, or the wait ends (see the module):
    ``--wait-timeout`` runs out, the bank stops answering, or the run is asked to stop.

    The events are read at least once even when no row is waiting, so that a return of a
    row delivered before is noticed. The run's observer is told when the wait begins, how
    it goes every ``_PROGRESS_SECONDS``, and why it ended with rows still open.
    """
    book, note, wait_seconds = run.book, run.watcher.note, run.options.wait_timeout
    stopped = run.stop.is_set
    tracker = _Tracker(run.client, run.org, book, since, stopped)
    if not tracker.tracked:
        return Followed()
    started = anyio.current_time()
    if tracker.waiting:
        note(_waiting_for(len(tracker.waiting), wait_seconds))
    ended: str | None = None
    try:
        with anyio.move_on_after(wait_seconds):
            next_progress = started + _PROGRESS_SECONDS
            while not stopped():
                await tracker.read_events()
                urls = tracker.due()
                if urls and not stopped():
                    await tracker.poll(urls)
                if not tracker.waiting:
                    break
                if tracker.silent_for() >= _NO_ANSWER_SECONDS:
                    ended = _no_answer_for(
                        tracker.silent_for(), len(tracker.waiting), tracker.last_failure
                    )
                    break
                if anyio.current_time() >= next_progress:
                    next_progress = anyio.current_time() + _PROGRESS_SECONDS
                    left = started + wait_seconds - anyio.current_time()
                    note(_how_it_goes(tracker, left))
                await anyio.sleep(interval)
    except AuthError as exc:
        raise refused_mid_run(exc, book.all(), reading=True) from exc
    if tracker.waiting and not stopped():
        ended = ended or wait_ran_out(wait_seconds, len(tracker.waiting))
        note(ended)
    return Followed(len(tracker.waiting), None if stopped() else ended)


def _payments(count: int) -> str:
    return f"{count} {'payment' if count == 1 else 'payments'}"


def _seconds(seconds: float) -> str:
    shown = f"{seconds:.0f}" if float(seconds).is_integer() else f"{seconds:g}"
    return f"{shown} {'second' if seconds == 1 else 'seconds'}"


def _waiting_for(open_rows: int, seconds: float) -> str:
    """The note that starts the wait: how many, how long at most, how to stop it."""
    limit = "" if seconds == float("inf") else f" up to {_seconds(seconds)} (--wait-timeout)"
    payments = "the submitted payment" if open_rows == 1 else f"the {open_rows} submitted payments"
    return (
        f"waiting{limit} for the bank to deliver {payments}; Ctrl-C stops waiting (the"
        " payments stand, and running the same command again keeps following them)"
    )


def _how_it_goes(tracker: _Tracker, left: float) -> str:
    """The note every ``_PROGRESS_SECONDS`` of the wait, of the payments it follows."""
    statuses = [tracker.book.get(number).status for number in tracker.tracked.values()]
    delivered = statuses.count(RowStatus.DELIVERED)
    not_paid = statuses.count(RowStatus.FAILED) + statuses.count(RowStatus.RETURNED)
    limit = "" if left == float("inf") else f" ({_seconds(max(0.0, round(left)))} left)"
    return (
        f"still waiting for the bank: {delivered} delivered, {not_paid} failed or returned,"
        f" {_payments(len(tracker.waiting))} not yet final{limit}"
    )


def _no_answer_for(seconds: float, open_rows: int, failure: str) -> str:
    """Why a wait ended early: the bank answered nothing for a while."""
    return (
        f"the bank gave no answer for {_seconds(round(seconds))} while payrun followed the"
        f" submitted payments ({failure}), so it stopped waiting with {_payments(open_rows)}"
        " submitted and not yet final (delivered, failed or returned); run the same command"
        " again later to keep following them (nothing will be paid twice)"
    )


def wait_ran_out(seconds: float, open_rows: int) -> str:
    """What to say when ``--wait-timeout`` ran out with ``open_rows`` not yet final."""
    return (
        f"the wait ran out after {_seconds(seconds)} (--wait-timeout) with"
        f" {_payments(open_rows)} submitted and not yet final (delivered, failed or returned);"
        " run the same command again to keep following them (nothing will be paid twice)"
    )
