"""Lanes beyond a worker's capacity wait in the order of their cut-offs, and key groups
keep each organization's key on the workers that serve it (docs/fleet.md, "Order and key
groups"). Real parts: a Temporal dev server (priority keys honoured, as docs/fleet.md
sets it up), PostgreSQL, sandbox banks and ``payrun fleet worker`` processes.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from _fleet_helpers import (
    Worker,
    new_database,
    pg_problems,
    start_worker,
    submit,
    wait_for,
    write_manifest,
)
from _postgres import Cluster
from _run_helpers import BatchRow, make_rows, write_batch
from payrun.cli import main
from payrun.config import DatabaseURL, Secret
from payrun.fleet import FleetStore, load_manifest
from payrun.fleet._submit import refuse_split_organizations
from payrun.fleet._workflow import cutoff_priority
from payrun.sandbox import RunningSandbox, serve_in_thread

_PAYING = re.compile(r"^batch (\S+) \(.*\): paying$", re.MULTILINE)


@pytest.fixture
def url(postgres: Cluster) -> str:
    """A new database for the test on the session's PostgreSQL server."""
    return new_database(postgres.url)


@pytest.fixture
def queue() -> str:
    """A task queue of the test's own."""
    return f"payrun-test-{secrets.token_hex(4)}"


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    """Workers the test starts; killed at its end whatever happened."""
    started: list[Worker] = []
    yield started
    for worker in started:
        worker.kill()
        worker.process.wait(30)


def _store(url: str) -> FleetStore:
    return FleetStore(DatabaseURL(Secret(url)))


def _keys(folder: Path, named: dict[str, RunningSandbox]) -> Path:
    """A keys folder holding only the keys ``named`` (name -> its bank)."""
    folder.mkdir(parents=True)
    for name, bank in named.items():
        (folder / name).write_text(bank.api_key + "\n")
        (folder / name).chmod(0o600)
    return folder


def _manifest(
    path: Path, name: str, bank: RunningSandbox, key: str, rows: list[BatchRow], **extra: Any
) -> Path:
    """A manifest of one batch ``name`` of ``rows`` at ``bank`` under ``key``."""
    write_batch(path.with_suffix(".csv"), rows)
    entry = {
        "name": name,
        "file": path.with_suffix(".csv").name,
        "base_url": bank.base_url,
        "key": key,
        "confirm_payees": False,
        **extra,
    }
    return write_manifest(path, [entry])


def _waiting_to_pay(temporal: str, url: str, name: str) -> bool:
    """The batch's lane holds its ``pay_batch`` activity (scheduled, waiting for a worker's
    place or paying)."""
    import asyncio

    from temporalio.client import Client
    from temporalio.service import RPCError

    batch = _store(url).batch(name)
    if batch is None or batch.lane_id is None:
        return False
    lane = batch.lane_id

    async def look() -> bool:
        client = await Client.connect(temporal)
        try:
            described = await client.get_workflow_handle(lane).describe()
        except RPCError:
            return False
        pending = described.raw_description.pending_activities
        return any(activity.activity_type.name == "pay_batch" for activity in pending)

    return asyncio.run(look())


def _state(url: str, name: str) -> str:
    batch = _store(url).batch(name)
    assert batch is not None
    return batch.state


def test_cutoff_priority_puts_the_batch_due_first_first() -> None:
    """The priority key falls as the cut-off nears; a fresh 24-hour bound ranks last."""
    now = datetime(2026, 11, 28, 9, 0, tzinfo=UTC)
    keys = [
        cutoff_priority(now + timedelta(minutes=minutes), now)
        for minutes in (-5, 30, 60, 61, 239, 300, 720, 1000, 24 * 60, 3 * 24 * 60)
    ]
    assert keys == [1, 1, 1, 2, 2, 3, 3, 4, 5, 5]
    assert cutoff_priority(None, now) == 5


