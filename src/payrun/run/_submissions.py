"""A payment's submissions at the bank, and what their final status means for a row.

Shared by the phases that read submissions: ``_approvals`` (before paying: submissions made
in the bank's app), ``_reconcile`` (rows left ``submitting``) and ``_track`` (``--wait``).
Input: rows with a payment, and a ``BankClient``. Output: each row moved to its payment's
latest submission (``submitted``, or ``delivered``/``failed``/``returned`` when final). An
answer about another payment's submission, or one recorded for another row, settles nothing:
it raises ``BankError`` (the run stops, exit 3, and the next run asks again).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio

from payrun._models import LedgerRow, RowStatus
from payrun.errors import AuthError, BankError
from payrun.run._book import RowBook

# The bank client is imported only by runs that talk to a bank
if TYPE_CHECKING:
    from payrun.bank import BankClient, Submission

__all__ = [
    "FINAL_SUBMISSION_STATUSES",
    "adopt_outside_submissions",
    "adopt_resubmissions",
    "final_error",
    "settle_by_submissions",
]

_READ_WORKERS = 20

FINAL_SUBMISSION_STATUSES = {
    "delivered": RowStatus.DELIVERED,
    "failed": RowStatus.FAILED,
    "returned": RowStatus.RETURNED,
}


def final_error(status: str, reason: str | None) -> str | None:
    """What a row's report says of a submission's final status (None when delivered)."""
    if status == "delivered":
        return None
    return (
        f"the bank reports the payment {status}"
        + (f": {reason}" if reason else "")
        + "; it is final for this file: to pay it once the cause is fixed, put the row in"
        " a new file of its own and pay that (and let nobody submit the old payment again in"
        " the bank's app)"
    )


async def adopt_outside_submissions(client: BankClient, book: RowBook) -> None:
    """Record submissions made outside payrun for rows created by an earlier run.

    A payment created with ``--create-only`` is approved (submitted) in the bank's app;
    a row left ``created`` by an earlier run is checked before it is submitted: if its
    payment has a submission, that one is recorded and nothing is sent.
    """
    rows = [r for r in book.in_status(RowStatus.CREATED) if r.payment_url]
    await settle_by_submissions(client, book, rows, none=None)


async def adopt_resubmissions(client: BankClient, book: RowBook) -> None:
    """Record a payment submitted again in the bank's app after its submission failed.

    The bank lets a payment whose submission failed be submitted again (an approver
    retrying in the app): such a row, ``failed`` in the ledger, takes the new submission.
    """
    rows = [r for r in book.in_status(RowStatus.FAILED) if r.payment_url and r.submission_url]
    await settle_by_submissions(client, book, rows, none=None, newer_only=True)


async def settle_by_submissions(
    client: BankClient,
    book: RowBook,
    rows: list[LedgerRow],
    *,
    none: RowStatus | None = RowStatus.CREATED,
    newer_only: bool = False,
) -> None:
    """Each row with a submission at the bank takes the latest one: ``submitted``, or its
    final status when it has one (delivered, failed, returned); a row with none becomes
    ``none`` (or stays as it is when ``none`` is None). ``newer_only``: only a submission
    other than the row's own is taken."""
    if not rows:
        return
    send, receive = anyio.create_memory_object_stream[LedgerRow](max_buffer_size=len(rows))
    for row in rows:
        send.send_nowait(row)
    send.close()

    async def worker() -> None:
        async for row in receive:
            submissions = await _submissions(client, book, row, must_read=none is not None)
            latest = max(submissions, key=lambda s: s.created_at) if submissions else None
            if latest is None:
                if none is not None:
                    book.set(row.row, status=none, error=None)
            elif not (newer_only and latest.url == row.submission_url):
                book.set(
                    row.row,
                    status=FINAL_SUBMISSION_STATUSES.get(latest.status, RowStatus.SUBMITTED),
                    submission_url=latest.url,
                    error=final_error(latest.status, latest.reason)
                    if latest.status in FINAL_SUBMISSION_STATUSES
                    else None,
                )

    with receive:
        async with anyio.create_task_group() as group:
            for _ in range(min(_READ_WORKERS, len(rows))):
                group.start_soon(worker)


def _own(book: RowBook, row: LedgerRow, submissions: list[Submission]) -> list[Submission]:
    """``submissions``, once checked to be the row's payment's: one of another payment, or
    one recorded for another row, makes the answer unusable (``BankError``: the run stops,
    nothing recorded from it, and the next run asks again)."""
    for submission in submissions:
        holder = book.submission_holder(submission.url)
        if submission.payment_url and submission.payment_url != row.payment_url:
            raise _foreign(row, f"{submission.url}, a submission of another payment")
        if holder is not None and holder != row.row:
            raise _foreign(row, f"{submission.url}, the submission recorded for row {holder}")
    return submissions


def _foreign(row: LedgerRow, named: str) -> BankError:
    msg = (
        f"the bank answered a question about the submissions of row {row.row}'s payment"
        f" {row.payment_url} with {named}; nothing was recorded from it and nothing more"
        " is sent: run the same command again to ask again (nothing is paid twice)"
    )
    return BankError(msg)


async def _submissions(
    client: BankClient, book: RowBook, row: LedgerRow, *, must_read: bool
) -> list[Submission]:
    """The payment's submissions (or its latest one), checked to be its own (``_own``).

    A row left submitting must be settled, so a failed read stops the run. For a created
    row whose submissions list cannot be read, the payment itself says whether it has a
    submission: it is submitted only when it has none (the bank does not promise to refuse
    a second live submission); when neither can be read, or the payment read names
    another payment, the run stops (exit 3).
    """
    assert row.payment_url is not None
    try:
        return _own(book, row, await client.payment_submissions(row.payment_url))
    except AuthError:
        raise
    except BankError:
        if must_read:
            raise
    payment = await client.get_payment(row.payment_url)
    if payment.url != row.payment_url:
        raise _foreign(row, f"the payment {payment.url}")
    if payment.latest_submission_url is None:
        return []
    latest = await client.get_submission(payment.latest_submission_url)
    if latest.url != payment.latest_submission_url:
        raise _foreign(row, f"{latest.url}, not its latest submission")
    return _own(book, row, [latest])
