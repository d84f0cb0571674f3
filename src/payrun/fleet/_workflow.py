"""The lane workflow: one per organization lane, paying its batches one at a time.

Temporal runs this code deterministically and keeps its event history; what enters that
history is only what is here: batch names, a batch's cut-off time, its key group's name
and the heartbeat timeout. Rows, files, bank addresses and keys stay in the ledger
database and on the workers. A batch is one long activity (``pay_batch``, heartbeating),
retried on any worker after a failure or a missed heartbeat; its cut-off is a durable
timer that, when it fires first, cancels the activity (the worker then stops starting
payments, lets those in flight finish and records) and ends the batch ``incomplete``
(``end_batch``).

Lanes beyond the workers' capacity wait in the order of their cut-offs: each batch's
activity carries a Temporal priority key from its cut-off (``cutoff_priority``), so the
organization due first is paid first (where the server honours priority keys: see
docs/fleet.md). A batch of a key group has its activities (and its route) on that group's
task queue (``key_group_queue``), which only the workers holding its keys poll.

This module imports only temporalio, the standard library and ``_address`` (standard
library only), as Temporal's workflow sandbox wants.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.common import Priority, RetryPolicy
from temporalio.exceptions import ActivityError
from temporalio.workflow import ActivityCancellationType

from payrun.fleet._address import normalized_base_url

__all__ = [
    "BATCHES_PER_HISTORY",
    "BatchTicket",
    "EndBatch",
    "LaneInput",
    "LaneWorkflow",
    "RouteInput",
    "RouteWorkflow",
    "cutoff_priority",
    "key_group_queue",
    "lane_workflow_id",
    "normalized_base_url",
    "route_workflow_id",
]

BATCHES_PER_HISTORY = 50
"""Batches a lane pays before it continues as new (Temporal histories stay short)."""
REFUSED = "BatchRefused"
"""The activity error type that no retry can mend (a missing key, a refused key)."""
_PAY_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=15),
    maximum_attempts=0,
    non_retryable_error_types=[REFUSED],
)
# A route is a local activity (it never waits behind paying batches for a slot): its
# retries beyond a minute are timers in its history, so they are spaced wider
_ROUTE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
    maximum_attempts=0,
    non_retryable_error_types=[REFUSED],
)
_END_RETRY = RetryPolicy(maximum_interval=timedelta(seconds=15), maximum_attempts=0)
# A batch may pay for hours: the heartbeat, not this, notices a dead worker
_PAY_TIMEOUT = timedelta(days=7)
_END_TIMEOUT = timedelta(seconds=60)
_FIRST_SIGNAL_WAIT = timedelta(seconds=30)
# A bank call and a workflow start: a worker dead mid-route is noticed this soon
_ROUTE_TIMEOUT = timedelta(seconds=20)
# Priority keys by the time left to the cut-off (Temporal's default: 1 to 5, 3 unset);
# later than the last bound (a batch just submitted without a cut-off of its own, bounded
# at 24 hours), or no cut-off: the last key
_PRIORITY_BOUNDS = (
    (timedelta(hours=1), 1),
    (timedelta(hours=4), 2),
    (timedelta(hours=12), 3),
    (timedelta(hours=20), 4),
)
_LAST_PRIORITY = 5
# Recording a batch's end takes a moment: it goes before any batch waiting to pay
_END_PRIORITY = Priority(priority_key=1)


@dataclass(frozen=True, slots=True)
class BatchTicket:
    """A batch handed to a lane: its name and, if any, its cut-off (ISO 8601, zoned)."""

    batch: str
    cutoff: str | None = None
    # The key group whose workers pay it (None: the deployment's task queue)
    key_group: str | None = None


@dataclass(frozen=True, slots=True)
class LaneInput:
    """What a lane starts with: the heartbeat timeout, batches carried over and the
    deployment's task queue (None: the lane's own, as lanes before key groups)."""

    heartbeat_seconds: float = 30.0
    pending: list[BatchTicket] = field(default_factory=list)
    task_queue: str | None = None


@dataclass(frozen=True, slots=True)
class EndBatch:
    """Ask the workers' side to record a batch's end the workflow decided (the cut-off)."""

    batch: str
    why: str


@dataclass(frozen=True, slots=True)
class RouteInput:
    """A batch to place in its organization's lane, the lane's heartbeat timeout and the
    deployment's task queue (None: the route activity's own, as routes before key groups)."""

    ticket: BatchTicket
    heartbeat_seconds: float = 30.0
    task_queue: str | None = None


def lane_workflow_id(task_queue: str, base_url: str, organization_url: str) -> str:
    """The lane's workflow id: a digest of the task queue (one deployment's workers and
    ledger database), the bank's normalized address and the organization's URL there
    (neither address appears in Temporal as text)."""
    text = f"{task_queue}\n{normalized_base_url(base_url)}\n{organization_url}"
    return f"payrun-lane-{hashlib.sha256(text.encode()).hexdigest()[:24]}"


def route_workflow_id(task_queue: str, batch: str) -> str:
    """The id of the workflow that places ``batch`` (of the deployment serving
    ``task_queue``) in its lane."""
    digest = hashlib.sha256(f"{task_queue}\n{batch}".encode()).hexdigest()[:24]
    return f"payrun-route-{digest}"


def key_group_queue(task_queue: str, key_group: str | None) -> str:
    """The task queue of ``key_group``'s workers in the deployment serving ``task_queue``
    (``task_queue`` itself for batches of no group)."""
    return task_queue if key_group is None else f"{task_queue}.{key_group}"


def cutoff_priority(cutoff: datetime | None, now: datetime) -> int:
    """The priority key of a batch due at ``cutoff``: 1 within the hour, 2 within 4 hours,
    3 within 12, 4 within 20, else 5 (a batch submitted without a cut-off of its own, bounded
    at 24 hours); a smaller key is paid first."""
    if cutoff is None:
        return _LAST_PRIORITY
    left = cutoff - now
    for bound, key in _PRIORITY_BOUNDS:
        if left <= bound:
            return key
    return _LAST_PRIORITY


@workflow.defn(name="payrun-route")
class RouteWorkflow:
    """Places one submitted batch in its organization's lane (a worker asks the bank whose
    key it is: the key stays on the workers)."""

    @workflow.run
    async def run(self, route: RouteInput) -> None:
        """Run the ``route_batch`` activity until it placed the batch or refused it."""
        try:
            if workflow.patched("route-local"):
                # On the worker that runs the route (of the batch's key group): no slot of
                # a paying batch is waited for, so a batch reaches its lane at once
                await workflow.execute_local_activity(
                    "route_batch",
                    route,
                    start_to_close_timeout=_ROUTE_TIMEOUT,
                    retry_policy=_ROUTE_RETRY,
                )
                return
            await workflow.execute_activity(
                "route_batch",
                route,
                start_to_close_timeout=_ROUTE_TIMEOUT,
                retry_policy=_PAY_RETRY,
            )
        except ActivityError:
            # A refusal (no key, a refused key) is recorded by the activity
            return


@workflow.defn(name="payrun-lane")
class LaneWorkflow:
    """Pays the batches signalled to it, in order, one at a time."""

    def __init__(self) -> None:
        self._queue: list[BatchTicket] = []
        self._home: str | None = None

    @workflow.signal(name="add")
    def add(self, ticket: BatchTicket) -> None:
        """Queue a batch (again queued only once while it waits)."""
        if all(waiting.batch != ticket.batch for waiting in self._queue[1:]):
            self._queue.append(ticket)

    @workflow.query(name="batches")
    def batches(self) -> list[str]:
        """The batches this lane holds: the one paying first, then those waiting."""
        return [ticket.batch for ticket in self._queue]

    @workflow.run
    async def run(self, lane: LaneInput) -> None:
        """Pay each queued batch; end when none is left, continue as new after many."""
        self._queue[:0] = lane.pending
        self._home = lane.task_queue
        await workflow.wait_condition(lambda: bool(self._queue), timeout=_FIRST_SIGNAL_WAIT)
        paid = 0
        while self._queue:
            if paid >= BATCHES_PER_HISTORY:
                workflow.continue_as_new(
                    LaneInput(lane.heartbeat_seconds, list(self._queue), lane.task_queue)
                )
            await self._pay(self._queue[0], timedelta(seconds=lane.heartbeat_seconds))
            self._queue.pop(0)
            paid += 1

    async def _pay(self, ticket: BatchTicket, heartbeat: timedelta) -> None:
        # What Temporal's UI shows of the lane: the batch it pays and its cut-off
        if workflow.patched("lane-memo"):
            workflow.upsert_memo({"batch": ticket.batch, "cutoff": ticket.cutoff})
        cutoff = None if ticket.cutoff is None else datetime.fromisoformat(ticket.cutoff)
        if cutoff is not None and workflow.now() >= cutoff:
            await self._end(ticket)
            return
        # The organization due first is paid first when lanes wait for a worker
        priority = Priority.default
        if workflow.patched("lane-priority"):
            priority = Priority(priority_key=cutoff_priority(cutoff, workflow.now()))
        handle = workflow.start_activity(
            "pay_batch",
            ticket.batch,
            task_queue=self._activity_queue(ticket),
            start_to_close_timeout=_PAY_TIMEOUT,
            heartbeat_timeout=heartbeat,
            retry_policy=_PAY_RETRY,
            cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            priority=priority,
        )
        if cutoff is None:
            await _settled(handle)
            return
        timer = asyncio.ensure_future(workflow.sleep(cutoff - workflow.now()))
        await workflow.wait([handle, timer], return_when=asyncio.FIRST_COMPLETED)
        if handle.done():
            timer.cancel()
            await _settled(handle)
            return
        # The cut-off: the worker stops starting payments, lets in-flight ones finish
        handle.cancel()
        await _settled(handle)
        await self._end(ticket)

    async def _end(self, ticket: BatchTicket) -> None:
        """Record that the batch's cut-off passed (by a worker of its key group)."""
        priority = _END_PRIORITY if workflow.patched("lane-priority") else Priority.default
        await workflow.execute_activity(
            "end_batch",
            EndBatch(ticket.batch, "cutoff"),
            task_queue=self._activity_queue(ticket),
            start_to_close_timeout=_END_TIMEOUT,
            retry_policy=_END_RETRY,
            priority=priority,
        )

    def _activity_queue(self, ticket: BatchTicket) -> str | None:
        """Where the batch's activities go: its key group's task queue; None (the lane's
        own, as before key groups) when that is the lane's own."""
        own = workflow.info().task_queue
        queue = key_group_queue(self._home or own, ticket.key_group)
        return None if queue == own else queue


async def _settled(handle: asyncio.Future[object]) -> None:
    """Wait for the activity; a refusal or a cancellation is already recorded by it."""
    try:
        await handle
    except (ActivityError, asyncio.CancelledError):
        return
