"""What a fleet worker does for Temporal: pay one stored batch, or record a batch's end.

``pay_batch(name)`` looks the batch up in the fleet's table (bank, key name, cut-off),
reads the organization's API key from the worker's keys folder, and pays the batch's
rows from the ledger database with the engine of ``payrun run`` (``run_stored_batch``:
the same limits, exactly-once and resume), in a thread of its own with its own event
loop, while the activity heartbeats every second. A cancellation (the cut-off's timer) or
the worker draining (SIGTERM) asks the engine to stop: nothing new starts, in-flight
requests finish and are recorded. A drained batch is handed back (a retryable error: the
next attempt, on any worker, resumes from the ledger); a refusal no retry can mend (no
key, the key refused, a ledger of another bank) ends the batch ``refused``.

``route_batch`` asks the bank whose key the batch's is (the index and the organization,
read at once when an earlier route of the key found it: ``ask_organization``) and keeps
what it found beside the batch: the run reads it again at once with its accounts
(``run_stored_batch``'s ``known``), the index deciding each time.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from payrun._models import RowStatus, utc_now
from payrun._redaction import redact
from payrun.config import (
    DEFAULT_SETTLE_WAIT,
    DatabaseURL,
    RunOptions,
    Settings,
    auth_scheme_environ,
    load_settings,
)
from payrun.errors import (
    EXIT_RUN_AGAIN,
    ApprovalError,
    AuthError,
    ConfigError,
    InterruptedRunError,
    LedgerError,
    LedgerLockedError,
    LedgerMismatchError,
    LedgerWriteError,
    PayrunError,
    first_payrun_error,
)
from payrun.fleet._store import FleetBatch, FleetStore, worker_identity
from payrun.fleet._workflow import (
    REFUSED,
    EndBatch,
    LaneInput,
    RouteInput,
    key_group_queue,
    lane_workflow_id,
    normalized_base_url,
)
from payrun.ledger import DatabaseLedger
from payrun.run import RunOutcome, StopSignal

if TYPE_CHECKING:
    from payrun.approval import Policy
    from payrun.run import KnownOrganization

__all__ = ["HEARTBEAT_SECONDS", "FleetActivities"]

HEARTBEAT_SECONDS = 1.0
"""How often a paying batch heartbeats (the contract: at least every 2 s)."""
HANDED_BACK = "BatchHandedBack"
"""The activity error type of a batch a draining worker hands back (retried elsewhere)."""
_UNFINISHED = frozenset(
    {RowStatus.PENDING, RowStatus.CREATING, RowStatus.SUBMITTING, RowStatus.CREATED}
)


@dataclass(slots=True)
class FleetActivities:
    """A worker's activities: its ledger database, keys folder and the batches it pays."""

    ledger_url: DatabaseURL
    keys: Path
    executor: ThreadPoolExecutor
    # The worker's settle wait (--settle-wait, PAYRUN_SETTLE_WAIT); a batch's own wins
    settle_wait: float = DEFAULT_SETTLE_WAIT
    identity: str = field(default_factory=worker_identity)
    # Where the worker's one line per batch started and ended goes
    say: Callable[[str], None] = field(default=lambda _line: None)
    draining: bool = False
    running: dict[str, StopSignal] = field(default_factory=dict)
    # The fleet's table in the ledger database, on one connection kept for the worker's
    # life (a batch reads and sets it several times: a new connection each costs more
    # than the call); the worker closes it when it ends
    store: FleetStore = field(init=False)

    def __post_init__(self) -> None:
        self.store = FleetStore(self.ledger_url, keep=True)

    def drain(self) -> None:
        """Stop every batch this worker pays (again: cut off in-flight requests)."""
        self.draining = True
        for stop in list(self.running.values()):
            stop.request()

    @activity.defn(name="end_batch")
    async def end_batch(self, end: EndBatch) -> None:
        """Record a batch's end that the workflow decided (its cut-off passed)."""
        message = "the cut-off passed: rows not paid by then stay unpaid"
        await asyncio.to_thread(
            self.store.set_state, end.batch, "incomplete", message=message, unless_final=True
        )

    @activity.defn(name="route_batch")
    async def route_batch(self, route: RouteInput) -> str:
        """Ask the bank whose key the batch's is and queue the batch in that organization's
        lane (started if none runs); the lane's workflow id."""
        name = route.ticket.batch
        store = self.store
        batch = await asyncio.to_thread(store.batch, name)
        if batch is None:
            msg = f"no batch {name} was submitted to the ledger database {self.ledger_url}"
            raise _failure(msg, kind=REFUSED, non_retryable=True)
        if batch.final:
            return batch.lane_id or ""
        try:
            settings = _settings(batch, self.keys)
            before = await asyncio.to_thread(
                store.organization_of, batch.base_url, settings.api_key
            )
            known = await _routed_organization(settings, before)
            organization = known.organization
        except ConfigError as exc:
            await asyncio.to_thread(store.set_state, name, "refused", message=str(exc))
            raise _failure(str(exc), kind=REFUSED, non_retryable=True) from None
        except AuthError as exc:
            message = f"batch {name}: the key {batch.key!r}: {exc}"
            await asyncio.to_thread(store.set_state, name, "refused", message=message)
            raise _failure(message, kind=REFUSED, non_retryable=True) from None
        except PayrunError as exc:
            # The bank away: the route is tried again
            message = f"batch {name}: {exc}"
            raise _failure(message, kind=type(exc).__name__) from None
        # The deployment's task queue names the lane; a lane started here runs on the
        # task queue of the batch's key group (the workers holding its keys)
        task_queue = route.task_queue or activity.info().task_queue
        lane = lane_workflow_id(task_queue, batch.base_url, organization.url)
        label = f"{organization.display_name}@{normalized_base_url(batch.base_url)}"
        await asyncio.to_thread(
            store.set_lane, name, lane, label, known, base_url=batch.base_url, key=settings.api_key
        )
        await activity.client().start_workflow(
            "payrun-lane",
            LaneInput(heartbeat_seconds=route.heartbeat_seconds, task_queue=task_queue),
            id=lane,
            task_queue=key_group_queue(task_queue, route.ticket.key_group),
            start_signal="add",
            start_signal_args=[route.ticket],
        )
        return lane

    @activity.defn(name="pay_batch")
    async def pay_batch(self, name: str) -> str:
        """Pay the stored batch ``name``; its final state (``done``, ``incomplete``)."""
        store = self.store
        batch = await asyncio.to_thread(store.batch, name)
        if batch is None:
            msg = f"no batch {name} was submitted to the ledger database {self.ledger_url}"
            raise _failure(msg, kind=REFUSED, non_retryable=True)
        if batch.final:
            return batch.state
        if _cut_off(batch):
            message = "the cut-off had passed before the batch started: nothing was paid"
            await asyncio.to_thread(store.set_state, name, "incomplete", message=message)
            return "incomplete"
        try:
            settings = _settings(batch, self.keys)
        except ConfigError as exc:
            await asyncio.to_thread(store.set_state, name, "refused", message=str(exc))
            raise _failure(str(exc), kind=REFUSED, non_retryable=True) from None
        for warning in settings.warnings:
            # The worker's log: an API key file other users can read
            self.say(f"batch {name}: warning: {warning}")
        stop = StopSignal()
        # Known to ``drain`` before the next await: a drain while the state is written
        # stops this batch too (it was lost, and the batch paid on by a stopping worker)
        self.running[name] = stop
        try:
            if self.draining:
                msg = f"worker {self.identity} is stopping: the batch goes to another"
                raise _failure(msg, kind=HANDED_BACK)
            await asyncio.to_thread(store.set_state, name, "paying", worker=self.identity)
            self.say(f"batch {name} ({batch.lane}): paying")
            outcome = await self._pay(batch, settings, stop)
        finally:
            del self.running[name]
        try:
            state = await asyncio.to_thread(self._record, batch, outcome)
        except ApplicationError as exc:
            self.say(f"batch {name}: {exc.message}")
            raise
        self.say(f"batch {name}: {state}")
        return state

    async def _pay(
        self, batch: FleetBatch, settings: Settings, stop: StopSignal
    ) -> RunOutcome | PayrunError:
        """Run the engine in a thread; heartbeat; a cancellation stops it and waits."""
        loop = asyncio.get_running_loop()
        work = loop.run_in_executor(self.executor, _pay_in_thread, self, batch, settings, stop)
        beat = asyncio.ensure_future(_heartbeat(batch, stop))
        try:
            while True:
                try:
                    return await asyncio.shield(work)
                except asyncio.CancelledError:
                    # The cut-off's timer or the worker's shutdown: drain, then record
                    stop.request()
        finally:
            beat.cancel()

    def _record(self, batch: FleetBatch, outcome: RunOutcome | PayrunError) -> str:
        """Record how the batch ended (or hand it back); raise what Temporal must retry."""
        store = self.store
        if isinstance(outcome, InterruptedRunError) or (
            isinstance(outcome, RunOutcome) and outcome.interrupted
        ):
            if _cut_off(batch) or not self.draining:
                message = "the cut-off passed: rows not paid by then stay unpaid"
                store.set_state(batch.name, "incomplete", message=message)
                return "incomplete"
            store.set_state(batch.name, "queued", message=f"handed back by {self.identity}")
            msg = f"worker {self.identity} stopped: the batch is handed back"
            raise _failure(msg, kind=HANDED_BACK)
        if isinstance(outcome, PayrunError):
            if _mendable(outcome):
                store.set_state(batch.name, "queued", message=str(outcome))
                raise _failure(str(outcome), kind=type(outcome).__name__)
            store.set_state(batch.name, "refused", message=str(outcome))
            raise _failure(str(outcome), kind=REFUSED, non_retryable=True)
        if any(row.status in _UNFINISHED for row in outcome.rows):
            # The bank could not be reached for some rows: try again
            message = "some rows are not paid yet (the bank did not answer); trying again"
            store.set_state(batch.name, "queued", message=message)
            raise _failure(message, kind="BatchUnfinished")
        store.set_state(batch.name, "done")
        return "done"


