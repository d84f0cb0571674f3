"""A run of an approved plan (``payrun.run._planned``): rows not exactly in the plan are
held, and a payee the plan did not count as new is refused."""

from __future__ import annotations

from decimal import Decimal

import pytest

from payrun._models import ApprovedRows, LedgerRow, RowStatus, plan_key
from payrun.errors import ApprovalError
from payrun.run._book import RowBook
from payrun.run._planned import hold_unplanned, refuse_unplanned_payees


def _row(number: int, amount: str, status: RowStatus = RowStatus.PENDING) -> LedgerRow:
    return LedgerRow(
        row=number,
        row_id=None,
        payee_name="Ada Lovelace",
        sort_code="040004",
        account_number="12345678",
        amount=Decimal(amount),
        reference="NOV",
        source_account="040004 30000001",
        status=status,
        payment_url="/v0/payments/pm.1" if status is RowStatus.CREATED else None,
    )


def test_rows_not_exactly_in_the_plan_are_held() -> None:
    """A changed amount, a row the plan never had, and a created payment not in the plan
    are held; planned and already submitted rows are left as they are."""
    planned = [_row(2, "10.00"), _row(3, "20.00")]
    approved = ApprovedRows("ab" * 32, frozenset(map(plan_key, planned)), frozenset())
    book = RowBook(
        [
            _row(2, "10.00"),
            _row(3, "20.01"),
            _row(4, "5.00"),
            _row(5, "7.00", RowStatus.CREATED),
            _row(6, "8.00", RowStatus.SUBMITTED),
        ]
    )
    hold_unplanned(book, approved)
    statuses = {row.row: row.status for row in book.all()}
    assert statuses == {
        2: RowStatus.PENDING,
        3: RowStatus.HELD,
        4: RowStatus.HELD,
        5: RowStatus.HELD,
        6: RowStatus.SUBMITTED,
    }
    assert "not in the approved plan abababababab" in str(book.get(3).error)


def test_a_new_payee_the_plan_did_not_count_is_refused() -> None:
    """Rows needing a new payee must be among the plan's new-payee rows."""
    approved = ApprovedRows("cd" * 32, frozenset(), frozenset({2}))
    refuse_unplanned_payees([[_row(2, "10.00")]], approved)
    with pytest.raises(ApprovalError, match="row 3 would create a new payee"):
        refuse_unplanned_payees([[_row(2, "10.00"), _row(3, "1.00")]], approved)
