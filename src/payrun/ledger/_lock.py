"""The ledger file's privacy and lock: created 0600, one writer process at a time.

The lock is ``flock`` on ``LEDGER.lock``, which the kernel releases when the process dies,
even by kill -9, so a crashed run never leaves a stale lock behind.
"""

from __future__ import annotations

import os
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from payrun.errors import LedgerError, LedgerLockedError

_LOCK_PATIENCE = 1.0
"""Seconds a run waits for a ledger's lock before it says who holds it: a dry run holds it
for an instant to see whether a run is paying, and a refused first run removes its new
ledger while holding it."""
_LOCK_RETRY_SECONDS = 0.05
_TMP_FOLDER = "/tmp/payrun"  # noqa: S108 - /tmp/payrun-UID, checked private before use

__all__ = [
    "bank_identity",
    "check_ledger_path",
    "create_private",
    "release_lock",
    "take_batch_lock",
    "take_lock",
]


def create_private(path: Path) -> None:
    """Create the ledger file readable by its owner only (0600) before SQLite opens it.

    A file already there keeps its mode (payrun did not make it: its owner chose who may
    read it) and must be a regular file this process can write.
    """
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    except FileExistsError:
        _check_writable(path)
        return
    except OSError as exc:
        msg = (
            f"cannot create the ledger {path}: {exc.strerror};"
            " check the folder exists and is writable"
        )
        raise LedgerError(msg) from None
    try:
        # the umask may have taken the owner's own bits away: this file is payrun's to set
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


