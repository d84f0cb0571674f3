"""The registers of running batches: one user's runs of the same rows never overlap, and no
other user can block, delay or read them (real files, real flocks, real second users)."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import NamedTuple

import pytest

from payrun._models import RowStatus
from payrun.errors import LedgerError, LedgerLockedError
from payrun.ledger import LedgerRow, _running, check_batch_lock, take_batch_lock

VICTIM = 65534
"""The user whose runs another user attacks (nobody)."""
ATTACKER = 65533
"""Another local user, with no entry in the user database (none is needed)."""
PAYROLL_GROUP = 54321
"""The group of an administrator's shared register."""
_NEEDS_ROOT = pytest.mark.skipif(
    os.getuid() != 0, reason="acting as two other users needs root (setuid in a fork)"
)


class Machine(NamedTuple):
    """A stand-in for the machine's folders, in a folder every user may enter."""

    root: Path
    tmp: Path
    shared: Path
    home: Path

    def own(self, uid: int | None = None) -> Path:
        """The register ``/tmp/payrun-UID`` of ``uid`` (this process's by default)."""
        return self.tmp / f"payrun-{os.getuid() if uid is None else uid}"


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch) -> Iterator[Machine]:
    """``/tmp`` (1777), the shared register's place and the users' homes, moved into a
    throwaway folder; main's single register (``LOCK_FOLDER``) is moved there as well."""
    root = Path(tempfile.mkdtemp(prefix="payrun-users-", dir="/tmp"))  # noqa: S108
    root.chmod(0o755)
    here = Machine(root, root / "tmp", root / "shared", root / "home")
    here.tmp.mkdir()
    here.tmp.chmod(0o1777)
    here.home.mkdir()
    for uid in {os.getuid(), VICTIM, ATTACKER}:
        (here.home / str(uid)).mkdir(mode=0o700)
        if os.getuid() == 0:
            os.chown(here.home / str(uid), uid, uid)
    monkeypatch.setattr(_running, "TMP_FOLDER", here.tmp, raising=False)
    monkeypatch.setattr(_running, "SHARED_FOLDER", here.shared, raising=False)
    monkeypatch.setattr(_running, "LOCK_FOLDER", here.tmp / "payrun-locks", raising=False)
    monkeypatch.setattr(_running, "_home_of", lambda uid: here.home / str(uid), raising=False)
    yield here
    shutil.rmtree(root)


@pytest.fixture
def lock_folder(machine: Machine) -> Path:
    """This user's own register (not made yet)."""
    return machine.own()


def _make_shared(machine: Machine, *, mode: int = 0o3770, key_mode: int = 0o640) -> None:
    """The shared register as docs/exactly-once.md tells an administrator to make it."""
    machine.shared.mkdir()
    os.chown(machine.shared, 0, PAYROLL_GROUP)
    machine.shared.chmod(mode)
    key = machine.shared / "key"
    key.write_bytes(os.urandom(32))
    os.chown(key, 0, PAYROLL_GROUP)
    key.chmod(key_mode)


def _make_old_register(machine: Machine) -> Path:
    """``/tmp/payrun-locks`` as main's docs told an administrator to make it (1777)."""
    old = machine.tmp / "payrun-locks"
    old.mkdir()
    old.chmod(0o1777)
    return old


def _payment_rows(count: int, *, first: int = 0, tag: str = "R") -> list[LedgerRow]:
    """``count`` valid ledger rows (row ids ``{tag}{n}``), payments numbered from ``first``."""
    return [
        LedgerRow(
            row=i + 2,
            row_id=f"{tag}{n}",
            payee_name=f"Payee {n}",
            sort_code="200000",
            account_number=f"{n:08d}",
            amount=Decimal(f"{10 + n}.50"),
            reference=f"REF {n}",
            source_account="040004 30000001",
            status=RowStatus.PENDING,
        )
        for i, n in enumerate(range(first, first + count))
    ]


# ---- one user's runs -----------------------------------------------------------------------


