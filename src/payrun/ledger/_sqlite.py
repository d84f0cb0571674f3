"""The SQLite ledger: one file per batch that makes reruns exactly-once (a ``LedgerStore``).

Input: the batch's rows (``RowVerdict``) and every state change of a run. Output: durable
``LedgerRow`` records a later run resumes from. WAL mode with ``synchronous=NORMAL``
survives a process crash (kill -9); every write goes through ``atomic()``, and the
execution stage commits an *intent* (``creating``/``submitting`` with its time) before each
POST and the outcome after it. A lock file stops two runs of one ledger at once. Unique
indexes refuse one bank payment URL, or one submission URL, for two rows; a ledger of an
older payrun gets them when a run opens it, and one that already holds such a pair is
refused with the rows named. The statements the two backends share are ``_sql``'s
(``SQLLedger``, on the ``SQLITE`` dialect); this module adds the file, its connection and
transactions, the lock file and this machine's registers.
Raises ``LedgerError`` (and subclasses); ``sqlite3`` errors are translated here only.
"""

from __future__ import annotations

import sqlite3
import weakref
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager, closing, nullcontext
from pathlib import Path
from typing import Any

from payrun._models import (
    LedgerRow,
)
from payrun.errors import ConfigError, LedgerError, LedgerWriteError
from payrun.ledger._checkpoint import BACKSTOP_PAGES, KEPT_LOG_BYTES, Checkpointer
from payrun.ledger._lock import create_private, release_lock, take_lock
from payrun.ledger._records import LATER_BATCH_COLUMNS
from payrun.ledger._running import take_batch_lock
from payrun.ledger._sql import SQLITE, SQLLedger

__all__ = ["MEMORY", "SQLiteLedger", "refuse_memory"]

MEMORY = ":memory:"
"""The name SQLite gives a database held in memory (``SQLiteLedger.in_memory``)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS batch (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    file_path TEXT NOT NULL,
    file_sha256 TEXT NOT NULL,
    base_url TEXT,
    organization_url TEXT,
    expect_count INTEGER,
    expect_total TEXT,
    valid_count INTEGER NOT NULL,
    valid_total TEXT NOT NULL,
    created_at TEXT NOT NULL,
    started_at TEXT,
    ended_at TEXT
);
CREATE TABLE IF NOT EXISTS rows (
    row INTEGER PRIMARY KEY,
    row_id TEXT,
    payee_name TEXT NOT NULL,
    sort_code TEXT NOT NULL,
    account_number TEXT NOT NULL,
    amount TEXT NOT NULL,
    reference TEXT,
    source_account TEXT NOT NULL,
    status TEXT NOT NULL,
    account_url TEXT,
    payee_url TEXT,
    payment_url TEXT,
    submission_url TEXT,
    intent_at TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    error TEXT,
    updated_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS plans (
    id TEXT PRIMARY KEY,
    document TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    event TEXT NOT NULL,
    actor TEXT NOT NULL,
    plan_id TEXT NOT NULL,
    detail TEXT NOT NULL
);
"""
_UNIQUE = (("rows_payment_url", "payment_url"), ("rows_submission_url", "submission_url"))
"""Index name, column: one bank payment (or submission) is never recorded for two rows
(partial indexes: the many rows with none cost nothing)."""


