"""A run of an approved plan (``run --plan``) pays the plan's rows and nothing else.

Input: the run's ``RowBook`` and the plan's ``ApprovedRows`` (``RunOptions.plan``). Output:
every row not yet submitted that is not exactly a planned row held (``hold_unplanned``), and
``ApprovalError`` before any payee is created when a row would need a new payee the plan
did not count as new (``refuse_unplanned_payees``). The plan itself, its approvals and the
policy are checked before the run starts (``payrun.approval``); this is the run's own check
on the rows it is about to pay.
"""

from __future__ import annotations

from collections.abc import Iterable

from payrun._models import ApprovedRows, LedgerRow, RowStatus, RowUpdate, plan_key
from payrun.errors import ApprovalError
from payrun.run._book import RowBook

__all__ = ["hold_unplanned", "refuse_unplanned_payees"]


def hold_unplanned(book: RowBook, approved: ApprovedRows) -> None:
    """Hold every row not yet submitted (pending, or created and waiting for its submit)
    whose payment is not exactly one the plan holds."""
    reason = (
        f"not in the approved plan {approved.plan_id[:12]}: it is not paid; to pay it, make"
        " and approve a new plan"
    )
    holds: dict[int, RowUpdate] = {
        row.row: {"status": RowStatus.HELD, "error": reason}
        for row in book.in_status(RowStatus.PENDING, RowStatus.CREATED)
        if plan_key(row) not in approved.rows
    }
    book.set_each(holds)


def refuse_unplanned_payees(new_payees: Iterable[list[LedgerRow]], approved: ApprovedRows) -> None:
    """``ApprovalError`` when a row would create a payee the plan did not count as new (the
    bank's payees changed since the plan was made): nothing has been created yet."""
    for rows in new_payees:
        for row in rows:
            if row.row not in approved.new_payee_rows:
                msg = (
                    f"row {row.row} would create a new payee ({row.payee_name}) that plan"
                    f" {approved.plan_id[:12]} did not count as new (the bank's payees changed"
                    " since): nothing was created; make and approve a new plan"
                )
                raise ApprovalError(msg)