def _pay_in_thread(
    owner: FleetActivities, batch: FleetBatch, settings: Settings, stop: StopSignal
) -> RunOutcome | PayrunError:
    """Pay in this thread's own event loop; a payrun error is returned, not raised."""
    import anyio

    from payrun.run import event_loop_options, run_stored_batch

    # Unattended: the submit, with its control totals, is the person's go-ahead
    settle_wait = batch.options.get("settle_wait")
    options = RunOptions(
        confirm_payees=bool(batch.options.get("confirm_payees", True)),
        assume_yes=True,
        settle_wait=owner.settle_wait if settle_wait is None else float(settle_wait),
    )
    try:
        options = _planned_options(owner, batch, options)
        return anyio.run(
            lambda: run_stored_batch(
                DatabaseLedger(owner.ledger_url, batch.name),
                settings,
                options=options,
                known=batch.known,
                stop=stop,
            ),
            backend_options=event_loop_options(),
        )
    except PayrunError as exc:
        return exc
    except BaseExceptionGroup as group:
        found = first_payrun_error(group)
        if found is None:
            raise
        return found


def _planned_options(owner: FleetActivities, batch: FleetBatch, options: RunOptions) -> RunOptions:
    """A batch with an approved plan: the plan checked (``ApprovalError`` when it does not
    verify) and its payee options and rows taken. A batch without one is refused when the
    worker's policy (PAYRUN_POLICY_FILE) requires an approved plan."""
    from payrun.approval import approved_stored_batch, load_policy
    from payrun.config import policy_path_from_env

    policy = load_policy(policy_path_from_env())
    plan_id = batch.options.get("plan")
    if not plan_id:
        _refuse_unplanned(batch.name, policy)
        return options
    plan, approved = approved_stored_batch(
        DatabaseLedger(owner.ledger_url, batch.name),
        str(plan_id),
        policy=policy,
        who=owner.identity,
    )
    chosen = plan.options
    return dataclasses.replace(
        options,
        confirm_payees=bool(chosen["confirm_payees"]),
        accept_close_match=bool(chosen["accept_close_match"]),
        accept_changed_details=bool(chosen["accept_changed_details"]),
        allow_repeat=bool(chosen["allow_repeat"]),
        duplicate_window_days=int(chosen["duplicate_window"]),
        plan=approved,
    )


