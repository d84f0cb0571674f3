"""The result ledger: one SQLite file per batch that makes reruns exactly-once.

Input: the batch's rows (``RowVerdict``) and every state change of a run. Output: durable
``LedgerRow`` records a later run resumes from. WAL mode with ``synchronous=NORMAL``
survives a process crash (kill -9); every write goes through ``atomic()``, and the
execution stage commits an *intent* (``creating``/``submitting`` with its time) before each
POST and the outcome after it. A lock file stops two runs of one ledger at once.
Raises ``LedgerError`` (and subclasses); ``sqlite3`` errors are translated here only.
"""

from __future__ import annotations

import os
import sqlite3
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from payrun.domain import RowStatus, RowVerdict, format_money
from payrun.errors import LedgerError, LedgerLockedError

__all__ = ["BatchInfo", "Ledger", "LedgerRow", "default_ledger_path", "utc_now"]

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
"""

_UPDATABLE = frozenset(
    {
        "status",
        "account_url",
        "payee_url",
        "payment_url",
        "submission_url",
        "intent_at",
        "attempts",
        "error",
    }
)


def utc_now() -> datetime:
    """The current time in UTC (the ledger stores ISO 8601 UTC text)."""
    return datetime.now(UTC)


def default_ledger_path(batch_path: Path) -> Path:
    """``BATCH.ledger.sqlite`` beside the batch file."""
    return batch_path.with_name(batch_path.name + ".ledger.sqlite")


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """What a ledger was made for: file content, bank and organization, control totals."""

    file_path: str
    file_sha256: str
    valid_count: int
    valid_total: Decimal
    base_url: str | None = None
    organization_url: str | None = None
    expect_count: int | None = None
    expect_total: Decimal | None = None
    created_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class LedgerRow:
    """One batch row as the ledger holds it; ``intent_at`` is the last committed intent's time."""

    row: int
    row_id: str | None
    payee_name: str
    sort_code: str
    account_number: str
    amount: Decimal
    reference: str | None
    source_account: str
    status: RowStatus
    account_url: str | None = None
    payee_url: str | None = None
    payment_url: str | None = None
    submission_url: str | None = None
    intent_at: datetime | None = None
    attempts: int = 0
    error: str | None = None
    updated_at: datetime | None = None
    amount_text: str = ""

    @property
    def payment_key(self) -> tuple[str, str, str, str]:
        """Sort code, account number, amount and reference: what the bank can match on."""
        return (
            self.sort_code,
            self.account_number,
            format_money(self.amount),
            self.reference or "",
        )


_ROW_COLUMNS = tuple(f.name for f in fields(LedgerRow) if f.name != "amount_text")


