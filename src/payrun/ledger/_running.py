"""The machine-wide register of batches being paid: no two runs pay the same rows at once.

Input: a run's rows and its bank (``bank_identity``). Output: a ``BatchLock`` held for the
run's life; or ``LedgerLockedError`` naming the run already paying the same batch or some
of the same rows (``check_batch_lock`` tells a dry run the same without taking anything).

Every paying run on the machine, whoever runs it and whatever HOME says, publishes an
entry file in ``/tmp/payrun-locks`` (a folder open to all with the sticky bit, so each user
can remove only their own files): its process, its ledger, its bank, the fingerprint of its
valid rows (what ``payrun validate`` prints) and an 8-byte keyed hash of each valid row's
payment (source account, payee account, amount, reference). It holds an ``flock`` on that
entry for its life; the kernel drops it when the process dies, even by kill -9, so an entry
nobody holds is a dead run's: ignored, and removed by its owner. An ``flock`` on the
register's guard file makes looking and publishing one step, so two runs starting at once
cannot both miss each other. Files are opened without following links and read whoever
owns them; a register that cannot be used, or an entry that cannot be read, refuses the run.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from payrun._models import LedgerRow, RowStatus, format_money
from payrun.errors import LedgerError, LedgerLockedError

__all__ = [
    "LOCK_FOLDER",
    "BatchLock",
    "RunningBatch",
    "RunningEntry",
    "check_batch_lock",
    "refuse_overlap_with",
    "running_batch",
    "take_batch_lock",
]

LOCK_FOLDER = Path("/tmp/payrun-locks")
"""The register's folder: the same for every user and process of the machine."""
_GUARD = "register.lock"
_ENTRY_PREFIX = "run-"
_ENTRY_SUFFIX = ".rows"
_FORMAT = 1
_KEY_BYTES = 8
_FOLDER_MODE = 0o1777
_FILE_MODE = 0o644
_WRITABLE_BY_OTHERS = 0o022
_GUARD_PATIENCE = 10.0
"""Seconds a run waits for the register's guard (each run holds it for an instant)."""
_GUARD_RETRY_SECONDS = 0.02
_FIX = (
    "as root, make it a folder open to all with the sticky bit"
    f" (mkdir -p {LOCK_FOLDER} && chmod 1777 {LOCK_FOLDER}), then run again"
)


@dataclass(frozen=True, slots=True)
class RunningBatch:
    """What a run pays, as the register compares it."""

    bank: str
    fingerprint: str
    keys: bytes

    @property
    def count(self) -> int:
        """Valid rows in the batch."""
        return len(self.keys) // _KEY_BYTES


@dataclass(frozen=True, slots=True)
class RunningEntry:
    """A live run's entry in the register."""

    name: str
    pid: int | None
    ledger: str
    bank: str
    fingerprint: str
    keys: bytes


class BatchLock:
    """A run's entry in the register, held until ``release`` (or the process ends)."""

    def __init__(self, folder: int, name: str, fd: int) -> None:
        self._folder = folder
        self._name = name
        self._fd: int | None = fd

    @property
    def path(self) -> Path:
        """The entry file."""
        return LOCK_FOLDER / self._name

    def release(self) -> None:
        """Remove the entry and drop its lock (a second call does nothing)."""
        if self._fd is None:
            return
        # Removed before the lock is dropped: a run looking now finds it gone or still held.
        _unlink_if_same(self._folder, self._name, self._fd)
        os.close(self._fd)
        os.close(self._folder)
        self._fd = None

    def __enter__(self) -> BatchLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def take_batch_lock(
    rows: Sequence[LedgerRow], bank: str, ledger_path: str | Path
) -> BatchLock | None:
    """Publish this run's rows in the register and hold them until ``release``.

    Raises ``LedgerLockedError`` when a live run at the same bank pays the same batch (the
    same fingerprint) or any of the same payments, and ``LedgerError`` when the register
    cannot be used: paying without it could pay twice.
    """
    if sys.platform == "win32":  # pragma: no cover - payrun runs on Linux and macOS
        return None
    batch = running_batch(rows, bank)
    folder = _open_folder(create=True)
    try:
        with _guard(folder):
            _refuse_overlap(folder, batch, dry_run=False)
            name, fd = _publish(folder, batch, ledger_path)
    except BaseException:
        os.close(folder)
        raise
    return BatchLock(folder, name, fd)


