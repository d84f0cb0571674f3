"""`payrun fleet submit` getting its batches to the workers soon: temporalio imported while
the batches are checked, up to ``STORING`` batches stored at once, each queued as soon as it
is stored; what it refuses and prints stays as before. Real PostgreSQL and Temporal."""

from __future__ import annotations

import contextlib
import secrets
import threading
from pathlib import Path

import psycopg
import pytest

from _fleet_helpers import new_database, pay_two_batches_of_one_key, write_manifest
from _postgres import Cluster
from _run_helpers import fresh_python, make_rows, write_batch
from payrun.cli import main
from payrun.config import DatabaseURL, Secret
from payrun.fleet import BatchEntry, FleetStore
from payrun.fleet import _submit as submit_module
from payrun.sandbox import serve_in_thread

ROWS = 300


@pytest.fixture
def url(postgres: Cluster) -> str:
    """A new database for the test on the session's PostgreSQL server."""
    return new_database(postgres.url)


def _manifest(folder: Path, count: int) -> Path:
    """``count`` batches of ``ROWS`` rows (b0, b1, ...) at one bank's address, one key each."""
    entries = []
    for index in range(count):
        write_batch(folder / f"b{index}.csv", make_rows(index, ROWS, tag="S"))
        entries.append(
            {
                "name": f"b{index}",
                "file": f"b{index}.csv",
                "base_url": "http://127.0.0.1:9",
                "key": f"org{index}",
                "confirm_payees": False,
            }
        )
    return write_manifest(folder / "fleet.toml", entries)


def test_the_submit_loads_no_temporalio_before_it_checks_its_batches() -> None:
    """The submit's own modules import no temporalio (imported in a thread meanwhile)."""
    code = (
        "import sys, payrun.cli._fleet, payrun.fleet._submit;"
        "print(sorted(m for m in sys.modules if m.startswith('temporalio'))[:3])"
    )
    assert fresh_python(code).strip() == "[]"


def _routes_started(temporal: str, queue: str, names: list[str]) -> list[str]:
    """Those of ``names`` whose route workflow (their way into a lane) Temporal holds."""
    import asyncio

    from temporalio.client import Client
    from temporalio.service import RPCError

    from payrun.fleet._workflow import route_workflow_id

    async def look() -> list[str]:
        client = await Client.connect(temporal)
        found = []
        for name in names:
            try:
                await client.get_workflow_handle(route_workflow_id(queue, name)).describe()
            except RPCError:
                continue
            found.append(name)
        return found

    return asyncio.run(look())


@pytest.mark.fleet
def test_batches_are_stored_several_at_once_each_queued_once_stored(
    tmp_path: Path,
    url: str,
    temporal: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Six batches: three are being stored at the same moment (each storing waits, up to
    10 s, until three are), not one after the other; every batch ends registered, with its
    rows, and queued (its route started), as the submit prints."""
    together = threading.Barrier(3, timeout=10)
    store_rows = submit_module._store_rows  # noqa: SLF001 - the submit's own step

    def store_together(entry: BatchEntry, where: DatabaseURL) -> None:
        with contextlib.suppress(threading.BrokenBarrierError):
            if entry.name in ("b0", "b1", "b2"):
                together.wait()
        store_rows(entry, where)

    monkeypatch.setattr(submit_module, "_store_rows", store_together)
    manifest = _manifest(tmp_path, 6)
    queue = f"payrun-test-{secrets.token_hex(4)}"
    argv = ["fleet", "submit", str(manifest), "--temporal", temporal, "--task-queue", queue]
    code = main([*argv, "--ledger-url", url])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert not together.broken, "the batches were stored one after the other"
    assert out.strip() == "submitted 6 batches: b0, b1, b2, b3, b4, b5"
    batches = FleetStore(DatabaseURL(Secret(url))).batches()
    names = [f"b{n}" for n in range(6)]
    assert [(b.name, b.state, b.rows) for b in batches] == [
        (name, "queued", {"pending": ROWS}) for name in names
    ]
    assert _routes_started(temporal, queue, names) == names


def test_temporal_out_of_reach_stores_nothing_and_says_so_once(
    tmp_path: Path, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Temporal not reachable (connected while the batches are checked): exit 2, one line
    naming it, nothing stored, no warning of a task left behind."""
    manifest = _manifest(tmp_path, 2)
    argv = ["fleet", "submit", str(manifest), "--temporal", "127.0.0.1:9", "--ledger-url", url]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err  # noqa: PLR2004
    assert "cannot reach Temporal at 127.0.0.1:9" in err, err
    assert "nothing was submitted" in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert FleetStore(DatabaseURL(Secret(url))).batches() == []


@pytest.mark.fleet
def test_a_key_routed_before_has_its_organization_read_at_once_by_route_and_run(
    tmp_path: Path, url: str, temporal: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key's second batch: its route reads the index and the organization the first
    route found at once, and its run the index, that organization and the account
    searches at once (the index asked once by each, as before); both batches are paid
    exactly once and bound to the bank's organization."""
    # 50 ms a request: reads sent at once all reach the bank before its first answer, even
    # on a loaded machine (at 5 ms, one came after an answer under CI's load)
    with serve_in_thread(latency_ms=50) as bank:
        seen = pay_two_batches_of_one_key((tmp_path, url, temporal), bank, monkeypatch, rows=20)
    organization = f"/v0/organizations/{bank.state.org_id}"
    # The batch's rows are paid from two accounts: two searches
    route, run = seen[:2], seen[2:6]
    assert sorted(route) == [("index", 0), ("organization", 0)], seen
    assert sorted(run) == [("index", 2), ("organization", 2), ("search", 2), ("search", 2)], seen
    assert [kind for kind, _ in seen].count("index") == 2, seen  # noqa: PLR2004
    with psycopg.connect(url, autocommit=True) as db:
        bound = db.execute("SELECT name, organization_url FROM payrun_batches ORDER BY name")
        assert bound.fetchall() == [("first", organization), ("second", organization)]
