"""Reaching Temporal: the client every fleet command opens, its errors as one line.

temporalio takes a few tenths of a second to import: it is imported in a thread, so a
command that connects while it does other work (the submit checking its batch files and
the database) is not held up by it.
"""

from __future__ import annotations

import asyncio
import importlib
from typing import TYPE_CHECKING

from payrun.config import FLEET_EXTRA
from payrun.errors import ConfigError

if TYPE_CHECKING:
    from temporalio.client import Client

__all__ = ["connect_temporal"]


async def connect_temporal(address: str, namespace: str) -> Client:
    """A Temporal client for ``address`` (HOST:PORT) and ``namespace``; ``ConfigError``
    naming them when the server cannot be reached."""
    try:
        client_module = await asyncio.to_thread(importlib.import_module, "temporalio.client")
    except Exception:  # noqa: BLE001 - also a concurrent import's _DeadlockError
        msg = f"payrun fleet needs temporalio, which is not installed: {FLEET_EXTRA}"
        raise ConfigError(msg) from None
    try:
        client: Client = await client_module.Client.connect(address, namespace=namespace)
    except RuntimeError as exc:
        reason = " ".join(str(exc).split())[:300]
        msg = (
            f"cannot reach Temporal at {address} (namespace {namespace}): {reason}; check"
            " --temporal and that the Temporal server runs (nothing was submitted)"
        )
        raise ConfigError(msg) from None
    return client
