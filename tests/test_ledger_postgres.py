"""The PostgreSQL ledger (issue 21) against a real PostgreSQL server: many batches in one
database, the batch's advisory lock, keepalives, identity, and the URL's password kept out of
everything a run shows or keeps. The exactly-once trials on it are in test_resume.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import psycopg
import pytest

from _postgres import Cluster
from _run_helpers import (
    DatabaseLedgerRef,
    assert_exactly_once,
    count_status,
    finish,
    fresh_python,
    kill_group,
    ledger_rows,
    make_rows,
    run,
    run_env,
    start_run,
    wait_until,
    write_batch,
)
from payrun._models import BatchInfo, PlainRow, RowStatus, RowUpdate
from payrun.config import DatabaseURL, Secret, database_url, mask_database_url, redact_url
from payrun.errors import LedgerError, LedgerLockedError, LedgerWriteError
from payrun.ledger import DatabaseLedger, open_ledger
from payrun.ledger._postgres import KEEPALIVES, batch_names
from payrun.sandbox import RunningSandbox, serve_in_thread


def _where(url: str, name: str) -> DatabaseLedger:
    found = database_url(url)
    assert found is not None
    return DatabaseLedger(found, name)


def _rows(count: int, tag: str) -> list[PlainRow]:
    return [
        (n, f"Payee {tag}{n}", "200000", f"{n:08d}", f"{n}.50", f"{tag}-{n}", "040004 1", None)
        for n in range(2, 2 + count)
    ]


def _info(tag: str) -> BatchInfo:
    return BatchInfo(
        file_path=f"/data/{tag}.csv", file_sha256=tag * 8, valid_count=0, valid_total=Decimal(0)
    )


def test_many_batches_share_one_database_each_under_its_own_name(database: str) -> None:
    """Two batches in one database keep their own record and rows, with the same row numbers."""
    with open_ledger(_where(database, "acme")) as acme, open_ledger(_where(database, "beta")) as b:
        assert acme.created and b.created and acme.batch() is None
        acme.start(_info("acme"), _rows(3, "A"))
        b.start(_info("beta"), _rows(2, "B"))
        acme.update_each([(2, {"status": RowStatus.CREATING, "attempts": 1})])
        b.update_many([2, 3], status=RowStatus.HELD, error="held")
        assert [(r.row, r.status, r.reference) for r in acme.rows()] == [
            (2, RowStatus.CREATING, "A-2"),
            (3, RowStatus.PENDING, "A-3"),
            (4, RowStatus.PENDING, "A-4"),
        ]
        assert {r.status for r in b.rows()} == {RowStatus.HELD}
        info = b.batch()
        assert info is not None and info.file_path == "/data/beta.csv"
    found = database_url(database)
    assert found is not None
    assert batch_names(found) == ["acme", "beta"]


def test_a_group_commit_is_one_update_statement_with_its_values_bound(database: str) -> None:
    """update_each: one bound UPDATE, no BEGIN or COMMIT; each row ends as its changes say."""
    from datetime import UTC, datetime

    at = datetime(2026, 11, 28, 9, 0, tzinfo=UTC)
    with open_ledger(_where(database, "acme")) as acme:
        acme.start(_info("acme"), _rows(5, "A"))
        sent: list[str] = []
        connection = acme._db  # type: ignore[attr-defined]
        execute = connection.execute

        def counted(query: object, *args: object, **kwargs: object) -> object:
            sent.append(str(query))
            return execute(query, *args, **kwargs)

        connection.execute = counted
        acme.update_each(
            [
                (2, {"status": RowStatus.CREATING, "intent_at": at, "attempts": 1}),
                (3, {"status": RowStatus.CREATING, "intent_at": at, "attempts": 2}),
                (4, {"status": RowStatus.CREATING, "intent_at": None, "attempts": 3}),
                (5, {"error": "the bank's answer; DROP TABLE payrun_rows; --"}),
                (2, {"status": RowStatus.CREATED, "payment_url": "/v0/payments/pm.2"}),
            ]
        )
        text = "\n".join(sent)
        assert len(sent) == 1 and text.count("UPDATE payrun_rows") == 1, text
        assert "DROP TABLE" not in text
        rows = {row.row: row for row in acme.rows()}
        acme.update_many([4, 5], error=None, payee_url="/v0/payees/p.1")
        many = {row.row: row for row in acme.rows()}
    assert (rows[2].status, rows[2].payment_url, rows[2].attempts, rows[2].intent_at) == (
        RowStatus.CREATED,
        "/v0/payments/pm.2",
        1,
        at,
    )
    assert (rows[3].payment_url, rows[5].attempts, rows[5].intent_at) == (None, 0, None)
    assert [(many[n].error, many[n].payee_url, many[n].status) for n in (4, 5)] == [
        (None, "/v0/payees/p.1", RowStatus.CREATING),
        (None, "/v0/payees/p.1", RowStatus.PENDING),
    ]
    assert (rows[3].status, rows[3].intent_at, rows[3].attempts) == (RowStatus.CREATING, at, 2)
    assert (rows[4].status, rows[4].intent_at, rows[4].attempts) == (RowStatus.CREATING, None, 3)
    assert rows[5].error == "the bank's answer; DROP TABLE payrun_rows; --"
    assert (rows[5].status, rows[6].status) == (RowStatus.PENDING, RowStatus.PENDING)


def test_a_group_commit_reads_only_its_own_rows_of_a_batch_newer_than_the_statistics(
    database: str,
) -> None:
    """update_each in a batch newer than the statistics fetches the changed rows by key only."""
    with open_ledger(_where(database, "old")) as old:
        old.start(_info("old"), _rows(2000, "O"))
    with psycopg.connect(database, autocommit=True) as admin:
        admin.execute("ANALYZE payrun_rows")
    at = datetime(2026, 11, 28, 9, 0, tzinfo=UTC)
    with open_ledger(_where(database, "new")) as new:
        new.start(_info("new"), _rows(2000, "N"))
        changes: list[tuple[int, RowUpdate]] = [
            (2, {"status": RowStatus.CREATING, "intent_at": at, "attempts": 1}),
            (3, {"status": RowStatus.CREATING, "intent_at": at, "attempts": 1}),
            (9, {"status": RowStatus.CREATED, "payment_url": "/v0/payments/9"}),
        ]
        changes += [(n, {"payee_url": f"/v0/payees/{n}"}) for n in (30, 31, 32)]
        with new.atomic():
            new.update_each(changes)
            # This transaction's reads of the table so far (the same connection)
            fetched = new._fetchall(  # type: ignore[attr-defined]  # noqa: SLF001
                "SELECT idx_tup_fetch + seq_tup_read FROM pg_stat_xact_user_tables"
                " WHERE relname = 'payrun_rows'"
            )
        rows = {row.row: row for row in new.rows()}
    assert fetched[0][0] <= 6, fetched
    assert rows[3].status is RowStatus.CREATING and rows[9].payment_url == "/v0/payments/9"
    assert rows[32].payee_url == "/v0/payees/32" and rows[33].payee_url is None


def test_a_second_writer_of_a_batch_is_refused_naming_the_holder_and_a_reader_is_not(
    database: str,
) -> None:
    """While one writer holds a batch, a second is refused naming its pid; a reader still
    reads; once the first closes, the batch opens again, not made anew."""
    where = _where(database, "payroll")
    with open_ledger(where) as first:
        first.start(_info("p"), _rows(2, "P"))
        with pytest.raises(LedgerLockedError, match=f"process {os.getpid()}") as caught:
            open_ledger(where)
        assert caught.value.pid == os.getpid()
        with open_ledger(where, readonly=True) as reader:
            assert len(reader.rows()) == 2
    with open_ledger(where) as again:
        assert not again.created and len(again.rows()) == 2


_HOLD = """
import sys, time
from payrun.config import database_url
from payrun.ledger import DatabaseLedger, open_ledger
ledger = open_ledger(DatabaseLedger(database_url(sys.argv[1]), "held"))
print("held", flush=True)
time.sleep(60)
"""


def test_the_lock_of_a_run_killed_with_sigkill_frees_at_once(database: str) -> None:
    """kill -9 of the process holding a batch: the server drops its session, and its lock."""
    with subprocess.Popen(
        [sys.executable, "-c", _HOLD, database], stdout=subprocess.PIPE, text=True
    ) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
            with pytest.raises(LedgerLockedError, match=f"process {holder.pid}"):
                open_ledger(_where(database, "held"))
        finally:
            holder.send_signal(signal.SIGKILL)
    deadline = time.monotonic() + 5
    while True:
        try:
            open_ledger(_where(database, "held")).close()
            break
        except LedgerLockedError:
            assert time.monotonic() < deadline, "the killed run's lock was still held after 5 s"
            time.sleep(0.05)


def test_every_ledger_connection_has_server_side_tcp_keepalives(database: str) -> None:
    """The server probes a silent ledger connection after 10 s, every 5 s, 3 times (and drops
    unacknowledged data after 25 s): a dead machine's lock frees within about 25 s; and each
    commit waits for the server's disk, whatever the server's default."""
    with open_ledger(_where(database, "k")) as ledger:
        connection = ledger._db  # type: ignore[attr-defined]  # noqa: SLF001
        names = [*KEEPALIVES, "synchronous_commit"]
        shown = {name: connection.execute(f"SHOW {name}").fetchone()[0] for name in names}
        tcp = connection.execute(
            "SELECT client_addr IS NOT NULL FROM pg_stat_activity WHERE pid = pg_backend_pid()"
        ).fetchone()[0]
    assert tcp, "the test server should be reached over TCP, where keepalives apply"
    assert shown == {
        "tcp_keepalives_idle": "10",
        "tcp_keepalives_interval": "5",
        "tcp_keepalives_count": "3",
        "tcp_user_timeout": "25000",
        "synchronous_commit": "on",
    }


def test_a_refused_first_run_leaves_no_batch_behind(database: str) -> None:
    """``discard`` of a new batch removes its record and rows: the next open makes it anew."""
    where = _where(database, "refused")
    ledger = open_ledger(where)
    ledger.start(_info("r"), _rows(2, "R"))
    ledger.discard()
    with open_ledger(where) as again:
        assert again.created and again.batch() is None and again.rows() == []


def test_one_payment_recorded_for_two_rows_is_refused(database: str) -> None:
    """The database refuses one bank payment URL for two rows of a batch (LedgerWriteError)."""
    with open_ledger(_where(database, "u")) as ledger:
        ledger.start(_info("u"), _rows(2, "U"))
        with pytest.raises(LedgerWriteError, match="one bank payment or submission for two"):
            ledger.update_many([2, 3], payment_url="/v0/payments/pm.1")
        assert {r.payment_url for r in ledger.rows()} == {None}


def test_a_batch_removed_mid_run_stops_the_run(database: str) -> None:
    """``check_in_place`` raises LedgerWriteError once the batch's record is gone."""
    with open_ledger(_where(database, "gone")) as ledger:
        ledger.start(_info("g"), _rows(1, "G"))
        ledger.check_in_place()
        with psycopg.connect(database, autocommit=True) as other:
            other.execute("DELETE FROM payrun_batches WHERE name = 'gone'")
        with pytest.raises(LedgerWriteError, match="removed from the database"):
            ledger.check_in_place()


