"""The run: a validated batch paid through the bank, exactly once, in call order.

The orchestrators call the phases in order: ``_pipeline`` is the run on one screen,
``_schedule`` the paying passes (the first pass and the rounds after it), ``_checks`` the
checks before paying in their order. The phases, in order, each receiving the run's state
(``_state``): ``_start`` (the ledger, new or resumed); ``_preflight`` (organization,
accounts, payees, repeats, changed bank details), with its parts ``_organization``,
``_bankview`` (what the bank said), ``_names``, ``_changed``, ``_payees`` (new payees
checked and created), ``_approvals`` and ``_confirm`` (a live-mode organization's run asks
a person first); ``_execute`` (create and submit under the bank's limits); ``_settle`` and
``_reconcile`` (requests whose answer was lost); ``_track`` (``--wait``). A phase imports
no later phase and no orchestrator; the neutral helpers import neither: ``_book`` (the rows
in memory, written through to the ledger), ``_doubt`` (the rows in doubt held back),
``_submissions`` (what the bank shows of a payment's submissions), ``_matching`` (whether a
bank payment is a row's), ``_stop`` (how a run is asked to stop), ``_gate`` (when a run may
create), ``_refusal`` (what a run says when the bank refuses the key's role mid-run),
``_planned`` (a run of an approved plan keeps to the plan's rows and payees), ``_outcome``
(what a run tells its caller) and ``_lifecycle`` (the client and ledger a run holds).
``_state`` names the phases' products it carries in type-only imports only. The test
tests/test_run_layout.py holds every module to its place. ``payrun check``
(``payrun.readiness``) makes the same first reads, before any run, through
``find_organization``.

Names are imported on first use, so ``payrun`` starts fast and a command that never pays
never loads the bank client.
"""

from __future__ import annotations

import importlib

# Not typing's: ``payrun.__main__`` imports StopSignal from here before catching Ctrl-C
TYPE_CHECKING = False

if TYPE_CHECKING:
    from payrun.run._confirm import AccountPreview as AccountPreview
    from payrun.run._confirm import ConfirmAnswer as ConfirmAnswer
    from payrun.run._confirm import Confirmer as Confirmer
    from payrun.run._confirm import RunPreview as RunPreview
    from payrun.run._lifecycle import event_loop_options as event_loop_options
    from payrun.run._organization import LIVE_MODE as LIVE_MODE
    from payrun.run._organization import KnownOrganization as KnownOrganization
    from payrun.run._organization import ask_organization as ask_organization
    from payrun.run._organization import find_organization as find_organization
    from payrun.run._outcome import QuietObserver as QuietObserver
    from payrun.run._outcome import RunObserver as RunObserver
    from payrun.run._outcome import RunOutcome as RunOutcome
    from payrun.run._outcome import run_exit_code as run_exit_code
    from payrun.run._pipeline import run_batch as run_batch
    from payrun.run._pipeline import run_stored_batch as run_stored_batch
    from payrun.run._start import check_control_totals as check_control_totals
    from payrun.run._start import file_rows as file_rows
    from payrun.run._start import file_sha256 as file_sha256
    from payrun.run._start import open_run_ledger as open_run_ledger
    from payrun.run._stop import STOP_GRACE_SECONDS as STOP_GRACE_SECONDS
    from payrun.run._stop import StopSignal as StopSignal

_HOMES = {
    "LIVE_MODE": "payrun.run._organization",
    "KnownOrganization": "payrun.run._organization",
    "ask_organization": "payrun.run._organization",
    "find_organization": "payrun.run._organization",
    "AccountPreview": "payrun.run._confirm",
    "ConfirmAnswer": "payrun.run._confirm",
    "Confirmer": "payrun.run._confirm",
    "RunPreview": "payrun.run._confirm",
    "QuietObserver": "payrun.run._outcome",
    "RunObserver": "payrun.run._outcome",
    "RunOutcome": "payrun.run._outcome",
    "event_loop_options": "payrun.run._lifecycle",
    "run_batch": "payrun.run._pipeline",
    "run_exit_code": "payrun.run._outcome",
    "run_stored_batch": "payrun.run._pipeline",
    "STOP_GRACE_SECONDS": "payrun.run._stop",
    "StopSignal": "payrun.run._stop",
    "check_control_totals": "payrun.run._start",
    "file_rows": "payrun.run._start",
    "file_sha256": "payrun.run._start",
    "open_run_ledger": "payrun.run._start",
}


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        msg = f"module 'payrun.run' has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


__all__ = [
    "LIVE_MODE",
    "STOP_GRACE_SECONDS",
    "AccountPreview",
    "ConfirmAnswer",
    "Confirmer",
    "KnownOrganization",
    "QuietObserver",
    "RunObserver",
    "RunOutcome",
    "RunPreview",
    "StopSignal",
    "ask_organization",
    "check_control_totals",
    "event_loop_options",
    "file_rows",
    "file_sha256",
    "find_organization",
    "open_run_ledger",
    "run_batch",
    "run_exit_code",
    "run_stored_batch",
]
