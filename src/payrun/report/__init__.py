"""Report, the last stage: every document payrun writes or prints about a batch.

Input: validation verdicts, ledger rows and a run's outcome. Output: tables and summaries
as CSV, .xlsx, JSON or text (``write_table``, ``render_validation``, ``write_report``, the
run summary's ``summary_view`` and ``summary_document``). An .xlsx opens ready to read.
openpyxl is imported only when an .xlsx is written.
"""

from __future__ import annotations

from payrun.report._attention import Cause as Cause
from payrun.report._attention import group_causes as group_causes
from payrun.report._attention import row_ranges as row_ranges
from payrun.report._audit import AUDIT_COLUMNS as AUDIT_COLUMNS
from payrun.report._audit import audit_table as audit_table
from payrun.report._audit import plan_summary_lines as plan_summary_lines
from payrun.report._audit import read_audit_trail as read_audit_trail
from payrun.report._documents import PROBLEM_COLUMNS as PROBLEM_COLUMNS
from payrun.report._documents import TABLE_FORMATS as TABLE_FORMATS
from payrun.report._documents import check_report_path as check_report_path
from payrun.report._documents import csv_cell as csv_cell
from payrun.report._documents import escape_cell as escape_cell
from payrun.report._documents import file_error_document as file_error_document
from payrun.report._documents import render_validation as render_validation
from payrun.report._documents import validation_document as validation_document
from payrun.report._documents import write_error_report as write_error_report
from payrun.report._documents import write_table as write_table
from payrun.report._documents import write_validation_report as write_validation_report
from payrun.report._ledger import REPORT_COLUMNS as REPORT_COLUMNS
from payrun.report._ledger import Totals as Totals
from payrun.report._ledger import ledger_batch_file as ledger_batch_file
from payrun.report._ledger import read_ledger_rows as read_ledger_rows
from payrun.report._ledger import report_records as report_records
from payrun.report._ledger import report_status as report_status
from payrun.report._ledger import report_table as report_table
from payrun.report._summary import dry_run_document as dry_run_document
from payrun.report._summary import dry_run_lines as dry_run_lines
from payrun.report._summary import print_blocks as print_blocks
from payrun.report._summary import render_plain as render_plain
from payrun.report._summary import summary_document as summary_document
from payrun.report._summary import summary_lines as summary_lines
from payrun.report._summary import summary_view as summary_view
from payrun.report._workbook import RECONCILE_COLUMNS as RECONCILE_COLUMNS
from payrun.report._workbook import SUMMARY_COLUMNS as SUMMARY_COLUMNS
from payrun.report._workbook import write_report as write_report

__all__ = [
    "AUDIT_COLUMNS",
    "Cause",
    "PROBLEM_COLUMNS",
    "RECONCILE_COLUMNS",
    "REPORT_COLUMNS",
    "SUMMARY_COLUMNS",
    "TABLE_FORMATS",
    "Totals",
    "audit_table",
    "check_report_path",
    "csv_cell",
    "dry_run_document",
    "dry_run_lines",
    "escape_cell",
    "file_error_document",
    "group_causes",
    "ledger_batch_file",
    "plan_summary_lines",
    "read_audit_trail",
    "read_ledger_rows",
    "render_validation",
    "report_records",
    "report_status",
    "report_table",
    "row_ranges",
    "summary_document",
    "print_blocks",
    "render_plain",
    "summary_lines",
    "summary_view",
    "validation_document",
    "write_error_report",
    "write_report",
    "write_table",
    "write_validation_report",
]