def test_a_database_of_an_earlier_payrun_gets_the_batch_columns_added_since(
    database: str,
) -> None:
    """A database made before options, late answers and signs of life were kept: a reader
    reads its batch (none of them), and a writer adds the columns, as for a ledger file."""
    with open_ledger(_where(database, "old")) as ledger:
        ledger.start(_info("o"), _rows(1, "O"))
    with psycopg.connect(database, autocommit=True) as other:
        for name in ("options", "late_until", "alive_at"):
            other.execute(f"ALTER TABLE payrun_batches DROP COLUMN {name}")
    with open_ledger(_where(database, "old"), readonly=True) as reader:
        batch = reader.batch()
        assert batch is not None and (batch.options, batch.late_until, batch.alive_at) == (
            None,
            None,
            None,
        )
    alive = datetime(2026, 11, 22, 12, 59, tzinfo=UTC)
    with open_ledger(_where(database, "old")) as writer:
        writer.set_batch(options="v1", alive_at=alive)
        batch = writer.batch()
    assert batch is not None and (batch.options, batch.alive_at) == ("v1", alive)


def test_a_database_of_another_schema_version_is_refused(database: str) -> None:
    """Tables a newer payrun made are refused (exit 2), not written with this one's rows."""
    open_ledger(_where(database, "first")).close()
    with psycopg.connect(database, autocommit=True) as other:
        other.execute("UPDATE payrun_meta SET value = '99' WHERE key = 'schema'")
    with pytest.raises(LedgerError, match=r"another version \(99"):
        open_ledger(_where(database, "second"))


