"""What a run says when the bank refuses the API key's role after payments were created.

Input: the bank's ``AuthError`` (401/403) and every row as recorded when the run stopped.
Output: a ``RefusedMidRunError`` whose message names what was done (payments created and
not submitted, submitted, not sent yet) and what to do next, carrying the rows so that the
CLI still prints the summary and writes the report; or the ``AuthError`` unchanged when no
payment of the batch exists yet (nothing was sent: one line, exit 2, as before).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from payrun._models import LedgerRow, RowStatus
from payrun.errors import AuthError, RefusedMidRunError

__all__ = ["refused_mid_run"]

_SUBMITTED = (RowStatus.SUBMITTED, RowStatus.DELIVERED)
_UNKNOWN = (RowStatus.CREATING, RowStatus.SUBMITTING)


def _count(number: int, what: str) -> str:
    noun = "payment" if number == 1 else "payments"
    return f"{number} {noun} {what}"


def _done(counts: Counter[RowStatus]) -> list[str]:
    """What the batch's rows have come to, in the words of someone paying them."""
    done = []
    if created := counts[RowStatus.CREATED]:
        done.append(_count(created, "created and not submitted (no money has left for them)"))
    if submitted := sum(counts[s] for s in _SUBMITTED):
        done.append(_count(submitted, "submitted"))
    if unknown := sum(counts[s] for s in _UNKNOWN):
        done.append(_count(unknown, "whose last request's answer was lost (checked next run)"))
    if pending := counts[RowStatus.PENDING]:
        done.append(f"{pending} {'row' if pending == 1 else 'rows'} not sent yet")
    return done


def refused_mid_run(
    error: AuthError,
    rows: Sequence[LedgerRow],
    *,
    reading: bool = False,
    create_only: bool = False,
) -> AuthError:
    """The refusal to raise: with what was done and what next once any payment exists.

    ``reading`` says the refused request was a read of the submissions (``--wait``): the
    payments stand and only following them failed. ``create_only``: the run submits none.
    """
    if isinstance(error, RefusedMidRunError) or not any(row.payment_url for row in rows):
        return error
    counts = Counter(row.status for row in rows)
    if reading:
        advice = (
            "The payments stand: to follow them to delivered, run the same command again with"
            " an API key whose role may read submissions or events (nothing is paid twice),"
            " or without --wait"
        )
    else:
        advice = (
            "To finish, run the same command again with an API key whose role may"
            f" {'create' if create_only else 'create and submit'} payments: nothing is"
            " created or submitted twice"
        )
        if counts[RowStatus.CREATED]:
            advice += (
                "; or approve the created payments in the bank's app, and the next run"
                " records them instead of submitting them again"
            )
    done = ", ".join(_done(counts)) or "see the summary"
    message = f"{error}. Done so far: {done}. {advice}."
    return RefusedMidRunError(
        message, rows=rows, status=error.status, code=error.code, detail=error.detail
    )
