"""Where a batch's ledger is in a PostgreSQL database: the database's URL and the batch's name.

Many batches share one database, each under a name unique in it. ``payrun run BATCH``
names its batch by the batch file's absolute path (links resolved), as the SQLite ledger
records it, so ``payrun report BATCH --ledger URL`` finds it again from the same file; a
batch stored under another name (a fleet manifest's) is named as stored.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from payrun.config import DatabaseURL

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
