"""payrun fleet end to end: a Temporal dev server, PostgreSQL, sandbox banks and real
`payrun fleet worker` processes, all on loopback (marked ``fleet``: `pytest -m "not
fleet"` leaves them out).

Each test gets new banks (so new lanes), a new database and its own task queue.
"""

from __future__ import annotations

import json
import secrets
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _fleet_helpers import (
    Worker,
    new_database,
    org_batches,
    pg_problems,
    pg_rows,
    start_worker,
    submit,
    wait_for,
    write_keys,
)
from _postgres import Cluster
from _run_helpers import BatchRow, stats
from payrun.config import DatabaseURL, Secret
from payrun.fleet import FleetStore
from payrun.sandbox import ACCOUNT_SUBMITS_CAP, ORG_IN_FLIGHT_CAP, RunningSandbox, serve_in_thread

pytestmark = pytest.mark.fleet

ROWS = 300


@pytest.fixture
def url(postgres: Cluster) -> str:
    """A new database for the test on the session's PostgreSQL server."""
    return new_database(postgres.url)


@pytest.fixture
def queue() -> str:
    """A task queue of the test's own."""
    return f"payrun-test-{secrets.token_hex(4)}"


@pytest.fixture
def banks() -> Iterator[list[RunningSandbox]]:
    """Three organizations: three sandbox banks, each answering after about 5 ms."""
    with serve_in_thread(latency_ms=5) as a, serve_in_thread(latency_ms=5) as b:
        with serve_in_thread(latency_ms=5) as c:
            yield [a, b, c]


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    """Workers the test starts; killed at its end whatever happened."""
    started: list[Worker] = []
    yield started
    for worker in started:
        worker.kill()
        worker.process.wait(30)


def _batches(
    tmp_path: Path, banks: list[RunningSandbox], rows: int = ROWS, **extra: Any
) -> tuple[Path, list[list[BatchRow]]]:
    """One batch per bank (org0, org1, ...): its file and a manifest naming them all."""
    return org_batches(tmp_path, banks, rows, tag="F", **extra)


def _store(url: str) -> FleetStore:
    return FleetStore(DatabaseURL(Secret(url)))


def _state(url: str, name: str) -> tuple[str, str | None]:
    batch = _store(url).batch(name)
    assert batch is not None
    return batch.state, batch.worker


def _paid(url: str, name: str) -> int:
    return sum(1 for row in pg_rows(url, name) if row["status"] in ("submitted", "delivered"))


def _limits_held(bank: RunningSandbox) -> None:
    seen = stats(bank)
    assert seen["max_in_flight"] <= ORG_IN_FLIGHT_CAP, seen
    assert all(v <= ACCOUNT_SUBMITS_CAP for v in seen["max_concurrent_submits"].values()), seen


def test_three_organizations_two_workers_pay_every_row_exactly_once(
    tmp_path: Path,
    banks: list[RunningSandbox],
    url: str,
    temporal: str,
    queue: str,
    workers: list[Worker],
) -> None:
    """Three banks' batches of 300 rows on two workers: each row paid once, limits held."""
    keys = write_keys(tmp_path / "keys", banks)
    manifest, rows = _batches(tmp_path, banks)
    for number in range(2):
        workers.append(start_worker(temporal, url, keys, queue, tmp_path / f"w{number}.log"))
    done = submit(temporal, url, manifest, queue, "--wait", "--format", "json")
    logs = "\n".join(w.output() for w in workers)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n{logs}"
    document = json.loads(done.stdout)
    assert [b["status"] for b in document["batches"]] == ["done"] * 3
    assert [b["rows"] for b in document["batches"]] == [{"submitted": ROWS}] * 3
    for index, bank in enumerate(banks):
        assert pg_problems(bank, rows[index], url, f"org{index}-2026-11") == []
        _limits_held(bank)
    status = submit_status(url)
    assert [b["status"] for b in status["batches"]] == ["done"] * 3


def submit_status(url: str) -> dict[str, Any]:
    """``payrun fleet status --format json``, parsed."""
    import subprocess
    import sys

    from _fleet_helpers import fleet_env

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "payrun",
            "fleet",
            "status",
            "--ledger-url",
            url,
            "--format",
            "json",
        ],
        env=fleet_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def _slow_bank() -> Any:
    """A bank answering after about 40 ms: a 300-row batch pays for a few seconds."""
    return serve_in_thread(latency_ms=40)


def _paying_on(url: str, name: str, worker: Worker, paid: int) -> bool:
    state, holder = _state(url, name)
    return state == "paying" and holder == worker.identity and _paid(url, name) >= paid


