"""Helpers for the `payrun run` exactly-once tests: batches, subprocess runs, bank and ledger.

Every run is the real CLI in its own process group (``start_new_session=True``) talking real
loopback HTTP to a sandbox bank served by ``serve_in_thread``. Checks read the sandbox's own
counters (``/__sandbox/stats``) and the ledger (read-only: the SQLite file, or the batch's
rows in a PostgreSQL database), never the runner's memory.
``fresh_python`` runs a snippet in a fresh interpreter (what a new process loads or starts).
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, MutableMapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from payrun.sandbox import RunningSandbox

ACCOUNTS = ("040004 30000001", "040004 30000002")
"""The default seed's two source accounts (GBP 1,000,000 each)."""

RUN_TIMEOUT_S = 120.0
"""Longest any single `payrun run` may take in these tests before it counts as hung."""
AFTER_KILL = Path(__file__).with_name("_payrun_after_kill.py")
"""``python -m payrun`` as the subprocess runs start it (see ``run_args``)."""

FIELDS = (
    "row_id",
    "payee_name",
    "sort_code",
    "account_number",
    "amount",
    "reference",
    "source_account",
)


@dataclass(frozen=True, slots=True)
class DatabaseLedgerRef:
    """A batch's ledger in a PostgreSQL database: ``str`` is what ``--ledger`` gets (the
    URL); the batch is named by the batch file's absolute path, as ``payrun run`` names it."""

    url: str
    batch: Path

    def __str__(self) -> str:
        return self.url

    @property
    def name(self) -> str:
        """The batch's name in the database."""
        return str(self.batch.resolve())


LedgerRef = Path | DatabaseLedgerRef
"""A ledger as the tests hand it to ``payrun run --ledger`` and read it back."""


@dataclass(frozen=True, slots=True)
class LedgerFor:
    """Makes a batch file's ledger on one backend: ``BATCH.ledger.sqlite`` beside it, or
    (with ``url``) its batch in that PostgreSQL database."""

    url: str | None = None

    def __call__(self, batch: Path) -> LedgerRef:
        if self.url is None:
            return batch.with_name(batch.name + ".ledger.sqlite")
        return DatabaseLedgerRef(self.url, batch)

    @property
    def tag(self) -> str:
        """Added to ``make_rows``' tag: each backend's rows are other payments, so a test run
        on both against one bank never finds the other's payments as repeats."""
        return "" if self.url is None else "Q"


@dataclass(frozen=True, slots=True)
class BatchRow:
    """One row written to a batch file (what the sandbox must end up paying exactly once)."""

    row_id: str
    payee_name: str
    sort_code: str
    account_number: str
    amount: str
    reference: str
    source_account: str

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        """Source account, creditor sort code and account number, amount, reference."""
        return (
            self.source_account,
            self.sort_code,
            self.account_number,
            self.amount,
            self.reference,
        )


def make_rows(trial: int, count: int, *, payees: int = 20, tag: str = "T") -> list[BatchRow]:
    """``count`` rows for one trial, alternating over both accounts, unique per trial.

    Payees (``payees`` of them) are unique to the trial (the account number encodes ``tag``
    and ``trial``), references are ``{tag}{trial:02d}-{i:04d}``, so the sandbox's
    per-(creditor, amount, reference) groups isolate each trial even on a shared bank.
    """
    tag_number = sum(ord(c) for c in tag) % 100
    rows = []
    for i in range(count):
        payee = i % payees
        rows.append(
            BatchRow(
                row_id=f"{tag}{trial:02d}-{i:04d}",
                payee_name=f"Payee {tag}{trial:02d} {payee:03d}",
                sort_code=f"20{tag_number:02d}{trial % 100:02d}",
                account_number=f"5{trial % 100:02d}{payee:05d}",
                amount=f"{10 + (i * 7919) % 990}.{(i * 37) % 100:02d}",
                reference=f"{tag}{trial:02d}-{i:04d}",
                source_account=ACCOUNTS[i % len(ACCOUNTS)],
            )
        )
    return rows


