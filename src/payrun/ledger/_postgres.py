"""The PostgreSQL ledger: many batches in one database, each opened as a ``LedgerStore``.

Input: a ``DatabaseLedger`` (the database's URL and the batch's name) and, as for the SQLite
file, the batch's rows and every state change of a run. Output: durable rows a later run
resumes from, on whichever machine it runs. Every write is durable when its call returns
(PostgreSQL's commit is durable when it returns), so the intent before each request is
committed before the request is sent. The batch's record, its rows' insert and the register
go through ``atomic()`` (one transaction); the rows' updates (``update_each``,
``update_many``) do not: outside a transaction each is one autocommit statement, a group of
rows' changes included, committed when it returns (inside an open ``atomic()`` it joins
that transaction, at the cost of its own round trip; no run does that).

Tables keyed by batch hold every batch: ``payrun_batches`` (one record per batch, the SQLite
file's ``batch`` table plus ``id``, ``name`` and who holds it), ``payrun_rows`` (the file's
rows, so a worker needs no shared file system) and ``payrun_running`` (the register of the
batches being paid, on any machine, with their payments' keyed hashes: ``hold_batch``).

A writer holds a session-level advisory lock on its batch
(``pg_try_advisory_lock(LOCK_SPACE, id)``) for the run's life: the server drops it when the
run's connection ends, and server-side TCP keepalives end the connection of a machine that
died within about 25 s. A connection that fails is never
reopened: the run stops (``LedgerWriteError``) rather than write without the lock.

The statements the two backends share are ``_sql``'s (``SQLLedger``, on the ``POSTGRES``
dialect); this module adds the connection, its transactions (sent with their COMMIT in one
round trip), the rows' updates (one prepared statement with its values bound: a group
commit is one statement and one round trip), the COPY of a new batch's rows, the batch's
lock and the register. psycopg is
imported only when such a ledger is opened; its errors are translated here only, and the
URL's password never appears in a message.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import TYPE_CHECKING, Any, NoReturn, Unpack

from payrun._models import (
    LedgerRow,
    RowUpdate,
    utc_now,
)
from payrun.config import FLEET_EXTRA, DatabaseURL
from payrun.errors import ConfigError, LedgerError, LedgerLockedError, LedgerWriteError
from payrun.ledger._database import DatabaseLedger
from payrun.ledger._records import LATER_BATCH_COLUMNS, check_fields, iso, to_sql
from payrun.ledger._running import (
    RunningBatch,
    RunningEntry,
    refuse_overlap_with,
    running_batch,
    take_batch_lock,
)
from payrun.ledger._sql import POSTGRES, SQLLedger

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "KEEPALIVES",
    "LOCK_SPACE",
    "PostgresLedger",
    "batch_names",
    "batch_recorded",
    "check_register",
    "connect",
    "refuse_if_running_at",
]

LOCK_SPACE = 0x70617972
"""The first key of payrun's advisory locks ("payr"); the second is the batch's id (0: the
schema's creation)."""
KEEPALIVES = {
    "tcp_keepalives_idle": 10,
    "tcp_keepalives_interval": 5,
    "tcp_keepalives_count": 3,
    "tcp_user_timeout": 25_000,
}
"""Server-side settings of every ledger connection: the server probes a silent client after
10 s, every 5 s, and drops it after 3 unanswered probes (or 25 s of unacknowledged data), so
the lock of a machine that died frees within about 25 s."""
_CLIENT_KEEPALIVES = {
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "5",
    "keepalives_count": "3",
    "connect_timeout": "10",
    "application_name": "payrun",
}
"""libpq's own settings (the URL's win): a run notices a server that went away as well."""
_SCHEMA_VERSION = "1"
_REGISTER = -1
"""The second key of the advisory lock that makes looking and publishing in the register one
step (batch ids start at 1, the schema's lock is 0)."""
_HOLDS_ITS_LOCK = (
    "EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.classid = %s"
    " AND l.objid = r.batch_id AND l.objsubid = 2 AND l.pid = r.backend_pid AND l.granted)"
)
"""True for an entry ``r`` of the register whose run's session still holds its batch's lock."""
_REGISTER_SELECT = (
    "SELECT b.name, r.holder_pid, r.holder_host, r.bank, r.fingerprint, r.keys"
    " FROM payrun_running r JOIN payrun_batches b ON b.id = r.batch_id WHERE r.bank = %s"
)
"""The register's entries at one bank, as ``_entry`` reads them."""
_LOCK_PATIENCE = 1.0
"""Seconds a run waits for a batch's lock before it says who holds it (as the file's lock)."""
_LOCK_RETRY_SECONDS = 0.05
_SCHEMA = """
CREATE TABLE IF NOT EXISTS payrun_meta (
    key text PRIMARY KEY,
    value text NOT NULL
);
CREATE TABLE IF NOT EXISTS payrun_batches (
    id integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name text NOT NULL UNIQUE,
    file_path text,
    file_sha256 text,
    base_url text,
    organization_url text,
    expect_count integer,
    expect_total text,
    valid_count integer,
    valid_total text,
    created_at text NOT NULL,
    started_at text,
    ended_at text,
    holder_pid integer,
    holder_host text
);
CREATE TABLE IF NOT EXISTS payrun_rows (
    batch_id integer NOT NULL REFERENCES payrun_batches (id) ON DELETE CASCADE,
    row integer NOT NULL,
    row_id text,
    payee_name text NOT NULL,
    sort_code text NOT NULL,
    account_number text NOT NULL,
    amount text NOT NULL,
    reference text,
    source_account text NOT NULL,
    status text NOT NULL,
    account_url text,
    payee_url text,
    payment_url text,
    submission_url text,
    intent_at text,
    attempts integer NOT NULL DEFAULT 0,
    error text,
    updated_at text NOT NULL,
    PRIMARY KEY (batch_id, row)
);
CREATE TABLE IF NOT EXISTS payrun_running (
    batch_id integer PRIMARY KEY REFERENCES payrun_batches (id) ON DELETE CASCADE,
    backend_pid integer NOT NULL,
    holder_pid integer,
    holder_host text,
    bank text NOT NULL,
    fingerprint text NOT NULL,
    keys bytea NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS payrun_rows_payment_url
    ON payrun_rows (batch_id, payment_url) WHERE payment_url IS NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS payrun_rows_submission_url
    ON payrun_rows (batch_id, submission_url) WHERE submission_url IS NOT NULL;
INSERT INTO payrun_meta (key, value) VALUES ('schema', '1') ON CONFLICT (key) DO NOTHING;
"""
_APPROVAL_SCHEMA = """
CREATE TABLE IF NOT EXISTS payrun_plans (
    batch_id integer NOT NULL REFERENCES payrun_batches (id) ON DELETE CASCADE,
    id text NOT NULL,
    document text NOT NULL,
    created_at text NOT NULL,
    PRIMARY KEY (batch_id, id)
);
CREATE TABLE IF NOT EXISTS payrun_audit (
    seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    batch_id integer NOT NULL REFERENCES payrun_batches (id) ON DELETE CASCADE,
    at text NOT NULL,
    event text NOT NULL,
    actor text NOT NULL,
    plan_id text NOT NULL,
    detail text NOT NULL
);
"""
"""Plans and the audit trail (added to a database made before them when a writer opens it)."""


class PostgresLedger(SQLLedger):
    """An open batch in a ledger database. Use ``PostgresLedger.open(where)`` (or
    ``open_ledger``); close it (or use ``with``) when done. Row updates are one autocommit
    statement each, not an ``atomic()`` block: durable when they return."""

    DIALECT = POSTGRES

    def __init__(
        self,
        where: DatabaseLedger,
        connection: psycopg.Connection[Any],
        batch_id: int,
        *,
        created: bool = False,
        writer: bool = True,
    ) -> None:
        super().__init__((batch_id,), created=created)
        self.where = where
        self._db = connection
        self._id = batch_id
        self._writer = writer
        self._pending: list[str] | None = None
        """The open transaction's statements not sent yet (None: no transaction)."""
        self._literals_cursor: psycopg.ClientCursor[Any] | None = None
        self._masks: dict[tuple[str, ...], int] = {}
        """Each set of row fields an update changes, as ``_UPDATE_ROWS``'s bits."""

    @classmethod
    def open(cls, where: DatabaseLedger, *, readonly: bool = False) -> PostgresLedger:
        """Open the batch ``where`` names; a writer creates it (and the tables) when missing
        and holds its lock, a reader (even mid-run) neither holds nor creates anything."""
        connection = connect(where.url, readonly=readonly)
        try:
            if readonly:
                batch_id = _find(connection, where)
                if batch_id is None:
                    _no_batch(connection, where)
                return cls(where, connection, batch_id, writer=False)
            _create_schema(connection, where)
            batch_id, created = _lock_batch(connection, where, patience=_LOCK_PATIENCE)
        except BaseException:
            connection.close()
            raise
        return cls(where, connection, batch_id, created=created)

    @property
    def location(self) -> str:
        """The database (its password masked) and the batch's name, as messages name them."""
        return str(self.where)

    def hold_batch(
        self, rows: Sequence[LedgerRow], bank: str, *, note: Callable[[str], None] | None = None
    ) -> AbstractContextManager[object]:
        """Publish these rows in the database's register of running batches
        (``payrun_running``, for runs on every machine) and in this user's registers on
        the machine (``take_batch_lock``, for ledger files too) until the block ends.

        Raises ``LedgerLockedError`` when a live run at the same bank pays the same batch
        content or any of the same payments through another batch of the database.
        """
        stack = ExitStack()
        running = running_batch(rows, bank)
        self._publish(running)
        stack.callback(self._unpublish)
        try:
            lock = take_batch_lock(rows, bank, self.location, note=note)
        except BaseException:
            stack.close()
            raise
        if lock is not None:
            stack.enter_context(lock)
        return stack

    def _publish(self, running: RunningBatch) -> None:
        """Check the live runs of the database's register and add this one, as one step."""
        with self.atomic():
            self._execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_SPACE, _REGISTER))
            # A run whose session ended (its batch's lock is gone) is no longer paying
            self._execute(
                f"DELETE FROM payrun_running r WHERE NOT {_HOLDS_ITS_LOCK}", (LOCK_SPACE,)
            )
            found = self._fetchall(
                f"{_REGISTER_SELECT} AND r.batch_id <> %s", (running.bank, self._id)
            )
            entries = (_entry(self.where.url, *record) for record in found)
            refuse_overlap_with(entries, running, dry_run=False)
            self._execute(
                "INSERT INTO payrun_running (batch_id, backend_pid, holder_pid, holder_host,"
                " bank, fingerprint, keys) VALUES (%s, pg_backend_pid(), %s, %s, %s, %s, %s)"
                " ON CONFLICT (batch_id) DO UPDATE SET backend_pid = EXCLUDED.backend_pid,"
                " holder_pid = EXCLUDED.holder_pid, holder_host = EXCLUDED.holder_host,"
                " bank = EXCLUDED.bank, fingerprint = EXCLUDED.fingerprint, keys = EXCLUDED.keys",
                (
                    self._id,
                    os.getpid(),
                    socket.gethostname(),
                    running.bank,
                    running.fingerprint,
                    running.keys,
                ),
            )

    def _unpublish(self) -> None:
        """Leave the register (a connection already gone left it with its lock)."""
        with contextlib.suppress(LedgerError):
            self._execute("DELETE FROM payrun_running WHERE batch_id = %s", (self._id,))

    def check_in_place(self) -> None:
        """Raise ``LedgerWriteError`` when the batch's record is gone from the database, or
        this connection no longer holds its lock: what the run writes would not be kept."""
        if not self._writer:
            return
        found = self._fetchone(
            "SELECT EXISTS (SELECT 1 FROM payrun_batches WHERE id = %s),"
            " EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid = %s"
            " AND objid = %s AND objsubid = 2 AND pid = pg_backend_pid() AND granted)",
            (self._id, LOCK_SPACE, self._id),
        )
        if found == (True, True):
            return
        how = "unlocked by someone else" if found and found[0] else "removed from the database"
        msg = (
            f"the ledger {self.location} was {how} while this run was using it: payrun"
            " stopped sending; run the same command again: rows the bank already holds are"
            " then held as possible repeats, not paid again"
        )
        raise LedgerWriteError(msg)

    def close(self) -> None:
        """Close the connection: the server drops the batch's lock with it."""
        self._db.close()

    def discard(self) -> None:
        """Remove this batch (its record and rows) while still holding its lock, then close."""
        try:
            with self.atomic():
                self._execute("DELETE FROM payrun_batches WHERE id = %s", (self._id,))
        finally:
            self.close()

    def _begin(self) -> None:
        """Writes wait in ``_pending`` and go to the server with the COMMIT, in one round
        trip (a read or a COPY inside sends what waits first): a group commit of a dozen
        rows costs one round trip, not one per statement plus BEGIN and COMMIT."""
        self._pending = ["BEGIN"]

    def _commit(self) -> None:
        self._pending = [*(self._pending or ()), "COMMIT"]
        self._send_pending()
        self._pending = None

    def _insert_rows(self, values: Iterable[tuple[Any, ...]]) -> None:
        """COPY the rows in (after what waits in the transaction)."""
        self._send_pending()
        with (
            _translated(self.where),
            self._db.cursor() as cursor,
            cursor.copy(self.DIALECT.copy_rows()) as copy,
        ):
            for row in values:
                copy.write_row((self._id, *row))

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        """Run a statement whose result is not read: in a transaction, with its COMMIT."""
        if self._pending is not None:
            self._pending.append(self._literal(sql, params))
            return
        with _translated(self.where):
            self._db.execute(sql, params)

    def _executemany(self, sql: str, params: Sequence[Sequence[Any]]) -> None:
        """``_execute`` for each set of ``params``."""
        if self._pending is not None:
            self._pending.extend(self._literals(sql, params))
            return
        if not params:
            return
        with _translated(self.where), self._db.cursor() as cursor:
            cursor.executemany(sql, params)

    def update_many(self, rows: Iterable[int], **values: Unpack[RowUpdate]) -> None:
        """Commit the same new values for several rows: one statement (``_update_merged``)."""
        self._update_merged(dict.fromkeys(rows, values))

    def _update_merged(self, merged: dict[int, RowUpdate]) -> None:
        """Commit each row's changes as one statement, its values bound server-side
        (``_UPDATE_ROWS``, prepared once per connection: no quoting on this side, no
        parsing or planning on the server's). Outside a transaction the statement is its
        own, committed (durably: ``synchronous_commit``) when this returns, in one round
        trip; inside one, it follows what waits there."""
        if not merged:
            return
        params = self._update_params(merged)
        self._send_pending()
        with _translated(self.where):
            self._db.execute(_UPDATE_ROWS, params, prepare=True)

    def _update_params(self, merged: dict[int, RowUpdate]) -> list[Any]:
        """``_UPDATE_ROWS``'s values: the time, then a list per column of each row's batch,
        number, which fields change (a bit each) and their new values (None elsewhere)."""
        count = len(merged)
        changed: list[int] = []
        columns: list[list[Any]] = [[None] * count for _ in _ROW_FIELDS]
        masks = self._masks
        for index, values in enumerate(merged.values()):
            names = tuple(values)
            mask = masks.get(names)
            if mask is None:
                check_fields(names, _ROW_BITS, "update row fields")
                mask = masks[names] = sum(_ROW_BITS[name] for name in names)
            changed.append(mask)
            for name, value in values.items():
                columns[_ROW_INDEX[name]][index] = to_sql(value)
        return [iso(utc_now()), [self._id] * count, list(merged), changed, *columns]

    def _literal(self, sql: str, params: Sequence[Any]) -> str:
        """The statement with its values written in (quoted by psycopg, as the server reads
        them), to go with others in one simple query."""
        return self._literals(sql, [params])[0]

    def _literals(self, sql: str, params: Sequence[Sequence[Any]]) -> list[str]:
        """``_literal`` for each set of ``params`` (a group commit's rows: one translation
        of psycopg's errors for them all, not one per row)."""
        if self._literals_cursor is None:
            import psycopg

            self._literals_cursor = psycopg.ClientCursor(self._db)
        mogrify = self._literals_cursor.mogrify
        with _translated(self.where):
            return [mogrify(sql, values) for values in params]

    def _send_pending(self) -> None:
        """Send the transaction's waiting statements, in order, in one round trip."""
        if not self._pending:
            return
        text, self._pending = ";\n".join(self._pending), []
        with _translated(self.where):
            self._db.execute(text)

    def _roll_back(self) -> None:
        """End a transaction that failed, if the server has one open (a connection already
        gone has none)."""
        import psycopg

        self._pending = None
        with contextlib.suppress(psycopg.Error):
            if self._db.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                self._db.execute("ROLLBACK")

    def _fetchone(self, sql: str, params: Sequence[Any]) -> tuple[Any, ...] | None:
        self._send_pending()
        with _translated(self.where):
            found: tuple[Any, ...] | None = self._db.execute(sql, params).fetchone()
        return found

    def _fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        self._send_pending()
        with _translated(self.where):
            return self._db.execute(sql, params).fetchall()

    def _fetch_record(self, sql: str, params: Sequence[Any]) -> dict[str, Any] | None:
        self._send_pending()
        with _translated(self.where):
            cursor = self._db.execute(sql, params)
            record = cursor.fetchone()
        if record is None or cursor.description is None:
            return None
        return dict(zip((column.name for column in cursor.description), record, strict=True))


