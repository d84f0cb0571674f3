"""``payrun serve``: the review-and-approve page a payroll team works in.

Routes (``_app``) call the same library functions the CLI does and render Jinja2 templates
(``templates/``); uploads are kept and checked in ``_batches``; plans and runs are
``payrun plan`` and ``payrun run --plan`` child processes whose state is read back from
their files and the ledger (``_runs``, ``_plans``); users and approvers' keys live in the
users file (``_users``); ``_server`` serves it with uvicorn.
"""

from __future__ import annotations

from payrun.serve._app import ServeConfig as ServeConfig
from payrun.serve._app import create_app as create_app
from payrun.serve._batches import MAX_UPLOAD_BYTES as MAX_UPLOAD_BYTES
from payrun.serve._runs import Bank as Bank
from payrun.serve._server import serve as serve
from payrun.serve._server import session_key as session_key
from payrun.serve._users import ROLES as ROLES
from payrun.serve._users import add_user as add_user
from payrun.serve._users import key_path as key_path
from payrun.serve._users import load_users as load_users
from payrun.serve._users import write_private as write_private

__all__ = [
    "MAX_UPLOAD_BYTES",
    "ROLES",
    "Bank",
    "ServeConfig",
    "add_user",
    "create_app",
    "key_path",
    "load_users",
    "serve",
    "session_key",
    "write_private",
]
