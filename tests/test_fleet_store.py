"""The fleet's table on a worker's kept connection (``FleetStore(keep=True)``), against a real
PostgreSQL server: one connection for all its calls, made again after the server cut it."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest

from payrun.bank import Organization
from payrun.config import DatabaseURL, Secret
from payrun.fleet import BatchEntry, FleetStore
from payrun.fleet import _store as store_module
from payrun.run import KnownOrganization


def _payrun_backends(url: str) -> list[int]:
    """The server processes of payrun's connections to the database of ``url``."""
    with psycopg.connect(url, autocommit=True) as admin:
        found = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = 'payrun'"
        ).fetchall()
    return [int(pid) for (pid,) in found]


def test_a_kept_store_makes_one_connection_for_all_its_calls(database: str) -> None:
    """Several calls of a kept store (a worker's) go over one connection, not one each."""
    store = FleetStore(DatabaseURL(Secret(database)), keep=True)
    try:
        store.ensure_schema()
        assert store.batch("nothing") is None
        first = _payrun_backends(database)
        store.set_state("nothing", "done")
        assert store.batches() == []
        assert _payrun_backends(database) == first
        assert len(first) == 1
    finally:
        store.close()
    assert _payrun_backends(database) == []


def test_a_kept_store_connects_again_after_the_server_cut_its_connection(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kept connection the server ended while idle (a restart) is made again: no call fails."""
    monkeypatch.setattr(store_module, "_KEPT_FRESH_SECONDS", 0.0)
    store = FleetStore(DatabaseURL(Secret(database)), keep=True)
    try:
        store.ensure_schema()
        (cut,) = _payrun_backends(database)
        with psycopg.connect(database, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (cut,))
        assert store.batch("nothing") is None
        (again,) = _payrun_backends(database)
        assert again != cut
    finally:
        store.close()


def test_a_complete_table_is_only_read_while_a_worker_reads_it(database: str) -> None:
    """A submit or worker start finding the fleet's table complete takes no lock on it: it
    does not wait for a worker's transaction reading the table (an ``ALTER TABLE`` would,
    and would hold up every other reader meanwhile)."""
    url = DatabaseURL(Secret(database))
    FleetStore(url).ensure_schema()
    with psycopg.connect(database) as reader:
        reader.execute("SELECT count(*) FROM payrun_fleet").fetchone()
        done = threading.Event()

        def check() -> None:
            FleetStore(url).ensure_schema()
            done.set()

        checking = threading.Thread(target=check, daemon=True)
        checking.start()
        finished = done.wait(5)
        reader.rollback()
    checking.join(30)
    assert finished, "ensure_schema waited for a reading transaction"


def test_the_route_s_organization_is_kept_with_the_lane(database: str) -> None:
    """What the route found of the key's organization is kept beside the lane, read back as
    it was written, and forgotten when the batch is submitted again."""
    store = FleetStore(DatabaseURL(Secret(database)))
    store.ensure_schema()
    entry = BatchEntry(
        name="b1",
        file=Path("b1.csv").resolve(),
        base_url="http://127.0.0.1:9",
        key="org0",
        source_account=None,
        expect_count=None,
        expect_total=None,
        cutoff=datetime(2030, 1, 1, tzinfo=UTC),
    )
    store.register(entry, {})
    found = KnownOrganization(
        "/v0/organizations/og-1", Organization(*(f"/v0/og-1/{n}" for n in range(10)))
    )
    store.set_lane("b1", "lane-1", "Org@http://127.0.0.1:9", found)
    batch = store.batch("b1")
    assert batch is not None
    assert (batch.lane_id, batch.known) == ("lane-1", found)
    store.register(entry, {})
    again = store.batch("b1")
    assert again is not None
    assert (again.lane_id, again.organization) == (None, None)