def connect(url: DatabaseURL, *, readonly: bool) -> psycopg.Connection[Any]:
    """A new autocommit connection to the ledger database, with payrun's keepalives.

    ``ConfigError`` when psycopg is not installed, ``LedgerError`` when the database cannot
    be reached (the message names it with its password masked).
    """
    try:
        import psycopg
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:
        msg = (
            "a PostgreSQL ledger needs psycopg, which is not installed:"
            f" {FLEET_EXTRA} (or use a ledger file)"
        )
        raise ConfigError(msg) from None
    with _translated(url, opening=True):
        params: dict[str, Any] = conninfo_to_dict(url.reveal())
        for name, value in _CLIENT_KEEPALIVES.items():
            params.setdefault(name, value)
        # A server set to commit lazily would lose the last intents in a crash of its own
        settings: dict[str, object] = {**KEEPALIVES, "synchronous_commit": "on"}
        if readonly:
            settings["default_transaction_read_only"] = "on"
        own = " ".join(f"-c {name}={value}" for name, value in settings.items())
        params["options"] = f"{params.get('options', '')} {own}".strip()
        return psycopg.connect(autocommit=True, **params)


def batch_names(url: DatabaseURL) -> list[str]:
    """The names of the batches recorded in the database (read-only), in name order."""
    connection = connect(url, readonly=True)
    try:
        with _translated(url):
            if not _has_tables(connection):
                return []
            found = connection.execute(
                "SELECT name FROM payrun_batches WHERE file_sha256 IS NOT NULL ORDER BY name"
            ).fetchall()
    finally:
        connection.close()
    return [name for (name,) in found]


