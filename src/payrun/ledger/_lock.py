"""The ledger file's privacy and lock: created 0600, one writer process at a time.

The lock is ``flock`` on ``LEDGER.lock``, which the kernel releases when the process dies,
even by kill -9, so a crashed run never leaves a stale lock behind.
"""

from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path

from payrun.errors import LedgerError, LedgerLockedError

_LOCK_PATIENCE = 1.0
"""Seconds a run waits for a ledger's lock before it says who holds it: a dry run holds it
for an instant to see whether a run is paying, and a refused first run removes its new
ledger while holding it."""
_LOCK_RETRY_SECONDS = 0.05

__all__ = [
    "bank_identity",
    "check_ledger_path",
    "create_private",
    "release_lock",
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
    symbolic link to nothing; and SQLite's ``-wal`` or ``-shm`` beside it as a link or not
    a regular file. A file path of a missing folder is left to ``take_lock``."""
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        if path.is_symlink():
            msg = (
                f"the ledger {path} is a symbolic link to nothing: remove the link or pass"
                " another --ledger"
            )
            raise LedgerError(msg) from None
        _check_beside(path)
        return
    except OSError as exc:
        msg = f"cannot use the ledger {path}: {exc.strerror}; pass another --ledger"
        raise LedgerError(msg) from None
    _refuse_unusual(path, mode)
    _check_beside(path)


def _check_beside(path: Path) -> None:
    """Refuse SQLite's ``-wal`` and ``-shm`` files beside the ledger when they are links or
    not regular files: SQLite would write the ledger's pages through them into another file."""
    for suffix in ("-wal", "-shm"):
        beside = path.with_name(path.name + suffix)
        try:
            mode = beside.lstat().st_mode
        except FileNotFoundError:
            continue
        except OSError as exc:
            msg = f"cannot use the ledger {path}: {beside}: {exc.strerror}; pass another --ledger"
            raise LedgerError(msg) from None
        _refuse_not_own(beside, mode)


def _refuse_not_own(path: Path, mode: int) -> None:
    """Refuse a file payrun keeps beside the ledger that is a link or not a regular file."""
    if stat.S_ISREG(mode):
        return
    if stat.S_ISLNK(mode):
        kind = "a symbolic link"
    else:
        kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    msg = (
        f"{path} is {kind}, not a file payrun made beside its ledger: remove it (payrun"
        " makes its own), or pass another --ledger"
    )
    raise LedgerError(msg)


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
        fd = _open_lock_file(lock_path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _read_pid(fd)
            os.close(fd)
            # A dry run's look, or a ledger being removed
            if time.monotonic() < deadline:
                time.sleep(_LOCK_RETRY_SECONDS)
                continue
            holder = f"process {pid}" if pid else "another process"
            msg = (
                f"the ledger {path} is in use by {holder} (another payrun run);"
                " wait for it to finish or stop it, then run again"
            )
            raise LedgerLockedError(msg, pid=pid) from None
        except OSError as exc:
            os.close(fd)
            msg = f"cannot lock the ledger lock {lock_path}: {exc.strerror}"
            raise LedgerError(msg) from None
        if _still_linked(fd, lock_path):
            break
        # Locked a lock file its holder removed meanwhile: take the new one
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
    except OSError as exc:
        os.close(fd)
        msg = f"cannot write the ledger lock {lock_path}: {exc.strerror}"
        raise LedgerError(msg) from None
    return fd


def _open_lock_file(lock_path: Path) -> int:
    """Open (or create) the lock file itself: never through a link, never a pipe or device."""
    flags = os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
    try:
        fd = os.open(lock_path, flags, 0o600)
    except OSError as exc:
        if lock_path.is_symlink():
            _refuse_not_own(lock_path, stat.S_IFLNK)
        msg = f"cannot create the ledger lock {lock_path}: {exc.strerror}"
        raise LedgerError(msg) from None
    try:
        _refuse_not_own(lock_path, os.fstat(fd).st_mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _still_linked(fd: int, lock_path: Path) -> bool:
    """True when ``lock_path`` still names the file ``fd`` locked."""
    try:
        return os.stat(lock_path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


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


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode().strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None


def release_lock(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)
