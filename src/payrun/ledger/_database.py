"""Where a batch's ledger is in a PostgreSQL database: ``DatabaseLedger``, its ``LedgerPlace``.

Many batches share one database, each under a name unique in it. ``payrun run BATCH``
names its batch by the batch file's absolute path (links resolved), as the SQLite ledger
records it, so ``payrun report BATCH --ledger URL`` finds it again from the same file; a
batch stored under another name (a fleet manifest's) is named as stored. Such a ledger has
no file; its lock is the server's (an advisory lock), and its runs publish in the
database's register of running batches as well as this machine's. psycopg (``_postgres``)
is imported only when one is used.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from payrun._models import LedgerRow
from payrun.config import DatabaseURL
from payrun.errors import ConfigError
from payrun.ledger._protocol import LedgerStore
from payrun.ledger._running import check_batch_lock

__all__ = ["DatabaseLedger", "batch_name"]


def batch_name(batch_path: Path) -> str:
    """The name a run of ``batch_path`` gives its batch in a ledger database: its absolute path."""
    return str(batch_path.resolve())


@dataclass(frozen=True, slots=True)
class DatabaseLedger:
    """One batch's ledger in a PostgreSQL database; ``str`` masks the URL's password."""

    url: DatabaseURL
    batch: str

    def __str__(self) -> str:
        return f"{self.url.masked} (batch {self.batch})"

    @property
    def report_words(self) -> str:
        """The ``payrun report`` arguments that read this ledger (the password masked)."""
        return f"{shlex.quote(self.batch)} --ledger {shlex.quote(self.url.masked)}"

    def file(self) -> Path:
        """None: ``ConfigError`` (the message does not repeat the URL's password)."""
        msg = f"the ledger {self} is a batch in a PostgreSQL database, not a file"
        raise ConfigError(msg)

    def open(self, *, readonly: bool) -> LedgerStore:
        """The batch opened as a ``PostgresLedger``."""
        from payrun.ledger._postgres import PostgresLedger

        return PostgresLedger.open(self, readonly=readonly)

    def exists(self) -> bool:
        """True when the database holds this batch with its rows (read-only)."""
        from payrun.ledger._postgres import batch_recorded

        return batch_recorded(self)

    def refuse_if_running(self) -> None:
        """Look for the batch's advisory lock (``LedgerLockedError`` names its holder)."""
        from payrun.ledger._postgres import refuse_if_running_at

        refuse_if_running_at(self)

    def check_running(
        self, rows: Sequence[LedgerRow], bank: str, *, note: Callable[[str], None] | None
    ) -> None:
        """The database's register (runs on every machine), then this machine's registers,
        as a run of this batch publishes in both (``PostgresLedger.hold_batch``)."""
        from payrun.ledger._postgres import check_register

        check_register(self, rows, bank)
        check_batch_lock(rows, bank, note=note)

    def is_default_for(self, batch_path: Path) -> bool:  # noqa: ARG002 - the protocol's
        """False: a run's default ledger is a file."""
        return False

    def files(self, *, lock: bool) -> list[tuple[str, Path]]:  # noqa: ARG002 - the protocol's
        """None: the batch is in the database."""
        return []

    def batch_beside(self) -> Path | None:
        """None: the batch is named by its file's path, not beside it."""
        return None
