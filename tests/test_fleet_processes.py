"""``payrun fleet worker --processes N``: one command, N worker processes (issue 31).

Real Temporal, PostgreSQL and sandbox banks for the worker itself; the supervision
(signals forwarded once, a child's death) with small Python children of its own.
"""

from __future__ import annotations

import os
import secrets
import signal
import sys
import time
from pathlib import Path

import pytest

from _fleet_helpers import (
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
from _run_helpers import BatchRow
from payrun.cli import main
from payrun.config import DatabaseURL, Secret, environ_with_ledger_url
from payrun.fleet import FleetStore
from payrun.fleet._processes import child_command, listen_to_parent, split_batches, supervise
from payrun.fleet._worker import connections_needed
from payrun.run import StopSignal
from payrun.sandbox import RunningSandbox, serve_in_thread

ROWS = 200


def _manifest(
    tmp_path: Path, banks: list[RunningSandbox], rows: int = ROWS
) -> tuple[Path, list[list[BatchRow]]]:
    """One batch per bank (orgN-2026-11) and the manifest naming them."""
    return org_batches(tmp_path, banks, rows, tag="P")


@pytest.mark.fleet
def test_one_worker_command_of_two_processes_pays_each_organization_once(
    tmp_path: Path, postgres: Cluster, temporal: str
) -> None:
    """--processes 2: two workers (two identities) from one command pay three
    organizations' batches exactly once; SIGTERM to the whole group drains once (no
    request cut off), exit 0, no traceback."""
    url = new_database(postgres.url)
    queue = f"payrun-test-{secrets.token_hex(4)}"
    with (
        serve_in_thread(latency_ms=5) as a,
        serve_in_thread(latency_ms=5) as b,
        serve_in_thread(latency_ms=5) as c,
    ):
        banks = [a, b, c]
        keys = write_keys(tmp_path / "keys", banks)
        manifest, rows = _manifest(tmp_path, banks)
        worker = start_worker(temporal, url, keys, queue, tmp_path / "w.log", processes=2)
        try:
            wait_for(lambda: worker.output().count("polls task queue") == 2, 60, "two workers")
            done = submit(temporal, url, manifest, queue, "--wait")
            assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n{worker.output()}"
            for index, bank in enumerate(banks):
                name = f"org{index}-2026-11"
                assert pg_problems(bank, rows[index], url, name) == []
            worker.kill(signal.SIGTERM)
            assert worker.process.wait(60) == 0, worker.output()
        finally:
            worker.kill(signal.SIGKILL)
            worker.process.wait(30)
    log = worker.output()
    assert "Traceback" not in log, log
    assert "worker process 1 of 2 started" in log, log
    assert "worker process 2 of 2 started" in log, log
    identities = {line.split()[1] for line in log.splitlines() if "polls task queue" in line}
    assert len(identities) == 2, log
    assert f":{worker.process.pid}" not in " ".join(identities), "a child is the parent"


@pytest.mark.fleet
def test_sigterm_to_the_parent_hands_the_batch_back_and_another_finishes_it(
    tmp_path: Path, postgres: Cluster, temporal: str
) -> None:
    """SIGTERM to the parent of --processes 2 only: its children drain (in-flight requests
    recorded), the batch goes back queued, exit 0 with no traceback; another worker pays
    the rest exactly once."""
    url = new_database(postgres.url)
    queue = f"payrun-test-{secrets.token_hex(4)}"
    store = FleetStore(DatabaseURL(Secret(url)))
    name = "org0-2026-11"
    with serve_in_thread(latency_ms=40) as bank:
        keys = write_keys(tmp_path / "keys", [bank])
        manifest, rows = _manifest(tmp_path, [bank], rows=300)
        first = start_worker(temporal, url, keys, queue, tmp_path / "first.log", processes=2)
        second = None
        try:

            def paying() -> bool:
                batch = store.batch(name)
                paid = sum(1 for row in pg_rows(url, name) if row["status"] == "submitted")
                held = bank.app.payments_held > 0
                return batch is not None and batch.state == "paying" and paid >= 20 and held

            # The batch cannot finish before the signal, however slow the machine: the bank
            # holds its payments after 40 until then (in flight: the drain lets them end)
            with bank.app.hold_payments(after=40, longest_s=120):
                assert submit(temporal, url, manifest, queue).returncode == 0
                wait_for(paying, 60, f"the batch paying\n{first.output()}")
                os.kill(first.process.pid, signal.SIGTERM)
            assert first.process.wait(60) == 0, first.output()
            batch = store.batch(name)
            assert batch is not None
            assert (batch.state, batch.worker) == ("queued", None), first.output()
            statuses = {row["status"] for row in pg_rows(url, name)}
            assert not statuses & {"creating", "submitting"}, statuses
            assert "submitted" in statuses
            assert "pending" in statuses, "the batch finished before the signal"
            second = start_worker(temporal, url, keys, queue, tmp_path / "second.log")
            wait_for(lambda: store.batch(name).state == "done", 120, "the other worker")  # type: ignore[union-attr]
            assert pg_problems(bank, rows[0], url, name) == []
        finally:
            for worker in (first, second):
                if worker is not None:
                    worker.kill(signal.SIGKILL)
                    worker.process.wait(30)
    log = first.output()
    assert "Traceback" not in log, log
    assert "worker stopped" in log, log


def test_the_connection_budget_counts_every_process(
    own_cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--processes 5 --max-batches 195: the 195 batches shared by 5 processes and 3 of
    each process's own (210) are more than the server's 197 allow: exit 2 before any
    process starts, one line with the numbers (a server of its own: none in use)."""
    url = new_database(own_cluster.url)
    (tmp_path / "keys").mkdir()
    argv = ["fleet", "worker", "--temporal", "127.0.0.1:9", "--ledger-url", url]
    code = main(
        [*argv, "--keys", str(tmp_path / "keys"), "--max-batches", "195", "--processes", "5"]
    )
    err = capsys.readouterr().err
    assert code == 2, err
    assert "could need 210 more (--max-batches 195 shared by --processes 5, and 3" in err, err
    assert "worker process" not in err
    assert len(err.strip().splitlines()) == 1


def test_max_batches_is_the_commands_number_shared_by_its_processes() -> None:
    """--max-batches is split fairly across the processes (each at least 1, together the
    command's number), so the defaults on an 8-core machine (20 batches, 8 processes)
    need 20 + 8 x 3 = 44 connections, under PostgreSQL's default 100."""
    assert split_batches(20, 8) == [3, 3, 3, 3, 2, 2, 2, 2]
    assert split_batches(2, 2) == [1, 1]
    assert split_batches(20, 1) == [20]
    for total in range(1, 30):
        for processes in range(1, total + 1):
            shares = split_batches(total, processes)
            assert sum(shares) == total and min(shares) >= 1
            assert max(shares) - min(shares) <= 1
    assert connections_needed(20, 8) == 44
    assert connections_needed(20, 1) == 23


def test_more_processes_than_max_batches_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--processes 4 --max-batches 2: the processes could not share 2 batches; exit 2,
    one line, before the ledger database is touched."""
    (tmp_path / "keys").mkdir()
    argv = ["fleet", "worker", "--temporal", "127.0.0.1:9"]
    argv += ["--ledger-url", "postgresql://payrun@127.0.0.1:9/payrun"]
    code = main([*argv, "--keys", str(tmp_path / "keys"), "--max-batches", "2", "--processes", "4"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "--processes 4 is more than --max-batches 2" in err, err
    assert len(err.strip().splitlines()) == 1


def test_a_childs_command_line_holds_its_share_and_no_ledger_url() -> None:
    """A child's words: the worker's own, less --ledger-url (either spelling) and the
    command's --max-batches, plus its share; the URL goes in its environment."""
    url = "postgresql://payrun:s3cret-pw@db.internal/payrun"
    for words in (
        ["fleet", "worker", "--ledger-url", url, "--max-batches", "20", "--keys", "k"],
        ["fleet", "worker", f"--ledger-url={url}", "--max-batches=20", "--keys", "k"],
    ):
        command = child_command(words, 3)
        assert not [word for word in command if "s3cret" in word or "ledger-url" in word]
        assert command[-7:] == [
            "--keys",
            "k",
            "--max-batches",
            "3",
            "--processes",
            "1",
            "--child-process",
        ]
        assert command.count("--max-batches") == 1 and "fleet" in command
    env = environ_with_ledger_url(DatabaseURL(Secret(url)), {"PATH": "/bin"})
    assert env == {"PATH": "/bin", "PAYRUN_LEDGER_URL": url}


def _cmdline(pid: int) -> list[str]:
    """The command line of process ``pid``, as ``ps`` would show it."""
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


@pytest.mark.fleet
def test_a_child_ignores_signals_and_has_its_share_and_no_password_in_its_words(
    tmp_path: Path, postgres: Cluster, temporal: str
) -> None:
    """--processes 2 --max-batches 2: each child's command line says --max-batches 1 and
    holds no ledger URL (it has it in PAYRUN_LEDGER_URL); two SIGTERMs sent to one child
    alone are ignored (its parent's word is its only stop, so a group's signal counts
    once); one SIGTERM to the whole group then stops the command with exit 0."""
    url = new_database(postgres.url)
    queue = f"payrun-test-{secrets.token_hex(4)}"
    (tmp_path / "keys").mkdir()
    worker = start_worker(
        temporal, url, tmp_path / "keys", queue, tmp_path / "w.log", max_batches=2, processes=2
    )
    try:
        wait_for(lambda: worker.output().count("polls task queue") == 2, 60, "two workers")
        pids = [
            int(line.rsplit("pid ", 1)[1])
            for line in worker.output().splitlines()
            if "started: pid" in line
        ]
        assert len(pids) == 2, worker.output()
        for pid in pids:
            words = _cmdline(pid)
            assert words[words.index("--max-batches") + 1] == "1", words
            assert not [word for word in words if url in word or "--ledger-url" in word], words
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            assert f"PAYRUN_LEDGER_URL={url}".encode() in environ
        os.kill(pids[0], signal.SIGTERM)
        time.sleep(0.5)
        os.kill(pids[0], signal.SIGTERM)
        time.sleep(1.5)
        assert worker.process.poll() is None, worker.output()
        assert Path(f"/proc/{pids[0]}").exists(), worker.output()
        assert "ended with exit code" not in worker.output()
        worker.kill(signal.SIGTERM)
        assert worker.process.wait(60) == 0, worker.output()
    finally:
        worker.kill(signal.SIGKILL)
        worker.process.wait(30)
    assert "Traceback" not in worker.output(), worker.output()


_CHILD = """
import os, sys
try:
    os.close(os.open(sys.argv[1], os.O_CREAT | os.O_EXCL))
except FileExistsError:
    print("waiting", flush=True)
    sys.exit(0 if sys.stdin.readline().strip() == "drain" else 9)
sys.exit(5)
"""


def test_a_child_that_dies_stops_the_others_and_its_code_is_the_commands(
    tmp_path: Path,
) -> None:
    """One child ends with exit 5 on its own: the other is told to drain (and ends 0), and
    the command's exit code is 5, with one line naming the child."""
    said: list[str] = []
    command = [sys.executable, "-c", _CHILD, str(tmp_path / "first")]
    started = time.monotonic()
    code = supervise([command] * 2, StopSignal(), said.append)
    assert code == 5, said
    assert time.monotonic() - started < 30
    assert any("ended with exit code 5" in line for line in said), said


def test_a_stop_is_forwarded_to_every_child_once(tmp_path: Path) -> None:
    """A stop request reaches every child as one ``drain`` (a second as ``cut``): children
    that exit 0 on ``drain`` make exit 0."""
    (tmp_path / "first").touch()
    stop = StopSignal()
    stop.request()
    command = [sys.executable, "-c", _CHILD, str(tmp_path / "first")]
    said: list[str] = []
    assert supervise([command] * 3, stop, said.append) == 0, said
    assert len([line for line in said if "started" in line]) == 3


def test_a_child_that_stops_alone_stops_the_command_with_exit_3(tmp_path: Path) -> None:
    """A child ending with exit 0 when no stop was asked for (stopped on its own): the
    others hand back and stop, and the command exits 3 (run again), not 0."""
    said: list[str] = []
    child = _CHILD.replace("sys.exit(5)", "sys.exit(0)")
    command = [sys.executable, "-c", child, str(tmp_path / "first")]
    code = supervise([command] * 2, StopSignal(), said.append)
    assert code == 3, said
    assert any("ended with exit code 0" in line for line in said), said


def test_a_child_whose_parent_is_gone_drains() -> None:
    """The end of a child's standard input (its parent killed, even with kill -9) is a stop
    request; ``drain`` after a signal the child already had is not a second one; ``cut`` is."""
    import io

    stop = StopSignal()
    listen_to_parent(stop, io.StringIO("")).join(5)
    assert stop.is_set() and not stop.must_cut_off()
    stop = StopSignal()
    stop.request()
    listen_to_parent(stop, io.StringIO("drain\n")).join(5)
    assert not stop.must_cut_off()
    listen_to_parent(stop, io.StringIO("cut\n")).join(5)
    assert stop.must_cut_off()
