"""The SQL core both ledger backends share: the statements, written once, and the ``LedgerStore``
methods that run them (``SQLLedger``); each backend adds its connection, its transactions
and its errors.

The two dialects differ in what stands beside the statements (``Dialect``): the
placeholder (``?``, ``%s``), the tables' names, how a statement names its batch (the SQLite
file holds one, record ``id = 1``; the database holds many, each row keyed by
``batch_id``), whether ``start`` inserts the batch's record or fills the one its lock made,
and how a list of values is bound. The columns are ``_records``'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, ClassVar, Self, Unpack

from payrun._models import (
    AuditEntry,
    BatchInfo,
    BatchUpdate,
    LedgerRow,
    PlainRow,
    RowStatus,
    RowUpdate,
    RowVerdict,
    utc_now,
)
from payrun.ledger._records import (
    REPLACED_COLUMNS,
    ROW_INSERT,
    ROW_SELECT,
    START_COLUMNS,
    batch_from_record,
    batch_values,
    check_fields,
    iso,
    replaced_values,
    row_from_values,
    row_values,
    to_sql,
)

__all__ = ["POSTGRES", "SQLITE", "Dialect", "SQLLedger"]

_AUDIT = "at, event, actor, plan_id, detail"
_PLAN = "id, document, created_at"
# The names are spliced into SQL text and the classes are public API, so calls that mypy
# never saw are checked too (once per set of names: the statements are cached).
_UPDATABLE = RowUpdate.__optional_keys__
_BATCH_UPDATABLE = BatchUpdate.__optional_keys__


@dataclass(frozen=True, slots=True)
class Dialect:
    """What the statements of one backend put where the two differ."""

    mark: str
    """The placeholder of one value."""
    batches: str
    rows: str
    plans: str
    audit: str
    batch_key: str
    """The condition naming the batch's record (its parameters: ``SQLLedger._scope``)."""
    scope: str | None
    """The column tying rows, plans and audit entries to their batch (None: one batch)."""
    record_made_first: bool
    """True when the batch's record exists before ``start`` (made when its lock is taken)."""
    array_values: bool
    """True when a list of values binds as one array (``= ANY(%s)``), else one mark each."""
    table_exists: str
    """A statement with one row when the table its one parameter names exists."""

    def marks(self, count: int) -> str:
        """``count`` placeholders, separated by commas."""
        return ", ".join([self.mark] * count)

    def scoped(self, columns: str) -> str:
        """``columns`` of an INSERT, after the batch's column if rows name one."""
        return columns if self.scope is None else f"{self.scope}, {columns}"

    def where(self, *conditions: str) -> str:
        """A WHERE clause of the batch's scope (its parameters first) and ``conditions``."""
        scope = () if self.scope is None else (f"{self.scope} = {self.mark}",)
        every = (*scope, *conditions)
        return f" WHERE {' AND '.join(every)}" if every else ""

    def assign(self, names: Iterable[str]) -> str:
        """``name = ?, ...`` for an UPDATE."""
        return ", ".join(f"{name} = {self.mark}" for name in names)

    def set_batch(self, names: Sequence[str]) -> str:
        """Set ``names`` in the batch's record."""
        return f"UPDATE {self.batches} SET {self.assign(names)} WHERE {self.batch_key}"

    def start_batch(self) -> str:
        """Record a new batch's ``START_COLUMNS``."""
        if self.record_made_first:
            return self.set_batch(START_COLUMNS)
        names, values = ", ".join(START_COLUMNS), self.marks(len(START_COLUMNS))
        return f"INSERT INTO {self.batches} (id, {names}) VALUES (1, {values})"

    def select_batch(self) -> str:
        """The batch's record, once ``start`` filled it."""
        return f"SELECT * FROM {self.batches} WHERE {self.batch_key} AND file_sha256 IS NOT NULL"

    def insert_rows(self) -> str:
        """One new row (``ROW_INSERT``)."""
        columns = self.scoped(", ".join(ROW_INSERT))
        count = len(ROW_INSERT) + (self.scope is not None)
        return f"INSERT INTO {self.rows} ({columns}) VALUES ({self.marks(count)})"

    def copy_rows(self) -> str:
        """New rows, copied in (``ROW_INSERT``)."""
        return f"COPY {self.rows} ({self.scoped(', '.join(ROW_INSERT))}) FROM STDIN"

    def update_row(self, names: Iterable[str]) -> str:
        """Set ``names`` (and ``updated_at``) of one row."""
        assignments = self.assign((*names, "updated_at"))
        return f"UPDATE {self.rows} SET {assignments}{self.where(f'row = {self.mark}')}"

    def replace_row(self) -> str:
        """Rewrite one row from the file (``REPLACED_COLUMNS``), forgetting what was found."""
        assignments = f"{self.assign(REPLACED_COLUMNS)}, account_url = NULL, payee_url = NULL"
        return f"UPDATE {self.rows} SET {assignments}{self.where(f'row = {self.mark}')}"

    def select_rows(self, statuses: Sequence[str] | None) -> tuple[str, list[Any]]:
        """Every row (or those in ``statuses``) in row order, and the statuses' parameters."""
        if statuses is None:
            return f"SELECT {ROW_SELECT} FROM {self.rows}{self.where()} ORDER BY row", []
        params: list[Any]
        if self.array_values:
            wanted, params = f"status = ANY({self.mark})", [list(statuses)]
        else:
            wanted, params = f"status IN ({self.marks(len(statuses))})", list(statuses)
        return f"SELECT {ROW_SELECT} FROM {self.rows}{self.where(wanted)} ORDER BY row", params

    def add_plan(self) -> str:
        """Record a plan once (again: nothing)."""
        values = self.marks(3 + (self.scope is not None))
        return (
            f"INSERT INTO {self.plans} ({self.scoped(_PLAN)}) VALUES ({values})"
            f" ON CONFLICT ({self.scoped('id')}) DO NOTHING"
        )

    def select_plans(self) -> str:
        """Every plan, oldest first."""
        return f"SELECT id, document FROM {self.plans}{self.where()} ORDER BY created_at, id"

    def append_audit(self) -> str:
        """One entry of the audit trail."""
        values = self.marks(5 + (self.scope is not None))
        return f"INSERT INTO {self.audit} ({self.scoped(_AUDIT)}) VALUES ({values})"

    def select_audit(self) -> str:
        """The audit trail, in the order it was written."""
        return f"SELECT {_AUDIT} FROM {self.audit}{self.where()} ORDER BY seq"