class Ledger:
    """An open ledger file. Use ``Ledger.open(path)``; close it (or use ``with``) when done."""

    def __init__(self, path: Path, connection: sqlite3.Connection, lock_fd: int | None) -> None:
        self.path = path
        self._db = connection
        self._lock_fd = lock_fd
        self._depth = 0
        self._sql_cache: dict[tuple[str, ...], str] = {}

    @classmethod
    def open(cls, path: Path, *, readonly: bool = False) -> Ledger:
        """Open (or create) the ledger at ``path``; writers take the lock, readers do not."""
        if readonly and not path.is_file():
            msg = f"no ledger at {path}: pass the .ledger.sqlite file a run wrote"
            raise LedgerError(msg)
        lock_fd = None if readonly else _take_lock(path)
        try:
            if not readonly:
                _create_private(path)
            connection = _connect(path, readonly=readonly)
        except BaseException:
            _release_lock(lock_fd)
            raise
        return cls(path, connection, lock_fd)

    def close(self) -> None:
        """Close the database and release the lock."""
        self._db.close()
        _release_lock(self._lock_fd)
        self._lock_fd = None

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """One transaction: BEGIN ... COMMIT, rolled back on any exception (nestable)."""
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        self._depth = 1
        try:
            self._execute("BEGIN IMMEDIATE")
            yield
            self._execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:
                self._db.rollback()
            raise
        finally:
            self._depth = 0

    def batch(self) -> BatchInfo | None:
        """The batch this ledger was made for, or None for a new ledger."""
        cursor = self._execute("SELECT * FROM batch WHERE id = 1")
        record = cursor.fetchone()
        return None if record is None else _batch_from_record(record)

    def start(self, info: BatchInfo, verdicts: Iterable[RowVerdict]) -> None:
        """Record a new batch and every row of it (valid rows pending, invalid rows invalid)."""
        now = _iso(utc_now())
        with self.atomic():
            self._execute(
                "INSERT INTO batch (id, file_path, file_sha256, base_url, organization_url,"
                " expect_count, expect_total, valid_count, valid_total, created_at)"
                " VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    info.file_path,
                    info.file_sha256,
                    info.base_url,
                    info.organization_url,
                    info.expect_count,
                    _money_or_none(info.expect_total),
                    info.valid_count,
                    format_money(info.valid_total),
                    now,
                ),
            )
            self._executemany(
                "INSERT INTO rows (row, row_id, payee_name, sort_code, account_number, amount,"
                " reference, source_account, status, error, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (_row_values(verdict, now) for verdict in verdicts),
            )

    def set_valid_totals(self, count: int, total: Decimal) -> None:
        """Record the count and total of the batch's valid rows."""
        with self.atomic():
            self._execute(
                "UPDATE batch SET valid_count = ?, valid_total = ? WHERE id = 1",
                (count, format_money(total)),
            )

    def set_batch(self, **values: Any) -> None:
        """Update batch fields: base_url, organization_url, started_at, ended_at."""
        allowed = {"base_url", "organization_url", "started_at", "ended_at"}
        unknown = set(values) - allowed
        if unknown:
            msg = f"cannot set batch fields {sorted(unknown)}"
            raise ValueError(msg)
        assignments = ", ".join(f"{name} = ?" for name in values)
        params = [_to_sql(value) for value in values.values()]
        with self.atomic():
            self._execute(f"UPDATE batch SET {assignments} WHERE id = 1", params)  # noqa: S608

    def rows(self, statuses: Iterable[RowStatus] | None = None) -> list[LedgerRow]:
        """Every row (or those in ``statuses``), in row order."""
        if statuses is None:
            cursor = self._execute("SELECT * FROM rows ORDER BY row")
        else:
            wanted = [str(status) for status in statuses]
            marks = ", ".join("?" for _ in wanted)
            cursor = self._execute(
                f"SELECT * FROM rows WHERE status IN ({marks}) ORDER BY row",
                wanted,  # noqa: S608
            )
        return [_row_from_record(record) for record in cursor]

    def counts(self) -> dict[RowStatus, int]:
        """How many rows are in each status."""
        cursor = self._execute("SELECT status, COUNT(*) FROM rows GROUP BY status")
        return {RowStatus(status): count for status, count in cursor}

    def update(self, row: int, **values: Any) -> None:
        """Commit new values for one row: one statement, its own transaction (WAL commit)."""
        sql = self._update_sql(tuple(values))
        params = [_to_sql(value) for value in values.values()]
        params += [_iso(utc_now()), row]
        self._execute(sql, params)

    def _update_sql(self, names: tuple[str, ...]) -> str:
        sql = self._sql_cache.get(names)
        if sql is None:
            unknown = set(names) - _UPDATABLE
            if unknown:
                msg = f"cannot update row fields {sorted(unknown)}"
                raise ValueError(msg)
            assignments = "".join(f"{name} = ?, " for name in names)
            sql = f"UPDATE rows SET {assignments}updated_at = ? WHERE row = ?"  # noqa: S608
            self._sql_cache[names] = sql
        return sql

    def update_each(self, changes: Iterable[tuple[int, dict[str, Any]]]) -> None:
        """Commit several rows' own changes in one transaction (a group commit)."""
        now = _iso(utc_now())
        with self.atomic():
            for row, values in changes:
                params = [_to_sql(value) for value in values.values()]
                params += [now, row]
                self._execute(self._update_sql(tuple(values)), params)

    def update_many(self, rows: Iterable[int], **values: Any) -> None:
        """Commit the same new values for several rows in one transaction."""
        sql = self._update_sql(tuple(values))
        params = [_to_sql(value) for value in values.values()] + [_iso(utc_now())]
        with self.atomic():
            self._executemany(sql, ([*params, row] for row in rows))

    def _execute(self, sql: str, params: Iterable[Any] = ()) -> sqlite3.Cursor:
        try:
            return self._db.execute(sql, tuple(params))
        except sqlite3.Error as exc:
            raise _ledger_error(self.path, exc) from exc

    def _executemany(self, sql: str, params: Iterable[Iterable[Any]]) -> None:
        try:
            self._db.executemany(sql, (tuple(p) for p in params))
        except sqlite3.Error as exc:
            raise _ledger_error(self.path, exc) from exc


def _ledger_error(path: Path, exc: sqlite3.Error) -> LedgerError:
    msg = (
        f"cannot use the ledger {path}: {exc};"
        " check the file is a payrun ledger and the disk has space"
    )
    return LedgerError(msg)


