"""The result ledger: a real SQLite file, its lock, its atomic writes."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from _run_helpers import fresh_python
from payrun._models import PaymentInstruction, RowProblem, RowStatus, RowVerdict
from payrun.errors import ConfigError, LedgerError, LedgerLockedError
from payrun.ledger import (
    BatchInfo,
    Ledger,
    SQLiteLedger,
    batch_beside,
    default_ledger_path,
    ledger_files,
    open_ledger,
    take_lock,
)
from payrun.ledger._lock import check_ledger_path


def _verdict(row: int, *, valid: bool = True) -> RowVerdict:
    if not valid:
        return RowVerdict(
            row=row,
            instruction=None,
            raw={"payee_name": "Bad", "amount": "abc", "sort_code": "1"},
            errors=(RowProblem(row, "amount", "amount is not a number"),),
        )
    item = PaymentInstruction(
        row=row,
        payee_name=f"Payee {row}",
        sort_code="200000",
        account_number=f"{row:08d}",
        amount=Decimal("10.50"),
        reference="REF",
        source_account="040004 30000001",
    )
    return RowVerdict(row=row, instruction=item, raw={})


def _info() -> BatchInfo:
    return BatchInfo(
        file_path="/x.csv", file_sha256="ab" * 32, valid_count=2, valid_total=Decimal("21.00")
    )


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    """A fresh ledger file with two valid rows and one invalid row."""
    opened = Ledger.open(tmp_path / "batch.ledger.sqlite")
    opened.start(_info(), [_verdict(2), _verdict(3), _verdict(4, valid=False)])
    return opened


def test_new_ledger_holds_rows_and_batch(ledger: Ledger) -> None:
    """Valid rows start pending, invalid rows invalid with their reason, batch info kept."""
    rows = ledger.rows()
    assert [r.status for r in rows] == [RowStatus.PENDING, RowStatus.PENDING, RowStatus.INVALID]
    assert rows[2].error == "amount is not a number"
    assert rows[2].amount_text == "abc"
    assert rows[0].amount == Decimal("10.50")
    info = ledger.batch()
    assert info is not None and info.file_sha256 == "ab" * 32
    ledger.close()


def test_file_is_private(ledger: Ledger) -> None:
    """The ledger file is readable by its owner only (mode 0600)."""
    assert stat.S_IMODE(os.stat(ledger.path).st_mode) == 0o600
    ledger.close()


def test_update_survives_reopen(ledger: Ledger) -> None:
    """A committed update is there when the file is opened again."""
    ledger.update_each([(2, {"status": RowStatus.CREATED, "payment_url": "/v0/payments/pm.1"})])
    ledger.close()
    with Ledger.open(ledger.path) as again:
        row = again.rows([RowStatus.CREATED])[0]
    assert row.row == 2 and row.payment_url == "/v0/payments/pm.1"


def test_update_each_ends_as_each_change_applied_in_turn(ledger: Ledger) -> None:
    """Several changes of one row among other rows' (an intent, then its outcome, then an
    error note) leave each row as applying them one by one would."""
    at = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    ledger.update_each(
        [
            (2, {"status": RowStatus.CREATING, "intent_at": at, "attempts": 1}),
            (3, {"status": RowStatus.CREATING, "intent_at": at, "attempts": 1}),
            (2, {"status": RowStatus.CREATED, "payment_url": "/v0/payments/pm.2", "error": None}),
            (3, {"error": "lost"}),
            (2, {"status": RowStatus.SUBMITTING, "intent_at": at, "attempts": 2}),
        ]
    )
    rows = {row.row: row for row in ledger.rows()}
    assert (rows[2].status, rows[2].payment_url, rows[2].attempts) == (
        RowStatus.SUBMITTING,
        "/v0/payments/pm.2",
        2,
    )
    assert (rows[3].status, rows[3].error, rows[3].attempts) == (RowStatus.CREATING, "lost", 1)
    assert rows[2].intent_at == at
    ledger.close()


def test_atomic_rolls_back_on_error(ledger: Ledger) -> None:
    """An exception inside atomic() leaves no partial write behind."""
    with pytest.raises(RuntimeError), ledger.atomic():
        ledger.update_each([(2, {"status": RowStatus.CREATED})])
        raise RuntimeError
    assert ledger.rows()[0].status is RowStatus.PENDING
    ledger.close()


def test_second_writer_is_refused_with_pid(ledger: Ledger) -> None:
    """A second process cannot open a ledger in use; it is told which process holds it."""
    code = (
        "import sys; from pathlib import Path; from payrun.ledger import Ledger\n"
        "from payrun.errors import LedgerLockedError\n"
        "try:\n    Ledger.open(Path(sys.argv[1]))\n"
        "except LedgerLockedError as e:\n    print(e.pid, e); sys.exit(7)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(ledger.path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 7
    assert result.stdout.startswith(str(os.getpid()))
    assert "in use by process" in result.stdout
    ledger.close()


def test_lock_released_on_close(ledger: Ledger) -> None:
    """Closing the ledger lets the next run open it."""
    ledger.close()
    Ledger.open(ledger.path).close()


def test_same_process_second_open_is_locked(ledger: Ledger) -> None:
    """Even in one process, two writers of one ledger are refused."""
    with pytest.raises(LedgerLockedError):
        Ledger.open(ledger.path)
    ledger.close()


def test_readonly_open_needs_existing_file(tmp_path: Path) -> None:
    """Reading a ledger that does not exist is a clear error."""
    with pytest.raises(LedgerError, match="no ledger"):
        Ledger.open(tmp_path / "missing.sqlite", readonly=True)


def test_a_ledger_in_a_missing_folder_says_to_create_the_folder(tmp_path: Path) -> None:
    """--ledger in a folder that does not exist: one clear line naming the folder."""
    with pytest.raises(LedgerError, match="the folder .*missing does not exist; create it"):
        Ledger.open(tmp_path / "missing" / "l.sqlite")


def test_not_a_ledger_is_refused_untouched(tmp_path: Path) -> None:
    """A file that is not SQLite (a batch file named as the ledger, say), or an SQLite
    database of other tables, is refused with one line: not written to, its mode kept."""
    bogus = tmp_path / "pay.csv"
    bogus.write_bytes(b"payee_name,amount\nAda,1.00\n" * 100)
    other = tmp_path / "customers.db"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE customers (name TEXT)")
    for path, said in (
        (bogus, "it is not an SQLite database"),
        (other, "it is a database of other tables (customers)"),
    ):
        path.chmod(0o644)
        before = path.read_bytes()
        with pytest.raises(LedgerError, match=re.escape(f"{path} is not a payrun ledger")) as err:
            Ledger.open(path)
        assert said in str(err.value) and "name another --ledger file" in str(err.value)
        assert path.read_bytes() == before and path.stat().st_mode & 0o777 == 0o644
    with pytest.raises(LedgerError, match="is not a payrun ledger"):
        Ledger.open(other, readonly=True)


def test_a_ledger_named_with_hash_or_question_mark_or_analyzed_opens(tmp_path: Path) -> None:
    """'payroll #12.csv.ledger.sqlite' opens again without a stray 'payroll ' file (the
    read-only check's URI lost its '#'), and a ledger a database tool ran ANALYZE on
    (its sqlite_stat1 table) is still a payrun ledger."""
    for name in ("payroll #12.csv.ledger.sqlite", "pay?x.csv.ledger.sqlite"):
        path = tmp_path / name
        Ledger.open(path).close()
        with sqlite3.connect(path) as db:
            db.execute("ANALYZE")
        Ledger.open(path).close()
        Ledger.open(path, readonly=True).close()
    assert sorted(p.name for p in tmp_path.iterdir() if "ledger" not in p.name) == []


def test_a_ledger_another_program_holds_locked_says_so(tmp_path: Path) -> None:
    """A database browser holding the ledger in a transaction: the message says another
    program has it locked and to close it (not to check the disk's space)."""
    path = tmp_path / "l.sqlite"
    Ledger.open(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("PRAGMA locking_mode=EXCLUSIVE")
        holder.execute("BEGIN EXCLUSIVE")
        with pytest.raises(LedgerError, match="another program has it locked") as refused:
            Ledger.open(path)
        assert "disk" not in str(refused.value)
    finally:
        holder.close()


def test_default_path_is_beside_batch(tmp_path: Path) -> None:
    """BATCH.ledger.sqlite sits beside the batch file."""
    assert default_ledger_path(tmp_path / "pay.csv") == tmp_path / "pay.csv.ledger.sqlite"


def test_mark_intent_counts_attempts(ledger: Ledger) -> None:
    """Each committed intent increments the attempt counter and records its time."""
    from payrun.run._book import RowBook

    book = RowBook(ledger.rows(), ledger=ledger)
    book.mark_intent(2, RowStatus.CREATING)
    book.mark_intent(2, RowStatus.CREATING)
    stored = ledger.rows([RowStatus.CREATING])[0]
    assert stored.attempts == 2 and stored.intent_at is not None
    ledger.close()


def _mixed_batch(path: Path) -> Path:
    """Plain rows (dashed and bare sort codes), a row with a warning, an invalid row."""
    path.write_text(
        "row_id,payee_name,sort_code,account_number,amount,reference,source_account\n"
        "E1,Ada Lovelace,20-00-00,12345678,1549.86,SALARY NOV,040004 30000001\n"
        "E2,Alan Turing,200000,23456789,12.50,SALARY NOV,040004 30000002\n"
        "E3,Grace Hopper,20-00-00,34567890,1000.5,SALARY NOV,040004 30000001\n"
        "E4,Bad Row,20-00-00,1234,abc,SALARY NOV,040004 30000001\n"
        "E5,Edsger Dijkstra,20 00 00,45678901,7.00,,040004 30000001\n",
        encoding="utf-8",
    )
    return path


def test_a_new_ledger_records_the_same_rows_from_plain_fields_as_from_verdicts(
    tmp_path: Path,
) -> None:
    """A run records plain rows from validation's fast path: the ledger is the same."""
    from payrun.config import ValidationOptions  # noqa: PLC0415
    from payrun.intake import read_batch  # noqa: PLC0415
    from payrun.validation import plain_or_verdicts, validate_rows  # noqa: PLC0415

    batch = _mixed_batch(tmp_path / "batch.csv")
    books = []
    for name, validate in (("verdicts", validate_rows), ("plain", plain_or_verdicts)):
        with read_batch(batch) as rows, Ledger.open(tmp_path / f"{name}.sqlite") as ledger:
            ledger.start(_info(), validate(rows, ValidationOptions()))
            books.append([row._replace(updated_at=None) for row in ledger.rows()])
    assert books[0] == books[1]
    assert [row.status for row in books[1]] == [RowStatus.PENDING] * 3 + [
        RowStatus.INVALID,
        RowStatus.PENDING,
    ]
    assert books[1][0].sort_code == "200000" and books[1][2].amount_text == "1000.50"


def test_either_row_shape_converts_and_counts_as_the_ledger_records_it(tmp_path: Path) -> None:
    """A plain row and a full verdict of the same line become the same ``LedgerRow`` (the
    one converter, ``ledger_row_of``) as the ledger records, and ``ValidTotals`` counts both
    shapes alike."""
    from payrun._models import ledger_row_of  # noqa: PLC0415
    from payrun.config import ValidationOptions  # noqa: PLC0415
    from payrun.intake import read_batch  # noqa: PLC0415
    from payrun.validation import ValidTotals, plain_or_verdicts, validate_rows  # noqa: PLC0415

    batch = _mixed_batch(tmp_path / "batch.csv")
    with read_batch(batch) as rows, Ledger.open(tmp_path / "ledger.sqlite") as ledger:
        ledger.start(_info(), validate_rows(rows, ValidationOptions()))
        recorded = [row._replace(updated_at=None) for row in ledger.rows()]
    for validate in (validate_rows, plain_or_verdicts):
        with read_batch(batch) as rows:
            verdicts = list(validate(rows, ValidationOptions()))
        assert [ledger_row_of(verdict) for verdict in verdicts] == recorded
        totals = ValidTotals.of(verdicts)
        assert (totals.count, totals.total) == (4, Decimal("2569.86"))


def test_starting_a_run_on_a_clean_file_does_not_load_pydantic(tmp_path: Path) -> None:
    """Plain rows go to the ledger without a pydantic model (0.15 s of every run's CPU)."""
    batch = _mixed_batch(tmp_path / "batch.csv")
    batch.write_text("\n".join(batch.read_text().splitlines()[:3]) + "\n", encoding="utf-8")
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from payrun.config import RunOptions, ValidationOptions\n"
        "from payrun.run._start import open_run_ledger\n"
        f"batch = Path({str(batch)!r})\n"
        "ledger = open_run_ledger(batch, batch.with_suffix('.sqlite'), ValidationOptions(),"
        " RunOptions())\n"
        "print(len(ledger.rows()), 'pydantic' in sys.modules)\n"
    )
    printed = fresh_python(code)
    assert printed.split() == ["2", "False"]


def test_bank_identity_is_the_same_however_the_address_is_written() -> None:
    """The batch lock's bank: loopback names, host case, default ports and a trailing /."""
    from payrun.ledger import bank_identity

    org = "/v0/organizations/og.1"
    same = {
        bank_identity("http://127.0.0.1:8080", org),
        bank_identity("http://localhost:8080/", org),
        bank_identity("http://LOCALHOST:8080", org),
        bank_identity("http://[::1]:8080", org),
    }
    assert len(same) == 1
    assert bank_identity("https://Bank.example", org) == bank_identity(
        "https://bank.example:443/", org
    )
    assert bank_identity("http://127.0.0.1:8081", org) not in same
    assert bank_identity("http://127.0.0.1:8080", "/v0/organizations/og.2") not in same


def test_a_lock_held_for_an_instant_is_waited_for_and_a_held_one_named(tmp_path: Path) -> None:
    """A dry run looks at a ledger's lock for an instant: a run starting then waits for it
    (up to a second) instead of refusing; a lock held longer is refused, naming its holder."""
    import threading  # noqa: PLC0415

    from payrun.ledger import release_lock, take_lock  # noqa: PLC0415

    path = tmp_path / "b.ledger.sqlite"
    held = take_lock(path)
    threading.Timer(0.3, release_lock, args=(held,)).start()
    mine = take_lock(path)  # would raise without the wait
    try:
        with pytest.raises(LedgerLockedError, match=str(os.getpid())):
            take_lock(path)
    finally:
        release_lock(mine)


def test_discard_removes_the_files_before_the_lock_is_let_go(tmp_path: Path) -> None:
    """A discarded ledger's files are gone while its lock is still held; a run that then
    takes the lock gets a fresh lock file, not the removed one."""
    from payrun.ledger import release_lock, take_lock  # noqa: PLC0415
    from payrun.ledger._lock import _still_linked  # noqa: PLC0415

    path = tmp_path / "b.ledger.sqlite"
    ledger = Ledger.open(path)
    lock_path = path.with_name(path.name + ".lock")
    old = os.open(lock_path, os.O_RDWR)  # a run that opened the lock file just before
    try:
        ledger.discard()
        assert sorted(p.name for p in tmp_path.iterdir()) == []
        assert not _still_linked(old, lock_path)
        fresh = take_lock(path)
        assert fresh is not None and _still_linked(fresh, lock_path)
        release_lock(fresh)
    finally:
        os.close(old)


def test_a_ledger_of_an_earlier_payrun_gets_the_late_until_and_alive_at_columns(
    ledger: Ledger,
) -> None:
    """A ledger written before late answers and signs of life were kept opens, reads
    neither, and keeps them once set (the columns are added on open)."""
    import sqlite3

    path = ledger.path
    ledger.close()
    with sqlite3.connect(path) as db:
        db.execute("ALTER TABLE batch DROP COLUMN late_until")
        db.execute("ALTER TABLE batch DROP COLUMN alive_at")
    with Ledger.open(path) as again:
        batch = again.batch()
        assert batch is not None and batch.late_until is None and batch.alive_at is None
        until = datetime(2026, 11, 22, 13, 0, tzinfo=UTC)
        alive = datetime(2026, 11, 22, 12, 59, tzinfo=UTC)
        again.set_batch(late_until=until, alive_at=alive)
        batch = again.batch()
        assert batch is not None and (batch.late_until, batch.alive_at) == (until, alive)


@contextlib.contextmanager
def _socket_at(path: Path) -> Iterator[Path]:
    """A listening Unix socket file at ``path``."""
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        yield path


def test_a_device_is_refused_by_looking_only() -> None:
    """/dev/null as a ledger is refused as a device; the check only stats the path."""
    with pytest.raises(LedgerError, match="the ledger /dev/null is a device, not a file"):
        check_ledger_path(Path("/dev/null"))


def test_a_ledger_path_that_is_not_a_file_is_refused_before_any_change(tmp_path: Path) -> None:
    """A socket, a folder or a link to nothing: refused with one line, its mode kept, and
    no lock file made beside it (neither by a run nor by a dry run's look)."""
    folder = tmp_path / "folder"
    folder.mkdir(mode=0o755)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    with _socket_at(tmp_path / "s") as sock:
        sock.chmod(0o755)
        for path, kind in (
            (sock, "a socket"),
            (folder, "a folder"),
            (dangling, "a symbolic link to nothing"),
        ):
            with pytest.raises(LedgerError, match=re.escape(f"the ledger {path} is {kind}")):
                Ledger.open(path)
            with pytest.raises(LedgerError, match=re.escape(f"the ledger {path} is {kind}")):
                take_lock(path)
            assert not path.with_name(path.name + ".lock").exists()
        assert stat.S_IMODE(sock.stat().st_mode) == stat.S_IMODE(folder.stat().st_mode) == 0o755
    assert not (tmp_path / "nowhere").exists()


def test_a_pipe_as_the_ledger_is_refused_not_waited_on(tmp_path: Path) -> None:
    """A FIFO as the ledger: refused at once (nothing reads or waits on it), mode kept."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o644)
    code = (
        "import sys; from pathlib import Path; from payrun.ledger import Ledger\n"
        "try:\n    Ledger.open(Path(sys.argv[1]))\nexcept Exception as exc:\n    print(exc)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(fifo)],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert f"the ledger {fifo} is a pipe, not a file" in done.stdout, done
    assert stat.S_IMODE(fifo.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo"]


def test_an_existing_empty_file_keeps_its_mode(tmp_path: Path) -> None:
    """An empty file the user made (mktemp, touch) becomes the ledger with its mode kept:
    payrun sets the mode only of a file it creates."""
    path = tmp_path / "mine.sqlite"
    path.touch(mode=0o640)
    path.chmod(0o640)
    with Ledger.open(path) as opened:
        opened.start(_info(), [_verdict(2)])
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_an_immutable_ledger_says_it_cannot_be_written(tmp_path: Path) -> None:
    """A ledger made immutable (chattr +i): "cannot write the ledger", not "create"."""
    path = tmp_path / "batch.ledger.sqlite"
    with Ledger.open(path) as opened:
        opened.start(_info(), [_verdict(2)])
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True, check=False).returncode:
        pytest.skip("chattr +i does not work here")
    try:
        with pytest.raises(LedgerError, match=re.escape(f"cannot write the ledger {path}")):
            Ledger.open(path)
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_one_payment_or_submission_url_is_refused_for_two_rows(ledger: Ledger) -> None:
    """The ledger refuses to record a payment URL (or a submission URL) a second row holds."""
    ledger.update_many([2], payment_url="/v0/payments/pm.1", submission_url="/v0/submissions/ps.1")
    with pytest.raises(LedgerError, match="one bank payment or submission for two rows"):
        ledger.update_many([3], payment_url="/v0/payments/pm.1")
    with pytest.raises(LedgerError, match="one bank payment or submission for two rows"):
        ledger.update_each([(3, {"submission_url": "/v0/submissions/ps.1"})])
    assert [r.payment_url for r in ledger.rows()] == ["/v0/payments/pm.1", None, None]


def _drop_unique_indexes(path: Path) -> None:
    """Make the file look like a ledger of a payrun before the unique indexes."""
    with sqlite3.connect(path) as db:
        db.execute("DROP INDEX rows_payment_url")
        db.execute("DROP INDEX rows_submission_url")


def test_a_ledger_of_an_earlier_payrun_gets_the_unique_indexes_on_open(ledger: Ledger) -> None:
    """A ledger written before the unique indexes gets them when a run opens it."""
    path = ledger.path
    ledger.close()
    _drop_unique_indexes(path)
    with Ledger.open(path) as again:
        again.update_many([2], payment_url="/v0/payments/pm.1")
        with pytest.raises(LedgerError, match="for two rows"):
            again.update_many([3], payment_url="/v0/payments/pm.1")


def test_an_earlier_ledger_holding_one_payment_for_two_rows_is_refused_naming_them(
    ledger: Ledger,
) -> None:
    """An older ledger already recording one payment for two rows is refused on open, with
    the rows and the payment named and what to do; reading it (a report) still works."""
    path = ledger.path
    ledger.close()
    _drop_unique_indexes(path)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE rows SET payment_url = '/v0/payments/pm.7' WHERE row IN (2, 3)")
    with pytest.raises(LedgerError) as refused:
        Ledger.open(path)
    message = str(refused.value)
    assert "rows 2, 3" in message and "/v0/payments/pm.7" in message, message
    assert "bank's app" in message and "new file" in message, message
    with Ledger.open(path, readonly=True) as reading:
        assert len(reading.rows()) == 3
    with sqlite3.connect(path) as db:
        db.execute("UPDATE rows SET payment_url = NULL WHERE row = 3")
    with Ledger.open(path) as again:  # the refused open let go of its lock
        assert again.rows()[0].payment_url == "/v0/payments/pm.7"


@pytest.mark.parametrize(
    "location",
    [
        "postgresql://payrun:pg-s3cret@db.example/payrun",
        Path("postgres://payrun:pg-s3cret@db.example/payrun"),
        "POSTGRESQL+psycopg://payrun:pg-s3cret@db.example/payrun",
    ],
    ids=["url", "path", "driver"],
)
def test_open_ledger_refuses_a_postgresql_url_without_repeating_it(location: str | Path) -> None:
    """A PostgreSQL location is a ConfigError (exit 2) naming the scheme, never the password."""
    with pytest.raises(ConfigError, match="is a PostgreSQL database") as caught:
        open_ledger(location)
    assert "pg-s3cret" not in str(caught.value)


def test_open_ledger_says_whether_it_made_the_ledger(tmp_path: Path) -> None:
    """``created`` is True for the open that made the file, False once it exists."""
    path = tmp_path / "b.ledger.sqlite"
    with open_ledger(path) as first:
        assert first.created
        assert first.location == str(path)
    with open_ledger(path) as again:
        assert not again.created
    with open_ledger(path, readonly=True) as reader:
        assert not reader.created


def test_the_files_of_a_ledger_are_named_in_one_place(tmp_path: Path) -> None:
    """The ledger, its -wal and -shm files and its lock; the batch a default name sits beside."""
    path = default_ledger_path(tmp_path / "pay.csv")
    names = [(what, p.name) for what, p in ledger_files(path)]
    assert names == [
        ("the ledger", "pay.csv.ledger.sqlite"),
        ("the ledger's file", "pay.csv.ledger.sqlite-wal"),
        ("the ledger's file", "pay.csv.ledger.sqlite-shm"),
        ("the ledger's lock", "pay.csv.ledger.sqlite.lock"),
    ]
    assert [p.name for _, p in ledger_files(path, lock=False)] == [n for _, n in names[:3]]
    assert batch_beside(path) == tmp_path / "pay.csv"
    assert batch_beside(tmp_path / "other.sqlite") is None


def test_an_in_memory_ledger_keeps_rows_and_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLiteLedger.in_memory records and updates rows like a file, and makes no file."""
    monkeypatch.chdir(tmp_path)
    ledger = SQLiteLedger.in_memory()
    assert ledger.created
    ledger.start(_info(), [_verdict(2), _verdict(3, valid=False)])
    ledger.update_many([2], status=RowStatus.CREATED, payment_url="/v0/payments/pm.1")
    with ledger.hold_batch(ledger.rows(), "bank"):
        ledger.check_in_place()
    assert [(r.row, r.status) for r in ledger.rows()] == [
        (2, RowStatus.CREATED),
        (3, RowStatus.INVALID),
    ]
    ledger.discard()
    assert list(tmp_path.iterdir()) == []


def test_open_ledger_refuses_sqlites_in_memory_name() -> None:
    """--ledger :memory: is a ConfigError: an in-memory ledger would let a rerun pay again."""
    with pytest.raises(ConfigError, match="lost when the run ends"):
        open_ledger(":memory:")


def test_sqlite_ledger_open_refuses_the_in_memory_name_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLiteLedger.open(":memory:") is refused as open_ledger is, making no file."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="lost when the run ends"):
        SQLiteLedger.open(Path(":memory:"))
    assert list(tmp_path.iterdir()) == []


def test_a_lock_file_or_sqlite_file_beside_the_ledger_that_is_a_link_is_refused_untouched(
    tmp_path: Path,
) -> None:
    """``L.lock``, ``L-wal`` or ``L-shm`` as a symbolic link (to a file, or /dev/null) or a
    pipe: refused in one line, the file linked to left as it was, no traceback."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    path = tmp_path / "L.sqlite"
    for suffix in (".lock", "-wal", "-shm"):
        for target in (victim, Path("/dev/null")):
            beside = path.with_name(path.name + suffix)
            beside.symlink_to(target)
            with pytest.raises(LedgerError, match=re.escape(f"{beside} is a symbolic link")):
                Ledger.open(path)
            beside.unlink()
        os.mkfifo(path.with_name(path.name + suffix))
        with pytest.raises(LedgerError, match=re.escape(f"{path.name}{suffix} is a pipe")):
            Ledger.open(path)
        path.with_name(path.name + suffix).unlink()
    assert victim.read_text() == "keep me\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["victim.txt"]
