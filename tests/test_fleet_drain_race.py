"""A fleet worker told to drain while a batch is starting (its state being written as
``paying``) stops that batch too: it is handed back, nothing paid, never paid on by a
worker on its way out.

The activity runs in temporalio's activity test environment over the real PostgreSQL
ledger and a sandbox bank; the drain is sent from inside the store's write of ``paying``
(the moment of the race, reached every time rather than by timing).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from _fleet_helpers import new_database, org_batches, write_keys
from _postgres import Cluster
from _run_helpers import stats
from payrun.config import DatabaseURL, Secret
from payrun.fleet import FleetStore, load_manifest
from payrun.fleet._activities import HANDED_BACK, FleetActivities
from payrun.fleet._submit import _store_rows
from payrun.sandbox import RunningSandbox, serve_in_thread

pytestmark = pytest.mark.fleet


@pytest.fixture
def bank() -> Iterator[RunningSandbox]:
    """One organization's sandbox bank."""
    with serve_in_thread(latency_ms=5) as running:
        yield running


def test_a_drain_while_the_batch_is_marked_paying_hands_it_back_unpaid(
    tmp_path: Path, postgres: Cluster, bank: RunningSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Drain during the write of ``paying``: the batch is handed back, the bank has nothing."""
    url = DatabaseURL(Secret(new_database(postgres.url)))
    manifest, _rows = org_batches(tmp_path, [bank], 20, tag="D")
    (entry,) = load_manifest(manifest)
    store = FleetStore(url)
    store.ensure_schema()
    _store_rows(entry, url)
    store.register(entry, {"confirm_payees": False})
    executor = ThreadPoolExecutor(1)
    activities = FleetActivities(url, write_keys(tmp_path / "keys", [bank]), executor)
    written = FleetStore.set_state

    def set_state(self: FleetStore, name: str, state: str, **more: Any) -> None:
        written(self, name, state, **more)
        if state == "paying":
            # SIGTERM (or the parent gone) as this worker takes the batch
            activities.drain()

    monkeypatch.setattr(FleetStore, "set_state", set_state)
    try:
        with pytest.raises(ApplicationError) as ended:
            asyncio.run(ActivityEnvironment().run(activities.pay_batch, entry.name))
    finally:
        executor.shutdown()
        activities.store.close()
    assert ended.value.type == HANDED_BACK, ended.value
    assert stats(bank)["payments"] == [], "a stopping worker paid the batch"
    batch = store.batch(entry.name)
    assert batch is not None
    assert batch.state == "queued", batch
