"""Fleet batches with an approved plan (``plan = "<id>"`` in the manifest): a lane pays a
batch whose plan verifies, refuses one whose plan does not, and a plan missing from the
database refuses the submit. Temporal dev server, PostgreSQL, sandbox banks and worker
processes are all real, on loopback."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from _fleet_helpers import (
    Worker,
    new_database,
    pg_problems,
    start_worker,
    submit,
    temporal_dev_server,
    write_keys,
    write_manifest,
)
from _postgres import Cluster
from _run_helpers import make_rows, stats, write_batch
from payrun.cli import main
from payrun.sandbox import RunningSandbox, serve_in_thread

pytestmark = pytest.mark.fleet

ROWS = 20


@pytest.fixture(scope="module")
def temporal() -> Iterator[str]:
    """A Temporal dev server for the module (in memory); its HOST:PORT."""
    with temporal_dev_server() as address:
        yield address


@pytest.fixture
def url(postgres: Cluster) -> str:
    """A new database for the test on the session's PostgreSQL server."""
    return new_database(postgres.url)


@pytest.fixture
def banks() -> Iterator[list[RunningSandbox]]:
    """Two organizations: two sandbox banks."""
    with serve_in_thread(latency_ms=5) as a, serve_in_thread(latency_ms=5) as b:
        yield [a, b]


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    """Workers the test starts; killed at its end whatever happened."""
    started: list[Worker] = []
    yield started
    for worker in started:
        worker.kill()
        worker.process.wait(30)


def _plan(
    bank: RunningSandbox,
    batch: Path,
    url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> str:
    """`payrun plan BATCH --ledger URL` against ``bank``, as carol; the plan id."""
    monkeypatch.setenv("PAYRUN_BASE_URL", bank.base_url)
    monkeypatch.setenv("PAYRUN_API_KEY", bank.api_key)
    words = ["plan", str(batch), "--ledger", url, "--as", "carol", "--no-confirm-payees"]
    assert main([*words, "--format", "json"]) == 0, capsys.readouterr().err
    plan: str = json.loads(capsys.readouterr().out)["plan"]
    return plan


def _entry(index: int, bank: RunningSandbox, plan: str) -> dict[str, object]:
    return {
        "name": f"org{index}-2026-11",
        "file": f"org{index}.csv",
        "base_url": bank.base_url,
        "key": f"org{index}",
        "confirm_payees": False,
        "plan": plan[:12],
    }


def test_a_lane_pays_an_approved_plan_and_refuses_one_not_approved(
    tmp_path: Path,
    banks: list[RunningSandbox],
    url: str,
    temporal: str,
    workers: list[Worker],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """org0's plan is approved: its batch is paid, each row once; org1's plan has no
    approval: its lane refuses the batch (exit 2) and its bank gets nothing."""
    rows = [make_rows(index, ROWS, tag="P") for index in range(2)]
    files = [write_batch(tmp_path / f"org{i}.csv", rows[i]) for i in range(2)]
    plans = [_plan(banks[i], files[i], url, capsys, monkeypatch) for i in range(2)]
    assert main(["approver-key", "alice", "-o", str(tmp_path / "alice.pem")]) == 0
    words = ["approve", str(files[0]), "--ledger", url, "--plan", plans[0], "--as", "alice"]
    assert main([*words, "--key", str(tmp_path / "alice.pem"), "--yes"]) == 0
    manifest = write_manifest(
        tmp_path / "fleet.toml", [_entry(i, banks[i], plans[i]) for i in range(2)]
    )
    keys = write_keys(tmp_path / "keys", banks)
    queue = f"payrun-test-{secrets.token_hex(4)}"
    workers.append(start_worker(temporal, url, keys, queue, tmp_path / "w.log"))
    done = submit(temporal, url, manifest, queue, "--wait", "--format", "json")
    assert done.returncode == 2, f"{done.stdout}\n{done.stderr}\n{workers[0].output()}"
    statuses = [b["status"] for b in json.loads(done.stdout)["batches"]]
    assert statuses == ["done", "refused"]
    assert pg_problems(banks[0], rows[0], url, "org0-2026-11") == []
    assert stats(banks[1])["payments"] == []


def test_a_plan_missing_from_the_database_submits_nothing(
    tmp_path: Path, banks: list[RunningSandbox], url: str, temporal: str
) -> None:
    """A manifest naming a plan the database does not hold: exit 2, nothing submitted."""
    write_batch(tmp_path / "org0.csv", make_rows(0, ROWS, tag="M"))
    manifest = write_manifest(tmp_path / "fleet.toml", [_entry(0, banks[0], "ab" * 32)])
    done = submit(temporal, url, manifest, "payrun-test-none")
    assert done.returncode == 2, done.stderr
    assert "no plan abababababab" in done.stderr and "nothing was submitted" in done.stderr


def _required_policy(tmp_path: Path) -> Path:
    """A policy requiring an approved plan, only its owner can change."""
    path = tmp_path / "policy.toml"
    path.write_text("[approval]\nrequired = true\n", encoding="utf-8")
    path.chmod(0o600)
    return path


def test_a_worker_whose_policy_requires_a_plan_refuses_a_batch_without_one(
    tmp_path: Path,
    banks: list[RunningSandbox],
    url: str,
    temporal: str,
    workers: list[Worker],
) -> None:
    """A manifest batch without ``plan``, submitted where no policy is set: the worker's
    PAYRUN_POLICY_FILE requires an approved plan, so the batch ends refused (exit 2) with
    one line saying so, and its bank gets nothing."""
    write_batch(tmp_path / "org0.csv", make_rows(0, ROWS, tag="U"))
    entry = {k: v for k, v in _entry(0, banks[0], "").items() if k != "plan"}
    manifest = write_manifest(tmp_path / "fleet.toml", [entry])
    keys = write_keys(tmp_path / "keys", banks[:1])
    queue = f"payrun-test-{secrets.token_hex(4)}"
    policy = {"PAYRUN_POLICY_FILE": str(_required_policy(tmp_path))}
    workers.append(start_worker(temporal, url, keys, queue, tmp_path / "w.log", env=policy))
    done = submit(temporal, url, manifest, queue, "--wait", "--format", "json")
    assert done.returncode == 2, f"{done.stdout}\n{done.stderr}\n{workers[0].output()}"
    assert [b["status"] for b in json.loads(done.stdout)["batches"]] == ["refused"]
    assert "requires an approved one" in workers[0].output()
    assert stats(banks[0])["payments"] == []


def test_submit_refuses_a_batch_without_a_plan_when_its_policy_requires_one(
    tmp_path: Path, banks: list[RunningSandbox], url: str, temporal: str
) -> None:
    """PAYRUN_POLICY_FILE on the submitting side requires a plan: a batch without one is
    refused at submit (exit 2, one line), nothing submitted."""
    write_batch(tmp_path / "org0.csv", make_rows(0, ROWS, tag="S"))
    entry = {k: v for k, v in _entry(0, banks[0], "").items() if k != "plan"}
    manifest = write_manifest(tmp_path / "fleet.toml", [entry])
    policy = {"PAYRUN_POLICY_FILE": str(_required_policy(tmp_path))}
    done = submit(temporal, url, manifest, "payrun-test-none", env=policy)
    assert done.returncode == 2, done.stderr
    assert "has no plan" in done.stderr and "nothing was submitted" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