def test_the_same_rows_from_another_file_are_refused_while_a_run_holds_them(
    lock_folder: Path,
) -> None:
    """The same valid rows (whatever file bytes they came from) at the same bank: refused,
    naming this process and the first ledger; once released, the batch can be taken."""
    rows = _payment_rows(50)
    lock = take_batch_lock(rows, "bank A", Path("/data/first.ledger.sqlite"))
    assert lock is not None
    with pytest.raises(LedgerLockedError, match="same content") as refused:
        take_batch_lock(list(rows), "bank A", Path("/data/copy.ledger.sqlite"))
    assert f"process {os.getpid()} (ledger /data/first.ledger.sqlite)" in str(refused.value)
    assert refused.value.pid == os.getpid()
    lock.release()
    again = take_batch_lock(rows, "bank A", Path("/data/copy.ledger.sqlite"))
    assert again is not None
    again.release()
    assert sorted(p.name for p in lock_folder.iterdir()) == ["key", "register.lock"]


def test_rows_overlapping_a_running_batch_are_refused_and_other_banks_are_not(
    lock_folder: Path,
) -> None:
    """Another batch sharing 5 payments (source account, payee account, amount, reference;
    other row ids and names) is refused with the count; the same rows at another bank, or
    a batch sharing none, are not."""
    lock = take_batch_lock(_payment_rows(50), "bank A", Path("a.ledger.sqlite"))
    assert lock is not None
    shared = [
        r._replace(row_id=f"X{r.row_id}", payee_name="Someone else")
        for r in _payment_rows(5, first=45)
    ]
    overlapping = [*_payment_rows(20, first=100), *shared]
    with pytest.raises(LedgerLockedError, match="is paying 5 of these 25 rows"):
        take_batch_lock(overlapping, "bank A", Path("b.ledger.sqlite"))
    with pytest.raises(LedgerLockedError, match="is paying 5 of these 25 rows"):
        check_batch_lock(overlapping, "bank A")
    at_bank_b = take_batch_lock(overlapping, "bank B", Path("c.ledger.sqlite"))
    unrelated = take_batch_lock(_payment_rows(20, first=100), "bank A", Path("d.sqlite"))
    assert at_bank_b is not None and unrelated is not None
    at_bank_b.release()
    unrelated.release()
    check_batch_lock(_payment_rows(20, first=100), "bank A")
    lock.release()


def test_the_source_account_is_compared_as_the_bank_names_it(lock_folder: Path) -> None:
    """One file names the source account by sort code and number, another by its URL: once
    both are resolved to the bank's account, their rows are the same payments."""
    rows = _payment_rows(10)
    resolved = [r._replace(account_url="/v0/bank/accounts/a1") for r in rows]
    by_url = [r._replace(source_account="/v0/bank/accounts/a1", row_id=None) for r in resolved]
    lock = take_batch_lock(resolved, "bank A", Path("a.ledger.sqlite"))
    assert lock is not None
    with pytest.raises(LedgerLockedError, match="is paying 10 of these 10 rows"):
        take_batch_lock(by_url, "bank A", Path("b.ledger.sqlite"))
    lock.release()


def test_the_batch_fingerprint_is_what_payrun_validate_prints(
    lock_folder: Path, tmp_path: Path
) -> None:
    """The refusal names the batch by the fingerprint `payrun validate` prints for the file."""
    from payrun.config import RunOptions, ValidationOptions
    from payrun.intake import read_batch
    from payrun.run._start import dry_run_book
    from payrun.validation import validate_batch

    batch = tmp_path / "pay.csv"
    batch.write_text(
        "payee_name,sort_code,account_number,amount,reference,source_account\r\n"
        "Ann Lee,20-00-00,12345678,10.5,Rent,040004 30000001\r\n"
        'Bob Ray,200000,87654321,"1,200",,040004 30000002\r\n',
        encoding="utf-8",
    )
    validation = ValidationOptions()
    with read_batch(batch) as read:
        printed = validate_batch(read, validation).fingerprint.sha256
    book, _ = dry_run_book(batch, tmp_path / "none.sqlite", validation, RunOptions())
    lock = take_batch_lock(book.all(), "bank A", Path("a.ledger.sqlite"))
    assert lock is not None
    with pytest.raises(LedgerLockedError, match=f"fingerprint sha256 {printed[:16]}"):
        take_batch_lock(book.all(), "bank A", Path("b.ledger.sqlite"))
    lock.release()