def _has_tables(connection: psycopg.Connection[Any]) -> bool:
    found = connection.execute("SELECT to_regclass('payrun_rows') IS NOT NULL").fetchone()
    return bool(found and found[0])


def _find(connection: psycopg.Connection[Any], where: DatabaseLedger) -> int | None:
    """The batch's id, or None when the database holds no such batch (or no payrun tables)."""
    with _translated(where):
        if not _has_tables(connection):
            return None
        found = connection.execute(
            "SELECT id FROM payrun_batches WHERE name = %s", (where.batch,)
        ).fetchone()
    return None if found is None else int(found[0])


def _no_batch(connection: psycopg.Connection[Any], where: DatabaseLedger) -> NoReturn:
    msg = (
        f"no batch {where.batch} in the ledger database {where.url.masked}: name a batch"
        " it holds (payrun report --ledger URL lists them), or the batch file a run paid"
    )
    raise LedgerError(msg)


def _create_schema(connection: psycopg.Connection[Any], where: DatabaseLedger) -> None:
    """Create payrun's tables if missing (one run at a time: an advisory lock), and refuse a
    database whose tables a newer payrun made. A database that has them all (every run but
    its first) is only read: no lock, no transaction."""
    with _translated(where):
        if not _schema_complete(connection):
            with connection.transaction():
                connection.execute("SELECT pg_advisory_xact_lock(%s, 0)", (LOCK_SPACE,))
                made = connection.execute(
                    "SELECT to_regclass('payrun_running') IS NOT NULL"
                ).fetchone()
                if not (made and made[0]):
                    connection.execute(_SCHEMA)
                audit = connection.execute(
                    "SELECT to_regclass('payrun_audit') IS NOT NULL"
                ).fetchone()
                if not (audit and audit[0]):
                    connection.execute(_APPROVAL_SCHEMA)
                _add_batch_columns(connection)
        found = connection.execute("SELECT value FROM payrun_meta WHERE key = 'schema'").fetchone()
    if found is None or found[0] != _SCHEMA_VERSION:
        msg = (
            f"the ledger database {where.url.masked} holds payrun tables of another version"
            f" ({'none' if found is None else found[0]}, this payrun writes"
            f" {_SCHEMA_VERSION}): use the payrun that made them, or another database"
        )
        raise LedgerError(msg)


