"""``payrun fleet submit``: check every batch of a manifest, store its rows, hand it to a lane.

Input: the manifest, the Temporal address and the ledger database. First every batch
file is read and validated as ``payrun run`` reads it (a file that cannot be used,
control totals that differ, or a payroll export whose pay date is still to come without
``pay_now``, refuse the whole submit before anything is stored or started); then each
batch's rows go into the ledger database (row-level problems as ``invalid`` rows, the
same code as ``payrun run``), and each batch is signalled to its lane's workflow
(started if none runs). Temporal sees batch names and cut-offs only.
With ``wait`` it then follows the batches in the database until each has ended.

temporalio is imported and Temporal connected meanwhile (``connect_temporal``, in a thread),
and up to ``STORING`` batches are stored at once, each queued as soon as it is stored: the
last organization of a manifest starts paying soon after the first.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from payrun._models import RowStatus
from payrun.config import (
    DEFAULT_HEARTBEAT_TIMEOUT,
    DatabaseURL,
    RunOptions,
    ValidationOptions,
    redact_url,
)
from payrun.errors import (
    EXIT_NOT_ALL_PAID,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_RUN_AGAIN,
    ApprovalError,
    InterruptedRunError,
    LedgerError,
    LedgerMismatchError,
    UsageError,
)
from payrun.fleet._address import normalized_base_url
from payrun.fleet._manifest import BatchEntry, load_manifest
from payrun.fleet._store import FleetBatch, FleetStore
from payrun.fleet._temporal import connect_temporal
from payrun.intake import open_batch, read_export, show_day
from payrun.ledger import DatabaseLedger
from payrun.run import StopSignal
from payrun.validation import ValidTotals, plain_or_verdicts

if TYPE_CHECKING:
    from temporalio.client import Client

__all__ = [
    "DEFAULT_BATCH_BOUND",
    "READ_FAILURE_BOUND",
    "REQUEUE_EVERY",
    "STORING",
    "SubmitOptions",
    "fleet_exit_code",
    "follow",
    "refuse_split_organizations",
    "requeuer",
    "submit",
]

DEFAULT_BATCH_BOUND = 24 * 3600.0
"""A batch without a cut-off ends ``incomplete`` this long after it was submitted."""
REQUEUE_EVERY = 15.0
"""How often ``--wait`` looks for its batches that Temporal lost (and queues them again)."""
READ_FAILURE_BOUND = 300.0
"""How long ``--wait`` keeps trying a ledger database it cannot read before exit 3."""
STORING = 3
"""Batches the submit stores at once (each its own database connection)."""
_POLL_SECONDS = 0.5
_READ_BACKOFF_MAX = 10.0
_NOT_PAID = frozenset(
    {
        RowStatus.INVALID.value,
        RowStatus.HELD.value,
        RowStatus.FAILED.value,
        RowStatus.RETURNED.value,
        RowStatus.REJECTED.value,
    }
)


@dataclass(frozen=True, slots=True)
class SubmitOptions:
    """Where to submit: Temporal (address, namespace, task queue) and the ledger database."""

    temporal: str
    ledger_url: DatabaseURL
    namespace: str = "default"
    task_queue: str = "payrun"
    heartbeat_seconds: float = DEFAULT_HEARTBEAT_TIMEOUT
    policy: Path | None = None
    """The submitting side's approval policy (PAYRUN_POLICY_FILE): when it requires an
    approved plan, a batch without one is refused before anything is stored."""


async def submit(manifest: Path, options: SubmitOptions) -> list[str]:
    """Check, store and hand over every batch of ``manifest``; their names, in order."""
    entries = [_bounded(entry) for entry in load_manifest(manifest)]
    # Imported and connected while the batches are checked; its error (Temporal not
    # reached) comes where it came before, after theirs
    connecting = asyncio.ensure_future(connect_temporal(options.temporal, options.namespace))
    store = FleetStore(options.ledger_url, keep=True)
    try:
        recorded = await _checked(entries, store, options)
        client = await connecting
        for entry in entries:
            await asyncio.to_thread(_check_plan, entry, options.ledger_url)
        await _hand_over(entries, recorded, store, client, options)
    finally:
        await _settled(connecting)
        store.close()
    return [entry.name for entry in entries]


async def _checked(
    entries: list[BatchEntry], store: FleetStore, options: SubmitOptions
) -> dict[str, str | None]:
    """Every check before anything is stored; the file digest the ledger holds for each
    batch name it knows."""
    await asyncio.to_thread(_refuse_unplanned, entries, options.policy)
    for entry in entries:
        await asyncio.to_thread(_check_file, entry)
    refuse_split_organizations(entries)
    await asyncio.to_thread(store.ensure_schema)
    unfinished = await asyncio.to_thread(store.open_batches, options.task_queue)
    refuse_split_organizations(entries, unfinished)
    recorded = await asyncio.to_thread(store.recorded_sha256, [e.name for e in entries])
    for entry in entries:
        await asyncio.to_thread(_refuse_other_rows, entry, recorded.get(entry.name), options)
    return recorded


async def _hand_over(
    entries: list[BatchEntry],
    recorded: dict[str, str | None],
    store: FleetStore,
    client: Client,
    options: SubmitOptions,
) -> None:
    """Store each batch and hand it to its lane as soon as it is stored, ``STORING`` at a
    time: the first organizations start paying while the next batches' rows are stored.
    After a failure no further batch is begun; those begun are stored and queued, then the
    first failure in the manifest's order is raised (every batch passed its checks; one a
    failure leaves stored and not queued is queued again by the workers' look for lost
    batches, or by submitting again)."""
    from payrun.fleet._requeue import queue_batch

    slots = asyncio.Semaphore(STORING)
    failed = False

    async def one(entry: BatchEntry) -> None:
        nonlocal failed
        async with slots:
            if failed:
                return
            try:
                if recorded.get(entry.name) is None:
                    await asyncio.to_thread(_store_rows, entry, options.ledger_url)
                chosen = _batch_options(entry)
                if entry.plan is not None:
                    chosen["plan"] = await asyncio.to_thread(
                        _copy_plan, entry, entry.plan, options.ledger_url
                    )
                await asyncio.to_thread(
                    store.register, entry, chosen, task_queue=options.task_queue
                )
            except BaseException:
                failed = True
                raise
        cutoff = None if entry.cutoff is None else entry.cutoff.astimezone(UTC).isoformat()
        try:
            await queue_batch(
                client,
                entry.name,
                cutoff,
                task_queue=options.task_queue,
                heartbeat_seconds=options.heartbeat_seconds,
                key_group=entry.key_group,
            )
        except BaseException:
            failed = True
            raise

    outcomes = await asyncio.gather(*(one(entry) for entry in entries), return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome


async def _settled(task: asyncio.Future[Client]) -> None:
    """``task`` ended: cancelled if it still runs, its error (already raised, or of no
    use after another) kept from the event loop's warnings."""
    if not task.done():
        task.cancel()
    with contextlib.suppress(BaseException):
        await task


