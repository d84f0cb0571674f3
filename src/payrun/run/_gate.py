"""The gate before anything is created at the bank: when a run may create payees and payments.

Input: the bank accounts a run checks, and whether its organization is in live mode.
Output: ``WriteGate.wait()``, which an account's payee and payment creates await first.

An account is *checked* once its reads are done and its read-only checks recorded (account
problem, repeats, balance, payees to reuse). In live mode nothing is created until every
account is checked and the gate is ``open``-ed by the run (which first tells the user what
it will pay, and, once the run asks for one, their confirmation); in test mode an account's
creates go ahead as soon as that account is checked. A gate that ``fail``-s (a read failed,
a stop) lets nothing more through.
"""

from __future__ import annotations

from collections.abc import Iterable

import anyio

__all__ = ["WriteGate"]


class WriteGate:
    """Holds creates back until the run allows them: at once (test mode) or once every
    account is checked and the run opens the gate (live mode)."""

    def __init__(self, accounts: Iterable[str], *, hold: bool) -> None:
        self._unchecked = set(accounts)
        self._hold = hold
        self._all_checked = anyio.Event()
        self._opened = anyio.Event()
        self._failed = False

    @property
    def holds(self) -> bool:
        """True when creates wait for every account's checks (live mode)."""
        return self._hold

    @property
    def failed(self) -> bool:
        """True once nothing more may be created."""
        return self._failed

    def checked(self, account_url: str) -> None:
        """The account's read-only checks are recorded (the last one: all are checked)."""
        self._unchecked.discard(account_url)
        if not self._unchecked:
            self._all_checked.set()

    def checked_all(self) -> None:
        """Every account's read-only checks are recorded (there may be none)."""
        self._unchecked.clear()
        self._all_checked.set()

    async def all_checked(self) -> bool:
        """Wait until every account is checked; False if the gate failed first."""
        await self._all_checked.wait()
        return not self._failed

    def open(self) -> None:
        """Let the creates through (live mode: the run has shown what it will pay)."""
        self._opened.set()

    def fail(self) -> None:
        """Let nothing more through; every waiter is told so."""
        self._failed = True
        self._all_checked.set()
        self._opened.set()

    async def wait(self) -> bool:
        """Before a create: True to go ahead, False when the gate failed (create nothing)."""
        if self._hold:
            await self._opened.wait()
        return not self._failed