def test_links_planted_in_the_register_are_never_followed(
    lock_folder: Path, tmp_path: Path
) -> None:
    """A link in place of the guard refuses the run and leaves its target untouched; a link
    posing as a run's entry is no run (ignored)."""
    target = tmp_path / "precious"
    target.write_text("keep", encoding="utf-8")
    lock_folder.mkdir(mode=0o700)
    (lock_folder / "run-planted.rows").symlink_to(target)
    lock = take_batch_lock(_payment_rows(3), "bank A", Path("a.ledger.sqlite"))
    assert lock is not None
    lock.release()
    assert stat.S_IMODE(lock_folder.stat().st_mode) == 0o700
    (lock_folder / "register.lock").unlink()
    (lock_folder / "register.lock").symlink_to(target)
    with pytest.raises(LedgerError, match="cannot hold register.lock"):
        take_batch_lock(_payment_rows(3), "bank A", Path("a.ledger.sqlite"))
    assert target.read_text(encoding="utf-8") == "keep"


def test_a_run_killed_with_9_leaves_no_lock_behind(machine: Machine) -> None:
    """kill -9 of a run holding the rows: its entry is no longer held, so the next run takes
    them (and removes the dead run's entry)."""
    code = (
        "import sys, time; from pathlib import Path; from payrun.ledger import _running;"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r});"
        "from test_register import _payment_rows;"
        f"_running.TMP_FOLDER = Path({str(machine.tmp)!r});"
        f"_running.SHARED_FOLDER = Path({str(machine.shared)!r});"
        "_running.take_batch_lock(_payment_rows(50), 'bank A', Path('k.sqlite'));"
        "print('held', flush=True); time.sleep(60)"
    )
    command = [sys.executable, "-c", code]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline() == "held\n"
            with pytest.raises(LedgerLockedError, match=f"process {holder.pid} "):
                take_batch_lock(_payment_rows(50), "bank A", Path("b.ledger.sqlite"))
        finally:
            holder.kill()
    lock = take_batch_lock(_payment_rows(50), "bank A", Path("b.ledger.sqlite"))
    assert lock is not None
    assert len([p for p in machine.own().iterdir() if p.name.startswith("run-")]) == 1
    lock.release()


def test_the_users_register_and_its_files_are_the_users_alone(machine: Machine) -> None:
    """The register is ``payrun-UID`` in /tmp, 0700 (made so from any umask, and put right
    if loosened); its key and entries are 0600; an entry names no payee or amount."""
    old = os.umask(0)
    try:
        lock = _take(_payment_rows(3), "/srv/payroll/march.ledger.sqlite")
    finally:
        os.umask(old)
    own = machine.own()
    assert stat.S_IMODE(own.stat().st_mode) == 0o700
    modes = {p.name[:4]: stat.S_IMODE(p.stat().st_mode) for p in own.iterdir()}
    assert modes == {"key": 0o600, "regi": 0o600, "run-": 0o600}, modes
    entry = lock.path.read_bytes()
    assert b"/srv/payroll/march.ledger.sqlite" in entry  # its owner's own messages name it
    assert b"Payee" not in entry and b"10.50" not in entry and b"REF" not in entry
    lock.release()
    own.chmod(0o755)
    _take(_payment_rows(3), "a.ledger.sqlite").release()
    assert stat.S_IMODE(own.stat().st_mode) == 0o700


@pytest.mark.parametrize("taken_by", ["a file", "a link", "another user's folder"])
def test_a_register_name_another_user_took_sends_the_runs_to_the_home_register(
    machine: Machine, tmp_path: Path, taken_by: str
) -> None:
    """``/tmp/payrun-UID`` made first by someone else (a file, a link, a folder of another
    user's): this user's runs use ~/.local/state/payrun/register of the home the user
    database names, with a warning, and still refuse the same rows twice; with no usable
    home either, a run is refused in one line (never run without a register)."""
    own = machine.own()
    if taken_by == "a file":
        own.write_text("x", encoding="utf-8")
    elif taken_by == "a link":
        own.symlink_to(tmp_path)
    elif os.getuid() != 0:
        pytest.skip("a folder of another user's needs root to make")
    else:
        own.mkdir(mode=0o777)
        os.chown(own, ATTACKER, ATTACKER)
    notes: list[str] = []
    said = _take_twice(_payment_rows(5), notes)
    assert said.startswith("refused: ") and "same content" in said, said
    home = machine.home / str(os.getuid()) / ".local/state/payrun/register"
    assert (home / "key").is_file() and stat.S_IMODE(home.stat().st_mode) == 0o700
    assert len(notes) == 2 and str(own) in notes[0] and str(home) in notes[0], notes
    assert list(tmp_path.iterdir()) == [] or taken_by != "a link"
    shutil.rmtree(machine.home / str(os.getuid()))
    (machine.home / str(os.getuid())).write_text("not a folder", encoding="utf-8")
    with pytest.raises(LedgerError, match="cannot take the lock that stops two runs") as refused:
        take_batch_lock(_payment_rows(3), "bank A", Path("a.ledger.sqlite"))
    assert str(own) in str(refused.value) and "\n" not in str(refused.value)
    check_batch_lock(_payment_rows(3), "bank A")  # a dry run has nothing to look at


