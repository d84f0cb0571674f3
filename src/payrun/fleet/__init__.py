"""payrun fleet: many organizations' batches paid across machines, on Temporal and PostgreSQL.

``submit`` (``_submit``) checks a manifest's batch files as ``payrun run`` does, stores
their rows in the ledger database and signals one Temporal workflow per organization lane
(``_workflow``: base URL + key name; one batch of a lane pays at a time). Workers
(``_worker``) run each batch as one long, heartbeating activity (``_activities``) with the
engine of ``payrun run`` over the PostgreSQL ledger. ``_store`` is the fleet's own table
(which bank, which key, the cut-off, where each batch stands); ``_manifest`` reads the
manifest. Only batch names and cut-offs enter Temporal's history.

Names are imported on first use: temporalio loads only for the fleet commands.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from payrun.fleet._manifest import KEY_GROUP as KEY_GROUP
    from payrun.fleet._manifest import BatchEntry as BatchEntry
    from payrun.fleet._manifest import load_manifest as load_manifest
    from payrun.fleet._overview import FleetOverview as FleetOverview
    from payrun.fleet._overview import overview as overview
    from payrun.fleet._overview import select_batches as select_batches
    from payrun.fleet._processes import CHILD_OPTION as CHILD_OPTION
    from payrun.fleet._processes import child_command as child_command
    from payrun.fleet._processes import default_processes as default_processes
    from payrun.fleet._processes import listen_to_parent as listen_to_parent
    from payrun.fleet._processes import split_batches as split_batches
    from payrun.fleet._processes import supervise as supervise
    from payrun.fleet._store import FleetBatch as FleetBatch
    from payrun.fleet._store import FleetStore as FleetStore
    from payrun.fleet._submit import SubmitOptions as SubmitOptions
    from payrun.fleet._submit import fleet_exit_code as fleet_exit_code
    from payrun.fleet._submit import follow as follow
    from payrun.fleet._submit import requeuer as requeuer
    from payrun.fleet._submit import submit as submit
    from payrun.fleet._worker import WorkerOptions as WorkerOptions
    from payrun.fleet._worker import check_worker_start as check_worker_start
    from payrun.fleet._worker import run_worker as run_worker

_HOMES = {
    "KEY_GROUP": "payrun.fleet._manifest",
    "BatchEntry": "payrun.fleet._manifest",
    "load_manifest": "payrun.fleet._manifest",
    "FleetOverview": "payrun.fleet._overview",
    "overview": "payrun.fleet._overview",
    "select_batches": "payrun.fleet._overview",
    "CHILD_OPTION": "payrun.fleet._processes",
    "child_command": "payrun.fleet._processes",
    "default_processes": "payrun.fleet._processes",
    "listen_to_parent": "payrun.fleet._processes",
    "split_batches": "payrun.fleet._processes",
    "supervise": "payrun.fleet._processes",
    "FleetBatch": "payrun.fleet._store",
    "FleetStore": "payrun.fleet._store",
    "SubmitOptions": "payrun.fleet._submit",
    "fleet_exit_code": "payrun.fleet._submit",
    "follow": "payrun.fleet._submit",
    "requeuer": "payrun.fleet._submit",
    "submit": "payrun.fleet._submit",
    "WorkerOptions": "payrun.fleet._worker",
    "check_worker_start": "payrun.fleet._worker",
    "run_worker": "payrun.fleet._worker",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        msg = f"module 'payrun.fleet' has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


__all__ = sorted(_HOMES)
