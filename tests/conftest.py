"""Shared fixtures, and the conventions every test follows so the suite runs in parallel.

The suite runs on pytest-xdist (``-n auto --dist loadgroup`` in pyproject's addopts): the
README's plain ``pytest`` starts three worker processes per core (``pytest_xdist_auto_num_workers``:
most tests wait on subprocesses and banks, not on the CPU). ``pytest -n 0 tests/test_x.py``
runs serially, in this process. What that asks of a test:

- Session fixtures: ``sandbox_server`` (a sandbox bank) is per worker; ``postgres`` (a
  throwaway PostgreSQL server, tests/_postgres.py) and ``temporal`` (a Temporal dev
  server) are one for all the workers of the session, started by the first test that asks
  and stopped by the controller (``shared_servers``; ``own_cluster``: a PostgreSQL server
  of the test's own, to stop or to count connections on). Share them by name, never by state:
  rows unique to the test (``make_rows`` with a ``tag``/``trial`` of its own), a database
  of its own (``new_database``) or batches named by ``tmp_path`` (``ledger_for``), a task
  queue of its own. A test that changes a server's behaviour starts its own
  (``serve_in_thread``).
- Files only under ``tmp_path`` (per worker). Nothing reads or writes ``samples/``: the
  ``samples`` fixture copies the shipped samples to the test's folder, so a ledger a user
  left beside ``samples/payroll.csv`` changes nothing. No fixed ports (port 0).
- Environment: every test starts with no ``PAYRUN_*`` variable (``clean_environ``); HOME is
  an empty folder of the worker's own (``worker_home``); change env, cwd or HOME only
  through ``monkeypatch`` (or a subprocess's ``env=``/``cwd=``).
- The user's register of running batches (``/tmp/payrun-UID``, chosen by the user id, not
  HOME) is shared by every worker and every other pytest of this user on the machine: runs
  meet there only on the same bank and rows, so unique rows or a bank of the test's own
  keep them apart; a test that inspects or breaks the register points
  ``payrun.ledger._running.TMP_FOLDER`` (and ``SHARED_FOLDER``) at ``tmp_path``, as
  tests/test_register.py does.
- Processes: a run started with ``start_run`` and left running (a failed test) is killed
  after the test (``reaped_runs``); any other process a test starts needs a fixture or a
  ``finally`` that kills and waits for it (``filterwarnings = error`` turns a leaked pipe
  into a failure of whichever later test the garbage collector runs in).
- No fixed sleeps to wait for something: poll (``wait_until``, ``wait_for``); time a signal
  from a sign the program gives (``AFTER_KILL_STARTED``), not from its launch.
- Markers: ``slow`` (kill -9 trials, long waits) and ``fleet`` tests start first
  (``pytest_collection_modifyitems``) so their waits overlap the many short tests;
  ``@pytest.mark.xdist_group("name")`` keeps tests on one worker when they must share
  something a per-worker session fixture cannot give them.
"""

from __future__ import annotations

import compileall
import dataclasses
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import filelock
import httpx
import pytest

from _postgres import Cluster, find_binaries, start_cluster, stop_cluster, throwaway_cluster
from _run_helpers import LedgerFor, reap_runs

REQUIRE_POSTGRES = os.environ.get("PAYRUN_REQUIRE_POSTGRES") == "1"
"""Set by .ci/run: a test of the PostgreSQL ledger fails, not skips, without a server."""


SAMPLES = Path(__file__).resolve().parents[1] / "samples"
"""The shipped samples: tests copy them (``samples``), never run in this folder."""
SHIPPED_SAMPLES = (
    "payroll.csv",
    "payroll-with-errors.csv",
    "suppliers.xlsx",
    "payroll-bacs18.txt",
    "payroll-bankline.csv",
    "payroll-barclays.csv",
)
"""The files of ``samples/`` in the repository (not whatever else a user left there)."""
FIRST_MARKERS = ("slow", "fleet")
"""Tests with one of these markers are started first: their waits overlap the short tests."""


def pytest_configure(config: pytest.Config) -> None:
    """Runs this suite starts get Ctrl-C as a terminal gives it, even when the suite itself
    runs as a background job of a script (`.ci/run &`): such a job inherits SIGINT ignored,
    and an ignored signal stays ignored in every child, so a test's Ctrl-C that reached a
    payrun before it caught the signal (its first ~15 ms) would be lost, not exit 3. A
    signal with a handler is reset to the default in a child."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    _keep_bytecode(first=not hasattr(config, "workerinput"))
    if not hasattr(config, "workerinput"):
        config.stash[_SHARED] = Path(tempfile.mkdtemp(prefix="payrun-tests-"))


_SHARED = pytest.StashKey[Path]()
"""The controller's folder of the servers its workers share (``shared_servers``)."""


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """(xdist, in the controller) Tell each worker the folder of the shared servers."""
    node.workerinput["payrun_shared"] = str(node.config.stash[_SHARED])