def _refuse_unplanned(name: str, policy: Policy) -> None:
    """``ApprovalError`` for a batch without a plan when ``policy`` requires one."""
    if policy.required:
        msg = (
            f"batch {name} has no plan, and the approval policy {policy.path} requires an"
            " approved one: make it with payrun plan FILE --ledger URL, have it approved, and"
            " submit the batch again with plan = ID in the manifest"
        )
        raise ApprovalError(msg)


async def _heartbeat(batch: FleetBatch, stop: StopSignal) -> None:
    """Heartbeat every second; at the cut-off, ask the engine to stop."""
    while True:
        activity.heartbeat()
        if _cut_off(batch) and not stop.is_set():
            stop.request()
        await asyncio.sleep(HEARTBEAT_SECONDS)


async def _routed_organization(
    settings: Settings, known: KnownOrganization | None
) -> KnownOrganization:
    """The organization the bank says the key belongs to, and the URL its index named
    (its errors as payrun's); with what an earlier route of the key found (``known``),
    read at once with the index (``ask_organization``)."""
    from payrun.bank import BankClient, make_transport
    from payrun.run import ask_organization

    async with BankClient(make_transport(), settings) as client:
        return await ask_organization(client, known)


def _failure(message: str, *, kind: str, non_retryable: bool = False) -> ApplicationError:
    """An expected end of an attempt (handed back, refused, the bank away): benign, so
    the worker's log gets payrun's one line, not the SDK's warning with a traceback.
    The message is redacted: it is kept in Temporal's history and shown by its tools."""
    return ApplicationError(
        redact(message),
        type=kind,
        non_retryable=non_retryable,
        category=ApplicationErrorCategory.BENIGN,
    )


