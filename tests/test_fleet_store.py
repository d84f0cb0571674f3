"""The fleet's table on a worker's kept connection (``FleetStore(keep=True)``), against a real
PostgreSQL server: one connection for all its calls, made again after the server cut it."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import psycopg
import pytest

from _postgres import Cluster
from payrun.config import DatabaseURL, Secret
from payrun.fleet import FleetStore
from payrun.fleet import _store as store_module


@pytest.fixture
def database(postgres: Cluster) -> Iterator[str]:
    """The URL of a new, empty database on the session's server (dropped after the test)."""
    name = f"t_{secrets.token_hex(6)}"
    with psycopg.connect(postgres.url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    yield postgres.url_for(name)
    with psycopg.connect(postgres.url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


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