def write_batch(path: Path, rows: Iterable[BatchRow], *, fields: Sequence[str] = FIELDS) -> Path:
    """Write ``rows`` as a payrun CSV batch with ``fields`` as its columns (all by default)."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(fields)
        for row in rows:
            writer.writerow([getattr(row, name) for name in fields])
    return path


def fresh_python(code: str) -> str:
    """Run ``code`` in a fresh interpreter (this one's) and return what it printed."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout


@contextlib.contextmanager
def closed_pipe() -> Iterator[int]:
    """The write end of a pipe whose reader has already gone (as after ``| head``)."""
    read, write = os.pipe()
    os.close(read)
    try:
        yield write
    finally:
        os.close(write)


def run_env(sandbox: RunningSandbox) -> dict[str, str]:
    """The environment of a `payrun` subprocess: this one's, minus PAYRUN_*, plus the bank,
    and a settle wait of 1 s (these banks answer within about 40 ms)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAYRUN_")}
    env["PAYRUN_BASE_URL"] = sandbox.base_url
    env["PAYRUN_API_KEY"] = sandbox.api_key
    env["PAYRUN_SETTLE_WAIT"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_args(batch: Path, ledger: LedgerRef, *extra: str) -> list[str]:
    """The `payrun run` command line for ``batch`` with its ``ledger``.

    It runs ``_payrun_after_kill.py``: ``python -m payrun`` with a sign of life every 0.5 s
    rather than 5 (``run_env`` gives it a settle wait of 1 s rather than 60).
    """
    return [
        sys.executable,
        str(AFTER_KILL),
        "run",
        str(batch),
        "--ledger",
        str(ledger),
        "--no-confirm-payees",
        *extra,
    ]


def start_run(
    sandbox: RunningSandbox,
    batch: Path,
    ledger: LedgerRef,
    *extra: str,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[str]:
    """Start `payrun run` in its own process group; stdout and stderr are captured.

    ``env`` adds to (or replaces) the variables ``run_env`` gives it, such as HOME.
    A run the test leaves running (it failed before ``finish``) is killed after the test
    (``reap_runs``).
    """
    process = subprocess.Popen(
        run_args(batch, ledger, *extra),
        env={**run_env(sandbox), **(env or {})},
        cwd=cwd or batch.parent,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    _STARTED.append(process)
    return process


_STARTED: list[subprocess.Popen[str]] = []
"""The runs ``start_run`` started during the current test."""


def reap_runs() -> None:
    """Kill the process group of every run the test started and left running, wait for it
    and close its pipes: a test that fails mid-way leaves no process behind, nor a pipe
    whose ResourceWarning would fail whichever later test the garbage collector runs in."""
    while _STARTED:
        process = _STARTED.pop()
        if process.poll() is None:
            kill_group(process)
        process.wait()
        for pipe in (process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()


@dataclass(frozen=True, slots=True)
class Finished:
    """A finished `payrun run`: exit code, output and how long it took."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def describe(self) -> str:
        """Everything needed to understand a failing run."""
        return (
            f"exit {self.returncode} after {self.seconds:.2f}s\n--- stdout ---\n"
            f"{self.stdout[-4000:]}\n--- stderr ---\n{self.stderr[-4000:]}"
        )


def finish(
    process: subprocess.Popen[str], started: float, timeout: float = RUN_TIMEOUT_S
) -> Finished:
    """Wait for ``process``; kill its whole group and fail loudly if it hangs."""
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(process)
        stdout, stderr = process.communicate()
        message = f"payrun run hung for {timeout}s\n{stdout[-3000:]}\n{stderr[-3000:]}"
        raise AssertionError(message) from None
    return Finished(process.returncode, stdout, stderr, time.monotonic() - started)


def run(
    sandbox: RunningSandbox,
    batch: Path,
    ledger: LedgerRef,
    *extra: str,
    timeout: float = RUN_TIMEOUT_S,
    env: dict[str, str] | None = None,
) -> Finished:
    """Run `payrun run` to the end (``env`` as for ``start_run``)."""
    started = time.monotonic()
    return finish(start_run(sandbox, batch, ledger, *extra, env=env), started, timeout)


def kill_group(process: subprocess.Popen[str], sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` to the process group of ``process`` (it leads its own session)."""
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass


def stats(sandbox: RunningSandbox) -> dict[str, Any]:
    """The sandbox's own counters: ``GET /__sandbox/stats``."""
    response = httpx.get(f"{sandbox.base_url}/__sandbox/stats", timeout=30)
    response.raise_for_status()
    body: dict[str, Any] = response.json()
    return body


def watch_requests(bank: RunningSandbox, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Filled, as the bank serves them, with each API request's kind (``index``,
    ``organization``, ``search``, ``other``) and how many answers the bank had sent when
    it came."""
    serve_api = bank.app._serve_api  # noqa: SLF001 - the server's own request handler
    seen: list[tuple[str, int]] = []
    answered = 0

    async def counted(scope: Any, receive: Any, send: Any) -> None:
        nonlocal answered
        path = str(scope["path"])
        kind = "other"
        if path == "/v0/index":
            kind = "index"
        elif path.endswith("/bank/accounts/search"):
            kind = "search"
        elif path.startswith("/v0/organizations/") and path.count("/") == 3:  # noqa: PLR2004
            kind = "organization"
        seen.append((kind, answered))
        try:
            await serve_api(scope, receive, send)
        finally:
            answered += 1

    monkeypatch.setattr(bank.app, "_serve_api", counted)
    return seen


def reset_stats(sandbox: RunningSandbox) -> None:
    """Forget the sandbox's peaks and counts (payments are kept)."""
    httpx.post(f"{sandbox.base_url}/__sandbox/stats/reset", timeout=30).raise_for_status()


def _money(text: str) -> str:
    return f"{Decimal(text):.2f}"


def account_urls(sandbox: RunningSandbox) -> dict[str, str]:
    """'SORTCODE ACCOUNTNUMBER' -> account URL, for every sandbox account."""
    return {
        f"{a.sort_code} {a.account_number}": f"/v0/bank/accounts/{a.id}"
        for a in list(sandbox.state.accounts.values())
    }


def ledger_rows(ledger: LedgerRef) -> list[dict[str, Any]]:
    """Every row of the ledger, read-only (a finished or interrupted run's)."""
    if isinstance(ledger, DatabaseLedgerRef):
        return _database_rows(ledger)
    connection = sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)
    try:
        connection.row_factory = sqlite3.Row
        return [dict(r) for r in connection.execute("SELECT * FROM rows ORDER BY row")]
    finally:
        connection.close()


_READERS: dict[str, Any] = {}
"""One reading connection per database (polled every 20 ms while a run pays)."""


def _database_rows(ledger: DatabaseLedgerRef) -> list[dict[str, Any]]:
    """Every row of the batch in the database, as ``ledger_rows`` gives a file's."""
    import psycopg
    from psycopg.rows import dict_row

    connection = _READERS.get(ledger.url)
    if connection is None or connection.closed:
        connection = psycopg.connect(ledger.url, autocommit=True, row_factory=dict_row)
        _READERS[ledger.url] = connection
    found = connection.execute(
        "SELECT r.* FROM payrun_rows r JOIN payrun_batches b ON b.id = r.batch_id"
        " WHERE b.name = %s ORDER BY r.row",
        (ledger.name,),
    ).fetchall()
    return [{k: v for k, v in record.items() if k != "batch_id"} for record in found]


def ledger_exists(ledger: LedgerRef) -> bool:
    """True when the ledger holds its batch's rows (the file, or the batch in the database)."""
    if isinstance(ledger, DatabaseLedgerRef):
        try:
            return bool(_database_rows(ledger))
        except Exception:  # noqa: BLE001 - no tables yet
            return False
    return ledger.exists()


PAID = ("submitted", "delivered")
"""Ledger statuses of a row whose payment was created and submitted."""


def exactly_once_problems(
    sandbox: RunningSandbox, rows: Sequence[BatchRow], ledger: LedgerRef
) -> list[str]:
    """Everything that breaks "every row: one payment, one submission, recorded"; [] if none."""
    return [*bank_problems(sandbox, rows), *ledger_problems(sandbox, rows, ledger)]


def bank_problems(sandbox: RunningSandbox, rows: Sequence[BatchRow]) -> list[str]:
    """The bank's view: one payment group per row, each with one payment and one submission.

    A group with a reference of ``rows`` that matches no row (wrong creditor, amount or
    account) is a problem too.
    """
    problems: list[str] = []
    accounts = account_urls(sandbox)
    wanted = {
        (
            accounts[r.source_account],
            r.sort_code,
            r.account_number,
            _money(r.amount),
            r.reference,
        ): r
        for r in rows
    }
    references = {r.reference for r in rows}
    seen: set[tuple[str, ...]] = set()
    for group in stats(sandbox)["payments"]:
        if group["reference"] not in references:
            continue
        key = (
            group["account_url"],
            group["sort_code"],
            group["account_number"],
            _money(group["amount"]),
            group["reference"],
        )
        row = wanted.get(key)
        if row is None:
            problems.append(f"bank payment group matching no row: {group}")
            continue
        seen.add(key)
        if group["payments"] != 1 or group["submissions"] != 1:
            problems.append(
                f"row {row.row_id}: {group['payments']} payment(s), "
                f"{group['submissions']} submission(s) at the bank: {group}"
            )
    problems.extend(
        f"row {row.row_id}: no payment at the bank"
        for key, row in wanted.items()
        if key not in seen
    )
    return problems


def ledger_problems(
    sandbox: RunningSandbox, rows: Sequence[BatchRow], ledger: LedgerRef
) -> list[str]:
    """The ledger's view: every row submitted, with the very payment and submission the bank has."""
    problems: list[str] = []
    by_id = {r.row_id: r for r in rows}
    recorded = ledger_rows(ledger)
    if len(recorded) != len(rows):
        problems.append(f"ledger has {len(recorded)} rows, the batch {len(rows)}")
    payments = sandbox.state.payments
    for record in recorded:
        row = by_id.get(record["row_id"])
        label = f"ledger row {record['row']} ({record['row_id']})"
        if record["status"] not in PAID:
            problems.append(f"{label}: status {record['status']!r}, error {record['error']!r}")
        elif row is None or not record["payment_url"] or not record["submission_url"]:
            problems.append(f"{label}: unknown row or missing urls: {record}")
        else:
            payment = payments.get(_last_part(record["payment_url"]))
            if payment is None or payment.reference != row.reference:
                problems.append(f"{label}: {record['payment_url']} is not this row's payment")
            elif list(payment.submission_ids) != [_last_part(record["submission_url"])]:
                problems.append(
                    f"{label}: submission {record['submission_url']} vs the bank's"
                    f" {payment.submission_ids}"
                )
    return problems


def _last_part(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


def assert_exactly_once(
    sandbox: RunningSandbox, rows: Sequence[BatchRow], ledger: LedgerRef, context: str = ""
) -> None:
    """Fail with every problem listed unless each row was paid exactly once and recorded."""
    problems = exactly_once_problems(sandbox, rows, ledger)
    assert not problems, f"{context}\n" + "\n".join(problems[:40])


def wait_until(condition: object, timeout: float, what: str) -> None:
    """Poll ``condition()`` every 20 ms until true; fail naming ``what`` after ``timeout`` s."""
    assert callable(condition)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.02)
    message = f"timed out after {timeout}s waiting for {what}"
    raise AssertionError(message)


def count_status(ledger: LedgerRef, *statuses: str) -> int:
    """Rows of ``ledger`` in one of ``statuses`` (0 while the ledger does not exist yet)."""
    if not ledger_exists(ledger):
        return 0
    try:
        return sum(1 for r in ledger_rows(ledger) if r["status"] in statuses)
    except Exception:  # noqa: BLE001 - the schema may not be committed yet
        return 0


def error_answer(status: int, title: str) -> Callable[[Any, Any, Any], Awaitable[None]]:
    """An ASGI handler answering ``status`` with the bank's JSON error body."""
    body = json.dumps({"errors": [{"status": str(status), "title": title}]}).encode()

    async def answer(scope: Any, receive: Any, send: Any) -> None:
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return answer


def refuse(
    bank: RunningSandbox,
    monkeypatch: pytest.MonkeyPatch,
    status: int,
    title: str,
    when: Callable[[str, str], bool],
) -> Callable[[], None]:
    """Fault injection in the real server: answer ``status`` to requests ``when`` picks
    (method, path); the rest go to the sandbox. Returns how to stop refusing."""
    serve_api = bank.app._serve_api  # noqa: SLF001 - the server's own request handler
    answer = error_answer(status, title)

    async def refusing(scope: Any, receive: Any, send: Any) -> None:
        if not when(scope["method"], scope["path"]):
            await serve_api(scope, receive, send)
            return
        await answer(scope, receive, send)

    monkeypatch.setattr(bank.app, "_serve_api", refusing)
    return lambda: monkeypatch.setattr(bank.app, "_serve_api", serve_api)


def return_submission(
    sandbox: RunningSandbox, submission_url: str, reason: str = "account-closed"
) -> None:
    """The payee's bank returns a payment: ``/__sandbox/submissions/{ps}/return`` (a
    processing submission is delivered first, so the events say delivered, then returned)."""
    ps = submission_url.rstrip("/").rsplit("/", 1)[-1]
    httpx.post(
        f"{sandbox.base_url}/__sandbox/submissions/{ps}/return", json={"reason": reason}, timeout=30
    ).raise_for_status()


Rewrite = Callable[[str, str, int, bytes], "tuple[int, bytes] | None"]
"""``(method, path, status, body) -> (status, body)`` to change an answer, or None to keep it."""


def rewrite_answers(
    bank: RunningSandbox,
    monkeypatch: pytest.MonkeyPatch,
    rewrite: Rewrite,
    *,
    headers: Callable[[str, str], list[tuple[bytes, bytes]]] | None = None,
) -> Callable[[], None]:
    """A hostile network between payrun and the real server: every API answer the sandbox
    gives passes through ``rewrite`` (after the bank has acted on the request), and
    ``headers(method, path)`` may replace the answer's headers (content-length is recomputed).
    Returns how to stop rewriting."""
    serve_api = bank.app._serve_api  # noqa: SLF001 - the server's own request handler

    async def rewriting(scope: Any, receive: Any, send: Any) -> None:
        started: dict[str, Any] = {}
        chunks: list[bytes] = []

        async def capture(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                started.update(message)
            else:
                chunks.append(message.get("body", b""))

        await serve_api(scope, receive, capture)
        method, path = scope["method"], scope["path"]
        status, body = started["status"], b"".join(chunks)
        changed = rewrite(method, path, status, body)
        if changed is not None:
            status, body = changed
        kept = [(k, v) for k, v in started["headers"] if k.lower() != b"content-length"]
        if headers is not None:
            kept = headers(method, path) or kept
        kept.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": kept})
        await send({"type": "http.response.body", "body": body})

    monkeypatch.setattr(bank.app, "_serve_api", rewriting)
    return lambda: monkeypatch.setattr(bank.app, "_serve_api", serve_api)
