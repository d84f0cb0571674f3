"""Validation, stage 2: raw rows -> one ``RowVerdict`` per row (a payment or its problems).

Input: a ``Batch`` from ``payrun.intake`` and ``ValidationOptions``. Output: a stream of
``RowVerdict`` (``validate_rows``), the same with plain valid rows as bare ``PlainRow``
fields (``plain_or_verdicts``: what a run records, no pydantic model built), or a
``BatchSummary`` with the fingerprint (``validate_batch``). Bad rows are data, never
exceptions: only ``BatchFileError`` from the file itself propagates. Duplicate detection is
stateful but bounded: 64-bit digests.
"""

from __future__ import annotations

from collections.abc import Iterator

from payrun._models import PlainRow, RowProblem, RowVerdict
from payrun.config import ValidationOptions
from payrun.intake import COLUMNS, Batch, ColumnSpec
from payrun.validation._checker import RowChecker
from payrun.validation._rules import normalize_source_account
from payrun.validation._totals import AccountTotal, BatchFingerprint, BatchSummary, ValidTotals

__all__ = [
    "COLUMNS",
    "AccountTotal",
    "BatchFingerprint",
    "BatchSummary",
    "ColumnSpec",
    "ValidTotals",
    "normalize_source_account",
    "plain_or_verdicts",
    "validate_batch",
    "validate_rows",
]


def validate_batch(batch: Batch, options: ValidationOptions) -> BatchSummary:
    """Validate every row of ``batch`` and return the summary (consumes ``batch.cells``).

    A plain valid row goes straight from its cells into the summary: no dict, ``RawRow``,
    ``PaymentInstruction`` or ``RowVerdict`` is built for it.
    """
    summary = BatchSummary(_header_warnings(batch))
    add, add_valid = summary.add, summary.valid_adder()
    for item in plain_or_verdicts(batch, options):
        if isinstance(item, RowVerdict):
            add(item)
        else:
            add_valid(item)
    return summary


def plain_or_verdicts(batch: Batch, options: ValidationOptions) -> Iterator[PlainRow | RowVerdict]:
    """Yield, in file order, a plain valid row's fields, or the row's full ``RowVerdict``.

    Tell them apart with ``isinstance(item, RowVerdict)``. Rows with anything to report
    (an error, a warning, an unusual cell) come as verdicts.
    """
    checker = RowChecker(batch.columns, options, dict(batch.header.positions))
    fast, check, raw_row = checker.fast, checker.check, batch.raw_row
    for number, cells, usual in batch.cells:
        fields = fast(number, cells) if usual else None
        if fields is None:
            yield check(raw_row(number, cells))
        elif isinstance(fields, RowProblem):
            yield RowVerdict(number, None, raw_row(number, cells).values, (fields,))
        else:
            yield fields


def validate_rows(batch: Batch, options: ValidationOptions) -> Iterator[RowVerdict]:
    """Yield one verdict per data row, in file order, streaming."""
    verdict = RowChecker(batch.columns, options, dict(batch.header.positions)).verdict
    raw_row = batch.raw_row
    for number, cells, usual in batch.cells:
        yield verdict(raw_row(number, cells), cells if usual else None)


def _header_warnings(batch: Batch) -> list[RowProblem]:
    warnings = list(batch.warnings)
    if "reference" not in batch.columns:
        warnings.append(
            RowProblem(
                1,
                "reference",
                'no reference column: every payment will say "Sent from <account owner>"',
            )
        )
    return warnings