def check_batch_lock(rows: Sequence[LedgerRow], bank: str) -> None:
    """Raise ``LedgerLockedError`` when a live run at this bank pays any of these rows.

    A dry run checks this: the payments of that run in flight are not at the bank yet.
    """
    if sys.platform == "win32":  # pragma: no cover - payrun runs on Linux and macOS
        return
    # No run has paid on this machine since it started
    if not LOCK_FOLDER.exists():
        return
    folder = _open_folder(create=False)
    try:
        with _guard(folder):
            _refuse_overlap(folder, running_batch(rows, bank), dry_run=True)
    finally:
        os.close(folder)


def running_batch(rows: Sequence[LedgerRow], bank: str) -> RunningBatch:
    """The fingerprint and the keyed row hashes of the valid rows, in row order.

    The fingerprint hashes what ``payrun validate`` hashes; a row's key is its payment
    as the bank sees it (the source account resolved to the bank's account when known).
    """
    lines: list[str] = []
    payments: list[str] = []
    for row in rows:
        if row.status is RowStatus.INVALID:
            continue
        payment = (
            f"{row.sort_code}\t{row.account_number}\t{format_money(row.amount)}\t"
            f"{row.reference or ''}"
        )
        lines.append(f"{row.payee_name}\t{payment}\t{row.source_account}\t{row.row_id or ''}\n")
        payments.append(f"{row.account_url or row.source_account}\t{payment}")
    bank_key = hashlib.sha256(bank.encode()).digest()
    keys: list[bytes] = []
    fresh = hashlib.blake2b(digest_size=_KEY_BYTES, key=bank_key).copy
    for payment in payments:
        key = fresh()
        key.update(payment.encode())
        keys.append(key.digest())
    fingerprint = hashlib.sha256("".join(lines).encode()).hexdigest()
    return RunningBatch(bank_key.hex()[:32], fingerprint, b"".join(keys))


def _refuse_overlap(folder: int, batch: RunningBatch, *, dry_run: bool) -> None:
    """Raise ``LedgerLockedError`` for the first live run paying any of ``batch``'s rows."""
    if batch.keys:
        refuse_overlap_with(_live_entries(folder), batch, dry_run=dry_run)


def refuse_overlap_with(
    entries: Iterable[RunningEntry], batch: RunningBatch, *, dry_run: bool
) -> None:
    """Raise ``LedgerLockedError`` for the first of these live runs that pays, at the same
    bank, the same batch (fingerprint) or any of ``batch``'s payments."""
    if not batch.keys:
        return
    mine: list[int] | None = None
    for entry in entries:
        if entry.bank != batch.bank:
            continue
        if entry.fingerprint == batch.fingerprint:
            raise _paying(entry, None, batch, dry_run=dry_run)
        mine = mine if mine is not None else _numbers(batch.keys)
        theirs = set(_numbers(entry.keys))
        shared = sum(1 for key in mine if key in theirs)
        if shared:
            raise _paying(entry, shared, batch, dry_run=dry_run)


def _numbers(keys: bytes) -> list[int]:
    return memoryview(keys).cast("Q").tolist()