# ---- what another user can do -------------------------------------------------------------


@_NEEDS_ROOT
@pytest.mark.parametrize("shared", [False, True], ids=["alone", "with a shared register"])
def test_a_file_another_user_leaves_in_the_registers_blocks_no_run(
    machine: Machine, shared: bool
) -> None:
    """Another user leaves a mode-000 file under every name payrun uses, in every folder
    they may write to (/tmp, main's /tmp/payrun-locks, the shared register they belong to):
    the user's run still pays, and a second run of the same rows is still refused."""
    _make_old_register(machine)
    if shared:
        _make_shared(machine)
    planted = _as_user(ATTACKER, lambda: _plant_everywhere(machine.root), [PAYROLL_GROUP])
    assert "payrun-locks/run-" in planted, planted
    assert ("shared/run-" in planted) is shared, planted
    said = _as_user(VICTIM, lambda: _take_twice(_payment_rows(10)), [PAYROLL_GROUP])
    assert said.startswith("refused: ") and "same content" in said, said


@_NEEDS_ROOT
@pytest.mark.parametrize("shared", [False, True], ids=["alone", "with a shared register"])
def test_locks_another_user_holds_delay_no_run(
    machine: Machine, monkeypatch: pytest.MonkeyPatch, shared: bool
) -> None:
    """Another user holds an exclusive lock on every file of payrun's they can open (main's
    register guard, the shared register's key and entries): a run is not made to wait."""
    monkeypatch.setattr(_running, "_GUARD_PATIENCE", 3.0)
    _make_old_register(machine)
    if shared:
        _make_shared(machine)
    groups = [PAYROLL_GROUP]
    assert _as_user(VICTIM, lambda: _take_twice(_payment_rows(10)), groups).startswith("refused")

    def timed() -> str:
        started = time.monotonic()
        said = _take_twice(_payment_rows(10, first=20))
        return f"{time.monotonic() - started:.2f} s, {said}"

    with _while_user(ATTACKER, lambda: _lock_everything(machine.root), groups) as held:
        assert ("key" in held) is shared, held
        said = _as_user(VICTIM, timed, groups)
    seconds, _, outcome = said.partition(" s, ")
    assert outcome.startswith("refused: ") and "same content" in outcome, said
    assert float(seconds) < 1.5, said


@_NEEDS_ROOT
def test_a_register_folder_another_user_made_first_refuses_no_run(machine: Machine) -> None:
    """Another user ran payrun first (main made its one folder theirs) and took the name of
    this user's register: this user's runs pay, warned, and refuse the same rows twice."""
    taken = machine.own(VICTIM)

    def first() -> str:
        _take(_payment_rows(3, first=50), "theirs.ledger.sqlite").release()
        taken.mkdir(mode=0o777)
        return "done"

    assert _as_user(ATTACKER, first) == "done"

    said = _as_user(VICTIM, lambda: _take_twice(_payment_rows(10)))
    assert said.startswith("refused: ") and "same content" in said, said

    def warned() -> str:
        notes: list[str] = []
        _take(_payment_rows(3), "a.ledger.sqlite", notes.append).release()
        return " / ".join(notes)

    assert f"{taken} belongs to user {ATTACKER}" in _as_user(VICTIM, warned)


