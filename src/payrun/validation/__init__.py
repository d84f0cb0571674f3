"""Validation, stage 2: raw rows -> one ``RowVerdict`` per row (a payment or its problems).

Input: a ``Batch`` from ``payrun.intake`` and ``ValidationOptions``. Output: a stream of
``RowVerdict`` (``validate_rows``) or a ``BatchSummary`` with the fingerprint
(``validate_batch``). Bad rows are data, never exceptions: only ``BatchFileError`` from the
file itself propagates. Duplicate detection is stateful but bounded: 64-bit digests.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

from payrun.config import ValidationOptions
from payrun.domain import RowProblem, RowVerdict
from payrun.intake import COLUMNS, Batch, ColumnSpec, RawRow
from payrun.validation._build import build_instruction
from payrun.validation._damage import damage_problems
from payrun.validation._rules import (
    Problems,
    check_account_number,
    check_amount,
    check_currency,
    check_payee_name,
    check_reference,
    check_sort_code,
    normalize_source_account,
)
from payrun.validation._seen import DigestTable
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

_NOTHING: frozenset[str] = frozenset()
_NO_SOURCE = "no source account: fill in the source_account column or pass --source-account"


def validate_batch(batch: Batch, options: ValidationOptions) -> BatchSummary:
    """Validate every row of ``batch`` and return the summary (consumes ``batch.rows``)."""
    summary = BatchSummary(_header_warnings(batch))
    add, check = summary.add, _RowChecker(batch.columns, options).check
    for raw in batch.rows:  # validate_rows inlined: one generator fewer per row
        add(check(raw))
    return summary


def validate_rows(batch: Batch, options: ValidationOptions) -> Iterator[RowVerdict]:
    """Yield one verdict per data row, in file order, streaming."""
    checker = _RowChecker(batch.columns, options)
    check = checker.check
    for raw in batch.rows:
        yield check(raw)


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


class _RowChecker:
    """The rules plus the state they need across rows (duplicate tables)."""

    def __init__(self, columns: tuple[str, ...], options: ValidationOptions) -> None:
        self._max_amount: Decimal = options.max_amount
        self._allow_duplicates = options.allow_duplicates
        self._default_source = (
            normalize_source_account(options.source_account) if options.source_account else None
        )
        self._has = frozenset(columns)
        self._row_ids = DigestTable()
        self._payments = DigestTable()

    def check(self, raw: RawRow) -> RowVerdict:
        """Apply every rule to one row."""
        values, problems = raw.values, Problems(raw.row)
        skip = damage_problems(raw.damage, values, problems) if raw.damage else _NOTHING
        name = None if "payee_name" in skip else check_payee_name(values["payee_name"], problems)
        sort_code = None if "sort_code" in skip else check_sort_code(values["sort_code"], problems)
        account = None
        if "account_number" not in skip:
            account = check_account_number(values["account_number"], problems)
        amount = None
        if "amount" not in skip:
            amount = check_amount(values["amount"], self._max_amount, problems)
        ok_reference, reference = self._reference(values, skip, problems)
        source = self._source(values, skip, problems)
        row_id = self._row_id(raw, problems)
        if "currency" in self._has and "currency" not in skip:
            check_currency(values["currency"], problems)
        if (
            problems.errors
            or not (name and sort_code and account and amount and source and ok_reference)
            or self._is_repeat(raw.row, (sort_code, account, amount, reference), problems)
        ):
            return RowVerdict(raw.row, None, values, (*problems.errors,), (*problems.warnings,))
        instruction = build_instruction(
            raw.row, name, sort_code, account, amount, reference, source, row_id
        )
        return RowVerdict(raw.row, instruction, values, (), (*problems.warnings,))

    def _reference(
        self, values: dict[str, str], skip: frozenset[str], problems: Problems
    ) -> tuple[bool, str | None]:
        if "reference" not in self._has:
            return True, None
        if "reference" in skip:
            return False, None
        return check_reference(values["reference"], problems)

    def _source(
        self, values: dict[str, str], skip: frozenset[str], problems: Problems
    ) -> str | None:
        text = values.get("source_account", "").strip()
        if "source_account" in skip:
            return None
        if not text:
            if self._default_source is None:
                problems.error("source_account", _NO_SOURCE)
            return self._default_source
        source = normalize_source_account(text)
        if source is None:
            problems.error(
                "source_account",
                f"source account {text!r} is neither an account URL (/v0/bank/accounts/ba.x)"
                " nor SORTCODE ACCOUNTNUMBER (like 040004 30000001)",
            )
        return source

    def _row_id(self, raw: RawRow, problems: Problems) -> str | None:
        row_id = raw.values.get("row_id", "").strip()
        if not row_id:
            return None
        first = self._row_ids.first_row(hash(row_id), raw.row)
        if first:
            problems.error(
                None, f"row_id {row_id!r} repeats row {first}'s: every row needs its own row_id"
            )
        elif not row_id.isprintable():
            problems.error("row_id", "row_id holds a control character (a tab, say): retype it")
        return row_id

    def _is_repeat(
        self, row: int, key: tuple[str, str, Decimal, str | None], problems: Problems
    ) -> bool:
        if self._allow_duplicates:
            return False
        first = self._payments.first_row(hash(key), row)
        if first:
            problems.error(
                None,
                f"same payee, amount and reference as row {first}: a double payment? Remove one"
                " (or pass --allow-duplicates if both are meant)",
            )
        return bool(first)