def _paying(
    entry: RunningEntry, shared: int | None, batch: RunningBatch, *, dry_run: bool
) -> LedgerError:
    holder = f"process {entry.pid}" if entry.pid else "another payrun run"
    holder += f" (ledger {entry.ledger})" if entry.ledger else ""
    what = (
        f"a batch with the same content (fingerprint sha256 {batch.fingerprint[:16]}…)"
        if shared is None
        else f"{shared} of these {batch.count} rows (the same source account, payee account,"
        " amount and reference)"
    )
    if dry_run:
        then = (
            "its payments in flight are not at the bank yet, so a dry run cannot tell what"
            " a run would pay: wait for it to finish, then check again"
        )
    else:
        rows = "every row" if shared is None else "them"
        then = (
            f"two runs at once would pay {rows} twice: wait for it to finish, then run again"
            " (rows it paid are then held as possible repeats)"
        )
    msg = f"{holder} is paying {what} at this bank right now; {then}"
    return LedgerLockedError(msg, pid=entry.pid)


def _open_folder(*, create: bool) -> int:
    """The register's folder, opened (not through a link) and checked: a folder owned by
    root or this user, that only its files' owners may remove files from."""
    if create:
        _make_folder()
    try:
        folder = os.open(LOCK_FOLDER, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        _refuse_unusable(f"cannot open it ({exc.strerror})")
    info = os.fstat(folder)
    mode = stat.S_IMODE(info.st_mode)
    # A sticky folder's owner may remove anyone's files in it, entries of running batches too
    if info.st_uid not in {0, os.getuid()}:
        os.close(folder)
        _refuse_unusable(
            f"belongs to user {info.st_uid}, who could remove other users' entries in it"
            " (it must belong to root or to you): remove it"
        )
    if info.st_uid == os.getuid() and mode != _FOLDER_MODE:
        # Ours (made by an earlier run, or a umask): opened to all, so every user's runs meet.
        os.fchmod(folder, _FOLDER_MODE)
    elif mode & _WRITABLE_BY_OTHERS and not mode & stat.S_ISVTX:
        os.close(folder)
        _refuse_unusable("others may remove the files in it (it lacks the sticky bit)")
    return folder


def _make_folder() -> None:
    try:
        os.mkdir(LOCK_FOLDER, 0o700)
    except FileExistsError:
        return
    except OSError as exc:
        _refuse_unusable(f"cannot create it ({exc.strerror})")


def _refuse_unusable(why: str) -> NoReturn:
    msg = (
        "cannot take the lock that stops two runs from paying the same rows at once:"
        f" {LOCK_FOLDER} {why}; {_FIX}"
    )
    raise LedgerError(msg) from None


@contextmanager
def _guard(folder: int) -> Iterator[None]:
    """Hold the register's guard: no other run looks or publishes meanwhile."""
    import fcntl

    fd = _open_guard(folder)
    try:
        deadline = time.monotonic() + _GUARD_PATIENCE
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    msg = (
                        f"the register of running batches {LOCK_FOLDER / _GUARD} has been"
                        f" locked for {_GUARD_PATIENCE:.0f} s by another process; find it"
                        f" (fuser {LOCK_FOLDER / _GUARD}), stop it, then run again"
                    )
                    raise LedgerLockedError(msg) from None
                time.sleep(_GUARD_RETRY_SECONDS)
        yield
    finally:
        os.close(fd)


def _open_guard(folder: int) -> int:
    """The guard file, read-only (an ``flock`` needs no more), created if missing.

    An existing file is opened without ``O_CREAT``: Linux refuses that to others'
    files in a sticky folder (``protected_regular``).
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
    for _ in range(2):
        try:
            fd = os.open(_GUARD, flags, dir_fd=folder)
        except FileNotFoundError:
            try:
                fd = os.open(_GUARD, flags | os.O_CREAT | os.O_EXCL, _FILE_MODE, dir_fd=folder)
                os.fchmod(fd, _FILE_MODE)
            except FileExistsError:
                continue
            except OSError as exc:
                _refuse_unusable(f"cannot hold {_GUARD} ({exc.strerror})")
        except OSError as exc:
            _refuse_unusable(f"cannot hold {_GUARD} ({exc.strerror})")
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            _refuse_unusable(f"holds {_GUARD} that is not a plain file")
        return fd
    _refuse_unusable(f"cannot hold {_GUARD}")


def _live_entries(folder: int) -> Iterator[RunningEntry]:
    """Every entry whose run is alive; a dead run's own entries are removed on the way."""
    with os.scandir(folder) as found:
        names = sorted(e.name for e in found)
    for name in names:
        if name.startswith(_ENTRY_PREFIX) and name.endswith(_ENTRY_SUFFIX):
            entry = _read_live(folder, name)
            if entry is not None:
                yield entry


def _read_live(folder: int, name: str) -> RunningEntry | None:
    """The entry ``name`` if a live run holds it; None if its run is over."""
    import fcntl

    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder)
    except (FileNotFoundError, IsADirectoryError):
        return None
    except OSError as exc:
        # A link (or a socket) is no run's entry: payrun makes plain files.
        if exc.errno in (errno.ELOOP, errno.ENXIO):
            return None
        raise _unreadable(name, exc.strerror) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _parse(name, _read_all(fd))
        if os.fstat(fd).st_uid == os.getuid():
            _unlink_if_same(folder, name, fd)
        return None
    finally:
        os.close(fd)