@_NEEDS_ROOT
@pytest.mark.parametrize("dry_run", [False, True], ids=["paying", "dry run"])
def test_a_run_in_the_home_register_is_seen_once_the_squatter_leaves_tmp(
    machine: Machine, dry_run: bool
) -> None:
    """Another user squats /tmp/payrun-UID, so this user's run A pays from the home
    register; the squatter removes the folder, and run B (a copy of the file, another
    ledger) makes /tmp/payrun-UID: B still sees A and is refused (a dry run too), and a
    run started after A ended pays (the home register is looked in, never written)."""
    taken = machine.own(VICTIM)

    def squat() -> str:
        taken.mkdir(mode=0o777)
        return "squatting"

    def leave() -> str:
        shutil.rmtree(taken)
        return "gone"

    assert _as_user(ATTACKER, squat) == "squatting"
    rows = _payment_rows(6)

    def second() -> str:
        try:
            if dry_run:
                check_batch_lock(rows, "bank A")
            else:
                _take(rows, "copy.ledger.sqlite").release()
        except LedgerLockedError as exc:
            return f"refused: {exc}"
        return f"paid twice, {taken} {'made' if taken.is_dir() else 'missing'}"

    with _while_user(VICTIM, lambda: _take(rows, "first.ledger.sqlite") and "holding") as said:
        assert said == "holding", said
        assert _as_user(ATTACKER, leave) == "gone"
        said = _as_user(VICTIM, second)
        assert said.startswith("refused: ") and "first.ledger.sqlite" in said, said
    assert _as_user(VICTIM, second).startswith("paid twice"), "A ended: B pays"
    home = machine.home / str(VICTIM) / ".local/state/payrun/register"
    assert (home / "key").is_file() and taken.is_dir() != dry_run


@_NEEDS_ROOT
@pytest.mark.parametrize("member", [False, True], ids=["not in the group", "in the group"])
def test_another_user_reads_no_path_amount_or_hash_of_a_run(machine: Machine, member: bool) -> None:
    """While a user's run holds its rows, another user reading every file they can (a
    member of the shared register's group too) finds no ledger path, payee, amount,
    reference, batch fingerprint or row hash of main's kind (keyed by the bank alone)."""
    _make_shared(machine)
    rows = _payment_rows(10)
    batch = _running.running_batch(rows, "bank A")
    secrets = [
        b"/srv/payroll/march.ledger.sqlite",
        b"Payee 3",
        b"13.50",
        b"REF 3",
        batch.fingerprint.encode(),
        batch.bank.encode(),
        *(batch.keys[i : i + 8] for i in range(0, len(batch.keys), 8)),
    ]
    groups = [PAYROLL_GROUP]
    hold = lambda: _take(rows, "/srv/payroll/march.ledger.sqlite")  # noqa: E731
    with _while_user(VICTIM, hold, groups) as held:
        assert held.startswith("<payrun"), held
        theirs = [PAYROLL_GROUP] if member else []
        said = _as_user(ATTACKER, lambda: _read_everything(machine.root, secrets), theirs)
    assert said.startswith("nothing among"), said


@_NEEDS_ROOT
def test_runs_of_two_users_meet_only_in_a_shared_register(machine: Machine) -> None:
    """Without a shared register, two users' runs of the same rows do not see each other;
    with one, each is refused while the other's run holds them, naming its user and never
    its ledger, both ways; so is a dry run."""
    rows = _payment_rows(10)
    groups = [PAYROLL_GROUP]
    with _while_user(VICTIM, lambda: _take(rows, "/srv/nobody.ledger.sqlite")):
        lock = _take(rows, "root.ledger.sqlite")
        lock.release()
    _make_shared(machine)
    with _while_user(VICTIM, lambda: _take(rows, "/srv/nobody.ledger.sqlite"), groups):
        with pytest.raises(LedgerLockedError, match="same content") as refused:
            _take(rows, "root.ledger.sqlite")
        assert "of user nobody" in str(refused.value), refused.value
        assert "/srv/nobody" not in str(refused.value), refused.value
        with pytest.raises(LedgerLockedError, match="a dry run cannot tell"):
            check_batch_lock(rows, "bank A")
    lock = _take(rows, "root.ledger.sqlite")
    said = _as_user(VICTIM, lambda: _take(rows, "nobody.ledger.sqlite"), groups)
    lock.release()
    assert said.startswith("LedgerLockedError") and "of user root" in said, said
    assert "root.ledger.sqlite" not in said, said


