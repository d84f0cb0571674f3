"""Shared fixtures: every test starts with no PAYRUN_* variables set."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Strip PAYRUN_* variables so the machine's environment cannot leak into a test."""
    import os

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
