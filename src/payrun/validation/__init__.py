"""Validation, stage 2: raw rows -> one ``RowVerdict`` per row (a payment or its problems).

Input: a ``Batch`` from ``payrun.intake`` and ``ValidationOptions``. Output: a stream of
``RowVerdict`` (``validate_rows``) or a ``BatchSummary`` with the fingerprint
(``validate_batch``). Bad rows are data, never exceptions: only ``BatchFileError`` from the
file itself propagates. Duplicate detection is stateful but bounded: 64-bit digests.
"""

from __future__ import annotations

from collections.abc import Iterator

from payrun.config import ValidationOptions
from payrun.domain import RowProblem, RowVerdict
from payrun.intake import COLUMNS, Batch, ColumnSpec
from payrun.validation._checker import RowChecker
from payrun.validation._rules import normalize_source_account
from payrun.validation._summary import AccountTotal, BatchFingerprint, BatchSummary

__all__ = [
    "COLUMNS",
    "AccountTotal",
    "BatchFingerprint",
    "BatchSummary",
    "ColumnSpec",
    "normalize_source_account",
    "validate_batch",
    "validate_rows",
]


def validate_batch(batch: Batch, options: ValidationOptions) -> BatchSummary:
    """Validate every row of ``batch`` and return the summary (consumes ``batch.rows``).

    A plain valid row goes straight from its normalised values into the summary: no
    ``PaymentInstruction`` or ``RowVerdict`` is built for it (about 1.5 us a row saved).
    """
    summary = BatchSummary(_header_warnings(batch))
    add, add_valid = summary.add, summary.add_valid
    checker = RowChecker(batch.columns, options)
    fast, check = checker.fast, checker.check
    for raw in batch.rows:
        fields = fast(raw)
        if fields is None:
            add(check(raw))
        elif isinstance(fields, RowVerdict):
            add(fields)
        else:
            add_valid(*fields)
    return summary


def validate_rows(batch: Batch, options: ValidationOptions) -> Iterator[RowVerdict]:
    """Yield one verdict per data row, in file order, streaming."""
    verdict = RowChecker(batch.columns, options).verdict
    for raw in batch.rows:
        yield verdict(raw)


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