def pytest_unconfigure(config: pytest.Config) -> None:
    """In the controller, after every worker has ended (Ctrl-C included): stop the shared
    PostgreSQL and Temporal servers, whichever worker started them; remove the folder."""
    shared = config.stash.get(_SHARED, None)
    if shared is None:
        return
    started = shared / "postgres.folder"
    if started.exists():
        stop_cluster(Path(started.read_text()))
    temporal = shared / "temporal.json"
    if temporal.exists():
        from _fleet_helpers import stop_temporal

        stop_temporal(json.loads(temporal.read_text())["pid"])
    shutil.rmtree(shared, ignore_errors=True)


def _keep_bytecode(*, first: bool) -> None:
    """Compile once what every process of the session would otherwise compile again.

    With PYTHONDONTWRITEBYTECODE set (an editable install in a container often has it),
    each xdist worker rewrote and compiled every test module from source (measured on 2
    cores: 8.7 s of CPU to collect the suite, 3.4 s with the cache), and each payrun
    subprocess compiled the payrun modules it imports (~0.1 s of its ~0.6 s). So the pytest
    processes write their bytecode caches (``__pycache__``, git-ignored) whatever the
    variable says, and the first process (the xdist controller, or a ``-n 0`` run)
    compiles the payrun package the subprocesses import, as pip does at install time.
    The subprocesses keep the variable: they read the caches and write nothing."""
    sys.dont_write_bytecode = False
    spec = importlib.util.find_spec("payrun")
    if first and spec is not None and spec.origin is not None:
        compileall.compile_dir(Path(spec.origin).parent, quiet=2)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: three workers per core, since most tests wait (on subprocesses, on banks
    answering after a latency, on settle waits) rather than compute. Measured on 2 cores
    (2,104 tests): 4 workers 5 min 42 s, 6 workers 5 min 5 s, 8 workers 5 min 9 s."""
    return 3 * (os.cpu_count() or 1)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put the slow and fleet tests first (a stable sort: the rest keep their order)."""
    items.sort(key=lambda item: not any(item.get_closest_marker(m) for m in FIRST_MARKERS))


@pytest.fixture(scope="session", autouse=True)
def worker_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """HOME is an empty folder of this worker's own for the session, for the tests and the
    programs they start: nothing a user keeps in their home folder reaches a test."""
    home = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HOME", str(home))
        yield home


@pytest.fixture
def samples(tmp_path: Path) -> Path:
    """A copy of the shipped samples in ``tmp_path/samples``: tests read and run them
    there, so nothing is written beside the real ones and nothing left there matters."""
    folder = tmp_path / "samples"
    folder.mkdir()
    for name in SHIPPED_SAMPLES:
        shutil.copyfile(SAMPLES / name, folder / name)
    return folder


@pytest.fixture(autouse=True)
def reaped_runs() -> Iterator[None]:
    """After each test, no `payrun run` it started (``start_run``) is left running."""
    yield
    reap_runs()


@pytest.fixture(autouse=True)
def stop_signals_as_they_were() -> Iterator[None]:
    """After each test, Ctrl-C and SIGTERM are handled as before it: a command run in this
    process that was stopped leaves them ignored (``payrun.cli.main``: no late Ctrl-C
    traceback while it exits), and an ignored signal stays ignored in every child the
    next tests start, so their Ctrl-C before payrun caught it would be lost."""
    before = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    yield
    for number, handler in before.items():
        if signal.getsignal(number) != handler:
            signal.signal(number, handler)


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Strip PAYRUN_* variables so the machine's environment cannot leak into a test."""
    for name in list(os.environ):
        if name.startswith("PAYRUN_"):
            monkeypatch.delenv(name)
    yield


@pytest.fixture
def anyio_backend() -> str:
    """Run async tests on asyncio only (payrun does not promise trio)."""
    return "asyncio"


# ---- sandbox bank (issue 3) ------------------------------------------------------------
# A real uvicorn server on loopback, shared by the whole session (start-up costs ~0.1 s).
# Tests that need their own settings (latency, faults) start their own with serve_in_thread.

from payrun.sandbox import RunningSandbox, SandboxApp, serve_in_thread  # noqa: E402


@pytest.fixture(scope="session")
def sandbox_server() -> Iterator[RunningSandbox]:
    """Yield a running sandbox bank: ``.base_url``, ``.api_key``, ``.state``, ``.app``."""
    with serve_in_thread(deliver_after_ms=50) as running:
        yield running


@pytest.fixture
async def client(app: SandboxApp) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client bound in-process to the module's sandbox ``app``, with its key."""
    transport = httpx.ASGITransport(app=app)
    headers = {"Authorization": f"ServiceAPIKey {app.api_key}"}
    async with httpx.AsyncClient(
        transport=transport, base_url="http://sandbox", headers=headers
    ) as http:
        yield http