class SQLiteLedger(SQLLedger):
    """An open ledger file. Use ``SQLiteLedger.open(path)`` (or ``open_ledger``); close it
    (or use ``with``) when done."""

    DIALECT = SQLITE

    def __init__(
        self,
        path: Path,
        connection: sqlite3.Connection,
        lock_fd: int | None,
        *,
        identity: tuple[int, int] | None = None,
        created: bool = False,
    ) -> None:
        super().__init__((), created=created)
        self.path = path
        self._db = connection
        self._lock_fd = lock_fd
        self._identity = identity
        """(device, inode) of the file a writer opened: ``check_in_place`` compares it."""
        self._in_memory = str(path) == MEMORY
        # A writer's log is checkpointed off the committing thread (``_checkpoint``)
        self._checkpoints = None if lock_fd is None else Checkpointer(path)
        if self._checkpoints is not None:
            weakref.finalize(self, self._checkpoints.close)

    @classmethod
    def open(cls, path: Path, *, readonly: bool = False) -> SQLiteLedger:
        """Open (or create) the ledger at ``path``; writers take the lock, readers do not."""
        refuse_memory(path)
        if readonly and not path.is_file():
            msg = f"no ledger at {path}: pass the .ledger.sqlite file a run wrote"
            raise LedgerError(msg)
        created = not readonly and not path.exists()
        lock_fd = None if readonly else take_lock(path)
        try:
            _refuse_other_files(path)
            if not readonly:
                create_private(path)
            connection = _connect(path, readonly=readonly)
            identity = None if readonly else _identity(path)
        except BaseException:
            release_lock(lock_fd)
            raise
        return cls(path, connection, lock_fd, identity=identity, created=created)

    @classmethod
    def in_memory(cls) -> SQLiteLedger:
        """A new, empty ledger in memory only, gone when closed: no file, lock or register
        (for tests of the run's logic; a run needs a ledger that outlives it)."""
        return cls(Path(MEMORY), _connect(Path(MEMORY), readonly=False), None, created=True)

    @property
    def location(self) -> str:
        """The ledger file's path, as messages name it."""
        return str(self.path)

    def hold_batch(
        self, rows: Sequence[LedgerRow], bank: str, *, note: Callable[[str], None] | None = None
    ) -> AbstractContextManager[object]:
        """Publish these rows in this user's registers of running batches
        (``take_batch_lock``) until the block ends."""
        lock = None if self._in_memory else take_batch_lock(rows, bank, self.path, note=note)
        return nullcontext() if lock is None else lock

    def check_in_place(self) -> None:
        """Raise ``LedgerWriteError`` when ``path`` no longer names the file this run opened
        (deleted, or replaced by another file): what the run writes would be lost with it."""
        if self._identity is None:
            return
        try:
            now = _identity(self.path)
        except LedgerError:
            how = "deleted"
        else:
            if now == self._identity:
                return
            how = "replaced by another file"
        msg = (
            f"the ledger {self.path} was {how} while this run was using it: payrun stopped"
            " sending (what it recorded went with the old file); run the same command again:"
            " rows the bank already holds are then held as possible repeats, not paid again"
        )
        raise LedgerWriteError(msg)

    def close(self) -> None:
        """Close the database and release the lock."""
        self._end_checkpoints()
        self._db.close()
        release_lock(self._lock_fd)
        self._lock_fd = None

    def discard(self) -> None:
        """Close and delete this ledger (file, WAL, index, lock file) while still holding
        its lock, so that no other run can open it half removed; then release the lock."""
        self._end_checkpoints()
        self._db.close()
        for suffix in () if self._in_memory else ("", "-wal", "-shm", ".lock"):
            self.path.with_name(self.path.name + suffix).unlink(missing_ok=True)
        release_lock(self._lock_fd)
        self._lock_fd = None

    def _end_checkpoints(self) -> None:
        """End the background checkpoints, before the connection's close checkpoints what
        is left (as the file's last connection)."""
        if self._checkpoints is not None:
            self._checkpoints.close()

    def _begin(self) -> None:
        self._execute("BEGIN IMMEDIATE")

    def _commit(self) -> None:
        self._execute("COMMIT")

    def _roll_back(self) -> None:
        if self._db.in_transaction:
            self._db.rollback()

    def _insert_rows(self, values: Iterable[tuple[Any, ...]]) -> None:
        self._executemany(self.DIALECT.insert_rows(), values)

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        self._cursor(sql, params)

    def _fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        cursor = self._cursor(sql, params)
        # Plain tuples, in the SELECT's order
        cursor.row_factory = None
        return cursor.fetchall()

    def _fetch_record(self, sql: str, params: Sequence[Any]) -> dict[str, Any] | None:
        cursor = self._cursor(sql, params)
        cursor.row_factory = None
        record = cursor.fetchone()
        if record is None:
            return None
        return dict(zip((d[0] for d in cursor.description), record, strict=True))

    def _cursor(self, sql: str, params: Sequence[Any]) -> sqlite3.Cursor:
        try:
            return self._db.execute(sql, tuple(params))
        except sqlite3.Error as exc:
            raise _ledger_error(self.path, exc) from exc

    def _executemany(self, sql: str, params: Iterable[Sequence[Any]]) -> None:
        try:
            self._db.executemany(sql, params)
        except sqlite3.Error as exc:
            raise _ledger_error(self.path, exc) from exc


def refuse_memory(location: str | Path) -> None:
    """Raise ``ConfigError`` for SQLite's in-memory name: such a ledger is lost when the run
    ends, so a rerun could pay again."""
    if str(location) == MEMORY:
        msg = (
            f"the ledger {MEMORY} would be kept in memory and lost when the run ends, so a"
            " rerun could pay again: name a ledger file (BATCH.ledger.sqlite by default)"
        )
        raise ConfigError(msg)


def _ledger_error(path: Path, exc: sqlite3.Error) -> LedgerError:
    if isinstance(exc, sqlite3.IntegrityError) and "UNIQUE" in str(exc):
        msg = (
            f"the ledger {path} refused to record one bank payment or submission for two"
            f" rows ({exc}), so nothing more is sent; payrun checks with the bank what each"
            " row's request did when it runs again"
        )
        return LedgerWriteError(msg)
    # Another program (a database browser, say) holds it
    if "locked" in str(exc):
        msg = (
            f"cannot use the ledger {path}: another program has it locked ({exc}); close"
            " that program, then run the same command again"
        )
        return LedgerError(msg)
    msg = (
        f"cannot use the ledger {path}: {exc};"
        " check the file is a payrun ledger and the disk has space"
    )
    return LedgerError(msg)


