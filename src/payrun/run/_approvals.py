"""Approvals: what people did in the bank's app with payments an earlier run created.

Input: the run's ``RowBook`` (rows left ``created``: their payments wait for a submit, by
this run or by an approver in the bank's app) and a ``BankClient``. Output: rows whose
payment was submitted in the app recorded with that submission (``submitted``), and, on a
``--create-only`` run, rows whose payment was rejected in the app moved to ``rejected``.
Read-only at the bank: nothing is submitted here. Raises ``AuthError``; other failed reads
leave their rows as they are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio

from payrun._models import LedgerRow, RowStatus
from payrun.errors import AuthError, BankError
from payrun.run._book import RowBook
from payrun.run._submissions import adopt_outside_submissions, adopt_resubmissions

# The bank client is imported only by runs that talk to a bank
if TYPE_CHECKING:
    from payrun.bank import BankClient

__all__ = ["refresh_created"]

_READ_WORKERS = 20
_REJECTED = (
    "the payment was rejected at the bank, so it is not paid; if it must still be paid, put"
    " the row in a new file of its own and pay that"
)


async def refresh_created(client: BankClient, book: RowBook, *, create_only: bool) -> None:
    """Bring rows left ``created`` up to date with the bank before this run goes on.

    Every run records the submissions made in the bank's app, a payment whose submission
    failed and that was submitted again there included. A run that submits finds a
    rejected payment out by submitting it (the bank refuses it as rejected); a
    ``--create-only`` run submits nothing, so it reads each waiting payment instead.
    """
    await adopt_outside_submissions(client, book)
    await adopt_resubmissions(client, book)
    if create_only:
        await _mark_rejected(client, book)


async def _mark_rejected(client: BankClient, book: RowBook) -> None:
    """Rows whose payment, still unsubmitted, the bank shows as rejected end ``rejected``."""
    queue = [r for r in book.in_status(RowStatus.CREATED) if r.payment_url]
    queue.reverse()

    async def worker() -> None:
        while queue:
            row = queue.pop()
            if await _is_rejected(client, row):
                book.set(row.row, status=RowStatus.REJECTED, error=_REJECTED)

    async with anyio.create_task_group() as group:
        for _ in range(min(_READ_WORKERS, len(queue))):
            group.start_soon(worker)


async def _is_rejected(client: BankClient, row: LedgerRow) -> bool:
    """True when the bank shows the row's payment rejected; False if it cannot be read, or
    the answer is about another payment (the row stays created: the next run reads it again)."""
    assert row.payment_url is not None
    try:
        payment = await client.get_payment(row.payment_url)
    except AuthError:
        raise
    except BankError:
        return False
    return payment.url == row.payment_url and payment.rejected
