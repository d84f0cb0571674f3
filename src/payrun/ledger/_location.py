"""Where a ledger is, and opening it: ``open_ledger(location)`` picks the backend.

A location is a file's path (the SQLite ledger) or a ``DatabaseLedger``: a batch in a
PostgreSQL database (``PostgresLedger``, whose driver is imported only then). Everything
that knows a ledger is a file lives here or beside it in ``payrun.ledger``: the default
name beside the batch, the files SQLite keeps next to it (``-wal``, ``-shm``, the
``.lock``), whether one exists; a database ledger has none of those files.
"""

from __future__ import annotations

import re
from pathlib import Path

from payrun.config import DatabaseURL
from payrun.errors import ConfigError, LedgerError, UsageError
from payrun.ledger._database import DatabaseLedger, batch_name
from payrun.ledger._lock import release_lock, take_lock
from payrun.ledger._protocol import LedgerStore
from payrun.ledger._sqlite import SQLiteLedger, refuse_memory

__all__ = [
    "LedgerLocation",
    "batch_beside",
    "database_ledger",
    "default_ledger_path",
    "is_default_ledger",
    "ledger_exists",
    "ledger_file",
    "ledger_files",
    "ledger_location",
    "open_ledger",
    "refuse_if_running",
    "report_words",
]

LedgerLocation = Path | DatabaseLedger
"""Where one batch's ledger is: a file, or a batch in a ledger database."""

_SUFFIX = ".ledger.sqlite"
_NAMES_SHOWN = 10
# A path keeps one slash of "scheme://", and a driver may follow the scheme: matched up to
# the colon, so no form of a database URL is taken for a file (and echoed with its password)
_DATABASE_URL = re.compile(r"(postgres(?:ql)?)(?:\+\w+)?:", re.IGNORECASE)


def default_ledger_path(batch_path: Path) -> Path:
    """``BATCH.ledger.sqlite`` beside the batch file."""
    return batch_path.with_name(batch_path.name + _SUFFIX)


def ledger_location(given: Path | DatabaseURL | None, batch_path: Path) -> LedgerLocation:
    """The ledger of a run of ``batch_path``: the file given, the batch in the database
    given (named by the file's absolute path), or ``BATCH.ledger.sqlite`` beside it."""
    if given is None:
        return default_ledger_path(batch_path)
    if isinstance(given, DatabaseURL):
        return DatabaseLedger(given, batch_name(batch_path))
    return given


def database_ledger(url: DatabaseURL, named: str | None) -> DatabaseLedger:
    """The batch ``named`` in the ledger database: the batch stored under that name, else
    the one a run of the batch file ``named`` paid; with no name, the database's only batch.

    ``UsageError`` when no name is given and the database holds several batches (the first
    are listed), ``LedgerError`` when it holds none of that name.
    """
    from payrun.ledger._postgres import batch_names

    names = batch_names(url)
    if named is not None:
        found = named if named in names else batch_name(Path(named))
        return DatabaseLedger(url, found)
    if len(names) == 1:
        return DatabaseLedger(url, names[0])
    if not names:
        msg = f"the ledger database {url.masked} holds no batch yet"
        raise LedgerError(msg)
    shown = ", ".join(names[:_NAMES_SHOWN]) + (", ..." if len(names) > _NAMES_SHOWN else "")
    msg = (
        f"the ledger database {url.masked} holds {len(names)} batches ({shown}): name one,"
        " or the batch file a run paid: payrun report BATCH --ledger URL"
    )
    raise UsageError(msg)


def ledger_file(location: str | LedgerLocation) -> Path:
    """The ledger file a location names; ``ConfigError`` for a database's (it has no file)
    and for SQLite's in-memory name, which would keep nothing once the run ends.

    The message does not repeat a URL: it may hold a password.
    """
    if isinstance(location, DatabaseLedger):
        msg = f"the ledger {location} is a batch in a PostgreSQL database, not a file"
        raise ConfigError(msg)
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


def open_ledger(location: str | LedgerLocation, *, readonly: bool = False) -> LedgerStore:
    """Open (or create) the ledger at ``location``: writers hold it for one run at a time,
    readers (``readonly``, even mid-run) neither hold nor create it."""
    if isinstance(location, DatabaseLedger):
        from payrun.ledger._postgres import PostgresLedger

        return PostgresLedger.open(location, readonly=readonly)
    return SQLiteLedger.open(ledger_file(location), readonly=readonly)


def ledger_exists(location: str | LedgerLocation) -> bool:
    """True when a ledger is at ``location`` (a dry run then reads its rows)."""
    if isinstance(location, DatabaseLedger):
        from payrun.ledger._postgres import batch_recorded

        return batch_recorded(location)
    return ledger_file(location).exists()


def refuse_if_running(location: str | LedgerLocation) -> None:
    """Raise ``LedgerLockedError`` naming the run that holds the ledger now (after a moment's
    wait, as a run starting does); hold nothing."""
    if isinstance(location, DatabaseLedger):
        from payrun.ledger._postgres import refuse_if_running_at

        refuse_if_running_at(location)
        return
    release_lock(take_lock(ledger_file(location)))


def is_default_ledger(location: str | LedgerLocation, batch_path: Path) -> bool:
    """True when ``location`` is the ledger a run of ``batch_path`` uses by default."""
    if isinstance(location, DatabaseLedger):
        return False
    return ledger_file(location).resolve() == default_ledger_path(batch_path).resolve()


def ledger_files(location: str | LedgerLocation, *, lock: bool = True) -> list[tuple[str, Path]]:
    """The ledger's file and the files kept beside it (``lock``: its lock file too), each
    with how a message names it: what a report must never overwrite (none for a database)."""
    if isinstance(location, DatabaseLedger):
        return []
    path = ledger_file(location)
    files = [
        ("the ledger", path),
        *(("the ledger's file", path.with_name(path.name + s)) for s in ("-wal", "-shm")),
    ]
    if lock:
        files.append(("the ledger's lock", path.with_name(path.name + ".lock")))
    return files


def report_words(location: LedgerLocation) -> str:
    """The ``payrun report`` arguments that read this ledger (a URL's password masked)."""
    if isinstance(location, DatabaseLedger):
        return location.report_words
    return str(location)


def batch_beside(location: str | LedgerLocation) -> Path | None:
    """The batch file a default-named ledger (``BATCH.ledger.sqlite``) sits beside, if so named."""
    if isinstance(location, DatabaseLedger):
        return None
    path = ledger_file(location)
    if not path.name.endswith(_SUFFIX):
        return None
    return path.with_name(path.name.removesuffix(_SUFFIX))