_BATCH_COLUMNS = (
    "SELECT attname::text FROM pg_attribute WHERE attrelid = to_regclass('payrun_batches')"
    " AND attnum > 0 AND NOT attisdropped"
)
"""The columns of ``payrun_batches`` (from the catalog: ``information_schema.columns`` costs
the server more than the rest of opening a batch)."""


def _schema_complete(connection: psycopg.Connection[Any]) -> bool:
    """True when payrun's tables are all there, with every later batch column (one read)."""
    found = connection.execute(
        "SELECT to_regclass('payrun_running') IS NOT NULL"
        " AND to_regclass('payrun_audit') IS NOT NULL"
        " AND to_regclass('payrun_meta') IS NOT NULL,"
        f" ARRAY({_BATCH_COLUMNS})"
    ).fetchone()
    if not (found and found[0]):
        return False
    columns = set(found[1])
    return all(column.name in columns for column in LATER_BATCH_COLUMNS)


def _add_batch_columns(connection: psycopg.Connection[Any]) -> None:
    """The batch columns added since the first ledgers (a new database's, and an older
    payrun's, empty)."""
    columns = {name for (name,) in connection.execute(_BATCH_COLUMNS).fetchall()}
    for column in LATER_BATCH_COLUMNS:
        if column.name not in columns:
            connection.execute(
                f"ALTER TABLE payrun_batches ADD COLUMN {column.name} {column.sql_type}"
            )


