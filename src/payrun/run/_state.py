"""The run's state: one object that every phase of a run receives.

``Caller`` is what the caller gave the run (settings, options, and how it is told progress,
asked to stop and asked to confirm); ``RunState`` adds what the run found once it reached
the bank: the client, the organization, the rows (``RowBook``), the checks' view of the
bank (``Preflight``: accounts, payees, payments), the open ledger (None in a dry run), and
the rows in doubt. Both are frozen: a phase changes rows through the book, never the state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict

from payrun.run._doubt import InDoubt
from payrun.run._outcome import QuietObserver, RunObserver
from payrun.run._stop import StopSignal

if TYPE_CHECKING:
    from payrun.bank import BankClient, Organization
    from payrun.config import RunOptions, Settings
    from payrun.ledger import LedgerStore
    from payrun.run._book import RowBook
    from payrun.run._confirm import Confirmer
    from payrun.run._organization import KnownOrganization
    from payrun.run._preflight import Preflight

__all__ = ["Caller", "RunHooks", "RunState"]


class RunHooks(TypedDict, total=False):
    """How a caller follows a run (all optional): ``observer`` is told progress, ``stop`` is
    how it asks the run to stop, ``confirmer`` asks a person before a live-mode run pays."""

    observer: RunObserver | None
    stop: StopSignal | None
    confirmer: Confirmer | None


@dataclass(frozen=True, slots=True)
class Caller:
    """What the caller gave a run."""

    settings: Settings
    options: RunOptions
    watcher: RunObserver
    stop: StopSignal
    confirmer: Confirmer | None = None
    # What the caller already found of the key's organization (a fleet's route): read
    # again at once with the index and the accounts, used only when the bank agrees
    known: KnownOrganization | None = None

    @classmethod
    def of(cls, settings: Settings, options: RunOptions, hooks: RunHooks) -> Caller:
        """The caller of a run given these ``hooks`` (a quiet observer and a stop signal
        never set when it gave none)."""
        return cls(
            settings=settings,
            options=options,
            watcher=hooks.get("observer") or QuietObserver(),
            stop=hooks.get("stop") or StopSignal(),
            confirmer=hooks.get("confirmer"),
        )


@dataclass(frozen=True, slots=True)
class RunState:
    """One run at the bank: what every phase works with."""

    caller: Caller
    client: BankClient
    org: Organization
    book: RowBook
    checks: Preflight
    # None: a dry run (nothing is written)
    ledger: LedgerStore | None = None
    doubt: InDoubt = field(default_factory=InDoubt)

    @property
    def options(self) -> RunOptions:
        """The run's options."""
        return self.caller.options

    @property
    def watcher(self) -> RunObserver:
        """Who is told the run's progress."""
        return self.caller.watcher

    @property
    def stop(self) -> StopSignal:
        """How the caller asks the run to stop."""
        return self.caller.stop

    @property
    def paying_ledger(self) -> LedgerStore:
        """The open ledger of a run that pays (a dry run has none)."""
        assert self.ledger is not None, "a dry run writes no ledger"
        return self.ledger
