"""What a run needs of a ledger: ``LedgerPlace``, where one is, and ``LedgerStore``, an open one.

The run's phases name only these protocols and the domain's values (``LedgerRow``,
``BatchInfo``, ``RowUpdate``, ``BatchUpdate``), never a backend's class, so a second
backend fits behind ``open_ledger`` without touching them. The backends: the SQLite file
(``LedgerFile``, opened as an ``SQLiteLedger``) and a batch in a PostgreSQL database
(``DatabaseLedger``, opened as a ``PostgresLedger``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Protocol, Self, Unpack

from payrun._models import (
    AuditEntry,
    BatchInfo,
    BatchUpdate,
    LedgerRow,
    PlainRow,
    RowStatus,
    RowUpdate,
    RowVerdict,
)

__all__ = ["LedgerPlace", "LedgerStore"]


class LedgerPlace(Protocol):
    """Where one batch's ledger is (a file, or a batch in a database), and what depends on
    it: opening it, whether it is there, who runs it, the files kept beside it.

    ``str`` names it as messages do (a database's password masked).
    """

    @property
    def report_words(self) -> str:
        """The ``payrun report`` arguments that read this ledger (a password masked)."""
        ...

    def file(self) -> Path:
        """The ledger's file; ``ConfigError`` for a ledger that is no file."""
        ...

    def open(self, *, readonly: bool) -> LedgerStore:
        """The ledger opened (a writer creates it and holds it for one run at a time; a
        reader, even mid-run, neither holds nor creates it)."""
        ...

    def exists(self) -> bool:
        """True when the ledger is there with a batch's rows (a dry run then reads them)."""
        ...

    def refuse_if_running(self) -> None:
        """Raise ``LedgerLockedError`` naming the run that holds the ledger now (after a
        moment's wait, as a run starting does); hold nothing."""
        ...

    def check_running(
        self, rows: Sequence[LedgerRow], bank: str, *, note: Callable[[str], None] | None
    ) -> None:
        """Raise ``LedgerLockedError`` when a live run at ``bank`` pays any of these rows, in
        every register of running batches a run of this ledger publishes in (a dry run)."""
        ...

    def is_default_for(self, batch_path: Path) -> bool:
        """True when this is the ledger a run of ``batch_path`` uses by default."""
        ...

    def files(self, *, lock: bool) -> list[tuple[str, Path]]:
        """The ledger's own files (``lock``: its lock file too), each with how a message
        names it: what a report must never overwrite."""
        ...

    def batch_beside(self) -> Path | None:
        """The batch file this ledger sits beside by its default name, if so named."""
        ...


class LedgerStore(Protocol):
    """An open ledger of one batch: its record, its rows, and the run's changes to them.

    Every write is durable when the call returns (or when the outermost ``atomic()``
    block ends), and fails with ``LedgerError`` (``LedgerWriteError`` mid-run).
    """

    @property
    def location(self) -> str:
        """Where the ledger is, as messages name it: a file's path, or a database's URL (its
        password masked) and the batch's name."""
        ...

    @property
    def created(self) -> bool:
        """True when opening it made a new ledger (a file, or a batch's record in a database):
        a refused first run removes it."""
        ...

    def atomic(self) -> AbstractContextManager[None]:
        """One transaction around the block, rolled back on any exception (nestable)."""
        ...

    def batch(self) -> BatchInfo | None:
        """The batch this ledger was made for, or None for a new ledger."""
        ...

    def start(self, info: BatchInfo, verdicts: Iterable[RowVerdict | PlainRow]) -> None:
        """Record a new batch and every row of it (valid rows pending, invalid rows invalid)."""
        ...

    def set_valid_totals(self, count: int, total: Decimal) -> None:
        """Record the count and total of the batch's valid rows."""
        ...

    def set_batch(self, **values: Unpack[BatchUpdate]) -> None:
        """Commit new values for fields of the batch's record."""
        ...

    def replace_rows(self, rows: Iterable[LedgerRow]) -> None:
        """Rewrite rows never sent to the bank from the file again (new options on a rerun)."""
        ...

    def rows(self, statuses: Iterable[RowStatus] | None = None) -> list[LedgerRow]:
        """Every row (or those in ``statuses``), in row order."""
        ...

    def update_each(self, changes: Iterable[tuple[int, RowUpdate]]) -> None:
        """Commit several rows' own changes in one transaction, in order (the last wins)."""
        ...

    def update_many(self, rows: Iterable[int], **values: Unpack[RowUpdate]) -> None:
        """Commit the same new values for several rows in one transaction."""
        ...

    def hold_batch(
        self, rows: Sequence[LedgerRow], bank: str, *, note: Callable[[str], None] | None = None
    ) -> AbstractContextManager[object]:
        """Hold these rows at this bank against every other run until the block ends.

        Raises ``LedgerLockedError`` when another live run pays the same batch or any of
        the same payments there; ``note`` receives warnings (a shared register ignored).
        """
        ...

    def add_plan(self, plan_id: str, document: str, *, at: datetime) -> None:
        """Record a plan (its canonical text) once; recording it again changes nothing."""
        ...

    def plans(self) -> list[tuple[str, str]]:
        """Every recorded plan: (id, canonical text), oldest first."""
        ...

    def append_audit(self, entry: AuditEntry) -> None:
        """Append one entry to the audit trail (plans made, approved, rejected, run)."""
        ...

    def audit_trail(self) -> list[AuditEntry]:
        """The audit trail, in the order it was written."""
        ...

    def check_in_place(self) -> None:
        """Raise ``LedgerWriteError`` when what this run writes would no longer be kept."""
        ...

    def discard(self) -> None:
        """Close and remove this ledger, still holding it so no other run opens it half gone."""
        ...

    def close(self) -> None:
        """Close the ledger and release what this run holds of it."""
        ...

    def __enter__(self) -> Self:
        """The open ledger, closed when the block ends."""
        ...

    def __exit__(self, *exc_info: object) -> None:
        """``close``."""
        ...
