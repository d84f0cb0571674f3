"""The result ledger: one SQLite file per batch that makes reruns exactly-once.

Input: the batch's rows (``RowVerdict``) and every state change of a run. Output: durable
``LedgerRow`` records a later run resumes from. WAL mode with ``synchronous=NORMAL``
survives a process crash (kill -9); every write goes through ``atomic()``, and the
execution stage commits an *intent* (``creating``/``submitting`` with its time) before each
POST and the outcome after it. A lock file stops two runs of one ledger at once, and a
machine-wide register (``take_batch_lock``) two runs paying the same rows at one bank.
Raises ``LedgerError`` (and subclasses); ``sqlite3`` errors are translated here only.
"""

from __future__ import annotations

from payrun.ledger._discard import discard_if_refused as discard_if_refused
from payrun.ledger._lock import bank_identity as bank_identity
from payrun.ledger._lock import release_lock as release_lock
from payrun.ledger._lock import take_lock as take_lock
from payrun.ledger._records import BatchInfo as BatchInfo
from payrun.ledger._records import LedgerRow as LedgerRow
from payrun.ledger._records import utc_now as utc_now
from payrun.ledger._running import BatchLock as BatchLock
from payrun.ledger._running import check_batch_lock as check_batch_lock
from payrun.ledger._running import take_batch_lock as take_batch_lock
from payrun.ledger._store import Ledger as Ledger
from payrun.ledger._store import default_ledger_path as default_ledger_path

__all__ = [
    "BatchInfo",
    "BatchLock",
    "Ledger",
    "LedgerRow",
    "bank_identity",
    "check_batch_lock",
    "default_ledger_path",
    "discard_if_refused",
    "release_lock",
    "take_lock",
    "take_batch_lock",
    "utc_now",
]