async def follow(
    url: DatabaseURL,
    names: list[str],
    stop: StopSignal,
    *,
    give_up_after: float | None = None,
    seen: Callable[[list[FleetBatch]], None] | None = None,
    requeue: Callable[[], Awaitable[object]] | None = None,
) -> list[FleetBatch]:
    """Poll the database until every named batch has ended, ``stop``, or
    ``give_up_after`` seconds; the last view (``seen`` gets each view). A database that
    cannot be read is tried again with backoff; ``InterruptedRunError`` (exit 3: the
    batches go on) once it has failed for ``READ_FAILURE_BOUND`` seconds in a row.
    ``requeue`` runs every ``REQUEUE_EVERY`` seconds (queue again what Temporal lost)."""
    from temporalio.service import RPCError

    reader = _PatientReader(FleetStore(url), names)
    started = requeued = time.monotonic()
    while True:
        if requeue is not None and time.monotonic() - requeued >= REQUEUE_EVERY:
            requeued = time.monotonic()
            with contextlib.suppress(LedgerError, RPCError):
                await requeue()
        if await reader.read():
            if seen is not None:
                seen(reader.last)
            if all(batch.final for batch in reader.last):
                return reader.last
        if stop.is_set():
            return reader.last
        if give_up_after is not None and time.monotonic() - started >= give_up_after:
            if reader.failing_since is not None:
                msg = (
                    f"stopped following after --wait-timeout {give_up_after:g} s, the ledger"
                    " database unreadable: the batches go on: see them with payrun fleet status"
                )
                raise InterruptedRunError(msg)
            return reader.last
        await asyncio.sleep(reader.pause)


