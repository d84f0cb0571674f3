"""The ledger file's privacy and lock: created 0600, one writer process at a time.

The lock is ``flock`` on ``LEDGER.lock``, which the kernel releases when the process dies,
even by kill -9, so a crashed run never leaves a stale lock behind.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from payrun.errors import LedgerError, LedgerLockedError

__all__ = ["create_private", "release_lock", "take_lock"]


def create_private(path: Path) -> None:
    """Create the ledger file readable by its owner only (0600) before SQLite opens it."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
        os.close(fd)
        os.chmod(path, 0o600)
    except OSError as exc:
        msg = (
            f"cannot create the ledger {path}: {exc.strerror};"
            " check the folder exists and is writable"
        )
        raise LedgerError(msg) from None


def take_lock(path: Path) -> int | None:
    """Hold an exclusive lock on ``PATH.lock`` for the process's life (released even on kill -9)."""
    if sys.platform == "win32":  # pragma: no cover - payrun runs on Linux and macOS
        return None
    import fcntl

    lock_path = path.with_name(path.name + ".lock")
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
        holder = f"process {pid}" if pid else "another process"
        msg = (
            f"the ledger {path} is in use by {holder} (another payrun run);"
            " wait for it to finish or stop it, then run again"
        )
        raise LedgerLockedError(msg, pid=pid) from None
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    return fd


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode().strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None


def release_lock(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)
