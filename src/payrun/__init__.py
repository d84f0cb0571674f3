"""payrun: pay a whole batch file of UK payments through the bank's REST API, exactly once.

The data flow is the folder tree: file -> rows (``intake``) -> verdicts (``validation``)
-> the run (``run``: start, preflight, execute, reconcile, track) -> ledger (``ledger``)
-> report (``report``), with the bank (``bank``) and the ledger as the run's two seams.
The re-exports below are the library API; the ``payrun`` command (``payrun.cli``) is a
thin shell over them.
"""

from __future__ import annotations

import importlib

# Not typing's: importing typing would cost the command's first milliseconds (see __main__)
TYPE_CHECKING = False

if TYPE_CHECKING:
    from payrun._models import PaymentInstruction as PaymentInstruction
    from payrun._models import RowProblem as RowProblem
    from payrun._models import RowStatus as RowStatus
    from payrun._models import RowVerdict as RowVerdict
    from payrun.config import RunOptions as RunOptions
    from payrun.config import Settings as Settings
    from payrun.config import ValidationOptions as ValidationOptions
    from payrun.config import load_settings as load_settings
    from payrun.errors import PayrunError as PayrunError
    from payrun.intake import read_batch as read_batch
    from payrun.ledger import Ledger as Ledger
    from payrun.report import read_ledger_rows as read_ledger_rows
    from payrun.report import write_table as write_table
    from payrun.run import RunOutcome as RunOutcome
    from payrun.run import run_batch as run_batch
    from payrun.validation import validate_batch as validate_batch
    from payrun.validation import validate_rows as validate_rows

__version__ = "0.1.0"
"""The package's version (pyproject.toml reads it from here)."""

_HOMES = {
    "RunOptions": "payrun.config",
    "Settings": "payrun.config",
    "ValidationOptions": "payrun.config",
    "load_settings": "payrun.config",
    "PayrunError": "payrun.errors",
    "PaymentInstruction": "payrun._models",
    "RowProblem": "payrun._models",
    "RowStatus": "payrun._models",
    "RowVerdict": "payrun._models",
    "read_batch": "payrun.intake",
    "Ledger": "payrun.ledger",
    "read_ledger_rows": "payrun.report",
    "RunOutcome": "payrun.run",
    "run_batch": "payrun.run",
    "write_table": "payrun.report",
    "validate_batch": "payrun.validation",
    "validate_rows": "payrun.validation",
}
"""Where each re-exported name lives: imported on first use, so that ``payrun`` starts
fast (the command line must answer Ctrl-C within a few milliseconds of starting)."""


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        msg = f"module 'payrun' has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


__all__ = [
    "__version__",
    "Ledger",
    "PaymentInstruction",
    "PayrunError",
    "RowProblem",
    "RowStatus",
    "RowVerdict",
    "RunOptions",
    "RunOutcome",
    "Settings",
    "ValidationOptions",
    "load_settings",
    "read_batch",
    "read_ledger_rows",
    "run_batch",
    "validate_batch",
    "validate_rows",
    "write_table",
]
