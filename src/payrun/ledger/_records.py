"""The ledger's records: their columns, and batch and row values converted to and from them.

Input: validation verdicts and database rows (SQLite's or PostgreSQL's: both keep times and
money as text). Output: the domain's ``BatchInfo`` and ``LedgerRow`` values, and the values
an INSERT or UPDATE binds. No I/O. The batch record's columns are listed once
(``BATCH_COLUMNS``): both backends' statements, reads and additions to an older ledger
follow the list.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Literal, NamedTuple

from payrun._models import BatchInfo, LedgerRow, PlainRow, RowStatus, RowVerdict, format_money

__all__ = [
    "BATCH_COLUMNS",
    "LATER_BATCH_COLUMNS",
    "REPLACED_COLUMNS",
    "ROW_COLUMNS",
    "ROW_INSERT",
    "ROW_SELECT",
    "START_COLUMNS",
    "Column",
    "batch_from_record",
    "batch_values",
    "check_fields",
    "iso",
    "row_from_values",
    "replaced_values",
    "row_values",
    "to_sql",
]


class Column(NamedTuple):
    """A column of the batch record: its ``BatchInfo`` field's name, how its value is kept
    (text, or an integer; money and times as text), and when it is written."""

    name: str
    kind: Literal["text", "integer", "money", "time"]
    start: bool = False
    """Written by ``start`` (the rest by ``set_batch``, ``set_valid_totals``)."""
    later: bool = False
    """Added after the first ledgers: nullable, and a writer adds it to an older ledger."""

    @property
    def sql_type(self) -> str:
        """Its type in either database."""
        return "INTEGER" if self.kind == "integer" else "TEXT"


BATCH_COLUMNS = (
    Column("file_path", "text", start=True),
    Column("file_sha256", "text", start=True),
    Column("base_url", "text", start=True),
    Column("organization_url", "text", start=True),
    Column("expect_count", "integer", start=True),
    Column("expect_total", "money", start=True),
    Column("valid_count", "integer", start=True),
    Column("valid_total", "money", start=True),
    Column("created_at", "time", start=True),
    Column("started_at", "time"),
    Column("ended_at", "time"),
    Column("options", "text", start=True, later=True),
    Column("late_until", "time", later=True),
    Column("alive_at", "time", later=True),
)
"""The batch record's columns (``BatchInfo``'s fields), in the order its tables have them."""
START_COLUMNS = tuple(column.name for column in BATCH_COLUMNS if column.start)
"""What ``start`` records of a new batch (``batch_values``)."""
LATER_BATCH_COLUMNS = tuple(column for column in BATCH_COLUMNS if column.later)
"""The columns a ledger made by an older payrun may lack (the schemas add them)."""
ROW_COLUMNS = tuple(name for name in LedgerRow._fields if name != "amount_text")
ROW_INSERT = (*ROW_COLUMNS[: ROW_COLUMNS.index("status") + 1], "error", "updated_at")
"""What ``start`` records of each row (``row_values``): the file's fields, the status, the
error (an invalid row's reasons) and the time."""
REPLACED_COLUMNS = ROW_INSERT[1:]
"""What ``replace_rows`` rewrites of a row (``replaced_values``)."""


def iso(value: datetime) -> str:
    """ISO 8601 text in UTC, as the ledger stores times."""
    return value.astimezone(UTC).isoformat()


def to_sql(value: Any) -> Any:
    """A value as SQLite stores it: times and money as text, statuses as their word."""
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, Decimal):
        return format_money(value)
    if isinstance(value, RowStatus):
        return str(value)
    return value


def batch_values(info: BatchInfo, now: str) -> tuple[Any, ...]:
    """A new batch's stored fields (``START_COLUMNS``), created at ``now``."""
    return tuple(
        now if name == "created_at" else to_sql(getattr(info, name)) for name in START_COLUMNS
    )


def replaced_values(row: LedgerRow, now: str) -> tuple[Any, ...]:
    """What ``replace_rows`` stores of a row: row_id, payee_name, sort_code, account_number,
    amount, reference, source_account, status, error, updated_at (``now``)."""
    return (
        row.row_id,
        row.payee_name,
        row.sort_code,
        row.account_number,
        row.amount_text if row.status is RowStatus.INVALID else format_money(row.amount),
        row.reference,
        row.source_account,
        str(row.status),
        row.error,
        now,
    )


def check_fields(names: Iterable[str], allowed: Collection[str], what: str) -> None:
    """Raise ``ValueError`` for a field that is not ``allowed`` (a programming error)."""
    unknown = set(names) - set(allowed)
    if unknown:
        msg = f"cannot {what} {sorted(unknown)}"
        raise ValueError(msg)


def row_values(verdict: RowVerdict | PlainRow, now: str) -> tuple[Any, ...]:
    """The INSERT values of one verdict: valid rows pending, invalid rows with their reasons.

    A ``PlainRow`` (a bare tuple: validation's fast path) is a valid row.
    """
    if not isinstance(verdict, RowVerdict):
        row, name, sort_code, account, amount, reference, source, row_id = verdict
        pending = str(RowStatus.PENDING)
        return (
            row,
            row_id,
            name,
            sort_code,
            account,
            amount,
            reference,
            source,
            pending,
            None,
            now,
        )
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


ROW_SELECT = ", ".join(ROW_COLUMNS)
"""The row columns in ``LedgerRow`` order, for ``SELECT``s read by ``row_from_values``."""
_STATUSES = {str(status): status for status in RowStatus}


def row_from_values(values: Sequence[Any]) -> LedgerRow:
    """A ``LedgerRow`` from the values of ``SELECT {ROW_SELECT}`` (a plain tuple).

    Positional, with a dict for the status: reading back 100,000 rows at a run's start
    takes a fifth of the time the by-name version took.
    """
    (
        row,
        row_id,
        payee_name,
        sort_code,
        account_number,
        amount_text,
        reference,
        source,
        status,
        account_url,
        payee_url,
        payment_url,
        submission_url,
        intent_at,
        attempts,
        error,
        updated_at,
    ) = values
    try:
        amount = Decimal(amount_text)
    except ArithmeticError:
        # An invalid row keeps its original text
        amount = Decimal(0)
    return LedgerRow(
        row,
        row_id,
        payee_name,
        sort_code,
        account_number,
        amount,
        reference,
        source,
        _STATUSES[status],
        account_url,
        payee_url,
        payment_url,
        submission_url,
        None if intent_at is None else datetime.fromisoformat(intent_at),
        attempts,
        error,
        None if updated_at is None else datetime.fromisoformat(updated_at),
        amount_text,
    )


def batch_from_record(values: Mapping[str, Any]) -> BatchInfo:
    """A ``BatchInfo`` from its record's columns by name (either backend's; a column an
    older ledger lacks is None)."""
    return BatchInfo(**{c.name: _from_sql(c, values.get(c.name)) for c in BATCH_COLUMNS})


def _from_sql(column: Column, value: Any) -> Any:
    if value is None or column.kind in {"text", "integer"}:
        return value
    if column.kind == "money":
        return Decimal(value)
    return datetime.fromisoformat(value)