_UNSAFE = [
    "owned by another user",
    "open to others",
    "not sticky",
    "no key",
    "key its group may change",
]


@_NEEDS_ROOT
@pytest.mark.parametrize("unsafe", [*_UNSAFE, "not in its group"])
def test_an_unsafe_shared_register_is_ignored_with_a_warning(machine: Machine, unsafe: str) -> None:
    """A shared register another user could tamper with, without its key, or that this
    user may not open: ignored with one warning naming the recipe; runs go on, and this
    user's own runs of the same rows are still refused."""
    modes = {"open to others": 0o3777, "not sticky": 0o2770}
    _make_shared(
        machine,
        mode=modes.get(unsafe, 0o3770),
        key_mode=0o660 if unsafe == "key its group may change" else 0o640,
    )
    if unsafe == "owned by another user":
        os.chown(machine.shared, ATTACKER, PAYROLL_GROUP)
    elif unsafe == "no key":
        (machine.shared / "key").unlink()

    def run() -> str:
        notes: list[str] = []
        said = _take_twice(_payment_rows(10), notes)
        return f"{said} / {notes}"

    said = _as_user(VICTIM, run, [] if unsafe == "not in its group" else [PAYROLL_GROUP])
    assert said.startswith("refused: ") and "same content" in said, said
    assert said.count("warning: the shared register") == 2 and "docs/exactly-once.md" in said
    assert not [p for p in machine.shared.iterdir() if p.name.startswith("run-")]


# ---- other users ----------------------------------------------------------------------------


def _fork_as(
    uid: int, action: Callable[[], object], groups: Sequence[int], *, stay: bool
) -> tuple[int, int]:
    """Run ``action`` in a forked child as ``uid``; its one line goes to the pipe returned."""
    read, write = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        try:
            os.setgroups(list(groups))
            os.setgid(uid)
            os.setuid(uid)
            said = str(action())
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            said = f"{type(exc).__name__}: {exc}"
        os.write(write, said.replace("\n", " | ").encode() + b"\n")
        if stay:
            time.sleep(60)
        os._exit(0)
    os.close(write)
    return pid, read


def _as_user(uid: int, action: Callable[[], object], groups: Sequence[int] = ()) -> str:
    """What ``action`` returned (or raised) run as ``uid``, once it has ended."""
    pid, read = _fork_as(uid, action, groups, stay=False)
    with os.fdopen(read) as out:
        said = out.readline()
    os.waitpid(pid, 0)
    return said.strip()


@contextmanager
def _while_user(
    uid: int, action: Callable[[], object], groups: Sequence[int] = ()
) -> Iterator[str]:
    """As ``uid``: ``action`` done and still alive (holding what it took) inside the block."""
    pid, read = _fork_as(uid, action, groups, stay=True)
    try:
        with os.fdopen(read) as out:
            yield out.readline().strip()
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def _take_twice(rows: list[LedgerRow], notes: list[str] | None = None) -> str:
    """Hold ``rows``, then try them again through another ledger: what the second said."""
    note = None if notes is None else notes.append
    lock = _take(rows, "first.ledger.sqlite", note)
    try:
        _take(rows, "copy.ledger.sqlite", note)
    except LedgerLockedError as exc:
        return f"refused: {exc}"
    finally:
        lock.release()
    return "paid twice"


def _take(
    rows: list[LedgerRow], ledger: str, note: Callable[[str], None] | None = None
) -> _running.BatchLock:
    if note is None:
        lock = take_batch_lock(rows, "bank A", Path(ledger))
    else:
        lock = take_batch_lock(rows, "bank A", Path(ledger), note=note)
    assert lock is not None
    return lock


def _plant_everywhere(root: Path) -> str:
    """As an attacker: a mode-000 file under each name payrun uses, in every folder this
    user may write to; what was planted."""
    planted = []
    for folder, _, _ in os.walk(root):
        if not os.access(folder, os.W_OK | os.X_OK):
            continue
        for name in ("run-0000000000000000.rows", "register.lock", "key", ".new-0"):
            path = Path(folder, name)
            if path.exists():
                continue
            path.touch(mode=0o000)
            path.chmod(0o000)
            planted.append(str(path))
    return " ".join(planted)


