"""The sandbox bank: the bank API of ``bank-api.md`` served from this machine.

It models the bank, not the client, so it imports nothing from the rest of payrun: a
wire-format mistake in ``payrun.bank`` cannot be copied into it.

- ``create_app(state=None, *, latency_ms=0, jitter_ms=0, fault_rate=0.0,
  extra_429_rate=0.0, deliver_after_ms=200, seed=None, api_key=None, fault_kinds=("500",
  "drop"), rng_seed=None)`` returns the ASGI app (use it with ``httpx.ASGITransport``);
  ``app.state.sandbox`` (or ``app.sandbox``) is its ``SandboxState``, ``app.api_key`` its
  secret (random per start unless ``api_key`` is given).
- ``serve_in_thread(**create_app_kwargs)`` serves it with uvicorn on ``127.0.0.1`` port 0
  and yields a ``RunningSandbox`` with ``base_url``, ``api_key``, ``state`` and ``app``.
- ``default_seed()``, ``load_seed(path)`` and ``build_state(seed)``: the starting state
  (the JSON format is documented in ``payrun.sandbox.seed``).
- ``/__sandbox/stats`` and the other test controls are documented in ``payrun.sandbox._admin``.
"""

from __future__ import annotations

from payrun.sandbox.app import ACCOUNT_SUBMITS_CAP as ACCOUNT_SUBMITS_CAP
from payrun.sandbox.app import ORG_IN_FLIGHT_CAP as ORG_IN_FLIGHT_CAP
from payrun.sandbox.app import InjectedDropError as InjectedDropError
from payrun.sandbox.app import SandboxApp as SandboxApp
from payrun.sandbox.app import create_app as create_app
from payrun.sandbox.seed import MAX_PUBLIC_KEY_FILE_BYTES as MAX_PUBLIC_KEY_FILE_BYTES
from payrun.sandbox.seed import MAX_SEED_BYTES as MAX_SEED_BYTES
from payrun.sandbox.seed import SeedError as SeedError
from payrun.sandbox.seed import build_state as build_state
from payrun.sandbox.seed import default_seed as default_seed
from payrun.sandbox.seed import load_seed as load_seed
from payrun.sandbox.server import RunningSandbox as RunningSandbox
from payrun.sandbox.server import serve as serve
from payrun.sandbox.server import serve_in_thread as serve_in_thread
from payrun.sandbox.state import SandboxState as SandboxState
from payrun.sandbox.state import SandboxStats as SandboxStats

__all__ = [
    "ACCOUNT_SUBMITS_CAP",
    "ORG_IN_FLIGHT_CAP",
    "MAX_PUBLIC_KEY_FILE_BYTES",
    "MAX_SEED_BYTES",
    "InjectedDropError",
    "RunningSandbox",
    "SandboxApp",
    "SandboxState",
    "SandboxStats",
    "SeedError",
    "build_state",
    "create_app",
    "default_seed",
    "load_seed",
    "serve",
    "serve_in_thread",
]