SQLITE = Dialect(
    mark="?",
    batches="batch",
    rows="rows",
    plans="plans",
    audit="audit",
    batch_key="id = 1",
    scope=None,
    record_made_first=False,
    array_values=False,
    table_exists="SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
)
"""The SQLite file: one batch, its record ``id = 1``; ``start`` inserts it."""
POSTGRES = Dialect(
    mark="%s",
    batches="payrun_batches",
    rows="payrun_rows",
    plans="payrun_plans",
    audit="payrun_audit",
    batch_key="id = %s",
    scope="batch_id",
    record_made_first=True,
    array_values=True,
    table_exists="SELECT 1 WHERE to_regclass(%s) IS NOT NULL",
)
"""A database of many batches, each keyed by its id; the batch's lock makes its record."""


class SQLLedger:
    """The ``LedgerStore`` methods both backends share, on the statements of ``DIALECT``.

    A backend gives its connection's primitives: ``_begin``/``_commit``/``_roll_back``
    (one transaction), ``_execute``/``_executemany`` (statements whose result is not read),
    ``_fetchall``/``_fetch_record`` (reads), ``_insert_rows`` (a new batch's rows) and
    ``close``; and sets ``_scope``, the parameters of its batch's key (none for a file).
    """

    DIALECT: ClassVar[Dialect]

    def __init__(self, scope: tuple[Any, ...], *, created: bool) -> None:
        self._scope = scope
        self._created = created
        self._depth = 0
        self._sql_cache: dict[tuple[str, ...], str] = {}

    @property
    def created(self) -> bool:
        """True when opening it made the ledger (a file, or a batch's record in a database)."""
        return self._created

    def _begin(self) -> None:
        raise NotImplementedError

    def _commit(self) -> None:
        raise NotImplementedError

    def _roll_back(self) -> None:
        raise NotImplementedError

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        raise NotImplementedError

    def _executemany(self, sql: str, params: Sequence[Sequence[Any]]) -> None:
        raise NotImplementedError

    def _fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _fetch_record(self, sql: str, params: Sequence[Any]) -> dict[str, Any] | None:
        """The first row of a read, by column name (None: no row)."""
        raise NotImplementedError

    def _insert_rows(self, values: Iterable[tuple[Any, ...]]) -> None:
        """Insert new rows, each ``ROW_INSERT``'s values (in ``start``'s transaction)."""
        raise NotImplementedError

    def close(self) -> None:
        """Close the ledger and release what this run holds of it."""
        raise NotImplementedError

    def __enter__(self) -> Self:
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
            self._begin()
            yield
            self._commit()
        except BaseException:
            self._roll_back()
            raise
        finally:
            self._depth = 0

    def batch(self) -> BatchInfo | None:
        """The batch this ledger was made for, or None for a new one (no rows recorded)."""
        record = self._fetch_record(self.DIALECT.select_batch(), self._scope)
        return None if record is None else batch_from_record(record)

    def start(self, info: BatchInfo, verdicts: Iterable[RowVerdict | PlainRow]) -> None:
        """Record a new batch and every row of it (valid rows pending, invalid rows invalid)."""
        now = iso(utc_now())
        with self.atomic():
            self._execute(self.DIALECT.start_batch(), (*batch_values(info, now), *self._scope))
            self._insert_rows(row_values(verdict, now) for verdict in verdicts)

    def set_valid_totals(self, count: int, total: Decimal) -> None:
        """Record the count and total of the batch's valid rows."""
        self._set_batch_values({"valid_count": count, "valid_total": total})

    def set_batch(self, **values: Unpack[BatchUpdate]) -> None:
        """Update batch fields: base_url, organization_url, started_at, ended_at, options,
        late_until, alive_at."""
        check_fields(values, _BATCH_UPDATABLE, "set batch fields")
        self._set_batch_values(values)

    def _set_batch_values(self, values: Mapping[str, object]) -> None:
        sql = self.DIALECT.set_batch(tuple(values))
        with self.atomic():
            self._execute(sql, [*map(to_sql, values.values()), *self._scope])

    def replace_rows(self, rows: Iterable[LedgerRow]) -> None:
        """Rewrite rows never sent to the bank from the file again (new options on a rerun).

        Their file fields, status and error are replaced; the account and payee found for
        them before are forgotten (a new source account has other payees).
        """
        now = iso(utc_now())
        params = [(*replaced_values(r, now), *self._scope, r.row) for r in rows]
        with self.atomic():
            self._executemany(self.DIALECT.replace_row(), params)

    def rows(self, statuses: Iterable[RowStatus] | None = None) -> list[LedgerRow]:
        """Every row (or those in ``statuses``), in row order."""
        wanted = None if statuses is None else [str(status) for status in statuses]
        sql, params = self.DIALECT.select_rows(wanted)
        return [row_from_values(values) for values in self._fetchall(sql, [*self._scope, *params])]

    def update_each(self, changes: Iterable[tuple[int, RowUpdate]]) -> None:
        """Commit several rows' own changes in one transaction (a group commit), in order.

        A row's changes become one update (applied in turn: a field's last value wins);
        how the rows go to the database is the backend's (``_update_merged``).
        """
        merged: dict[int, RowUpdate] = {}
        for row, values in changes:
            earlier = merged.get(row)
            merged[row] = values if earlier is None else {**earlier, **values}
        if merged:
            self._update_merged(merged)

    def _update_merged(self, merged: dict[int, RowUpdate]) -> None:
        """Commit each row's changes in one transaction: rows changing the same fields go
        to the database as one ``executemany`` (a commit of a dozen rows' intents and
        outcomes costs 2-3 statements, not one per row)."""
        by_names: dict[tuple[str, ...], list[list[Any]]] = {}
        now = iso(utc_now())
        for row, values in merged.items():
            params = [*map(to_sql, values.values()), now, *self._scope, row]
            by_names.setdefault(tuple(values), []).append(params)
        with self.atomic():
            for names, group in by_names.items():
                self._executemany(self._update_sql(names), group)

    def update_many(self, rows: Iterable[int], **values: Unpack[RowUpdate]) -> None:
        """Commit the same new values for several rows in one transaction."""
        sql = self._update_sql(tuple(values))
        params = [*map(to_sql, values.values()), iso(utc_now()), *self._scope]
        with self.atomic():
            self._executemany(sql, [[*params, row] for row in rows])

    def _update_sql(self, names: tuple[str, ...]) -> str:
        sql = self._sql_cache.get(names)
        if sql is None:
            check_fields(names, _UPDATABLE, "update row fields")
            sql = self._sql_cache[names] = self.DIALECT.update_row(names)
        return sql

    def add_plan(self, plan_id: str, document: str, *, at: datetime) -> None:
        """Record a plan (its canonical text) once; recording it again changes nothing."""
        with self.atomic():
            self._execute(self.DIALECT.add_plan(), (*self._scope, plan_id, document, iso(at)))

    def plans(self) -> list[tuple[str, str]]:
        """Every recorded plan: (id, canonical text), oldest first."""
        if not self._has_table(self.DIALECT.plans):
            return []
        found = self._fetchall(self.DIALECT.select_plans(), self._scope)
        return [(record[0], record[1]) for record in found]

    def append_audit(self, entry: AuditEntry) -> None:
        """Append one entry to the audit trail."""
        values = (iso(entry.at), entry.event, entry.actor, entry.plan_id, entry.detail)
        with self.atomic():
            self._execute(self.DIALECT.append_audit(), (*self._scope, *values))

    def audit_trail(self) -> list[AuditEntry]:
        """The audit trail, in the order it was written."""
        if not self._has_table(self.DIALECT.audit):
            return []
        found = self._fetchall(self.DIALECT.select_audit(), self._scope)
        return [
            AuditEntry(datetime.fromisoformat(at), event, actor, plan_id, detail)
            for at, event, actor, plan_id, detail in found
        ]

    def _has_table(self, name: str) -> bool:
        """True when the ledger has the table (one of an older payrun, read as it is, lacks
        the plans and the audit trail)."""
        return bool(self._fetchall(self.DIALECT.table_exists, (name,)))
