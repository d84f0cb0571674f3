"""The result ledger: the durable record of a batch that makes reruns exactly-once.

Input: the batch's rows (``RowVerdict``) and every state change of a run. Output: durable
``LedgerRow`` records a later run resumes from. The run's phases see a ``LedgerStore``
(the protocol every backend implements) from ``open_ledger(location)``, where the location
is a ``LedgerPlace`` that carries its own behaviour. The backends: an SQLite file
(``SQLiteLedger`` at a ``LedgerFile`` or a plain path), whose WAL mode with
``synchronous=NORMAL`` survives a process crash (kill -9), and a batch in a PostgreSQL
database that many batches share (``PostgresLedger`` at a ``DatabaseLedger``; psycopg is
imported only for it); both write through one SQL core (``_sql``). Every write
is durable when it returns (through ``atomic()``; PostgreSQL's row updates are one
autocommit statement each), and the execution stage commits an *intent*
(``creating``/``submitting`` with its time) before each POST and the outcome after it. A
lock file (in PostgreSQL a session-level advisory lock) stops two runs of one ledger at
once, and each user's register of running batches (``hold_batch``, ``take_batch_lock``;
with an administrator's shared register, across users) two runs paying the same rows at
one bank; a dry run looks in the same registers (``check_running``). Raises
``LedgerError`` (and subclasses); ``sqlite3`` errors are translated here only, and
``psycopg`` errors in ``_postgres`` only (``database_errors`` lends that boundary to
the fleet's own table).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from payrun._models import BatchInfo as BatchInfo
from payrun._models import LedgerRow as LedgerRow
from payrun._models import utc_now as utc_now
from payrun.ledger._database import DatabaseLedger as DatabaseLedger
from payrun.ledger._database import batch_name as batch_name
from payrun.ledger._discard import discard_if_refused as discard_if_refused
from payrun.ledger._file import LedgerFile as LedgerFile
from payrun.ledger._location import LedgerLocation as LedgerLocation
from payrun.ledger._location import batch_beside as batch_beside
from payrun.ledger._location import check_running as check_running
from payrun.ledger._location import database_ledger as database_ledger
from payrun.ledger._location import default_ledger_path as default_ledger_path
from payrun.ledger._location import is_default_ledger as is_default_ledger
from payrun.ledger._location import ledger_exists as ledger_exists
from payrun.ledger._location import ledger_file as ledger_file
from payrun.ledger._location import ledger_files as ledger_files
from payrun.ledger._location import ledger_location as ledger_location
from payrun.ledger._location import ledger_named_by as ledger_named_by
from payrun.ledger._location import open_ledger as open_ledger
from payrun.ledger._location import refuse_if_running as refuse_if_running
from payrun.ledger._location import report_words as report_words
from payrun.ledger._lock import bank_identity as bank_identity
from payrun.ledger._lock import release_lock as release_lock
from payrun.ledger._lock import take_lock as take_lock
from payrun.ledger._protocol import LedgerPlace as LedgerPlace
from payrun.ledger._protocol import LedgerStore as LedgerStore
from payrun.ledger._running import BatchLock as BatchLock
from payrun.ledger._running import check_batch_lock as check_batch_lock
from payrun.ledger._running import take_batch_lock as take_batch_lock
from payrun.ledger._sqlite import SQLiteLedger as SQLiteLedger

Ledger = SQLiteLedger
"""The SQLite ledger under its library name (``payrun.Ledger``)."""

if TYPE_CHECKING:
    import psycopg

    from payrun.config import DatabaseURL


def connect_database(url: DatabaseURL, *, readonly: bool) -> psycopg.Connection[Any]:
    """A new autocommit connection to a ledger database, with payrun's keepalives (for the
    fleet's own table beside the batches); its errors as ``LedgerError``/``ConfigError``.
    psycopg and the PostgreSQL backend are imported only on the first call."""
    from payrun.ledger._postgres import connect

    return connect(url, readonly=readonly)


def database_errors(url: DatabaseURL) -> AbstractContextManager[None]:
    """A block whose psycopg errors end as one-line ``LedgerError`` messages naming the
    database with its password masked: the ledger's one boundary for psycopg, for code
    beside the batches (the fleet's own table)."""
    from payrun.ledger._postgres import _translated

    return _translated(url)


__all__ = [
    "BatchInfo",
    "BatchLock",
    "DatabaseLedger",
    "Ledger",
    "LedgerFile",
    "LedgerLocation",
    "LedgerPlace",
    "LedgerRow",
    "LedgerStore",
    "SQLiteLedger",
    "bank_identity",
    "batch_beside",
    "batch_name",
    "check_batch_lock",
    "check_running",
    "connect_database",
    "database_errors",
    "database_ledger",
    "default_ledger_path",
    "discard_if_refused",
    "is_default_ledger",
    "ledger_exists",
    "ledger_file",
    "ledger_files",
    "ledger_named_by",
    "ledger_location",
    "open_ledger",
    "refuse_if_running",
    "release_lock",
    "report_words",
    "take_lock",
    "take_batch_lock",
    "utc_now",
]
