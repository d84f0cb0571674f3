"""Ledger -> report: one line per batch row, and the run's totals by status and account.

Input: ``LedgerRow`` values (from a ledger, at any time, even mid-run). Output: report
records with the contract's columns and status words, and ``Totals`` for summaries.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from payrun._models import LedgerRow, RowStatus, format_money
from payrun.ledger import LedgerLocation, open_ledger

__all__ = [
    "REPORT_COLUMNS",
    "Totals",
    "ledger_batch_file",
    "read_ledger_rows",
    "report_records",
    "report_status",
    "report_table",
]

REPORT_COLUMNS = (
    "row",
    "row_id",
    "payee_name",
    "amount",
    "reference",
    "status",
    "payment_url",
    "submission_url",
    "error",
)

_REPORTED = {
    # Not known to exist at the bank yet
    RowStatus.CREATING: RowStatus.PENDING,
    # The payment exists; the submit is unconfirmed
    RowStatus.SUBMITTING: RowStatus.CREATED,
}


def report_status(status: RowStatus) -> str:
    """The contract's status word: in-between intents show as the last sure state."""
    return str(_REPORTED.get(status, status))


def read_ledger_rows(path: LedgerLocation) -> list[LedgerRow]:
    """Every row of a ledger, read-only and without its lock (works mid-run)."""
    with open_ledger(path, readonly=True) as ledger:
        return ledger.rows()


def ledger_batch_file(path: LedgerLocation) -> Path | None:
    """The batch file a ledger was made for (None for a ledger without its batch)."""
    with open_ledger(path, readonly=True) as ledger:
        info = ledger.batch()
    return None if info is None else Path(info.file_path)


def report_records(rows: Iterable[LedgerRow]) -> list[dict[str, object]]:
    """One record per row with the report columns."""
    return [
        {
            "row": row.row,
            "row_id": row.row_id or "",
            "payee_name": row.payee_name,
            "amount": format_money(row.amount)
            if row.status is not RowStatus.INVALID
            else row.amount_text,
            "reference": row.reference or "",
            "status": report_status(row.status),
            "payment_url": row.payment_url or "",
            "submission_url": row.submission_url or "",
            "error": row.error or "",
        }
        for row in rows
    ]


def report_table(rows: Iterable[LedgerRow]) -> list[tuple[object, ...]]:
    """The report records as tuples in ``REPORT_COLUMNS`` order (for table writers).

    A valid row's amount is a ``Decimal`` here, so an .xlsx report holds a number (CSV and
    JSON write it as ``1234.50``, like the records); an invalid row's is the file's text.
    """
    rows = list(rows)
    return [
        tuple(
            row.amount if c == "amount" and row.status is not RowStatus.INVALID else record[c]
            for c in REPORT_COLUMNS
        )
        for row, record in zip(rows, report_records(rows), strict=True)
    ]


@dataclass(slots=True)
class Totals:
    """Count and total of rows per reported status, overall and per source account."""

    by_status: dict[str, tuple[int, Decimal]] = field(default_factory=dict)
    by_account: dict[str, dict[str, tuple[int, Decimal]]] = field(default_factory=dict)

    @classmethod
    def of(cls, rows: Iterable[LedgerRow]) -> Totals:
        """Add up ``rows`` (invalid rows count with amount 0 in totals)."""
        totals = cls()
        for row in rows:
            status = report_status(row.status)
            amount = row.amount if row.status is not RowStatus.INVALID else Decimal(0)
            _add(totals.by_status, status, amount)
            if row.status is not RowStatus.INVALID:
                _add(totals.by_account.setdefault(row.source_account, {}), status, amount)
        return totals


def _add(table: dict[str, tuple[int, Decimal]], key: str, amount: Decimal) -> None:
    count, total = table.get(key, (0, Decimal(0)))
    table[key] = (count + 1, total + amount)
