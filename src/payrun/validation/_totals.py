"""The summary of a validated batch: counts, totals per source account, the fingerprint.

Input: ``RowVerdict`` values, one at a time (``BatchSummary.add``), so the caller can stream.
Output: counts, the total of the valid rows, per-account totals, every problem, and the
``BatchFingerprint`` (count, total, sha256 of the normalised valid rows) that later runs
check as control totals. ``ValidTotals`` is the count and sum alone, of verdicts and plain
rows passing on their way to a ledger (``payrun run`` and ``fleet submit`` check them
against ``--expect-count``/``--expect-total``).
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from decimal import Decimal

from payrun._models import (
    PaymentInstruction,
    PlainRow,
    RowProblem,
    RowVerdict,
    format_money,
    valid_amount,
)
from payrun.validation._plain import Plain

__all__ = ["AccountTotal", "BatchFingerprint", "BatchSummary", "ValidTotals", "fingerprint_line"]


@dataclass(slots=True)
class AccountTotal:
    """How many valid rows pay from one source account, and how much."""

    count: int = 0
    total: Decimal = Decimal("0.00")


@dataclass(slots=True)
class ValidTotals:
    """How many valid rows passed (``count``) and what they pay (``total``)."""

    count: int = 0
    total: Decimal = Decimal(0)

    @classmethod
    def of(cls, verdicts: Iterable[RowVerdict | PlainRow]) -> ValidTotals:
        """The totals of every row of ``verdicts``."""
        totals = cls()
        for _verdict in totals.counted(verdicts):
            pass
        return totals

    def counted(self, verdicts: Iterable[RowVerdict | PlainRow]) -> Iterator[RowVerdict | PlainRow]:
        """Each of ``verdicts`` passed on, the valid ones counted on the way."""
        for verdict in verdicts:
            amount = valid_amount(verdict)
            if amount is not None:
                self.count += 1
                self.total += amount
            yield verdict


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
"""Rows held before their lines are hashed (one ``update``) and amounts summed (C loops)."""
_ZERO = Decimal("0.00")


class BatchSummary:
    """Running totals of a validation; ``add`` each verdict, then read the fields.

    Valid rows are held in batches: their fingerprint lines and amounts (as text, by source
    account) are folded into the totals every ``_LINES_PER_UPDATE`` rows and whenever a
    total is read, so the counts and totals read are always those of every row added.
    """

    def __init__(self, warnings: Iterable[RowProblem] = ()) -> None:
        self.invalid = 0
        self.errors: list[RowProblem] = []
        self.warnings: list[RowProblem] = list(warnings)
        self.names: dict[int, str] = {}
        """The payee name of each row with a problem, as the file gives it."""
        self._rows = 0
        self._valid = 0
        self._total = _ZERO
        self._accounts: dict[str, AccountTotal] = {}
        self._digest = hashlib.sha256()
        self._lines: list[str] = []
        self._amounts: defaultdict[str, list[str]] = defaultdict(list)

    def add(self, verdict: RowVerdict) -> None:
        """Count one row's verdict and keep its problems."""
        if verdict.errors:
            self.errors.extend(verdict.errors)
        if verdict.warnings:
            self.warnings.extend(verdict.warnings)
        instruction = verdict.instruction
        if verdict.errors or verdict.warnings:
            named = instruction.payee_name if instruction else verdict.raw.get("payee_name")
            self.names[verdict.row] = named or ""
        if instruction is None:
            self._rows += 1
            self.invalid += 1
            return
        # every validated amount has two places, so str() is what add_valid is given
        self._amounts[instruction.source_account].append(str(instruction.amount))
        self._lines.append(_line_text(instruction))
        if len(self._lines) >= _LINES_PER_UPDATE:
            self._flush()

    def add_valid(self, fields: Plain) -> None:
        """Count one valid row with no problems, from its normalised values (``Plain``)."""
        self.valid_adder()(fields)

    def valid_adder(self) -> Callable[[Plain], None]:
        """``add_valid`` as a closure over the held lines and amounts (for a hot loop)."""
        lines, amounts, flush = self._lines, self._amounts, self._flush

        def add_valid(fields: Plain) -> None:
            _row, name, sort_code, account, amount, reference, source, row_id = fields
            amounts[source].append(amount)
            lines.append(
                f"{name}\t{sort_code}\t{account}\t{amount}\t{reference or ''}\t"
                f"{source}\t{row_id or ''}\n"
            )
            if len(lines) >= _LINES_PER_UPDATE:
                flush()

        return add_valid

    def _flush(self) -> None:
        """Hash the held lines and add the held amounts to the totals."""
        self._digest.update("".join(self._lines).encode("utf-8"))
        self._lines.clear()
        for source, amounts in self._amounts.items():
            total = sum(map(Decimal, amounts), _ZERO)
            self._rows += len(amounts)
            self._valid += len(amounts)
            self._total += total
            account = self._accounts.get(source)
            if account is None:
                account = self._accounts[source] = AccountTotal()
            account.count += len(amounts)
            account.total += total
        self._amounts.clear()

    @property
    def rows(self) -> int:
        """Rows added so far."""
        self._flush()
        return self._rows

    @property
    def valid(self) -> int:
        """Valid rows added so far."""
        self._flush()
        return self._valid

    @property
    def total(self) -> Decimal:
        """The total of the valid rows added so far."""
        self._flush()
        return self._total

    @property
    def accounts(self) -> dict[str, AccountTotal]:
        """Count and total of the valid rows by source account, in order of first use."""
        self._flush()
        return self._accounts

    @property
    def all_valid(self) -> bool:
        """True when no row has an error (the exit-0 condition)."""
        return self.invalid == 0

    @property
    def fingerprint(self) -> BatchFingerprint:
        """The control totals of the valid rows seen so far."""
        self._flush()
        return BatchFingerprint(self._valid, self._total, self._digest.hexdigest())