def _lock_batch(
    connection: psycopg.Connection[Any], where: DatabaseLedger, *, patience: float
) -> tuple[int, bool]:
    """Take the batch's advisory lock for the connection's life, making its record if new.

    Returns (id, created). Raises ``LedgerLockedError`` naming the process that holds it
    after ``patience`` seconds.
    """
    deadline = time.monotonic() + patience
    with _translated(where):
        while True:
            batch_id, created = _record(connection, where)
            taken = connection.execute(
                "SELECT pg_try_advisory_lock(%s, %s)", (LOCK_SPACE, batch_id)
            ).fetchone()
            if taken and taken[0]:
                claimed = connection.execute(
                    "UPDATE payrun_batches SET holder_pid = %s, holder_host = %s"
                    " WHERE id = %s RETURNING id",
                    (os.getpid(), socket.gethostname(), batch_id),
                ).fetchone()
                if claimed is not None:
                    return batch_id, created
                # Removed by a refused first run while we waited: take the new record
                connection.execute("SELECT pg_advisory_unlock(%s, %s)", (LOCK_SPACE, batch_id))
                continue
            if time.monotonic() >= deadline:
                _locked(connection, where, batch_id)
            time.sleep(_LOCK_RETRY_SECONDS)


def _record(connection: psycopg.Connection[Any], where: DatabaseLedger) -> tuple[int, bool]:
    """The batch's id, inserting an empty record (no file yet) when there is none."""
    made = connection.execute(
        "INSERT INTO payrun_batches (name, created_at) VALUES (%s, %s)"
        " ON CONFLICT (name) DO NOTHING RETURNING id",
        (where.batch, iso(utc_now())),
    ).fetchone()
    if made is not None:
        return int(made[0]), True
    found = connection.execute(
        "SELECT id FROM payrun_batches WHERE name = %s", (where.batch,)
    ).fetchone()
    if found is None:
        # Removed between the two statements
        return _record(connection, where)
    return int(found[0]), False


