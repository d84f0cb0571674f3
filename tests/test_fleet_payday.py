"""payrun fleet on payday: the settle wait on workers, the heartbeat timeout, a database blip
under ``submit --wait``, and what ``fleet status`` shows and filters.

The blip and status tests use a real PostgreSQL (a throwaway server of their own where
they stop it); the failover test runs real workers on a Temporal dev server.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import signal
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from _fleet_helpers import (
    Worker,
    new_database,
    pg_problems,
    pg_rows,
    start_worker,
    submit,
    temporal_dev_server,
    wait_for,
    write_keys,
    write_manifest,
)
from _postgres import Cluster, server_down
from _run_helpers import make_rows, write_batch
from payrun.cli import main
from payrun.config import DatabaseURL, Secret
from payrun.fleet import BatchEntry, FleetStore, fleet_exit_code, follow
from payrun.run import StopSignal
from payrun.sandbox import serve_in_thread


def _store(url: str) -> FleetStore:
    store = FleetStore(DatabaseURL(Secret(url)))
    store.ensure_schema()
    return store


def _entry(name: str, key: str = "acme", base_url: str = "https://bank.example") -> BatchEntry:
    return BatchEntry(
        name=name,
        file=Path(f"/batches/{name}.csv"),
        base_url=base_url,
        key=key,
        source_account=None,
        expect_count=None,
        expect_total=None,
        cutoff=None,
    )


def _status(url: str, *extra: str, capsys: pytest.CaptureFixture[str]) -> str:
    code = main(["fleet", "status", "--ledger-url", url, *extra])
    assert code == 0
    return capsys.readouterr().out


def test_status_says_queued_and_paying_and_filters(
    postgres: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """status JSON says queued and paying while batches are, and --state, --since and
    --manifest keep only the batches asked for, with a summary line in text."""
    url = new_database(postgres.url)
    store = _store(url)
    for name, key in (("a-nov", "a"), ("b-nov", "b"), ("c-nov", "c")):
        store.register(_entry(name, key), {})
    store.set_state("b-nov", "paying", worker="host:1")
    store.set_state("c-nov", "done")
    found = json.loads(_status(url, "--format", "json", capsys=capsys))
    assert {b["name"]: b["status"] for b in found["batches"]} == {
        "a-nov": "queued",
        "b-nov": "paying",
        "c-nov": "done",
    }
    paying = json.loads(_status(url, "--state", "paying,queued", "--format", "json", capsys=capsys))
    assert [b["name"] for b in paying["batches"]] == ["a-nov", "b-nov"]
    tomorrow = (datetime.now(UTC) + timedelta(days=1)).date().isoformat()
    later = json.loads(_status(url, "--since", tomorrow, "--format", "json", capsys=capsys))
    assert later["batches"] == []
    manifest = write_manifest(
        tmp_path / "m.toml",
        [{"name": "c-nov", "file": "c.csv", "base_url": "https://bank.example", "key": "c"}],
    )
    text = _status(url, "--manifest", str(manifest), capsys=capsys)
    assert text.splitlines()[0].startswith("c-nov: done")
    assert text.splitlines()[-1] == ("organizations: 1 done, 0 paying, 0 queued; rows paid 0 of 0")
    whole = _status(url, capsys=capsys).splitlines()[-1]
    assert whole.startswith("organizations: 1 done, 1 paying, 1 queued;"), whole


def test_a_secret_in_a_refused_batchs_message_is_redacted_everywhere_it_goes(
    postgres: Cluster, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A batch refused with a message holding the configured API key: the fleet table,
    ``fleet status``, the worker's log line and the failure Temporal keeps show ``***``."""
    from payrun.cli._fleet import _print_batches, _say
    from payrun.fleet._activities import _failure

    secret = "sk_live_" + secrets.token_hex(12)
    monkeypatch.setenv("PAYRUN_API_KEY", secret)
    said = f"batch a-nov: the bank refused the key {secret}"
    url = new_database(postgres.url)
    store = _store(url)
    store.register(_entry("a-nov"), {})
    store.set_state("a-nov", "refused", message=said)
    import psycopg

    with psycopg.connect(url) as db:
        (kept,) = db.execute("SELECT message FROM payrun_fleet").fetchone() or ("",)
    assert secret not in kept and "***" in kept, kept
    shown = _status(url, capsys=capsys)
    assert "a-nov: refused" in shown and secret not in shown and "***" in shown, shown
    _say(said)
    _print_batches([replace(store.batches()[0], message=said)], as_json=False)
    out, err = capsys.readouterr()
    assert secret not in out + err and "***" in out and "***" in err, (out, err)
    assert secret not in str(_failure(said, kind="Refused"))