@dataclass(slots=True)
class _PatientReader:
    """Reads the named batches; a failed read backs off, and fails for good (exit 3) only
    after ``READ_FAILURE_BOUND`` seconds of failures in a row."""

    store: FleetStore
    names: list[str]
    last: list[FleetBatch] = field(default_factory=list)
    failing_since: float | None = None
    pause: float = _POLL_SECONDS

    async def read(self) -> bool:
        """Read again; True when this read succeeded (``last`` holds it)."""
        try:
            self.last = await asyncio.to_thread(self.store.batches, self.names)
        except LedgerError as exc:
            now = time.monotonic()
            self.failing_since = now if self.failing_since is None else self.failing_since
            if now - self.failing_since >= READ_FAILURE_BOUND:
                msg = (
                    f"stopped following: the ledger database could not be read for"
                    f" {now - self.failing_since:.0f} s ({exc}); the batches go on: see them"
                    " with payrun fleet status"
                )
                raise InterruptedRunError(msg) from None
            self.pause = min(self.pause * 2, _READ_BACKOFF_MAX)
            return False
        self.failing_since, self.pause = None, _POLL_SECONDS
        return True


async def requeuer(
    options: SubmitOptions, names: Collection[str]
) -> Callable[[], Awaitable[list[str]]]:
    """What ``follow`` calls to queue again the batches of ``names`` Temporal lost."""
    from payrun.fleet._requeue import requeue_lost

    client = await connect_temporal(options.temporal, options.namespace)
    store = FleetStore(options.ledger_url)

    async def requeue() -> list[str]:
        return await requeue_lost(
            client,
            store,
            task_queue=options.task_queue,
            heartbeat_seconds=options.heartbeat_seconds,
            names=names,
        )

    return requeue


def refuse_split_organizations(
    entries: list[BatchEntry], unfinished: Collection[FleetBatch] = ()
) -> None:
    """Refuse (``UsageError``) a batch whose organization (its key at its bank) another
    batch of ``entries``, or an ``unfinished`` (queued, paying) one in the store not
    submitted again here, puts in another key group: an organization pays in one lane, on
    the task queue of one group's workers, so a batch of another group would wait in a
    lane its own workers never poll."""
    names = {entry.name for entry in entries}
    first: dict[tuple[str, str], tuple[str, str | None, str]] = {}
    for batch in unfinished:
        if batch.name not in names:
            organization = (normalized_base_url(batch.base_url), batch.key)
            first.setdefault(organization, (batch.name, batch.key_group, f"{batch.state} "))
    for entry in entries:
        organization = (normalized_base_url(entry.base_url), entry.key)
        name, group, state = first.setdefault(organization, (entry.name, entry.key_group, ""))
        if group != entry.key_group:
            msg = (
                f"batch {entry.name} is in {_group(entry.key_group)} but the {state}batch"
                f" {name} of the same organization (key {entry.key} at"
                f" {redact_url(entry.base_url)}) is in {_group(group)}: an organization pays"
                " in one lane, which one key group's workers poll; give its batches the same"
                " key_group"
            )
            raise UsageError(msg)


def _group(key_group: str | None) -> str:
    """How a message names ``key_group``."""
    return "no key group" if key_group is None else f"key group {key_group}"


def fleet_exit_code(batches: list[FleetBatch], *, interrupted: bool = False) -> int:
    """2 when a batch was refused, 3 when one is incomplete (or not ended), 1 when some
    rows are invalid, held or failed, else 0."""
    if any(batch.state == "refused" for batch in batches):
        return EXIT_REFUSED
    if interrupted or any(batch.state != "done" for batch in batches):
        return EXIT_RUN_AGAIN
    if any(status in _NOT_PAID for batch in batches for status in batch.rows):
        return EXIT_NOT_ALL_PAID
    return EXIT_OK


def _bounded(entry: BatchEntry) -> BatchEntry:
    """The entry with a cut-off: its own, else ``DEFAULT_BATCH_BOUND`` from now, so a bank
    that stays down cannot keep a batch retrying forever."""
    if entry.cutoff is not None:
        return entry
    return replace(entry, cutoff=datetime.now(UTC) + timedelta(seconds=DEFAULT_BATCH_BOUND))


def _batch_options(entry: BatchEntry) -> dict[str, object]:
    """What the workers need of the manifest's options (stored beside the batch)."""
    options: dict[str, object] = {"confirm_payees": entry.confirm_payees}
    if entry.settle_wait is not None:
        options["settle_wait"] = entry.settle_wait
    return options


def _validation(entry: BatchEntry) -> ValidationOptions:
    return ValidationOptions(source_account=entry.source_account, input_format=entry.input_format)


