"""payrun: pay a whole batch file of UK payments through the bank's REST API, exactly once.

The data flow, one module per stage: file -> rows (``intake``) -> validated payments
(``validation``) -> plan (``planning``) -> execution against the bank (``execution``)
-> ledger (``ledger``) -> report (``reporting``). The re-exports below are the library API.
"""

from __future__ import annotations

from payrun.errors import PayrunError as PayrunError

__all__ = ["PayrunError"]
