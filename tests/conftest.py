"""Shared fixtures: every test starts with no PAYRUN_* variables set; a PostgreSQL server
for the tests of the PostgreSQL ledger (and ``ledger_for``, which runs a test on both
backends)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import httpx
import pytest

from _postgres import Cluster, find_binaries, throwaway_cluster
from _run_helpers import DatabaseLedgerRef, LedgerRef

REQUIRE_POSTGRES = os.environ.get("PAYRUN_REQUIRE_POSTGRES") == "1"
"""Set by .ci/run: a test of the PostgreSQL ledger fails, not skips, without a server."""


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Strip PAYRUN_* variables so the machine's environment cannot leak into a test."""
    for name in list(os.environ):
        if name.startswith("PAYRUN_"):
            monkeypatch.delenv(name)
    yield


@pytest.fixture
def anyio_backend() -> str:
    """Run async tests on asyncio only (payrun does not promise trio)."""
    return "asyncio"


# ---- sandbox bank (issue 3) ------------------------------------------------------------
# A real uvicorn server on loopback, shared by the whole session (start-up costs ~0.1 s).
# Tests that need their own settings (latency, faults) start their own with serve_in_thread.

from payrun.sandbox import RunningSandbox, SandboxApp, serve_in_thread  # noqa: E402


@pytest.fixture(scope="session")
def sandbox_server() -> Iterator[RunningSandbox]:
    """Yield a running sandbox bank: ``.base_url``, ``.api_key``, ``.state``, ``.app``."""
    with serve_in_thread(deliver_after_ms=50) as running:
        yield running


@pytest.fixture
async def client(app: SandboxApp) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client bound in-process to the module's sandbox ``app``, with its key."""
    transport = httpx.ASGITransport(app=app)
    headers = {"Authorization": f"ServiceAPIKey {app.api_key}"}
    async with httpx.AsyncClient(
        transport=transport, base_url="http://sandbox", headers=headers
    ) as http:
        yield http


# ---- PostgreSQL (issue 21) ---------------------------------------------------------------
# One throwaway server for the session (initdb + pg_ctl, ~2 s); every test's batches share
# its database under their own names, as many batches share one ledger database.


@pytest.fixture(scope="session")
def postgres() -> Iterator[Cluster]:
    """A running throwaway PostgreSQL server; skipped (failed under PAYRUN_REQUIRE_POSTGRES=1)
    when this machine has no PostgreSQL server programs or no psycopg."""
    binaries, why = find_binaries()
    try:
        import psycopg  # noqa: F401
    except ImportError:
        why = "psycopg is not installed: pip install -e '.[test]'"
        binaries = None
    if binaries is None:
        if REQUIRE_POSTGRES:
            pytest.fail(f"PAYRUN_REQUIRE_POSTGRES=1 but {why}", pytrace=False)
        pytest.skip(why)
    with throwaway_cluster() as cluster:
        yield cluster


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger_for(request: pytest.FixtureRequest) -> Callable[[Path], LedgerRef]:
    """The ledger of a batch file on each backend: ``BATCH.ledger.sqlite`` beside it, or its
    batch in the session's PostgreSQL database."""
    if request.param == "sqlite":
        return lambda batch: batch.with_name(batch.name + ".ledger.sqlite")
    cluster: Cluster = request.getfixturevalue("postgres")
    return lambda batch: DatabaseLedgerRef(cluster.url, batch)