def test_status_refuses_an_unknown_state(
    postgres: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """--state with a state that does not exist: exit 2, naming the states there are."""
    with pytest.raises(SystemExit) as info:
        main(["fleet", "status", "--ledger-url", postgres.url, "--state", "finished"])
    assert info.value.code == 2
    assert "'finished' is not a batch state: queued, paying, done" in capsys.readouterr().err


def test_wait_rides_out_a_database_blip(own_cluster: Cluster) -> None:
    """The database stops for 8 s while --wait follows a batch: it keeps following and
    returns the batch's end once the database is back, not an error."""
    url = new_database(own_cluster.url)
    store = _store(url)
    store.register(_entry("blip-nov"), {})
    found: list[Any] = []
    failed: list[BaseException] = []

    def follow_it() -> None:
        try:
            found.extend(asyncio.run(follow(store.url, ["blip-nov"], StopSignal())))
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            failed.append(exc)

    follower = threading.Thread(target=follow_it, daemon=True)
    follower.start()
    time.sleep(1)
    with server_down(own_cluster):
        time.sleep(8)
        assert follower.is_alive() and not failed, failed
    store.set_state("blip-nov", "done")
    follower.join(60)
    assert not failed, failed
    assert [(b.name, b.state) for b in found] == [("blip-nov", "done")]


def test_wait_timeout_stops_following_with_exit_3(postgres: Cluster) -> None:
    """--wait-timeout: following ends after it while the batch is still queued: exit 3."""
    url = new_database(postgres.url)
    store = _store(url)
    store.register(_entry("slow-nov"), {})
    started = time.monotonic()
    batches = asyncio.run(follow(store.url, ["slow-nov"], StopSignal(), give_up_after=1.0))
    assert time.monotonic() - started < 10
    assert [b.state for b in batches] == ["queued"]
    assert fleet_exit_code(batches) == 3


def test_a_fleet_table_error_is_told_by_the_ledgers_one_translation(postgres: Cluster) -> None:
    """A psycopg error on the fleet's table ends as the ledger's own one-line
    ``LedgerError`` (psycopg is translated in one place), the password masked."""
    import psycopg

    from payrun.errors import LedgerError
    from payrun.ledger import database_errors

    url = new_database(postgres.url)
    store = _store(url)
    with psycopg.connect(url, autocommit=True) as db:
        db.execute("ALTER TABLE payrun_fleet DROP COLUMN submitted_at")
    with pytest.raises(LedgerError) as fleet_said:
        store.batches()
    with (
        pytest.raises(LedgerError) as ledger_said,
        psycopg.connect(url, autocommit=True) as db,
        database_errors(store.url),
    ):
        db.execute("SELECT submitted_at FROM payrun_fleet")
    told = [str(fleet_said.value), str(ledger_said.value)]
    assert [line.split(": ")[0] for line in told] == [f"cannot use the ledger {store.url}"] * 2
    assert all("submitted_at" in line and postgres.password not in line for line in told), told


def test_a_manifest_settle_wait_is_stored_for_the_workers(tmp_path: Path) -> None:
    """A batch's settle_wait in the manifest is read and checked (a day at most)."""
    from payrun.errors import UsageError
    from payrun.fleet import load_manifest

    base = {"name": "x", "file": "x.csv", "base_url": "https://bank.example", "key": "k"}
    good = write_manifest(tmp_path / "good.toml", [{**base, "settle_wait": 2}])
    assert [e.settle_wait for e in load_manifest(good)] == [2.0]
    bad = write_manifest(tmp_path / "bad.toml", [{**base, "settle_wait": 100_000}])
    with pytest.raises(UsageError, match="settle_wait"):
        load_manifest(bad)


@pytest.mark.fleet
def test_a_killed_worker_batch_finishes_within_45_s_with_a_1_s_settle_wait(
    tmp_path: Path, postgres: Cluster
) -> None:
    """kill -9 of the paying worker with the default 15 s heartbeat timeout and workers
    told PAYRUN_SETTLE_WAIT=1: the other worker finishes the batch within 45 s, once each."""
    url = new_database(postgres.url)
    queue = f"payrun-test-{secrets.token_hex(4)}"
    started: list[Worker] = []
    with temporal_dev_server() as temporal, serve_in_thread(latency_ms=40) as bank:
        try:
            keys = write_keys(tmp_path / "keys", [bank])
            rows = make_rows(0, 300, tag="K")
            write_batch(tmp_path / "org0.csv", rows)
            name = "org0-2026-11"
            manifest = write_manifest(
                tmp_path / "fleet.toml",
                [
                    {
                        "name": name,
                        "file": "org0.csv",
                        "base_url": bank.base_url,
                        "key": "org0",
                        "confirm_payees": False,
                    }
                ],
            )
            fast = {"PAYRUN_SETTLE_WAIT": "1"}
            first = start_worker(temporal, url, keys, queue, tmp_path / "1.log", env=fast)
            started.append(first)
            store = _store(url)

            def paying() -> bool:
                batch = store.batch(name)
                paid = sum(1 for r in pg_rows(url, name) if r["status"] == "submitted")
                held = bank.app.payments_held > 0
                return batch is not None and batch.worker == first.identity and paid >= 20 and held

            # Killed mid-batch however slow the machine: the bank holds the first worker's
            # payments after 40 (never made: it is gone when they go on)
            with bank.app.hold_payments(after=40, longest_s=120):
                handed = submit(temporal, url, manifest, queue, "--heartbeat-timeout", "15")
                assert handed.returncode == 0, handed.stderr
                wait_for(paying, 60, "the first worker paying")
                second = start_worker(temporal, url, keys, queue, tmp_path / "2.log", env=fast)
                started.append(second)
                first.kill(signal.SIGKILL)
                killed = time.monotonic()

            def done() -> bool:
                batch = store.batch(name)
                return batch is not None and batch.state == "done"

            wait_for(done, 120, f"the second worker finishing\n{second.output()}")
            took = time.monotonic() - killed
            assert took <= 45, f"the batch took {took:.1f} s after the kill"
            assert pg_problems(bank, rows, url, name) == []
        finally:
            for worker in started:
                worker.kill()
                worker.process.wait(30)


@pytest.mark.fleet
def test_two_key_names_of_one_organization_share_one_lane(
    tmp_path: Path, postgres: Cluster
) -> None:
    """One organization's key filed under two names ("payroll", "expenses"), a batch each,
    one worker: the batches pay one after the other in one lane, so the bank never sees
    more than 50 in flight or 3 submits on an account, and answers no 429."""
    from _run_helpers import stats
    from payrun.sandbox import ACCOUNT_SUBMITS_CAP, ORG_IN_FLIGHT_CAP

    url = new_database(postgres.url)
    queue = f"payrun-test-{secrets.token_hex(4)}"
    with temporal_dev_server() as temporal, serve_in_thread(latency_ms=40) as bank:
        keys = tmp_path / "keys"
        keys.mkdir()
        entries, written = [], {}
        for index, key in enumerate(("payroll", "expenses")):
            (keys / key).write_text(bank.api_key + "\n")
            rows = make_rows(index, 200, tag="L")
            write_batch(tmp_path / f"{key}.csv", rows)
            name = f"{key}-2026-11"
            written[name] = rows
            # The second spelling of the bank's address is the same bank
            base = bank.base_url if index == 0 else bank.base_url.upper().replace("HTTP", "http")
            entries.append(
                {
                    "name": name,
                    "file": f"{key}.csv",
                    "base_url": base + "/",
                    "key": key,
                    "confirm_payees": False,
                }
            )
        manifest = write_manifest(tmp_path / "fleet.toml", entries)
        worker = start_worker(temporal, url, keys, queue, tmp_path / "w.log")
        try:
            done = submit(temporal, url, manifest, queue, "--wait", "--format", "json")
            assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n{worker.output()}"
            for name, rows in written.items():
                assert pg_problems(bank, rows, url, name) == []
            seen = stats(bank)
            assert seen["max_in_flight"] <= ORG_IN_FLIGHT_CAP, seen
            assert max(seen["max_concurrent_submits"].values()) <= ACCOUNT_SUBMITS_CAP, seen
            assert sum(seen["rate_limited"].values()) == 0, seen
            lanes = {b.lane_id for b in _store(url).batches()}
            assert len(lanes) == 1, lanes
            assert "Traceback" not in worker.output()
        finally:
            worker.kill()
            worker.process.wait(30)


@pytest.mark.fleet
def test_a_restarted_in_memory_temporal_loses_no_queued_batch(
    tmp_path: Path, postgres: Cluster
) -> None:
    """Batches queued when an in-memory Temporal restarts are queued again: once by
    ``fleet status --temporal``, once by a worker's own periodic look, and paid once."""
    import socket
    import subprocess
    import sys

    from _fleet_helpers import fleet_env

    url = new_database(postgres.url)
    queue = f"payrun-test-{secrets.token_hex(4)}"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with serve_in_thread(latency_ms=5) as bank:
        keys = write_keys(tmp_path / "keys", [bank])
        rows = {name: make_rows(i, 30, tag="R") for i, name in enumerate(("r0-nov", "r1-nov"))}
        for name, batch_rows in rows.items():
            write_batch(tmp_path / f"{name}.csv", batch_rows)

        def manifest_of(name: str) -> Path:
            entry: dict[str, object] = {"name": name, "file": f"{name}.csv"}
            entry |= {"base_url": bank.base_url}
            entry |= {"key": "org0", "confirm_payees": False}
            return write_manifest(tmp_path / f"{name}.toml", [entry])

        with temporal_dev_server(port) as temporal:
            for name in rows:
                assert submit(temporal, url, manifest_of(name), queue).returncode == 0
        # Temporal is gone with both batches queued; a new one starts empty
        with temporal_dev_server(port) as temporal:
            looked = subprocess.run(
                [sys.executable, "-m", "payrun", "fleet", "status", "--ledger-url", url]
                + ["--temporal", temporal, "--task-queue", queue, "--manifest"]
                + [str(manifest_of("r0-nov"))],
                env=fleet_env(),
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert looked.returncode == 0, looked.stderr
            assert "batch r0-nov: Temporal had lost it; queued again" in looked.stderr
            assert "r1-nov" not in looked.stderr
        with temporal_dev_server(port) as temporal:
            worker = start_worker(temporal, url, keys, queue, tmp_path / "w.log")
            try:
                store = _store(url)

                def both_done() -> bool:
                    return all(b.state == "done" for b in store.batches())

                wait_for(both_done, 90, f"both batches paid\n{worker.output()}")
                assert "Temporal had lost it; queued again" in worker.output()
                for name, batch_rows in rows.items():
                    assert pg_problems(bank, batch_rows, url, name) == []
            finally:
                worker.kill()
                worker.process.wait(30)


def test_a_worker_that_could_exhaust_the_database_connections_is_refused(
    own_cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--max-batches beyond what the ledger database's connections allow: exit 2, one
    line naming the budget, before the worker takes any batch (a server of its own: 200
    connections, 3 kept for superusers)."""
    url = new_database(own_cluster.url)
    (tmp_path / "keys").mkdir()
    argv = ["fleet", "worker", "--temporal", "127.0.0.1:9", "--ledger-url", url]
    code = main(
        [*argv, "--keys", str(tmp_path / "keys"), "--max-batches", "400", "--processes", "1"]
    )
    err = capsys.readouterr().err
    assert code == 2, err
    assert "the ledger database allows 197 connections" in err, err
    assert "lower --max-batches or raise the server's max_connections" in err
    assert len(err.strip().splitlines()) == 1
