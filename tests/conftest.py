"""Shared fixtures: every test starts with no PAYRUN_* variables set."""

from __future__ import annotations

from collections.abc import Iterator

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