def _locked(connection: psycopg.Connection[Any], where: DatabaseLedger, batch_id: int) -> NoReturn:
    found = connection.execute(
        "SELECT holder_pid, holder_host FROM payrun_batches WHERE id = %s", (batch_id,)
    ).fetchone()
    pid, host = found if found is not None else (None, None)
    holder = f"process {pid}" if pid else "another process"
    if host and host != socket.gethostname():
        holder += f" on {host}"
    msg = (
        f"the ledger {where} is in use by {holder} (another payrun run);"
        " wait for it to finish or stop it, then run again"
    )
    raise LedgerLockedError(msg, pid=pid)


def refuse_if_running_at(where: DatabaseLedger) -> None:
    """Raise ``LedgerLockedError`` when a run holds the batch (after a moment's wait); hold
    nothing, create nothing."""
    connection = connect(where.url, readonly=True)
    try:
        batch_id = _find(connection, where)
        if batch_id is None:
            return
        deadline = time.monotonic() + _LOCK_PATIENCE
        with _translated(where):
            while True:
                taken = connection.execute(
                    "SELECT pg_try_advisory_lock(%s, %s)", (LOCK_SPACE, batch_id)
                ).fetchone()
                if taken and taken[0]:
                    return
                if time.monotonic() >= deadline:
                    _locked(connection, where, batch_id)
                time.sleep(_LOCK_RETRY_SECONDS)
    finally:
        # Closing drops the lock taken for the look
        connection.close()