def test_kill_9_of_the_paying_worker_hands_its_batch_to_the_other(
    tmp_path: Path, url: str, temporal: str, queue: str, workers: list[Worker]
) -> None:
    """kill -9 of the worker mid-batch: the other worker finishes it, each row paid once."""
    with _slow_bank() as bank:
        keys = write_keys(tmp_path / "keys", [bank])
        manifest, rows = _batches(tmp_path, [bank])
        name = "org0-2026-11"
        # Killed mid-batch however slow the machine: the bank holds the first worker's
        # payments after 40 (never made: it is gone when they go on)
        with bank.app.hold_payments(after=40, longest_s=120):
            first = start_worker(temporal, url, keys, queue, tmp_path / "first.log")
            workers.append(first)
            handed = submit(temporal, url, manifest, queue)
            assert handed.returncode == 0, handed.stderr
            wait_for(
                lambda: _paying_on(url, name, first, 20) and bank.app.payments_held > 0,
                60,
                "the first worker paying, its next payments held",
            )
            second = start_worker(temporal, url, keys, queue, tmp_path / "second.log")
            workers.append(second)
            first.kill(signal.SIGKILL)
        assert _paid(url, name) < ROWS, "the batch finished before the kill"
        holders: set[str | None] = set()

        def ended() -> bool:
            state, holder = _state(url, name)
            holders.add(holder)
            return state == "done"

        wait_for(ended, 120, f"the batch to finish on the second worker\n{second.output()}")
        assert second.identity in holders
        assert pg_problems(bank, rows[0], url, name) == []
        _limits_held(bank)


def test_sigterm_drains_the_worker_and_hands_the_batch_back(
    tmp_path: Path, url: str, temporal: str, queue: str, workers: list[Worker]
) -> None:
    """SIGTERM: in-flight requests finish and are recorded, the batch goes back, another
    worker finishes it exactly once."""
    with _slow_bank() as bank:
        keys = write_keys(tmp_path / "keys", [bank])
        manifest, rows = _batches(tmp_path, [bank])
        name = "org0-2026-11"
        first = start_worker(temporal, url, keys, queue, tmp_path / "first.log")
        workers.append(first)
        # The batch cannot finish before the signal, however slow the machine: the bank
        # holds its payments after 40 until then (in flight: the drain lets them end)
        with bank.app.hold_payments(after=40, longest_s=120):
            assert submit(temporal, url, manifest, queue).returncode == 0
            wait_for(
                lambda: _paying_on(url, name, first, 20) and bank.app.payments_held > 0,
                60,
                "the first worker paying, its next payments held",
            )
            first.kill(signal.SIGTERM)
        assert first.process.wait(60) == 0, first.output()
        assert "worker stopped" in first.output()
        assert "Traceback" not in first.output(), first.output()
        state, holder = _state(url, name)
        assert (state, holder) == ("queued", None)
        statuses = {row["status"] for row in pg_rows(url, name)}
        # Drained: no request was left without its answer recorded
        assert not statuses & {"creating", "submitting"}, statuses
        assert _paid(url, name) < ROWS
        second = start_worker(temporal, url, keys, queue, tmp_path / "second.log")
        workers.append(second)
        wait_for(lambda: _state(url, name)[0] == "done", 120, "the second worker finishing")
        assert pg_problems(bank, rows[0], url, name) == []
        _limits_held(bank)


def test_a_cutoff_in_the_past_pays_nothing(
    tmp_path: Path,
    banks: list[RunningSandbox],
    url: str,
    temporal: str,
    queue: str,
    workers: list[Worker],
) -> None:
    """A batch whose cut-off has passed ends incomplete (exit 3) with nothing sent."""
    keys = write_keys(tmp_path / "keys", banks[:1])
    manifest, _ = _batches(tmp_path, banks[:1], rows=20, cutoff="2020-01-01T09:00:00Z")
    workers.append(start_worker(temporal, url, keys, queue, tmp_path / "w.log"))
    done = submit(temporal, url, manifest, queue, "--wait", "--format", "json")
    assert done.returncode == 3, f"{done.stdout}\n{done.stderr}"
    document = json.loads(done.stdout)
    assert document == {
        "batches": [
            {
                "name": "org0-2026-11",
                "file": str(tmp_path / "org0.csv"),
                "status": "incomplete",
                "rows": {"pending": 20},
            }
        ]
    }
    assert [g for g in stats(banks[0])["payments"] if g["reference"].startswith("F")] == []