_SQLITE_HEADER = b"SQLite format 3\x00"
_OWN_TABLES = frozenset({"batch", "rows", "plans", "audit"})


def _refuse_other_files(path: Path) -> None:
    """Refuse, before touching it, a file at ``path`` that is not a payrun ledger: another
    kind of file (a batch file, a report), or an SQLite database holding other tables."""
    try:
        with path.open("rb") as handle:
            header = handle.read(len(_SQLITE_HEADER))
    except FileNotFoundError:
        return
    except OSError:
        # A folder or an unreadable file: opening it says why
        return
    if not header:
        # Empty: a new ledger
        return
    other = f"{path} is not a payrun ledger"
    if header != _SQLITE_HEADER:
        msg = f"{other} (it is not an SQLite database): name another --ledger file"
        raise LedgerError(msg)
    try:
        with closing(sqlite3.connect(_read_only(path), uri=True, timeout=1.0)) as db:
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.Error:
        # Opening it for real says what is wrong
        return
    # ANALYZE's too
    others = {t for t in tables - _OWN_TABLES if not t.startswith("sqlite_")}
    if others:
        shown = ", ".join(sorted(others)[:5])
        msg = f"{other}: it is a database of other tables ({shown}); name another --ledger file"
        raise LedgerError(msg)


def _identity(path: Path) -> tuple[int, int]:
    """(device, inode) of the file at ``path``; ``LedgerError`` when there is none."""
    try:
        info = path.stat()
    except OSError as exc:
        msg = f"cannot find the ledger {path}: {exc.strerror}"
        raise LedgerError(msg) from None
    return info.st_dev, info.st_ino


def _read_only(path: Path) -> str:
    """The read-only URI of ``path`` ("#" or "?" in a name are escaped, not a query)."""
    return f"{path.resolve().as_uri()}?mode=ro"


def _add_batch_columns(connection: sqlite3.Connection) -> None:
    """The batch columns added since the first ledgers (a new ledger's, and an older
    payrun's, empty)."""
    columns = {record[1] for record in connection.execute("PRAGMA table_info(batch)")}
    for column in LATER_BATCH_COLUMNS:
        if column.name not in columns:
            connection.execute(f"ALTER TABLE batch ADD COLUMN {column.name} {column.sql_type}")


def _add_unique_indexes(connection: sqlite3.Connection, path: Path) -> None:
    """Create the unique indexes (a ledger of an older payrun has none); refuse a ledger
    that already records one payment or submission for two rows, naming them."""
    for index, column in _UNIQUE:
        try:
            connection.execute(
                f"CREATE UNIQUE INDEX IF NOT EXISTS {index} ON rows ({column})"
                f" WHERE {column} IS NOT NULL"
            )
        except sqlite3.IntegrityError:
            url, rows = connection.execute(
                f"SELECT {column}, GROUP_CONCAT(row, ', ') FROM rows"
                f" WHERE {column} IS NOT NULL GROUP BY {column} HAVING COUNT(*) > 1 LIMIT 1"
            ).fetchone()
            what = column.removesuffix("_url")
            msg = (
                f"the ledger {path} records one bank {what} for several rows (rows {rows}:"
                f" {url}), as an older payrun could after a wrong answer from the bank, so"
                " payrun cannot tell which row it paid: check those rows' payments in the"
                " bank's app, pay any row they did not pay in a new file of its own, and keep"
                " this ledger as the record (payrun report still reads it)"
            )
            raise LedgerError(msg) from None


def _connect(path: Path, *, readonly: bool) -> sqlite3.Connection:
    try:
        if readonly:
            connection = sqlite3.connect(_read_only(path), uri=True, isolation_level=None)
        else:
            connection = sqlite3.connect(path, isolation_level=None)
            connection.execute("PRAGMA journal_mode=WAL")
            # Durable across a process crash
            connection.execute("PRAGMA synchronous=NORMAL")
            # Checkpoints run on a thread of their own (``_checkpoint``): this connection
            # checkpoints itself only should that thread fall behind
            connection.execute(f"PRAGMA wal_autocheckpoint={BACKSTOP_PAGES}")
            connection.execute(f"PRAGMA journal_size_limit={KEPT_LOG_BYTES}")
            connection.executescript(_SCHEMA)
            _add_batch_columns(connection)
            try:
                _add_unique_indexes(connection, path)
            except LedgerError:
                connection.close()
                raise
        connection.row_factory = sqlite3.Row
        connection.execute("PRAGMA busy_timeout=5000")
        connection.execute("SELECT COUNT(*) FROM rows").fetchone()
    except sqlite3.Error as exc:
        raise _ledger_error(path, exc) from exc
    return connection
