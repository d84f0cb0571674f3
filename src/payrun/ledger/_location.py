"""Where a ledger is, and opening it: ``open_ledger(location)`` asks the location.

A location is a ``LedgerPlace``: a ``LedgerFile`` (the SQLite ledger; a plain path or its
text stands for one) or a ``DatabaseLedger``, a batch in a PostgreSQL database
(``PostgresLedger``, whose driver is imported only then). Each carries its own behaviour
(opening, whether it exists, who runs it, its registers of running batches, its files), so
nothing here or in a caller asks which kind it is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from payrun._models import LedgerRow
from payrun.config import DatabaseURL
from payrun.errors import LedgerError, UsageError
from payrun.ledger._database import DatabaseLedger, batch_name
from payrun.ledger._file import LedgerFile, default_ledger_path, file_path
from payrun.ledger._protocol import LedgerPlace, LedgerStore

__all__ = [
    "LedgerLocation",
    "batch_beside",
    "check_running",
    "database_ledger",
    "default_ledger_path",
    "is_default_ledger",
    "ledger_exists",
    "ledger_file",
    "ledger_files",
    "ledger_named_by",
    "ledger_location",
    "open_ledger",
    "place_of",
    "refuse_if_running",
    "report_words",
]

LedgerLocation = Path | LedgerPlace
"""Where one batch's ledger is: a file (its path), or a batch in a ledger database."""

_SQLITE_MAGIC = b"SQLite format 3\x00"
_NAMES_SHOWN = 10


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


def place_of(location: str | LedgerLocation) -> LedgerPlace:
    """The ``LedgerPlace`` of a location: a path (or its text) is a ``LedgerFile``."""
    if isinstance(location, str | Path):
        return LedgerFile(file_path(location))
    return location


def ledger_file(location: str | LedgerLocation) -> Path:
    """The ledger file a location names; ``ConfigError`` for a database's (it has no file)
    and for SQLite's in-memory name, which would keep nothing once the run ends.

    The message does not repeat a URL: it may hold a password.
    """
    return place_of(location).file()


def open_ledger(location: str | LedgerLocation, *, readonly: bool = False) -> LedgerStore:
    """Open (or create) the ledger at ``location``: writers hold it for one run at a time,
    readers (``readonly``, even mid-run) neither hold nor create it."""
    return place_of(location).open(readonly=readonly)


def ledger_exists(location: str | LedgerLocation) -> bool:
    """True when a ledger is at ``location`` (a dry run then reads its rows)."""
    return place_of(location).exists()


def refuse_if_running(location: str | LedgerLocation) -> None:
    """Raise ``LedgerLockedError`` naming the run that holds the ledger now (after a moment's
    wait, as a run starting does); hold nothing."""
    place_of(location).refuse_if_running()


def check_running(
    location: str | LedgerLocation,
    rows: Sequence[LedgerRow],
    bank: str,
    *,
    note: Callable[[str], None] | None = None,
) -> None:
    """Raise ``LedgerLockedError`` when a live run at ``bank`` pays any of these rows, in
    every register a run of this ledger would publish in: a dry run's look, holding nothing
    (a database's register too: runs of other batches there, on any machine)."""
    place_of(location).check_running(rows, bank, note=note)


def is_default_ledger(location: str | LedgerLocation, batch_path: Path) -> bool:
    """True when ``location`` is the ledger a run of ``batch_path`` uses by default."""
    return place_of(location).is_default_for(batch_path)


def ledger_files(location: str | LedgerLocation, *, lock: bool = True) -> list[tuple[str, Path]]:
    """The ledger's file and the files kept beside it (``lock``: its lock file too), each
    with how a message names it: what a report must never overwrite (none for a database)."""
    return place_of(location).files(lock=lock)


def report_words(location: LedgerLocation) -> str:
    """The ``payrun report`` arguments that read this ledger (a URL's password masked)."""
    return place_of(location).report_words


def batch_beside(location: str | LedgerLocation) -> Path | None:
    """The batch file a default-named ledger (``BATCH.ledger.sqlite``) sits beside, if so named."""
    return place_of(location).batch_beside()


def ledger_named_by(location: str | Path) -> tuple[Path, bool]:
    """The ledger a ``payrun report`` argument names, and whether it named a batch file.

    A ledger (an SQLite file) or a path to no file is taken as it is; any other file is a
    batch file, whose ledger is the one a run of it writes by default (beside it).
    """
    path = file_path(location)
    try:
        with path.open("rb") as handle:
            head = handle.read(len(_SQLITE_MAGIC))
    except OSError:
        # Missing, a folder, unreadable: opening it as a ledger says which
        return path, False
    if head == _SQLITE_MAGIC or not head:
        return path, False
    return default_ledger_path(path), True
