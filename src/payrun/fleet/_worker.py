"""``payrun fleet worker``: a Temporal worker that pays lanes' batches until told to stop.

Input: the Temporal address, namespace and task queue, the ledger database's URL and the
keys folder. It connects, serves the lane workflow and the activities, and watches the
command line's ``StopSignal``: on the first SIGTERM or Ctrl-C it polls no new task, asks
every batch it pays to drain (no new request; in-flight ones finish and are recorded) and
hands them back, then exits; a second signal cuts in-flight requests off.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from temporalio.service import RPCError

from payrun.config import DEFAULT_HEARTBEAT_TIMEOUT, DEFAULT_SETTLE_WAIT, DatabaseURL
from payrun.errors import ConfigError, LedgerError
from payrun.fleet._activities import FleetActivities
from payrun.fleet._requeue import requeue_lost
from payrun.fleet._store import FleetStore
from payrun.fleet._temporal import connect_temporal
from payrun.fleet._workflow import LaneWorkflow, RouteWorkflow, key_group_queue
from payrun.run import STOP_GRACE_SECONDS, StopSignal

if TYPE_CHECKING:
    from temporalio.client import Client

__all__ = [
    "CONNECTIONS_PER_WORKER",
    "REQUEUE_SECONDS",
    "WorkerOptions",
    "check_worker_start",
    "connections_needed",
    "run_worker",
]

CONNECTIONS_PER_WORKER = 3
"""Ledger database connections a worker holds beside its paying batches' (the fleet's
table, its look for lost batches, a refusal being recorded)."""
REQUEUE_SECONDS = 30.0
"""How often a worker looks for open batches that Temporal no longer holds."""

_STOP_POLL_SECONDS = 0.25


@dataclass(frozen=True, slots=True)
class WorkerOptions:
    """Where a worker connects and what it may hold at once."""

    temporal: str
    namespace: str
    task_queue: str
    ledger_url: DatabaseURL
    keys: Path
    max_batches: int = 20
    settle_wait: float = DEFAULT_SETTLE_WAIT
    # The heartbeat timeout of the lanes this worker queues again
    heartbeat_seconds: float = DEFAULT_HEARTBEAT_TIMEOUT
    # The worker's log: one line per batch started and ended
    say: Callable[[str], None] | None = None
    # Serve only this key group's batches (its task queue): --keys holds only its keys
    key_group: str | None = None

    @property
    def polled_queue(self) -> str:
        """The task queue this worker polls: its key group's, else the deployment's."""
        return key_group_queue(self.task_queue, self.key_group)

    # Worker processes the command runs (--processes), sharing its max_batches
    processes: int = 1
    # A child of --processes N: its parent checked the start for all N
    supervised: bool = False


async def run_worker(
    options: WorkerOptions, stop: StopSignal, ready: Callable[[str], None] | None = None
) -> None:
    """Serve the task queue until ``stop``; drain, hand batches back, return."""
    from temporalio.worker import Worker
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

    if not options.supervised:
        await asyncio.to_thread(check_worker_start, options)
    await asyncio.to_thread(_warm_up)
    client = await connect_temporal(options.temporal, options.namespace)
    executor = ThreadPoolExecutor(options.max_batches, thread_name_prefix="payrun-batch")
    activities = FleetActivities(
        options.ledger_url, options.keys, executor, settle_wait=options.settle_wait
    )
    if options.say is not None:
        activities.say = options.say
    worker = Worker(
        client,
        task_queue=options.polled_queue,
        workflows=[LaneWorkflow, RouteWorkflow],
        activities=[activities.route_batch, activities.pay_batch, activities.end_batch],
        max_concurrent_activities=options.max_batches,
        identity=activities.identity,
        # Drained batches finish their in-flight requests first
        graceful_shutdown_timeout=timedelta(seconds=STOP_GRACE_SECONDS + 10),
        workflow_runner=SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules("payrun")
        ),
    )
    running = asyncio.ensure_future(worker.run())
    watch = asyncio.ensure_future(_watch_lost_batches(client, activities, options))
    try:
        if ready is not None:
            ready(activities.identity)
        # The flag is set by a signal handler, which cannot set an asyncio Event
        while not stop.is_set() and not running.done():  # noqa: ASYNC110
            await asyncio.sleep(_STOP_POLL_SECONDS)
        if running.done():
            # The worker failed (Temporal went away for good): say why
            running.result()
            return
        activities.drain()
        # No new task is polled from here; running batches drain first
        stopping = asyncio.ensure_future(worker.shutdown())
        cut_off = False
        while not stopping.done():
            if stop.must_cut_off() and not cut_off:
                cut_off = True
                activities.drain()
            await asyncio.sleep(_STOP_POLL_SECONDS)
        await stopping
        await running
    finally:
        watch.cancel()
        executor.shutdown(wait=False)
        activities.store.close()


def _warm_up() -> None:
    """Import what paying a batch needs now, once, rather than in the first batches: the
    engine, the HTTP client and the PostgreSQL ledger (a long-lived worker's start-up, not
    a payment's cost)."""
    import aiohttp
    import psycopg

    import payrun.approval
    import payrun.run

    # The run's engine, through its public name (payrun.run imports on first use)
    _ = payrun.run.run_stored_batch, aiohttp, psycopg


def check_worker_start(options: WorkerOptions) -> None:
    """What a worker command checks once before it serves (for all its processes): the keys
    folder, the ledger's tables, and the database's connections."""
    if not options.keys.is_dir():
        msg = f"--keys {options.keys} is not a folder (it holds one API key file per organization)"
        raise ConfigError(msg)
    store = FleetStore(options.ledger_url)
    store.ensure_schema()
    _check_connection_budget(store, options.max_batches, options.processes)


def connections_needed(max_batches: int, processes: int) -> int:
    """The connections a worker command could hold: one per batch it pays at once (its
    ``max_batches``, shared by its processes) and ``CONNECTIONS_PER_WORKER`` per process."""
    return max_batches + processes * CONNECTIONS_PER_WORKER


def _check_connection_budget(store: FleetStore, max_batches: int, processes: int) -> None:
    """Refuse a worker whose batches could need more connections than the server has left:
    each paying batch holds one for its life, and each worker process a few of its own."""
    allowed, used = store.free_connections()
    needed = connections_needed(max_batches, processes)
    if used + needed > allowed:
        each = f"--max-batches {max_batches} and {CONNECTIONS_PER_WORKER} of its own"
        lower = "--max-batches"
        if processes > 1:
            each = (
                f"--max-batches {max_batches} shared by --processes {processes}, and"
                f" {CONNECTIONS_PER_WORKER} of each process's own"
            )
            lower = "--max-batches or --processes"
        msg = (
            f"the ledger database allows {allowed} connections and {used} are in use: this"
            f" worker could need {needed} more ({each}); lower {lower} or raise the"
            " server's max_connections (docs/fleet.md, Sizing)"
        )
        raise ConfigError(msg)


async def _watch_lost_batches(
    client: Client, activities: FleetActivities, options: WorkerOptions
) -> None:
    """Every ``REQUEUE_SECONDS``, queue again the batches of this task queue that Temporal
    lost (a restarted in-memory server); a failed look is tried at the next turn."""
    store = FleetStore(options.ledger_url)
    while not activities.draining:
        await asyncio.sleep(REQUEUE_SECONDS)
        try:
            lost = await requeue_lost(
                client,
                store,
                task_queue=options.task_queue,
                heartbeat_seconds=options.heartbeat_seconds,
            )
        except (LedgerError, RPCError) as exc:
            activities.say(f"could not look for lost batches ({exc}); trying again")
            continue
        for name in lost:
            activities.say(f"batch {name}: Temporal had lost it; queued again")
