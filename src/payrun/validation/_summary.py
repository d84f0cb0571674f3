"""The summary of a validated batch: counts, totals per source account, the fingerprint.

Input: ``RowVerdict`` values, one at a time (``BatchSummary.add``), so the caller can stream.
Output: counts, the total of the valid rows, per-account totals, every problem, and the
``BatchFingerprint`` (count, total, sha256 of the normalised valid rows) that later runs
check as control totals.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal

from payrun.domain import PaymentInstruction, RowProblem, RowVerdict, format_money

__all__ = ["AccountTotal", "BatchFingerprint", "BatchSummary", "fingerprint_line"]


@dataclass(slots=True)
class AccountTotal:
    """How many valid rows pay from one source account, and how much."""

    count: int = 0
    total: Decimal = Decimal("0.00")


@dataclass(frozen=True, slots=True)
class BatchFingerprint:
    """Control totals of a batch's valid rows: count, total and a sha256 over them."""

    count: int
    total: Decimal
    sha256: str

    def __str__(self) -> str:
        return f"count {self.count}, total {format_money(self.total)}, sha256 {self.sha256}"


def fingerprint_line(instruction: PaymentInstruction) -> bytes:
    """One valid row in the fingerprint's normal form (tab-separated, newline-ended).

    Names and references cannot hold tabs or newlines (validation rejects control
    characters), so the form is unambiguous.
    """
    return _line_text(instruction).encode("utf-8")


def _line_text(i: PaymentInstruction) -> str:
    return (
        f"{i.payee_name}\t{i.sort_code}\t{i.account_number}\t{format_money(i.amount)}\t"
        f"{i.reference or ''}\t{i.source_account}\t{i.row_id or ''}\n"
    )


_LINES_PER_UPDATE = 1024
"""Fingerprint lines hashed in one ``update``: the same digest, a fifth of the calls."""


class BatchSummary:
    """Running totals of a validation; ``add`` each verdict, then read the fields."""

    def __init__(self, warnings: Iterable[RowProblem] = ()) -> None:
        self.rows = 0
        self.valid = 0
        self.invalid = 0
        self.total = Decimal("0.00")
        self.accounts: dict[str, AccountTotal] = {}
        self.errors: list[RowProblem] = []
        self.warnings: list[RowProblem] = list(warnings)
        self._digest = hashlib.sha256()
        self._lines: list[str] = []

    def add(self, verdict: RowVerdict) -> None:
        """Count one row's verdict and keep its problems."""
        self.rows += 1
        if verdict.errors:
            self.errors.extend(verdict.errors)
        if verdict.warnings:
            self.warnings.extend(verdict.warnings)
        instruction = verdict.instruction
        if instruction is None:
            self.invalid += 1
            return
        self.valid += 1
        self.total += instruction.amount
        self._count(instruction.source_account, instruction.amount)
        self._lines.append(_line_text(instruction))
        if len(self._lines) >= _LINES_PER_UPDATE:
            self._flush()

    def add_valid(
        self, row: int, payee_name: str, sort_code: str, account_number: str, amount: Decimal,
        reference: str | None, source_account: str, row_id: str | None,
    ) -> None:
        """Count one valid row with no problems, from its normalised values.

        ``amount`` must have exactly two decimal places (every validated amount has).
        """
        self.rows += 1
        self.valid += 1
        self.total += amount
        account = self.accounts.get(source_account)
        if account is None:
            account = self.accounts[source_account] = AccountTotal()
        account.count += 1
        account.total += amount
        lines = self._lines
        lines.append(
            f"{payee_name}\t{sort_code}\t{account_number}\t{amount}\t{reference or ''}\t"
            f"{source_account}\t{row_id or ''}\n"
        )
        if len(lines) >= _LINES_PER_UPDATE:
            self._flush()

    def _flush(self) -> None:
        self._digest.update("".join(self._lines).encode("utf-8"))
        self._lines.clear()

    def _count(self, source_account: str, amount: Decimal) -> None:
        account = self.accounts.get(source_account)
        if account is None:
            account = self.accounts[source_account] = AccountTotal()
        account.count += 1
        account.total += amount

    @property
    def all_valid(self) -> bool:
        """True when no row has an error (the exit-0 condition)."""
        return self.invalid == 0

    @property
    def fingerprint(self) -> BatchFingerprint:
        """The control totals of the valid rows seen so far."""
        self._flush()
        return BatchFingerprint(self.valid, self.total, self._digest.hexdigest())
