"""Where a ledger is when it is a file: ``LedgerFile``, the SQLite ledger's ``LedgerPlace``.

Everything that knows a ledger is a file lives here: the default name beside the batch
(``BATCH.ledger.sqlite``), the files SQLite keeps next to it (``-wal``, ``-shm``, the
``.lock``), whether one exists, the file's lock, and this machine's registers of running
batches (a file's runs publish there only).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from payrun._models import LedgerRow
from payrun.errors import ConfigError
from payrun.ledger._lock import release_lock, take_lock
from payrun.ledger._protocol import LedgerStore
from payrun.ledger._running import check_batch_lock
from payrun.ledger._sqlite import SQLiteLedger, refuse_memory

__all__ = ["SUFFIX", "LedgerFile", "default_ledger_path", "file_path"]

SUFFIX = ".ledger.sqlite"
"""The end of a ledger's default name, after the batch file's."""
# A path keeps one slash of "scheme://", and a driver may follow the scheme: matched up to
# the colon, so no form of a database URL is taken for a file (and echoed with its password)
_DATABASE_URL = re.compile(r"(postgres(?:ql)?)(?:\+\w+)?:", re.IGNORECASE)


def default_ledger_path(batch_path: Path) -> Path:
    """``BATCH.ledger.sqlite`` beside the batch file."""
    return batch_path.with_name(batch_path.name + SUFFIX)


def file_path(location: str | Path) -> Path:
    """The ledger file ``location`` names; ``ConfigError`` for a database's URL and for
    SQLite's in-memory name, which would keep nothing once the run ends.

    The message does not repeat a URL: it may hold a password.
    """
    found = _DATABASE_URL.match(str(location))
    if found:
        msg = (
            f"the ledger {found.group(1).lower()}://... is a PostgreSQL database, not a file:"
            " pass its URL, written postgresql://USER@HOST/DATABASE, as --ledger (to payrun"
            " report too)"
        )
        raise ConfigError(msg)
    refuse_memory(location)
    return Path(location)


@dataclass(frozen=True, slots=True)
class LedgerFile:
    """A ledger file (SQLite): its lock file stops two runs of it at once, and this user's
    registers on this machine two runs paying the same rows."""

    path: Path

    def __str__(self) -> str:
        return str(self.path)

    @property
    def report_words(self) -> str:
        """The file's path, quoted for a shell."""
        return shlex.quote(str(self.path))

    def file(self) -> Path:
        """The ledger's file."""
        return self.path

    def open(self, *, readonly: bool) -> LedgerStore:
        """The file opened as an ``SQLiteLedger``."""
        return SQLiteLedger.open(self.path, readonly=readonly)

    def exists(self) -> bool:
        """True when the file is there."""
        return self.path.exists()

    def refuse_if_running(self) -> None:
        """Take the file's lock and release it at once (``LedgerLockedError`` names its holder)."""
        release_lock(take_lock(self.path))

    def check_running(
        self, rows: Sequence[LedgerRow], bank: str, *, note: Callable[[str], None] | None
    ) -> None:
        """This user's registers on this machine (and the shared one), as a run uses them."""
        check_batch_lock(rows, bank, note=note)

    def is_default_for(self, batch_path: Path) -> bool:
        """True when the file is ``BATCH.ledger.sqlite`` beside ``batch_path``."""
        return self.path.resolve() == default_ledger_path(batch_path).resolve()

    def files(self, *, lock: bool) -> list[tuple[str, Path]]:
        """The file, SQLite's ``-wal`` and ``-shm`` beside it, and (``lock``) its lock file."""
        path = self.path
        files = [
            ("the ledger", path),
            *(("the ledger's file", path.with_name(path.name + s)) for s in ("-wal", "-shm")),
        ]
        if lock:
            files.append(("the ledger's lock", path.with_name(path.name + ".lock")))
        return files

    def batch_beside(self) -> Path | None:
        """The batch file ``BATCH`` of a ledger named ``BATCH.ledger.sqlite``."""
        if not self.path.name.endswith(SUFFIX):
            return None
        return self.path.with_name(self.path.name.removesuffix(SUFFIX))