def check_register(where: DatabaseLedger, rows: Sequence[LedgerRow], bank: str) -> None:
    """Raise ``LedgerLockedError`` when a live run in the database's register (on any
    machine) pays, at ``bank``, the same batch or any of these rows: a dry run's look, with
    the same comparison as a paying run's (``PostgresLedger.hold_batch``); read-only."""
    running = running_batch(rows, bank)
    if not running.keys:
        return
    connection = connect(where.url, readonly=True)
    try:
        with _translated(where):
            made = connection.execute("SELECT to_regclass('payrun_running') IS NOT NULL")
            found = made.fetchone()
            if not (found and found[0]):
                return
            live = connection.execute(
                f"{_REGISTER_SELECT} AND {_HOLDS_ITS_LOCK}", (running.bank, LOCK_SPACE)
            ).fetchall()
    finally:
        connection.close()
    entries = (_entry(where.url, *record) for record in live)
    refuse_overlap_with(entries, running, dry_run=True)


def _entry(
    url: DatabaseURL, name: str, pid: int | None, host: str | None, *rest: Any
) -> RunningEntry:
    """Another batch's live run, as the register's messages name it."""
    bank, fingerprint, keys = rest
    where = str(DatabaseLedger(url, name))
    if host and host != socket.gethostname():
        where += f" on {host}"
    return RunningEntry(name, pid, where, bank, fingerprint, bytes(keys))


