"""A new ledger that its first run never used is removed, so no stray ledger is left bound
to a bank (a later run of it would hold every row another ledger paid as a repeat)."""

from __future__ import annotations

from payrun.errors import AuthError, LedgerError, LedgerLockedError, LedgerMismatchError, UsageError
from payrun.ledger._protocol import LedgerStore

__all__ = ["discard_if_refused"]

_REFUSALS = (UsageError, AuthError, LedgerLockedError, LedgerMismatchError)


def discard_if_refused(ledger: LedgerStore, error: BaseException) -> None:
    """Close and remove a new ledger whose first run was refused (exit 2: settings, key,
    lock) before any row was sent; a run cut short (exit 3) keeps it, to be run again."""
    if _refused(error) and _never_sent(ledger):
        ledger.discard()


def _refused(error: BaseException) -> bool:
    if isinstance(error, BaseExceptionGroup):
        return all(_refused(inner) for inner in error.exceptions)
    return isinstance(error, _REFUSALS)


def _never_sent(ledger: LedgerStore) -> bool:
    """True when no row of the ledger was ever sent to the bank (no intent, no payment)."""
    try:
        return not any(row.attempts or row.payment_url for row in ledger.rows())
    except LedgerError:
        # Unreadable: keep it
        return False