def _read_all(fd: int) -> bytes:
    parts = []
    while block := os.read(fd, 1 << 20):
        parts.append(block)
    return b"".join(parts)


def _parse(name: str, data: bytes) -> RunningEntry:
    """A live entry's content; one payrun cannot read refuses the run (it may be a run)."""
    header, _, keys = data.partition(b"\n")
    try:
        info = json.loads(header)
        if info["format"] != _FORMAT or len(keys) % _KEY_BYTES:
            raise ValueError
        pid = info["pid"]
        return RunningEntry(
            name,
            pid if isinstance(pid, int) else None,
            str(info["ledger"]),
            str(info["bank"]),
            str(info["fingerprint"]),
            keys,
        )
    except (ValueError, KeyError, TypeError):
        raise _unreadable(name, "not an entry this payrun can read") from None


def _unreadable(name: str, why: str | None) -> LedgerError:
    msg = (
        f"cannot read {LOCK_FOLDER / name}, the entry of a run that may be paying these rows"
        f" ({why}); wait for that run to finish, or ask the file's owner to remove it if no"
        " payrun is running, then run again"
    )
    return LedgerLockedError(msg)


def _publish(folder: int, batch: RunningBatch, ledger_path: str | Path) -> tuple[str, int]:
    """Create this run's entry, locked before anything is written (under the guard)."""
    import fcntl

    name = f"{_ENTRY_PREFIX}{os.urandom(8).hex()}{_ENTRY_SUFFIX}"
    header = {
        "format": _FORMAT,
        "pid": os.getpid(),
        "ledger": str(ledger_path),
        "bank": batch.bank,
        "fingerprint": batch.fingerprint,
    }
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    try:
        fd = os.open(name, flags, _FILE_MODE, dir_fd=folder)
    except OSError as exc:
        _refuse_unusable(f"cannot hold a file of this user's ({exc.strerror})")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        # Readable by all: another user's run of the same rows must see this one.
        os.fchmod(fd, _FILE_MODE)
        data = json.dumps(header).encode() + b"\n" + batch.keys
        while data:
            data = data[os.write(fd, data) :]
    except OSError as exc:
        _unlink_if_same(folder, name, fd)
        os.close(fd)
        _refuse_unusable(f"cannot hold a file of this user's ({exc.strerror})")
    return name, fd


def _unlink_if_same(folder: int, name: str, fd: int) -> None:
    """Remove ``name`` if it still names the file ``fd`` has open."""
    try:
        if os.stat(name, dir_fd=folder, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
            os.unlink(name, dir_fd=folder)
    except OSError:
        return