def _cut_off(batch: FleetBatch) -> bool:
    return batch.cutoff is not None and utc_now() >= batch.cutoff


def _mendable(error: PayrunError) -> bool:
    """Errors a later attempt may not meet: the bank or the database away, the batch held
    by a run whose machine has not been declared dead yet."""
    if isinstance(error, LedgerLockedError | LedgerWriteError):
        return True
    # The database unreachable now; a ledger of another bank or file stays refused
    if isinstance(error, LedgerError) and not isinstance(error, LedgerMismatchError):
        return True
    return error.exit_code == EXIT_RUN_AGAIN


_KEY_ID_FILE_LIMIT = 1024
"""A key id is a short word (at most 256 characters): a bigger file is not one."""


def _key_id(path: Path) -> str:
    """The key id in ``path`` (``NAME.keyid``), read no further than ``_KEY_ID_FILE_LIMIT``
    bytes; a longer one is refused by ``load_settings`` as no key id."""
    with path.open("rb") as handle:
        return handle.read(_KEY_ID_FILE_LIMIT).decode("utf-8", "replace").strip()


def _settings(batch: FleetBatch, keys: Path) -> Settings:
    """The bank settings of the batch's lane: its base URL, the API key read from ``keys``
    (``NAME``), and the signing key when both ``NAME.signing.pem`` and ``NAME.keyid`` are
    there."""
    signing_file = keys / f"{batch.key}.signing.pem"
    key_id_file = keys / f"{batch.key}.keyid"
    signing = signing_file.is_file() or key_id_file.is_file()
    try:
        key_id = _key_id(key_id_file) if key_id_file.is_file() else None
        return load_settings(
            base_url=batch.base_url,
            api_key_file=keys / batch.key,
            signing_key_file=signing_file if signing else None,
            signing_key_id=key_id,
            environ=auth_scheme_environ(),
        )
    except OSError as exc:
        msg = (
            f"batch {batch.name}: cannot read {key_id_file.name} in the worker's --keys"
            f" folder ({exc.strerror})"
        )
        raise ConfigError(msg) from None
    except ConfigError as exc:
        msg = f"batch {batch.name}: the keys {batch.key!r} in the worker's --keys folder: {exc}"
        raise ConfigError(msg) from None
