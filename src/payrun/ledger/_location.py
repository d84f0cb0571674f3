"""Where a ledger is, and opening it: ``open_ledger(location)`` picks the backend.

A location is a file's path today (the SQLite ledger); a database URL is refused with a
``ConfigError`` until a backend for it exists. Everything that knows a ledger is a file
lives here or beside it in ``payrun.ledger``: the default name beside the batch, the
files SQLite keeps next to it (``-wal``, ``-shm``, the ``.lock``), whether one exists.
"""

from __future__ import annotations

import re
from pathlib import Path

from payrun.errors import ConfigError
from payrun.ledger._lock import release_lock, take_lock
from payrun.ledger._protocol import LedgerStore
from payrun.ledger._sqlite import SQLiteLedger, refuse_memory

__all__ = [
    "batch_beside",
    "default_ledger_path",
    "is_default_ledger",
    "ledger_exists",
    "ledger_file",
    "ledger_files",
    "ledger_named_by",
    "open_ledger",
    "refuse_if_running",
]

_SUFFIX = ".ledger.sqlite"
_SQLITE_MAGIC = b"SQLite format 3\x00"
# A path keeps one slash of "scheme://", so the scheme is matched up to its colon
_DATABASE_URL = re.compile(r"(postgres(?:ql)?)(?:\+\w+)?:", re.IGNORECASE)


def default_ledger_path(batch_path: Path) -> Path:
    """``BATCH.ledger.sqlite`` beside the batch file."""
    return batch_path.with_name(batch_path.name + _SUFFIX)


def ledger_file(location: str | Path) -> Path:
    """The ledger file a location names; ``ConfigError`` for a database URL (not yet usable)
    and for SQLite's in-memory name, which would keep nothing once the run ends.

    The message does not repeat the URL: it may hold a password.
    """
    refuse_memory(location)
    found = _DATABASE_URL.match(str(location))
    if found:
        msg = (
            f"the ledger {found.group(1).lower()}://... is a PostgreSQL database, which this"
            " payrun cannot use yet: name a ledger file instead (BATCH.ledger.sqlite by default)"
        )
        raise ConfigError(msg)
    return Path(location)


def open_ledger(location: str | Path, *, readonly: bool = False) -> LedgerStore:
    """Open (or create) the ledger at ``location``: writers hold it for one run at a time,
    readers (``readonly``, even mid-run) neither hold nor create it."""
    return SQLiteLedger.open(ledger_file(location), readonly=readonly)


def ledger_exists(location: str | Path) -> bool:
    """True when a ledger is at ``location`` (a dry run then reads its rows)."""
    return ledger_file(location).exists()


def refuse_if_running(location: str | Path) -> None:
    """Raise ``LedgerLockedError`` naming the run that holds the ledger now (after a moment's
    wait, as a run starting does); hold nothing."""
    release_lock(take_lock(ledger_file(location)))


def is_default_ledger(location: str, batch_path: Path) -> bool:
    """True when ``location`` is the ledger a run of ``batch_path`` uses by default."""
    return ledger_file(location).resolve() == default_ledger_path(batch_path).resolve()


def ledger_files(location: str | Path, *, lock: bool = True) -> list[tuple[str, Path]]:
    """The ledger's file and the files kept beside it (``lock``: its lock file too), each
    with how a message names it: what a report must never overwrite."""
    path = ledger_file(location)
    files = [
        ("the ledger", path),
        *(("the ledger's file", path.with_name(path.name + s)) for s in ("-wal", "-shm")),
    ]
    if lock:
        files.append(("the ledger's lock", path.with_name(path.name + ".lock")))
    return files


def batch_beside(location: str | Path) -> Path | None:
    """The batch file a default-named ledger (``BATCH.ledger.sqlite``) sits beside, if so named."""
    path = ledger_file(location)
    if not path.name.endswith(_SUFFIX):
        return None
    return path.with_name(path.name.removesuffix(_SUFFIX))


def ledger_named_by(location: str | Path) -> tuple[Path, bool]:
    """The ledger a ``payrun report`` argument names, and whether it named a batch file.

    A ledger (an SQLite file) or a path to no file is taken as it is; any other file is a
    batch file, whose ledger is the one a run of it writes by default (beside it).
    """
    path = ledger_file(location)
    try:
        with path.open("rb") as handle:
            head = handle.read(len(_SQLITE_MAGIC))
    except OSError:
        # Missing, a folder, unreadable: opening it as a ledger says which
        return path, False
    if head == _SQLITE_MAGIC or not head:
        return path, False
    return default_ledger_path(path), True