def _connect(path: Path, *, readonly: bool) -> sqlite3.Connection:
    try:
        if readonly:
            connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
        else:
            connection = sqlite3.connect(path, isolation_level=None)
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=NORMAL")  # durable across a process crash
            connection.executescript(_SCHEMA)
        connection.row_factory = sqlite3.Row
        connection.execute("PRAGMA busy_timeout=5000")
        connection.execute("SELECT COUNT(*) FROM rows").fetchone()
    except sqlite3.Error as exc:
        raise _ledger_error(path, exc) from exc
    return connection


def _create_private(path: Path) -> None:
    """Create the ledger file readable by its owner only (0600) before SQLite opens it."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
        os.close(fd)
        os.chmod(path, 0o600)
    except OSError as exc:
        msg = (
            f"cannot create the ledger {path}: {exc.strerror};"
            " check the folder exists and is writable"
        )
        raise LedgerError(msg) from None


def _take_lock(path: Path) -> int | None:
    """Hold an exclusive lock on ``PATH.lock`` for the process's life (released even on kill -9)."""
    if sys.platform == "win32":  # pragma: no cover - payrun runs on Linux and macOS
        return None
    import fcntl

    lock_path = path.with_name(path.name + ".lock")
    try:
        fd = os.open(lock_path, os.O_CREAT | os.O_RDWR, 0o600)
    except OSError as exc:
        msg = f"cannot create the ledger lock {lock_path}: {exc.strerror}"
        raise LedgerError(msg) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = _read_pid(fd)
        os.close(fd)
        holder = f"process {pid}" if pid else "another process"
        msg = (
            f"the ledger {path} is in use by {holder} (another payrun run);"
            " wait for it to finish or stop it, then run again"
        )
        raise LedgerLockedError(msg, pid=pid) from None
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    return fd


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode().strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None


def _release_lock(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat()


def _to_sql(value: Any) -> Any:
    if isinstance(value, datetime):
        return _iso(value)
    if isinstance(value, Decimal):
        return format_money(value)
    if isinstance(value, RowStatus):
        return str(value)
    return value


def _money_or_none(value: Decimal | None) -> str | None:
    return None if value is None else format_money(value)


def _parse_time(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


def _row_values(verdict: RowVerdict, now: str) -> tuple[Any, ...]:
    item = verdict.instruction
    if item is not None:
        return (
            item.row,
            item.row_id,
            item.payee_name,
            item.sort_code,
            item.account_number,
            format_money(item.amount),
            item.reference,
            item.source_account,
            str(RowStatus.PENDING),
            None,
            now,
        )
    raw = verdict.raw
    error = "; ".join(problem.message for problem in verdict.errors) or "invalid row"
    return (
        verdict.row,
        raw.get("row_id") or None,
        raw.get("payee_name", ""),
        raw.get("sort_code", ""),
        raw.get("account_number", ""),
        raw.get("amount", ""),
        raw.get("reference") or None,
        raw.get("source_account", ""),
        str(RowStatus.INVALID),
        error,
        now,
    )


def _row_from_record(record: sqlite3.Row) -> LedgerRow:
    values = dict(zip(record.keys(), record, strict=True))
    amount_text = values["amount"]
    try:
        amount = Decimal(amount_text)
    except ArithmeticError:  # an invalid row keeps its original text
        amount = Decimal(0)
    return LedgerRow(
        **{
            name: values[name]
            for name in _ROW_COLUMNS
            if name not in {"amount", "status", "intent_at", "updated_at"}
        },
        amount=amount,
        amount_text=amount_text,
        status=RowStatus(values["status"]),
        intent_at=_parse_time(values["intent_at"]),
        updated_at=_parse_time(values["updated_at"]),
    )


def _batch_from_record(record: sqlite3.Row) -> BatchInfo:
    values = dict(zip(record.keys(), record, strict=True))
    expect_total = values["expect_total"]
    return BatchInfo(
        file_path=values["file_path"],
        file_sha256=values["file_sha256"],
        valid_count=values["valid_count"],
        valid_total=Decimal(values["valid_total"]),
        base_url=values["base_url"],
        organization_url=values["organization_url"],
        expect_count=values["expect_count"],
        expect_total=None if expect_total is None else Decimal(expect_total),
        created_at=_parse_time(values["created_at"]),
        started_at=_parse_time(values["started_at"]),
        ended_at=_parse_time(values["ended_at"]),
    )