def batch_recorded(where: DatabaseLedger) -> bool:
    """True when the database holds this batch with its rows (read-only)."""
    connection = connect(where.url, readonly=True)
    try:
        batch_id = _find(connection, where)
        if batch_id is None:
            return False
        with _translated(where):
            found = connection.execute(
                "SELECT file_sha256 IS NOT NULL FROM payrun_batches WHERE id = %s", (batch_id,)
            ).fetchone()
    finally:
        connection.close()
    return bool(found and found[0])


@contextmanager
def _translated(where: DatabaseLedger | DatabaseURL, *, opening: bool = False) -> Iterator[None]:
    """psycopg's errors as ``LedgerError`` (``LedgerWriteError`` for a second payment URL
    for a row), in one line, without the password."""
    import psycopg

    url = where.url if isinstance(where, DatabaseLedger) else where
    try:
        yield
    except psycopg.errors.UniqueViolation as exc:
        location = str(where)
        msg = (
            f"the ledger {location} refused to record one bank payment or submission for two"
            f" rows ({_one_line(exc, url)}), so nothing more is sent; payrun checks with the bank"
            " what each row's request did when it runs again"
        )
        raise LedgerWriteError(msg) from None
    except psycopg.Error as exc:
        # Named only when it failed (masking the URL's password costs each statement more)
        location = str(where)
        if opening:
            msg = (
                f"cannot reach the ledger database {location}: {_one_line(exc, url)}; check the"
                " URL, that the server runs and accepts this user, and the password"
            )
        else:
            msg = f"cannot use the ledger {location}: {_one_line(exc, url)}"
        raise LedgerError(msg) from None


def _one_line(exc: BaseException, url: DatabaseURL) -> str:
    """The error's text on one line (libpq writes hints on lines of their own), with any
    password of the URL masked (a driver may quote the part of a URL it cannot read)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    for secret in url.passwords():
        text = text.replace(secret, "***")
    return text


_ROW_FIELDS = tuple(RowUpdate.__annotations__)
"""The row fields a run changes (``RowUpdate``'s), in ``_UPDATE_ROWS``'s order."""
_ROW_INDEX = {name: index for index, name in enumerate(_ROW_FIELDS)}
_ROW_BITS = {name: 1 << index for index, name in enumerate(_ROW_FIELDS)}
_UPDATE_ROWS = (
    "UPDATE payrun_rows AS r SET "
    + ", ".join(
        f"{name} = CASE WHEN v.m & {bit} = 0 THEN r.{name} ELSE v.{name} END"
        for name, bit in _ROW_BITS.items()
    )
    + ", updated_at = %b FROM unnest(%b::integer[], %b::integer[], %b::integer[], "
    + ", ".join(f"%b::{'integer' if name == 'attempts' else 'text'}[]" for name in _ROW_FIELDS)
    + f") AS v(b, n, m, {', '.join(_ROW_FIELDS)}) WHERE r.batch_id = v.b AND r.row = v.n"
)
"""Set the changed fields (and ``updated_at``) of each row of a list, in one statement: per
row its batch, its number, a bit per field it changes (the rest stay as they are) and the
new values. The values' batch column makes the join the only condition on ``payrun_rows``,
so the server looks each row up by its key: with ``r.batch_id = id`` on its own, a batch
newer than the table's statistics (every batch a worker pays) is taken for a single row,
and each commit read the whole batch (3,000 rows: 10 ms of the server's CPU for a commit
of 38 rows)."""
