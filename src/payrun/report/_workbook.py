"""The run report as a file: CSV and JSON with the contract's columns, .xlsx ready to read.

Input: ledger rows and a path. Output: the report written atomically, its format chosen by
the path's extension. CSV and JSON hold exactly ``REPORT_COLUMNS``. The .xlsx adds, after
those columns, what a person needs to tick the rows off against a bank statement
(``RECONCILE_COLUMNS``: the payee's sort code and account number, the account paid from,
when the row was paid), and a second sheet, ``summary``, with rows and amounts per status
and per source account. Raises ``ConfigError`` as ``write_table`` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import IO, Any

from payrun._models import AuditEntry, LedgerRow, RowStatus
from payrun.report._audit import AUDIT_COLUMNS, audit_table, plan_summary_lines
from payrun.report._documents import atomic_write, write_table
from payrun.report._ledger import REPORT_COLUMNS, Totals, report_table
from payrun.report._sheet import add_sheet

__all__ = ["RECONCILE_COLUMNS", "SUMMARY_COLUMNS", "write_report"]

RECONCILE_COLUMNS = ("sort_code", "account_number", "source_account", "paid_at_utc")
"""The .xlsx report's columns after ``REPORT_COLUMNS``; paid_at_utc is set for rows
submitted or delivered (when the row reached that state)."""
SUMMARY_COLUMNS = ("source_account", "status", "rows", "amount")
_PAID = frozenset({RowStatus.SUBMITTED, RowStatus.DELIVERED})
_ALL = "all accounts"


def write_report(
    path: Path | str, rows: Sequence[LedgerRow], *, audit: Sequence[AuditEntry] = ()
) -> None:
    """Write the report of ``rows`` to ``path`` (.csv, .json or .xlsx); an .xlsx's summary
    names the plan paid (``audit``: the ledger's audit trail) and an ``audit`` sheet holds
    the trail."""
    target = Path(path)
    if target.suffix.lower() != ".xlsx":
        write_table(target, REPORT_COLUMNS, report_table(rows))
        return
    atomic_write(target, "wb", lambda handle: _write_book(handle, rows, audit))


def _write_book(
    handle: IO[Any], rows: Sequence[LedgerRow], audit: Sequence[AuditEntry] = ()
) -> None:
    from openpyxl import Workbook  # type: ignore[import-untyped]

    book = Workbook(write_only=True)
    lines = [(*line, *_reconcile(row)) for row, line in zip(rows, report_table(rows), strict=True)]
    add_sheet(book, "report", (*REPORT_COLUMNS, *RECONCILE_COLUMNS), lines)
    summary = _summary_lines(Totals.of(rows))
    # The filter covers the per-status lines, not the notes under them
    plan = plan_summary_lines(audit)
    add_sheet(book, "summary", SUMMARY_COLUMNS, summary + plan, filter_rows=len(summary))
    if audit:
        add_sheet(book, "audit", AUDIT_COLUMNS, audit_table(audit))
    book.save(handle)


def _reconcile(row: LedgerRow) -> tuple[object, ...]:
    """The statement's side of a row: payee account, paying account, when it was paid."""
    paid = row.updated_at if row.status in _PAID else None
    return (row.sort_code, row.account_number, row.source_account, paid)


def _summary_lines(totals: Totals) -> list[tuple[object, ...]]:
    """Rows and amount per status, for all accounts and then per source account, each
    group ending with its total. An invalid row's amount is left empty (not money)."""
    lines: list[tuple[object, ...]] = []
    groups = [(_ALL, totals.by_status), *sorted(totals.by_account.items())]
    for account, table in groups:
        count_all, total_all = 0, Decimal(0)
        for status, (count, total) in sorted(table.items()):
            amount = None if status == RowStatus.INVALID else total
            lines.append((account, status, count, amount))
            count_all, total_all = count_all + count, total_all + total
        lines.append((account, "total", count_all, total_all))
    return lines