def test_the_url_shows_only_scheme_user_host_port_and_database() -> None:
    """The address's password shows as ***; no query option's value ever shows."""
    assert mask_database_url("postgresql://u:p%40w@h:5432/db?sslmode=require&password=x") == (
        "postgresql://u:***@h:5432/db"
    )
    assert mask_database_url("postgresql:///db?host=/run/pg") == "postgresql:///db"
    assert mask_database_url("postgres://u@h:5432/db?sslpassword=Ssl-pw&sslmode=require") == (
        "postgres://u@h:5432/db"
    )
    url = DatabaseURL(Secret("postgres://u:s3cret@h/db?sslpassword=ssl%2Bpw"))
    assert "s3cret" not in f"{url} {url!r} {DatabaseLedger(url, 'b')}"
    assert "ssl" not in f"{url} {url!r} {DatabaseLedger(url, 'b')}".replace("postgres", "")
    # What driver messages are scrubbed of: every password, as written and decoded
    assert sorted(url.passwords()) == ["s3cret", "ssl%2Bpw", "ssl+pw"]


def test_redact_url_shows_no_query_and_nothing_of_a_text_that_is_no_url() -> None:
    """A bank's address shows without its query or fragment; a non-URL shows nothing of itself."""
    assert redact_url("https://bank.example/v0?token=T0k#frag") == "https://bank.example/v0"
    assert redact_url("sk_live_4eC39HqLyjWDarjtT1zd") == "(not a URL: not shown)"
    assert redact_url("postgresql://[u:pw@h/db") == "postgresql://***"


