"""``payrun fleet submit``: check every batch of a manifest, store its rows, hand it to a lane.

Input: the manifest, the Temporal address and the ledger database. First every batch
file is read and validated as ``payrun run`` reads it (a file that cannot be used, or
control totals that differ, refuse the whole submit before anything is stored or
started); then each batch's rows go into the ledger database (row-level problems as
``invalid`` rows, the same code as ``payrun run``), and each batch is signalled to its
lane's workflow (started if none runs). Temporal sees batch names and cut-offs only.
With ``wait`` it then follows the batches in the database until each has ended.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC
from decimal import Decimal
from pathlib import Path

from payrun._models import RowStatus, RowVerdict
from payrun.config import DatabaseURL, RunOptions, ValidationOptions
from payrun.errors import ApprovalError, LedgerError, LedgerMismatchError, UsageError
from payrun.fleet._manifest import BatchEntry, load_manifest
from payrun.fleet._store import FleetBatch, FleetStore
from payrun.fleet._temporal import connect_temporal
from payrun.fleet._workflow import BatchTicket, LaneInput, LaneWorkflow, lane_workflow_id
from payrun.intake import read_batch
from payrun.ledger import DatabaseLedger
from payrun.run import StopSignal
from payrun.validation import plain_or_verdicts

__all__ = ["SubmitOptions", "fleet_exit_code", "follow", "submit"]

_POLL_SECONDS = 0.5
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
    heartbeat_seconds: float = 30.0


async def submit(manifest: Path, options: SubmitOptions) -> list[str]:
    """Check, store and hand over every batch of ``manifest``; their names, in order."""
    entries = load_manifest(manifest)
    for entry in entries:
        await asyncio.to_thread(_check_file, entry)
    store = FleetStore(options.ledger_url)
    await asyncio.to_thread(store.ensure_schema)
    recorded = await asyncio.to_thread(store.recorded_sha256, [e.name for e in entries])
    for entry in entries:
        await asyncio.to_thread(_refuse_other_rows, entry, recorded.get(entry.name), options)
    client = await connect_temporal(options.temporal, options.namespace)
    for entry in entries:
        await asyncio.to_thread(_check_plan, entry, options.ledger_url)
    for entry in entries:
        if recorded.get(entry.name) is None:
            await asyncio.to_thread(_store_rows, entry, options.ledger_url)
        chosen: dict[str, object] = {"confirm_payees": entry.confirm_payees}
        if entry.plan is not None:
            chosen["plan"] = await asyncio.to_thread(_copy_plan, entry, options.ledger_url)
        await asyncio.to_thread(store.register, entry, chosen)
    for entry in entries:
        cutoff = None if entry.cutoff is None else entry.cutoff.astimezone(UTC).isoformat()
        await client.start_workflow(
            LaneWorkflow.run,
            LaneInput(heartbeat_seconds=options.heartbeat_seconds),
            id=lane_workflow_id(entry.base_url, entry.key),
            task_queue=options.task_queue,
            start_signal="add",
            start_signal_args=[BatchTicket(entry.name, cutoff)],
        )
    return [entry.name for entry in entries]


async def follow(url: DatabaseURL, names: list[str], stop: StopSignal) -> list[FleetBatch]:
    """Poll the database until every named batch has ended (or ``stop``); the last view."""
    store = FleetStore(url)
    while True:
        batches = await asyncio.to_thread(store.batches, names)
        if all(batch.final for batch in batches) or stop.is_set():
            return batches
        await asyncio.sleep(_POLL_SECONDS)


def fleet_exit_code(batches: list[FleetBatch], *, interrupted: bool = False) -> int:
    """2 when a batch was refused, 3 when one is incomplete (or not ended), 1 when some
    rows are invalid, held or failed, else 0."""
    if any(batch.state == "refused" for batch in batches):
        return 2
    if interrupted or any(batch.state != "done" for batch in batches):
        return 3
    if any(status in _NOT_PAID for batch in batches for status in batch.rows):
        return 1
    return 0


def _validation(entry: BatchEntry) -> ValidationOptions:
    return ValidationOptions(source_account=entry.source_account)


def _check_file(entry: BatchEntry) -> None:
    """Read and validate the batch's file as ``payrun run`` does, writing nothing; refuse
    an unusable file or control totals that differ (``UsageError``, naming the batch)."""
    from payrun.run._start import check_control_totals

    validation = _validation(entry)
    count, total = 0, Decimal(0)
    try:
        with read_batch(entry.file, sheet=validation.sheet, max_rows=validation.max_rows) as batch:
            for verdict in plain_or_verdicts(batch, validation):
                if not isinstance(verdict, RowVerdict):
                    count += 1
                    total += Decimal(verdict[4])
                elif verdict.instruction is not None:
                    count += 1
                    total += verdict.instruction.amount
        check_control_totals(
            count, total, expect_count=entry.expect_count, expect_total=entry.expect_total
        )
    except UsageError as exc:
        msg = f"batch {entry.name}: {exc}; nothing was submitted"
        raise type(exc)(msg) from None


def _refuse_other_rows(entry: BatchEntry, recorded: str | None, options: SubmitOptions) -> None:
    """A batch name already stored with another file's rows is refused (names are unique)."""
    from payrun.run._start import file_sha256

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


def _copy_plan(entry: BatchEntry, url: DatabaseURL) -> str:
    """Copy the batch's plan and its decisions to the batch's own ledger; its full id."""
    from payrun.approval import copy_plan

    assert entry.plan is not None
    return copy_plan(_plan_source(entry, url), DatabaseLedger(url, entry.name), entry.plan)


def _store_rows(entry: BatchEntry, url: DatabaseURL) -> None:
    """Store the batch's rows in the ledger database, as ``payrun run`` records a new file."""
    from payrun.run._start import open_run_ledger

    options = RunOptions(expect_count=entry.expect_count, expect_total=entry.expect_total)
    where = DatabaseLedger(url, entry.name)
    open_run_ledger(entry.file, where, _validation(entry), options).close()