def _check_writable(path: Path) -> None:
    """Open an existing ledger for writing (never blocking on a pipe) and close it again."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        msg = (
            f"cannot write the ledger {path}: {exc.strerror}; make the file writable by this"
            " user (it may be read-only or immutable: lsattr shows an i), or pass another --ledger"
        )
        raise LedgerError(msg) from None
    try:
        # replaced by something else since ``check_ledger_path`` looked
        _refuse_unusual(path, os.fstat(fd).st_mode)
    finally:
        os.close(fd)


def check_ledger_path(path: Path) -> None:
    """Refuse a ledger path naming anything but a regular file (or nothing yet), before
    anything is opened, locked or made beside it: a device, a pipe, a socket, a folder, a
    symbolic link to nothing. A file path of a missing folder is left to ``take_lock``."""
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        if path.is_symlink():
            msg = (
                f"the ledger {path} is a symbolic link to nothing: remove the link or pass"
                " another --ledger"
            )
            raise LedgerError(msg) from None
        return
    except OSError as exc:
        msg = f"cannot use the ledger {path}: {exc.strerror}; pass another --ledger"
        raise LedgerError(msg) from None
    _refuse_unusual(path, mode)


_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISCHR, "a device"),
    (stat.S_ISBLK, "a device"),
    (stat.S_ISFIFO, "a pipe"),
    (stat.S_ISSOCK, "a socket"),
)


def _refuse_unusual(path: Path, mode: int) -> None:
    if stat.S_ISREG(mode):
        return
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    msg = (
        f"the ledger {path} is {kind}, not a file: pass --ledger a file's path (a new"
        " ledger file is created there)"
    )
    raise LedgerError(msg)


def take_lock(path: Path) -> int | None:
    """Hold an exclusive lock on ``PATH.lock`` for the process's life (released even on kill -9).

    ``path`` is checked first (``check_ledger_path``): no lock file is made beside a device.
    """
    check_ledger_path(path)
    if sys.platform == "win32":  # pragma: no cover - payrun runs on Linux and macOS
        return None
    import fcntl

    lock_path = path.with_name(path.name + ".lock")
    if not path.parent.is_dir():
        msg = (
            f"cannot create the ledger {path}: the folder {path.parent} does not exist;"
            " create it first, or pass another --ledger"
        )
        raise LedgerError(msg)
    deadline = time.monotonic() + _LOCK_PATIENCE
    while True:
        try:
            fd = os.open(lock_path, os.O_CREAT | os.O_RDWR, 0o600)
        except OSError as exc:
            msg = f"cannot create the ledger lock {lock_path}: {exc.strerror}"
            raise LedgerError(msg) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _read_pid(fd)
            os.close(fd)
            if time.monotonic() < deadline:  # a dry run's look, or a ledger being removed
                time.sleep(_LOCK_RETRY_SECONDS)
                continue
            holder = f"process {pid}" if pid else "another process"
            msg = (
                f"the ledger {path} is in use by {holder} (another payrun run);"
                " wait for it to finish or stop it, then run again"
            )
            raise LedgerLockedError(msg, pid=pid) from None
        if _still_linked(fd, lock_path):
            break
        os.close(fd)  # locked a lock file its holder removed meanwhile: take the new one
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    return fd


def _still_linked(fd: int, lock_path: Path) -> bool:
    """True when ``lock_path`` still names the file ``fd`` locked."""
    try:
        return os.stat(lock_path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def take_batch_lock(file_sha256: str, bank: str, ledger_path: Path) -> int | None:
    """Hold a lock on this file content paid to this bank and organization, whatever the ledger.

    Two runs of the same content through two ledgers at once (a copy of the file, or
    ``--ledger`` given twice) would each pay every row: the repeat guard reads the bank
    before paying, so it only catches a run that starts after the other one has paid.
    ``bank`` names the bank and organization (``bank_identity``). The lock lives in this
    user's ``~/.cache/payrun`` (whatever TMPDIR says, so cron and a shell meet there), or,
    when that cannot be used (no home folder, a read-only one), in ``/tmp/payrun-UID``; so
    it covers the runs of one user on one machine; the kernel drops it when the process
    dies. When neither can be used the run is refused: paying without it could pay twice.
    """
    if sys.platform == "win32":  # pragma: no cover - payrun runs on Linux and macOS
        return None
    import fcntl
    import hashlib

    key = hashlib.sha256(f"{file_sha256} {bank}".encode()).hexdigest()[:40]
    fd = None
    flags = os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW
    for folder in _private_folders():
        try:
            fd = os.open(folder / f"batch-{key}.lock", flags, 0o600)
            break
        except OSError:
            continue
    if fd is None:
        msg = (
            "cannot take the lock that stops two runs of the same file from paying at once:"
            f" neither ~/.cache/payrun nor {_TMP_FOLDER}-{os.getuid()} can be used by this user;"
            " make one of them a folder of this user's (mode 0700), then run again"
        )
        raise LedgerError(msg)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read_holder(fd)
        os.close(fd)
        msg = (
            f"{holder or 'another payrun run'} is paying a file with the same content at"
            " this bank right now; two runs at once would pay every row twice: wait for it to"
            " finish, then run again (rows it paid are then held as possible repeats)"
        )
        raise LedgerLockedError(msg, pid=None) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n{ledger_path}".encode())
    return fd


def bank_identity(base_url: str, organization_url: str) -> str:
    """The bank and organization, the same however the address is written.

    The host is lower-cased and every loopback name is one (``localhost``, ``127.0.0.1``
    and ``[::1]`` reach the same sandbox), the default port is filled in.
    """
    from urllib.parse import urlsplit

    parts = urlsplit(base_url)
    host = (parts.hostname or "").lower()
    if host in {"localhost", "::1"} or host.startswith("127."):
        host = "loopback"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.scheme}://{host}:{port}{parts.path.rstrip('/')} {organization_url}"


def _private_folders() -> Iterator[Path]:
    """``~/.cache/payrun`` then ``/tmp/payrun-UID``: each made 0700 if missing, and given
    only if it is a folder owned by this user and closed to others."""
    candidates = [Path(f"{_TMP_FOLDER}-{os.getuid()}")]
    try:
        home = Path.home()
    except RuntimeError:  # no home folder known
        home = None
    if home is not None and home.is_dir():  # never makes a home folder that is not there
        candidates.insert(0, home / ".cache" / "payrun")
    for folder in candidates:
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            info = folder.lstat()
        except OSError:  # it cannot be written
            continue
        if info.st_uid == os.getuid() and not info.st_mode & 0o077 and stat.S_ISDIR(info.st_mode):
            yield folder  # else someone else's, or open to others: not a place for a lock


def _read_holder(fd: int) -> str | None:
    try:
        pid, _, ledger = os.pread(fd, 4096, 0).decode().partition("\n")
    except (OSError, UnicodeDecodeError):
        return None
    if not pid.strip().isdigit():
        return None
    return f"process {pid.strip()} (ledger {ledger.strip()})" if ledger else f"process {pid}"


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode().strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None


def release_lock(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)