def _check_file(entry: BatchEntry, *, today: date | None = None) -> None:
    """Read and validate the batch's file as ``payrun run`` does, writing nothing; refuse
    an unusable file, control totals that differ, or a payroll export to be paid after
    ``today`` unless the batch says ``pay_now`` (``UsageError``, naming the batch)."""
    from payrun.run import check_control_totals

    validation = _validation(entry)
    try:
        _refuse_before_pay_date(entry, today or date.today())  # noqa: DTZ011 - as payrun run
        with open_batch(entry.file, validation) as batch:
            totals = ValidTotals.of(plain_or_verdicts(batch, validation))
        check_control_totals(
            totals.count,
            totals.total,
            expect_count=entry.expect_count,
            expect_total=entry.expect_total,
        )
    except UsageError as exc:
        msg = f"batch {entry.name}: {exc}; nothing was submitted"
        raise type(exc)(msg) from None


def _refuse_before_pay_date(entry: BatchEntry, today: date) -> None:
    """A payroll export whose pay date is after ``today`` is refused unless ``pay_now``:
    a lane pays as soon as it reaches a batch, and Faster Payments arrive in seconds."""
    export = read_export(entry.file, input_format=entry.input_format)
    pay_date = None if export is None else export.pay_date
    if pay_date is None or entry.pay_now or today >= pay_date:
        return
    msg = (
        f"{entry.file.name} is to be paid on {show_day(pay_date)}, and today is"
        f" {show_day(today)}: a lane would pay it at once; submit it on that day, or add"
        " pay_now = true to the batch in the manifest to pay it now"
    )
    raise UsageError(msg)


def _refuse_other_rows(entry: BatchEntry, recorded: str | None, options: SubmitOptions) -> None:
    """A batch name already stored with another file's rows is refused (names are unique)."""
    from payrun.run import file_sha256

    if recorded is not None and recorded != file_sha256(entry.file):
        msg = (
            f"batch {entry.name} is already in the ledger database {options.ledger_url} with"
            f" the rows of another content of its file: give {entry.file.name} a new batch"
            " name in the manifest (nothing was submitted)"
        )
        raise LedgerMismatchError(msg)


def _plan_source(entry: BatchEntry, url: DatabaseURL) -> DatabaseLedger:
    """Where ``payrun plan FILE --ledger URL`` recorded the batch file's plans."""
    from payrun.ledger import batch_name

    return DatabaseLedger(url, batch_name(entry.file))


def _refuse_unplanned(entries: list[BatchEntry], policy_path: Path | None) -> None:
    """``ApprovalError`` for the first batch without a plan when the policy requires one."""
    from payrun.approval import load_policy

    policy = load_policy(policy_path)
    unplanned = [entry.name for entry in entries if entry.plan is None]
    if policy.required and unplanned:
        msg = (
            f"batch {unplanned[0]} has no plan, and the approval policy {policy.path} requires"
            " an approved one: make it with payrun plan FILE --ledger URL, have it approved,"
            " and add plan = ID to the batch in the manifest; nothing was submitted"
        )
        raise ApprovalError(msg)


def _check_plan(entry: BatchEntry, url: DatabaseURL) -> None:
    """A batch naming a plan: the plan must be in the database (before anything is stored)."""
    if entry.plan is None:
        return
    from payrun.approval import find_plan
    from payrun.ledger import open_ledger

    try:
        with open_ledger(_plan_source(entry, url), readonly=True) as ledger:
            find_plan(ledger, entry.plan)
    except (ApprovalError, LedgerError):
        msg = (
            f"batch {entry.name}: no plan {entry.plan} for {entry.file} in the ledger"
            f" database: make it with payrun plan {entry.file} --ledger URL and have it"
            " approved; nothing was submitted"
        )
        raise ApprovalError(msg) from None


def _copy_plan(entry: BatchEntry, plan: str, url: DatabaseURL) -> str:
    """Copy the batch's plan ``plan`` and its decisions to the batch's own ledger; its
    full id."""
    from payrun.approval import copy_plan

    return copy_plan(_plan_source(entry, url), DatabaseLedger(url, entry.name), plan)


def _store_rows(entry: BatchEntry, url: DatabaseURL) -> None:
    """Store the batch's rows in the ledger database, as ``payrun run`` records a new file."""
    from payrun.run import open_run_ledger

    options = RunOptions(expect_count=entry.expect_count, expect_total=entry.expect_total)
    where = DatabaseLedger(url, entry.name)
    open_run_ledger(entry.file, where, _validation(entry), options).close()