def test_a_manifest_key_group_is_read_and_checked(tmp_path: Path) -> None:
    """``key_group`` is read from the manifest; a name that is not one is refused (exit 2)
    naming the batch and field."""
    (tmp_path / "a.csv").write_text("x")
    entry = {"name": "a", "file": "a.csv", "base_url": "https://bank.example", "key": "a"}
    good = write_manifest(tmp_path / "good.toml", [{**entry, "key_group": "north-1"}])
    assert [e.key_group for e in load_manifest(good)] == ["north-1"]
    bad = write_manifest(tmp_path / "bad.toml", [{**entry, "key_group": "../south"}])
    code = main(["fleet", "status", "--ledger-url", "postgresql:///x", "--manifest", str(bad)])
    assert code == 2


def test_a_worker_refuses_a_key_group_that_is_not_a_name(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--key-group`` with a path in it: exit 2, one line, before anything connects."""
    with pytest.raises(SystemExit) as stopped:
        main(
            ["fleet", "worker", "--temporal", "127.0.0.1:1", "--ledger-url", "postgresql:///x"]
            + ["--keys", ".", "--key-group", "a/b"]
        )
    assert stopped.value.code == 2
    assert "is not a key group name" in capsys.readouterr().err


@pytest.mark.fleet
def test_lanes_beyond_capacity_pay_the_earliest_cutoff_first(
    tmp_path: Path, url: str, temporal: str, queue: str, workers: list[Worker]
) -> None:
    """A worker of one lane's capacity; batches submitted late cut-off (paying at once),
    then no cut-off, then early cut-off: the early one is paid next, the other last."""
    now = datetime.now(UTC)
    late_cutoff = (now + timedelta(hours=2)).isoformat(timespec="seconds")
    early_cutoff = (now + timedelta(minutes=30)).isoformat(timespec="seconds")
    with (
        serve_in_thread(latency_ms=150) as slow,
        serve_in_thread(latency_ms=5) as plain,
        serve_in_thread(latency_ms=5) as urgent,
    ):
        keys = _keys(tmp_path / "keys", {"late": slow, "none": plain, "early": urgent})
        batches = {
            "late-nov": _manifest(
                tmp_path / "late.toml",
                "late-nov",
                slow,
                "late",
                make_rows(0, 600, tag="P"),
                cutoff=late_cutoff,
            ),
            "none-nov": _manifest(
                tmp_path / "none.toml", "none-nov", plain, "none", make_rows(1, 30, tag="P")
            ),
            "early-nov": _manifest(
                tmp_path / "early.toml",
                "early-nov",
                urgent,
                "early",
                make_rows(2, 30, tag="P"),
                cutoff=early_cutoff,
            ),
        }
        worker = start_worker(temporal, url, keys, queue, tmp_path / "w.log", max_batches=1)
        workers.append(worker)
        # The late batch cannot end while the others are handed over, however slow this is
        with slow.app.hold_payments(after=20, longest_s=180):
            for name, manifest in batches.items():
                handed = submit(temporal, url, manifest, queue)
                assert handed.returncode == 0, f"{handed.stderr}\n{worker.output()}"
                if name == "late-nov":
                    wait_for(lambda: slow.app.payments_held > 0, 60, "the late batch paying")
                else:
                    # In its lane, waiting for the one place the late batch holds
                    wait_for(
                        lambda name=name: _waiting_to_pay(temporal, url, name),
                        60,
                        f"{name} waiting to pay\n{worker.output()}",
                    )
            # Both others were waiting for the one place while it paid
            waited = _state(url, "late-nov") == "paying"

        def all_done() -> bool:
            return all(b.state == "done" for b in _store(url).batches())

        wait_for(all_done, 240, f"every batch paid\n{worker.output()}")
    assert _PAYING.findall(worker.output()) == ["late-nov", "early-nov", "none-nov"]
    assert waited, "the late batch ended before the others were queued: make it slower"


@pytest.mark.fleet
def test_key_groups_pay_on_the_workers_holding_their_keys(
    tmp_path: Path, url: str, temporal: str, queue: str, workers: list[Worker]
) -> None:
    """Two key groups, a worker each holding only its group's key: both groups' batches
    pay, each on its own group's worker, and neither worker needed the other's key."""
    with serve_in_thread(latency_ms=5) as north_bank, serve_in_thread(latency_ms=5) as south_bank:
        rows = {"north-nov": make_rows(0, 40, tag="G"), "south-nov": make_rows(1, 40, tag="G")}
        entries = []
        for name, bank in (("north-nov", north_bank), ("south-nov", south_bank)):
            group = name.split("-")[0]
            write_batch(tmp_path / f"{name}.csv", rows[name])
            entries.append(
                {
                    "name": name,
                    "file": f"{name}.csv",
                    "base_url": bank.base_url,
                    "key": f"{group}-key",
                    "key_group": group,
                    "confirm_payees": False,
                }
            )
        manifest = write_manifest(tmp_path / "fleet.toml", entries)
        by_group = {}
        for group, bank in (("north", north_bank), ("south", south_bank)):
            keys = _keys(tmp_path / f"keys-{group}", {f"{group}-key": bank})
            by_group[group] = start_worker(
                temporal,
                url,
                keys,
                queue,
                tmp_path / f"{group}.log",
                extra=("--key-group", group),
            )
            workers.append(by_group[group])
        done = submit(temporal, url, manifest, queue, "--wait", "--wait-timeout", "180")
        logs = "\n".join(w.output() for w in workers)
        assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n{logs}"
        assert pg_problems(north_bank, rows["north-nov"], url, "north-nov") == []
        assert pg_problems(south_bank, rows["south-nov"], url, "south-nov") == []
    for group, worker in by_group.items():
        assert f"polls task queue {queue}.{group}" in worker.output()
        assert _PAYING.findall(worker.output()) == [f"{group}-nov"], worker.output()
        assert "--keys folder" not in worker.output(), worker.output()
        assert "refused" not in worker.output(), worker.output()
    batches = {b.name: b for b in _store(url).batches()}
    assert {b.key_group for b in batches.values()} == {"north", "south"}


def _org_batches(tmp_path: Path, groups: list[str | None], stem: str) -> Path:
    """A manifest of one batch per entry of ``groups``, all of one organization (key org0
    at one bank), each in that key group (None: no group)."""
    write_batch(tmp_path / "rows.csv", make_rows(7, 3, tag="G"))
    entries: list[dict[str, Any]] = []
    for index, group in enumerate(groups):
        entry = {
            "name": f"{stem}{index}",
            "file": "rows.csv",
            "base_url": "https://bank.example:443/",
            "key": "org0",
            "confirm_payees": False,
        }
        entries.append(entry if group is None else {**entry, "key_group": group})
    return write_manifest(tmp_path / f"{stem}.toml", entries)


def test_one_organization_in_two_key_groups_of_a_manifest_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two batches of one organization, one in key group north and one in none: submit
    refuses with exit 2 and one line naming both, before the database is touched (a lane
    runs on one group's task queue: the other batch would wait there unpaid)."""
    manifest = _org_batches(tmp_path, ["north", None], "b")
    argv = ["fleet", "submit", str(manifest), "--temporal", "127.0.0.1:9"]
    code = main([*argv, "--ledger-url", "postgresql://payrun@127.0.0.1:9/none"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "batch b1 is in no key group but the batch b0 of the same organization" in err, err
    assert "key group north" in err and len(err.strip().splitlines()) == 1, err
    same = _org_batches(tmp_path, ["north", "north"], "c")
    refuse_split_organizations(load_manifest(same))


def test_a_batch_in_another_key_group_than_an_unfinished_one_is_refused(
    tmp_path: Path, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A queued batch of the organization in key group north in the store: a new batch of
    it in no group is refused (exit 2, one line); once that batch is done, it is not."""
    store = FleetStore(DatabaseURL(Secret(url)))
    store.ensure_schema()
    (earlier,) = load_manifest(_org_batches(tmp_path, ["north"], "a"))
    store.register(earlier, {}, task_queue="payrun")
    manifest = _org_batches(tmp_path, [None], "b")
    argv = ["fleet", "submit", str(manifest), "--temporal", "127.0.0.1:9", "--ledger-url", url]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "batch b0 is in no key group but the queued batch a0 of the same" in err, err
    assert len(err.strip().splitlines()) == 1, err
    # Another deployment's task queue, or the earlier batch ended: no lane is shared
    refuse_split_organizations(load_manifest(manifest), store.open_batches("other"))
    store.set_state("a0", "done")
    refuse_split_organizations(load_manifest(manifest), store.open_batches("payrun"))
