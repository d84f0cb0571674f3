"""One row's checks: a fast path for the ordinary row, the full rules for every other.

Input: one row at a time, as its cells (``payrun.intake.Cells``) or its ``RawRow``, and
``ValidationOptions``. Output: from ``RowChecker.check``, a ``RowVerdict``; from
``RowChecker.fast``, the normalised fields of a valid row (``Plain``, a plain tuple), the
error of a repeated row, or ``None`` when the row needs the full rules
(``RowChecker.check``). The fast path (``_plain``) accepts only rows on which every rule
would report nothing, so both paths give the same verdict; it exists because the full
rules cost about 6 us a row and the benchmark's budget is 6-7 us for everything.
State across rows: the two duplicate tables (row ids and payments).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from payrun._models import PaymentInstruction, RowProblem, RowVerdict
from payrun.config import ValidationOptions
from payrun.intake import RawRow
from payrun.validation._damage import damage_problems
from payrun.validation._plain import Plain, PlainCheck, plain_check
from payrun.validation._rules import (
    Problems,
    check_account_number,
    check_amount,
    check_country,
    check_currency,
    check_payee_name,
    check_reference,
    check_sort_code,
    normalize_source_account,
)
from payrun.validation._seen import DigestTable

__all__ = ["RowChecker", "payment_digest"]

_CURRENCIES = ("currency", "source_currency", "amount_currency")
"""Columns that must say GBP when present (Wise's batch file has all three)."""

FastPath = Callable[[int, Sequence[Any]], Plain | RowProblem | None]
_NOTHING: frozenset[str] = frozenset()
_TIDY_ROWS = 4096
"""Rows between the fast path's calls of ``DigestTable.tidy`` (the dict's overshoot)."""
_NO_SOURCE = "no source account: fill in the source_account column or pass --source-account"


def payment_digest(sort_code: str, account: str, amount: Decimal, reference: str | None) -> int:
    """The duplicate-payment digest; ``str(amount)`` is canonical (always 2 places) and,
    unlike a Decimal, cheap to hash (0.06 us against 0.8 us)."""
    return hash((sort_code, account, str(amount), reference))


def _repeated_row_id(row_id: str, first: int) -> str:
    return f"row_id {row_id!r} repeats row {first}'s: every row needs its own row_id"


def _repeated_payment(first: int) -> str:
    return (
        f"same payee, amount and reference as row {first}: a double payment? Remove one"
        " (or pass --allow-duplicates if both are meant)"
    )


class RowChecker:
    """The rules plus the state they need across rows (duplicate tables).

    ``positions`` says where each column's cell sits in the lists given to ``fast`` and
    ``verdict`` (the header's file indexes); by default, the order of ``columns``.
    """

    def __init__(
        self,
        columns: tuple[str, ...],
        options: ValidationOptions,
        positions: Mapping[str, int] | None = None,
    ) -> None:
        self._max_amount: Decimal = options.max_amount
        self._allow_duplicates = options.allow_duplicates
        self._default_source = (
            normalize_source_account(options.source_account) if options.source_account else None
        )
        self._has = frozenset(columns)
        self._has_reference = "reference" in self._has
        self._row_ids = DigestTable()
        self._payments = DigestTable()
        if positions is None:
            positions = {column: index for index, column in enumerate(columns)}
        self.fast = self._fast_path(plain_check(positions, self._max_amount, self._default_source))
        """A plain row's fields (or the error of a repeat); ``None``: use ``check`` instead."""

    def _fast_path(self, plain: PlainCheck) -> FastPath:
        """``fast``: ``plain`` plus the duplicate checks, as a closure (no attribute loads)."""
        row_ids, payments = self._row_ids, self._payments
        allow_duplicates = self._allow_duplicates
        tidy_at = 0

        def fast(row: int, cells: Sequence[Any]) -> Plain | RowProblem | None:
            nonlocal tidy_at
            fields = plain(row, cells)
            if fields is None:
                return None
            # Row numbers only grow: tidy every _TIDY_ROWS rows
            if row >= tidy_at:
                row_ids.tidy()
                payments.tidy()
                tidy_at = row + _TIDY_ROWS
            row_id = fields[7]
            if row_id is not None and (first := row_ids.remember(hash(row_id), row)) != row:
                return RowProblem(row, None, _repeated_row_id(row_id, first))
            # fields[4] is str() of the amount's Decimal: the same digest as payment_digest
            if not allow_duplicates and (first := payments.remember(hash(fields[2:6]), row)) != row:
                return RowProblem(row, None, _repeated_payment(first))
            return fields

        return fast

    def verdict(self, raw: RawRow, cells: Sequence[Any] | None = None) -> RowVerdict:
        """Apply every rule to one row, the fast path first when its ``cells`` are given."""
        fields = None if cells is None else self.fast(raw.row, cells)
        if fields is None:
            return self.check(raw)
        if isinstance(fields, RowProblem):
            return RowVerdict(raw.row, None, raw.values, (fields,))
        row, name, sort_code, account, amount, reference, source, row_id = fields
        instruction = PaymentInstruction(
            row, name, sort_code, account, Decimal(amount), reference, source, row_id
        )
        return RowVerdict(raw.row, instruction, raw.values)

    def check(self, raw: RawRow) -> RowVerdict:
        """Apply every rule to one row (the full rules, with every message)."""
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
        for column in _CURRENCIES:
            if column in self._has and column not in skip:
                check_currency(values[column], problems, column)
        if "country" in self._has and "country" not in skip:
            check_country(values["country"], problems)
        if (
            problems.errors
            or not (name and sort_code and account and amount and source and ok_reference)
            or self._is_repeat(raw.row, (sort_code, account, amount, reference), problems)
        ):
            return RowVerdict(raw.row, None, values, (*problems.errors,), (*problems.warnings,))
        instruction = PaymentInstruction(
            raw.row, name, sort_code, account, amount, reference, source, row_id
        )
        return RowVerdict(raw.row, instruction, values, (), (*problems.warnings,))

    def _reference(
        self, values: dict[str, str], skip: frozenset[str], problems: Problems
    ) -> tuple[bool, str | None]:
        if not self._has_reference:
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
            problems.error(None, _repeated_row_id(row_id, first))
        elif not row_id.isprintable():
            problems.error("row_id", "row_id holds a control character (a tab, say): retype it")
        return row_id

    def _is_repeat(
        self, row: int, key: tuple[str, str, Decimal, str | None], problems: Problems
    ) -> bool:
        if self._allow_duplicates:
            return False
        first = self._payments.first_row(payment_digest(*key), row)
        if first:
            problems.error(None, _repeated_payment(first))
        return bool(first)
