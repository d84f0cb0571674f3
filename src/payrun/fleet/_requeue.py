"""Hand a batch to Temporal, and hand it again when Temporal lost it.

``queue_batch`` starts the batch's route workflow (a worker asks the bank whose key it is
and queues the batch in that organization's lane). ``requeue_lost`` looks at every batch
the ledger database holds as not ended and queues again each one that no route and no
lane holds any more (a Temporal server that lost its state: an in-memory dev server
restarted). Queueing is idempotent: a batch already waiting in its lane is not added twice,
and a batch that ended is not paid again (``pay_batch`` returns its end).
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from datetime import UTC, timedelta
from typing import TYPE_CHECKING

from temporalio.client import WorkflowQueryFailedError
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError

from payrun.fleet._store import FleetBatch, FleetStore
from payrun.fleet._workflow import (
    BatchTicket,
    RouteInput,
    RouteWorkflow,
    key_group_queue,
    route_workflow_id,
)

if TYPE_CHECKING:
    from temporalio.client import Client

__all__ = ["queue_batch", "requeue_lost"]

_QUERY_TIMEOUT = timedelta(seconds=5)
_RUNNING = 1
"""``WorkflowExecutionStatus.RUNNING``'s value."""


async def queue_batch(
    client: Client,
    batch: str,
    cutoff: str | None,
    *,
    task_queue: str,
    heartbeat_seconds: float,
    key_group: str | None = None,
) -> None:
    """Start the batch's route (or leave the one that runs): it reaches its lane. The
    route runs on the task queue of the batch's key group (a worker holding its key)."""
    await client.start_workflow(
        RouteWorkflow.run,
        RouteInput(BatchTicket(batch, cutoff, key_group), heartbeat_seconds, task_queue),
        id=route_workflow_id(task_queue, batch),
        task_queue=key_group_queue(task_queue, key_group),
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )


async def requeue_lost(
    client: Client,
    store: FleetStore,
    *,
    task_queue: str,
    heartbeat_seconds: float,
    names: Collection[str] | None = None,
) -> list[str]:
    """Queue again the open batches of ``task_queue`` (``names``, or all) that Temporal
    no longer holds; their names."""
    batches = await asyncio.to_thread(store.open_batches, task_queue)
    lost = []
    for batch in batches:
        if names is not None and batch.name not in names:
            continue
        if await _held(client, batch, task_queue):
            continue
        cutoff = None if batch.cutoff is None else batch.cutoff.astimezone(UTC).isoformat()
        await queue_batch(
            client,
            batch.name,
            cutoff,
            task_queue=task_queue,
            heartbeat_seconds=heartbeat_seconds,
            key_group=batch.key_group,
        )
        lost.append(batch.name)
    return lost


async def _held(client: Client, batch: FleetBatch, task_queue: str) -> bool:
    """Whether a running route, or a running lane that lists it, holds the batch; True
    too when Temporal cannot tell now (no worker answers the lane's query)."""
    if await _running(client, route_workflow_id(task_queue, batch.name)):
        return True
    if batch.lane_id is None or not await _running(client, batch.lane_id):
        return False
    try:
        held = await client.get_workflow_handle(batch.lane_id).query(
            "batches", rpc_timeout=_QUERY_TIMEOUT
        )
    except (RPCError, WorkflowQueryFailedError):
        return True
    return batch.name in held


async def _running(client: Client, workflow_id: str) -> bool:
    try:
        described = await client.get_workflow_handle(workflow_id).describe()
    except RPCError:
        return False
    return described.status is not None and int(described.status) == _RUNNING