def _queued_in_temporal(temporal: str, queue: str, batch: str) -> bool:
    """True when the batch's route workflow (its way into a lane) exists in Temporal."""
    import asyncio

    from temporalio.client import Client
    from temporalio.service import RPCError

    from payrun.fleet._workflow import route_workflow_id

    async def look() -> bool:
        client = await Client.connect(temporal)
        try:
            await client.get_workflow_handle(route_workflow_id(queue, batch)).describe()
        except RPCError:
            return False
        return True

    return asyncio.run(look())


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        ("missing file", "cannot"),
        ("bad toml", "not valid TOML"),
        ("unknown field", "not a manifest field"),
        ("control totals", "control totals differ"),
        ("no header", "org1"),
    ],
)
def test_a_bad_manifest_or_unusable_file_submits_nothing(
    tmp_path: Path,
    banks: list[RunningSandbox],
    url: str,
    temporal: str,
    queue: str,
    damage: str,
    says: str,
) -> None:
    """One bad batch refuses the whole submit (exit 2): nothing stored, nothing queued."""
    manifest, _ = _batches(tmp_path, banks[:2], rows=5)
    text = manifest.read_text()
    if damage == "missing file":
        (tmp_path / "org1.csv").unlink()
    elif damage == "bad toml":
        text += "[[batch\n"
    elif damage == "unknown field":
        text += 'colour = "blue"\n'
    elif damage == "control totals":
        text += "expect_count = 6\n"
    else:
        (tmp_path / "org1.csv").write_text("")
    manifest.write_text(text)
    done = submit(temporal, url, manifest, queue, "--wait")
    assert done.returncode == 2, f"{done.stdout}\n{done.stderr}"
    assert says in done.stderr
    assert "Traceback" not in done.stderr
    assert _store(url).batches() == []
    assert not any(_queued_in_temporal(temporal, queue, f"org{i}-2026-11") for i in range(2))


def test_the_cutoff_timer_stops_a_paying_batch_and_ends_it_incomplete(
    tmp_path: Path, url: str, temporal: str, queue: str, workers: list[Worker]
) -> None:
    """A cut-off passing mid-batch: no new payment starts, in-flight ones are recorded,
    the batch ends incomplete (exit 3) and no row is paid twice."""
    import datetime

    # 300 rows at 600 ms a request (3 submits per account) take some 35 s: the cut-off,
    # 20 s after the worker is ready, comes mid-batch even when a busy machine is slow to
    # submit and start paying
    with serve_in_thread(latency_ms=600) as bank:
        keys = write_keys(tmp_path / "keys", [bank])
        worker = start_worker(temporal, url, keys, queue, tmp_path / "w.log")
        workers.append(worker)
        # The cut-off counts from a worker ready to pay, however long a busy machine takes
        wait_for(lambda: "polls task queue" in worker.output(), 120, "the worker to start")
        soon = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=20)
        manifest, rows = _batches(tmp_path, [bank], cutoff=soon.isoformat())
        name = "org0-2026-11"
        done = submit(temporal, url, manifest, queue, "--wait", "--format", "json")
        assert done.returncode == 3, f"{done.stdout}\n{done.stderr}\n{workers[0].output()}"
        assert json.loads(done.stdout)["batches"][0]["status"] == "incomplete"
        recorded = pg_rows(url, name)
        statuses = {row["status"] for row in recorded}
        assert not statuses & {"creating", "submitting"}, statuses
        assert 0 < _paid(url, name) < ROWS
        groups = [g for g in stats(bank)["payments"] if g["reference"].startswith("F00-")]
        # Each payment made once, submitted at most once, and the ledger knows every submission
        assert all(g["payments"] == 1 and g["submissions"] <= 1 for g in groups), groups
        submitted = sum(1 for row in recorded if row["status"] == "submitted")
        assert sum(g["submissions"] for g in groups) == submitted
        _limits_held(bank)


def test_a_worker_refuses_a_keys_folder_signing_key_others_can_read(tmp_path: Path) -> None:
    """The worker's NAME.signing.pem readable by others refuses the batch (with the chmod);
    its API key file NAME readable by others is a warning, the key still used."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from payrun.errors import ConfigError
    from payrun.fleet._activities import _settings
    from payrun.fleet._store import FleetBatch

    keys = tmp_path / "keys"
    keys.mkdir()
    (keys / "org").write_text("api-key-1\n")
    (keys / "org").chmod(0o644)
    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    (keys / "org.signing.pem").write_bytes(pem)
    (keys / "org.signing.pem").chmod(0o644)
    (keys / "org.keyid").write_text("k-1\n")
    batch = FleetBatch(
        "b", "pay.csv", "https://bank.example", "org", None, {}, "queued", None, None
    )
    with pytest.raises(ConfigError) as refused:
        _settings(batch, keys)
    message = str(refused.value)
    assert "can be read by other users (permissions 0644)" in message, message
    assert f"chmod 600 {keys / 'org.signing.pem'}" in message, message
    (keys / "org.signing.pem").chmod(0o600)
    settings = _settings(batch, keys)
    assert settings.api_key.reveal() == "api-key-1" and settings.signing is not None
    (warning,) = settings.warnings
    assert f"chmod 600 {keys / 'org'}" in warning, warning