def _lock_everything(root: Path) -> str:
    """As an attacker: an exclusive flock on every file this user can open (kept)."""
    import fcntl

    held = []
    for folder, _, names in os.walk(root):
        for name in names:
            try:
                fd = os.open(Path(folder, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue
            held.append(name)
    return " ".join(held) or "nothing"


def _read_everything(root: Path, secrets: Sequence[bytes]) -> str:
    """As an attacker: every byte this user can read under ``root``; which secrets it holds."""
    data = b""
    for folder, _, names in os.walk(root):
        for name in names:
            try:
                data += Path(folder, name).read_bytes()
            except OSError:
                continue
    found = [s.hex() for s in secrets if s in data]
    return "found " + " ".join(found) if found else f"nothing among {len(data)} bytes"


@_NEEDS_ROOT
def test_the_administrators_recipe_in_the_docs_makes_a_shared_register_payrun_uses(
    machine: Machine,
) -> None:
    """The commands docs/exactly-once.md gives an administrator (its paths and group moved
    here) make a shared register payrun uses without a warning: 3770, root's, keyed."""
    docs = (Path(__file__).parents[1] / "docs" / "exactly-once.md").read_text(encoding="utf-8")
    recipe = docs.split("**Several people paying from one machine.**")[1].split("```")[1]
    steps = [
        line.replace("/var/lib/payrun/register", str(machine.shared)).replace(
            "payroll", str(PAYROLL_GROUP)
        )
        for line in recipe.splitlines()
        if line.startswith(("install ", "head ", "chown ", "chmod "))
    ]
    assert len(steps) == 4, recipe
    subprocess.run(["/bin/sh", "-ec", "\n".join(steps)], check=True)  # noqa: S603
    assert stat.S_IMODE(machine.shared.stat().st_mode) == 0o3770
    notes: list[str] = []
    lock = _take(_payment_rows(4), "a.ledger.sqlite", notes.append)
    assert notes == []
    assert [p.name[:4] for p in machine.shared.iterdir() if p.name != "key"] == ["run-"]
    said = _as_user(VICTIM, lambda: _take(_payment_rows(4), "b.ledger.sqlite"), [PAYROLL_GROUP])
    lock.release()
    assert said.startswith("LedgerLockedError") and "of user root" in said, said


def test_a_ledgers_hold_passes_the_registers_warnings_on(machine: Machine, tmp_path: Path) -> None:
    """A file ledger's ``hold_batch`` (what a run takes) hands the warning about an unsafe
    shared register to the run's ``note``, and still holds the rows."""
    from payrun.ledger import Ledger

    machine.shared.mkdir(mode=0o777)
    machine.shared.chmod(0o777)
    notes: list[str] = []
    with Ledger.open(tmp_path / "a.ledger.sqlite") as ledger:
        with ledger.hold_batch(_payment_rows(3), "bank A", note=notes.append):
            with pytest.raises(LedgerLockedError, match="same content"):
                take_batch_lock(_payment_rows(3), "bank A", Path("b.ledger.sqlite"))
    assert len(notes) == 1 and f"shared register {machine.shared}" in notes[0], notes


@_NEEDS_ROOT
def test_with_no_register_of_its_own_a_run_uses_the_shared_one_alone(machine: Machine) -> None:
    """Another user took ``/tmp/payrun-UID`` and the user has no home: with a shared
    register, the runs go on (warned) and that register alone refuses the same rows twice."""
    machine.own(VICTIM).mkdir(mode=0o777)
    os.chown(machine.own(VICTIM), ATTACKER, ATTACKER)
    shutil.rmtree(machine.home / str(VICTIM))
    refused = _as_user(VICTIM, lambda: _take_twice(_payment_rows(5)))
    assert refused.startswith("LedgerError: cannot take the lock"), refused
    _make_shared(machine)

    def run() -> str:
        notes: list[str] = []
        said = _take_twice(_payment_rows(5), notes)
        return f"{said} / {notes}"

    said = _as_user(VICTIM, run, [PAYROLL_GROUP])
    assert said.startswith("refused: ") and "same content" in said, said
    assert "the shared register" in said and "alone stops two runs" in said, said