def test_psycopg_is_imported_only_for_a_postgresql_ledger() -> None:
    """A run's modules and an SQLite ledger never import psycopg (start-up does not pay it)."""
    code = (
        "import sys, tempfile, pathlib\n"
        "import payrun.cli, payrun.cli._run, payrun.run, payrun.ledger, payrun.report\n"
        "from payrun.ledger import open_ledger\n"
        "open_ledger(pathlib.Path(tempfile.mkdtemp()) / 'b.ledger.sqlite').close()\n"
        "print('psycopg' in sys.modules)\n"
    )
    assert fresh_python(code).strip() == "False"


# ---- the CLI ---------------------------------------------------------------------------------


def _payrun(sandbox: RunningSandbox, *args: str, env: dict[str, str] | None = None) -> str:
    """Run ``payrun ARGS`` to the end; stdout and stderr together, and the exit code first."""
    done = subprocess.run(
        [sys.executable, "-m", "payrun", *args],
        env={**run_env(sandbox), **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return f"exit {done.returncode}\n{done.stdout}{done.stderr}"


def test_the_password_never_appears_in_what_a_run_shows_or_keeps(
    sandbox_server: RunningSandbox, database: str, tmp_path: Path, postgres: Cluster
) -> None:
    """A run, its JSON log, its report and the ledger's own rows never hold the password;
    the ledger line shows the URL masked."""
    rows = make_rows(1, 12, tag="K")
    batch = write_batch(tmp_path / "keys.csv", rows)
    done = run(
        sandbox_server,
        batch,
        DatabaseLedgerRef(database, batch),
        "--report",
        str(tmp_path / "out.json"),
        "--log-format",
        "json",
    )
    assert done.returncode == 0, done.describe()
    assert_exactly_once(sandbox_server, rows, DatabaseLedgerRef(database, batch))
    finished = json.loads(done.stderr.strip().splitlines()[-1])
    assert finished["ledger"].startswith("postgresql://payrun:***@127.0.0.1")
    kept = [done.stdout, done.stderr, (tmp_path / "out.json").read_text()]
    with psycopg.connect(database, autocommit=True) as db:
        for table in ("payrun_batches", "payrun_rows", "payrun_meta"):
            kept += [str(r) for r in db.execute(f"SELECT * FROM {table}").fetchall()]  # noqa: S608
    assert not [text for text in kept if postgres.password in text]


def test_a_wrong_password_is_refused_in_one_line_without_it(
    sandbox_server: RunningSandbox, tmp_path: Path, postgres: Cluster
) -> None:
    """A URL with a wrong password: exit 2, one line naming the database masked, no traceback."""
    batch = write_batch(tmp_path / "w.csv", make_rows(2, 2, tag="W"))
    wrong = postgres.url.replace(postgres.password, "Wr0ng-pw")
    said = _payrun(sandbox_server, "run", str(batch), "--ledger", wrong, "--no-confirm-payees")
    assert said.startswith("exit 2\n"), said
    assert "Wr0ng-pw" not in said and "Traceback" not in said, said
    assert "cannot reach the ledger database postgresql://payrun:***@" in said, said
    assert "password authentication failed" in said, said


def test_no_query_value_of_the_ledger_url_shows_in_run_or_report(
    sandbox_server: RunningSandbox, database: str, tmp_path: Path
) -> None:
    """An sslpassword (or any option) in the ledger URL never shows: run, report and errors
    show the URL as scheme, user, host, port and database only."""
    url = f"{database}?sslpassword=Ssl-S3cret-pw&application_name=App-N4me"
    env = {"PAYRUN_LEDGER_URL": url}
    batch = write_batch(tmp_path / "ssl.csv", make_rows(5, 2, tag="S"))
    said = [
        _payrun(sandbox_server, "run", str(batch), "--no-confirm-payees", env=env),
        _payrun(sandbox_server, "run", str(batch), "--ledger", url, "--log-format", "json"),
        _payrun(sandbox_server, "report", str(batch), env=env),
        _payrun(sandbox_server, "report", "no-such-batch", env=env),
        _payrun(sandbox_server, "report", env=env),
    ]
    assert said[0].startswith("exit 0\n"), said[0]
    assert said[3].startswith("exit 2\n") and "no-such-batch in the ledger" in said[3], said[3]
    shown = "\n".join(said)
    assert "postgresql://payrun:***@127.0.0.1" in shown, shown
    assert "Ssl-S3cret-pw" not in shown and "App-N4me" not in shown, shown


def test_report_reads_a_batch_by_its_file_or_its_name_and_lists_them_when_unnamed(
    sandbox_server: RunningSandbox, database: str, tmp_path: Path
) -> None:
    """PAYRUN_LEDGER_URL selects the database for run and report; report names a batch by
    the batch file a run paid, or by its stored name, and lists the batches when unnamed."""
    env = {"PAYRUN_LEDGER_URL": database}
    first = write_batch(tmp_path / "first.csv", make_rows(3, 3, tag="A"))
    second = write_batch(tmp_path / "second.csv", make_rows(4, 2, tag="B"))
    for batch in (first, second):
        said = _payrun(sandbox_server, "run", str(batch), "--no-confirm-payees", env=env)
        assert said.startswith("exit 0\n") and "ledger: postgresql://payrun:***@" in said, said
    assert not list(tmp_path.glob("*.ledger.sqlite*")), "a ledger file was made"
    unnamed = _payrun(sandbox_server, "report", env=env)
    assert unnamed.startswith("exit 2\n") and "holds 2 batches" in unnamed, unnamed
    assert str(first.resolve()) in unnamed, unnamed
    by_file = _payrun(sandbox_server, "report", str(first), "--format", "json", env=env)
    assert by_file.startswith("exit 0\n"), by_file
    assert [r["row_id"] for r in json.loads(by_file.partition("\n")[2])] == [
        r["row_id"] for r in ledger_rows(DatabaseLedgerRef(database, first))
    ]
    by_name = _payrun(
        sandbox_server, "report", str(second.resolve()), "--ledger", database, "--format", "json"
    )
    assert len(json.loads(by_name.partition("\n")[2])) == 2, by_name
    missing = _payrun(sandbox_server, "report", "nobody", env=env)
    assert missing.startswith("exit 2\n") and "no batch" in missing, missing


def test_a_copy_paid_under_another_name_from_another_machine_is_refused(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database's register stops a second batch of the same payments at the same bank
    (another machine: no machine-wide register in common), naming the run paying them; a
    run whose session ended no longer counts."""
    import payrun.ledger._postgres as backend

    monkeypatch.setattr(backend, "take_batch_lock", lambda *args, **kwargs: None)
    first, copy = open_ledger(_where(database, "first")), open_ledger(_where(database, "copy"))
    try:
        first.start(_info("f"), _rows(4, "S"))
        copy.start(_info("c"), _rows(4, "S"))
        with first.hold_batch(first.rows(), "bank A"):
            with (
                pytest.raises(LedgerLockedError, match="same content") as caught,
                copy.hold_batch(copy.rows(), "bank A"),
            ):
                pass
            assert f"process {os.getpid()} (ledger postgresql://payrun:***@" in str(caught.value)
            assert "(batch first)" in str(caught.value)
            with copy.hold_batch(copy.rows(), "bank B"):
                pass
            # Ended without leaving the register, as a killed run's session does
            first._db.close()  # type: ignore[attr-defined]  # noqa: SLF001
            # The server ends the session a moment after the client hangs up
            deadline = time.monotonic() + 10
            while True:
                try:
                    with copy.hold_batch(copy.rows(), "bank A"):
                        break
                except LedgerLockedError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
    finally:
        first.close()
        copy.close()


_OTHER_MACHINE = """
import sys, time
from pathlib import Path
import httpx
from payrun.config import RunOptions, ValidationOptions, database_url
from payrun.ledger import DatabaseLedger, _running, bank_identity, open_ledger
from payrun.run._start import dry_run_book
url, batch, base_url, api_key, own = sys.argv[1:]
# Another machine: registers of its own, none in common with this one's
_running.TMP_FOLDER = Path(own)
_running.SHARED_FOLDER = Path(own, "no-shared-register")
key = {"Authorization": f"ServiceAPIKey {api_key}"}
org = httpx.get(f"{base_url}/v0/index", headers=key).json()["organization-url"]
options = (ValidationOptions(), RunOptions())
book, _ = dry_run_book(Path(batch), Path(own, "none.ledger.sqlite"), *options)
with (
    open_ledger(DatabaseLedger(database_url(url), "a copy")) as ledger,
    ledger.hold_batch(book.all(), bank_identity(base_url, org)),
):
    print("paying", flush=True)
    time.sleep(60)
"""


def test_a_dry_run_sees_a_run_paying_the_same_rows_from_another_machine(
    sandbox_server: RunningSandbox, database: str, tmp_path: Path
) -> None:
    """A run on another machine paying a copy of the batch (under another name in the same
    database, in no register of this machine's): a dry run here says so and exits 2, as a
    real run does; once that run is over, the dry run goes ahead."""
    batch = write_batch(tmp_path / "copy.csv", make_rows(6, 4, tag="M"))
    elsewhere = tmp_path / "other-machine"
    elsewhere.mkdir(mode=0o700)
    args = [database, str(batch), sandbox_server.base_url, sandbox_server.api_key, str(elsewhere)]
    command = ["run", str(batch), "--ledger", database, "--no-confirm-payees"]
    with subprocess.Popen(
        [sys.executable, "-c", _OTHER_MACHINE, *args], stdout=subprocess.PIPE, text=True
    ) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "paying"
            dry = _payrun(sandbox_server, *command, "--dry-run")
            assert dry.startswith("exit 2\n"), dry
            assert f"process {holder.pid} (ledger postgresql://payrun:***@" in dry, dry
            assert "(batch a copy)) is paying a batch with the same content" in dry, dry
            assert "a dry run cannot tell what a run would pay" in dry, dry
            real = _payrun(sandbox_server, *command)
            assert real.startswith("exit 2\n"), real
            assert "(batch a copy)) is paying a batch with the same content" in real, real
            assert "two runs at once would pay every row twice" in real, real
        finally:
            holder.kill()
    # The server ends the holder's session (and its lock) a moment after it dies
    wait_until(
        lambda: _payrun(sandbox_server, *command, "--dry-run").startswith("exit 0\n"),
        10,
        "a dry run once the other run is over",
    )


def test_a_ledger_connection_lost_mid_run_exits_3_and_the_rerun_pays_each_row_once(
    database: str, tmp_path: Path, postgres: Cluster
) -> None:
    """The server ends the run's ledger connection mid-run (as a failover or an admin would):
    the run stops sending, exits 3 in one line saying to run again, and the rerun pays
    each row exactly once."""
    rows = make_rows(3, 150, tag="X")
    batch = write_batch(tmp_path / "lost.csv", rows)
    ledger = DatabaseLedgerRef(database, batch)
    with serve_in_thread(latency_ms=40, jitter_ms=10, deliver_after_ms=50, rng_seed=9) as bank:
        started = time.monotonic()
        process = start_run(bank, batch, ledger)
        try:
            wait_until(lambda: count_status(ledger, "submitted") >= 5, 60, "5 submitted rows")
            with psycopg.connect(database, autocommit=True) as admin:
                ended = admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE application_name = 'payrun' AND datname = current_database()"
                ).fetchall()
            assert ended == [(True,)], ended
        except BaseException:
            kill_group(process)
            raise
        lost = finish(process, started)
        assert lost.returncode == 3, lost.describe()
        assert "run the same command again" in lost.stderr, lost.describe()
        assert "Traceback" not in lost.stderr + lost.stdout, lost.describe()
        assert postgres.password not in lost.stderr + lost.stdout, lost.describe()
        assert count_status(ledger, "submitted") < len(rows), lost.describe()
        again = run(bank, batch, ledger)
        assert again.returncode == 0, again.describe()
        assert_exactly_once(bank, rows, ledger, "after the ledger's connection was lost")