# ---- PostgreSQL (issue 21) ---------------------------------------------------------------
# One throwaway server for the session (initdb + pg_ctl, ~1 s of CPU), shared by every
# worker: every test's batches share its database under their own names (the batch file's
# absolute path, under the worker's own tmp_path), as many batches share one ledger
# database, or it makes a database of its own (``new_database``). A test that stops or
# breaks a server starts its own (``throwaway_cluster``).

SHARED_CONNECTIONS = max(600, 100 * (os.cpu_count() or 1) * 3)
"""The shared server's session limit: every worker's runs, fleets and pools at once (three
workers per core, each up to about 100)."""


def _postgres_or_skip() -> None:
    """Skip the test (fail it under PAYRUN_REQUIRE_POSTGRES=1) without a PostgreSQL server's
    programs or psycopg."""
    binaries, why = find_binaries()
    try:
        import psycopg  # noqa: F401
    except ImportError:
        why = "psycopg is not installed: pip install -e '.[test]'"
        binaries = None
    if binaries is None:
        if REQUIRE_POSTGRES:
            pytest.fail(f"PAYRUN_REQUIRE_POSTGRES=1 but {why}", pytrace=False)
        pytest.skip(why)


@pytest.fixture(scope="session")
def shared_servers(request: pytest.FixtureRequest) -> Path | None:
    """The folder where the workers of an xdist session share their servers (the
    controller's, which stops them at the end); None without workers (``-n 0``)."""
    workerinput: dict[str, Any] | None = getattr(request.config, "workerinput", None)
    return None if workerinput is None else Path(workerinput["payrun_shared"])


@pytest.fixture(scope="session")
def postgres(shared_servers: Path | None) -> Iterator[Cluster]:
    """A running throwaway PostgreSQL server; skipped (failed under PAYRUN_REQUIRE_POSTGRES=1)
    when this machine has no PostgreSQL server programs or no psycopg. The first worker
    that asks starts it (under a file lock); the controller stops it after the session."""
    _postgres_or_skip()
    if shared_servers is None:
        with throwaway_cluster() as cluster:
            yield cluster
        return
    record = shared_servers / "postgres.json"
    with filelock.FileLock(shared_servers / "postgres.lock"):
        if not record.exists():
            folder = Path(tempfile.mkdtemp(prefix="payrun-pg-"))
            # Written first: the controller stops even a start a Ctrl-C interrupted
            (shared_servers / "postgres.folder").write_text(str(folder))
            try:
                cluster = start_cluster(folder, connections=SHARED_CONNECTIONS)
            except BaseException:
                stop_cluster(folder)
                (shared_servers / "postgres.folder").unlink()
                raise
            record.write_text(json.dumps({**dataclasses.asdict(cluster), "folder": str(folder)}))
        found = json.loads(record.read_text())
    yield Cluster(**{**found, "folder": Path(found["folder"])})


@pytest.fixture
def own_cluster() -> Iterator[Cluster]:
    """A PostgreSQL server of the test's own (~1 s of CPU to make): for a test that stops
    and starts it, or that counts the connections in use (the shared one's are every
    worker's)."""
    _postgres_or_skip()
    with throwaway_cluster() as cluster:
        yield cluster


@pytest.fixture
def database(postgres: Cluster) -> Iterator[str]:
    """The URL of a new, empty database on the session's server (dropped after the test)."""
    import secrets

    import psycopg

    name = f"t_{secrets.token_hex(6)}"
    with psycopg.connect(postgres.url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    yield postgres.url_for(name)
    with psycopg.connect(postgres.url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger_for(request: pytest.FixtureRequest) -> LedgerFor:
    """The ledger of a batch file on each backend: ``BATCH.ledger.sqlite`` beside it, or its
    batch in the session's PostgreSQL database."""
    if request.param == "sqlite":
        return LedgerFor()
    cluster: Cluster = request.getfixturevalue("postgres")
    return LedgerFor(cluster.url)


# ---- Temporal (the fleet) ---------------------------------------------------------------------
# One dev server (in memory) for the session, started by the first test that asks for it;
# each test keeps to its own task queue (the fleet's workflow ids include it) and database.
# A test that restarts Temporal starts its own (``temporal_dev_server``).


@pytest.fixture(scope="session")
def temporal(shared_servers: Path | None) -> Iterator[str]:
    """A Temporal dev server for the session (in memory); its HOST:PORT. As ``postgres``:
    the first worker that asks starts it, the controller kills it after the session."""
    from _fleet_helpers import start_temporal, temporal_dev_server

    if shared_servers is None:
        with temporal_dev_server() as address:
            yield address
        return
    record = shared_servers / "temporal.json"
    with filelock.FileLock(shared_servers / "temporal.lock"):
        if not record.exists():
            process, address = start_temporal(log=shared_servers / "temporal.log")
            _STARTED_HERE.append(process)
            record.write_text(json.dumps({"pid": process.pid, "address": address}))
        found = json.loads(record.read_text())
    yield found["address"]


_STARTED_HERE: list[subprocess.Popen[bytes]] = []
"""The shared dev server, if this worker started it: kept, not waited (the controller kills
it once every worker is done; init reaps it)."""
