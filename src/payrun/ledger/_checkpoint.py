"""Checkpoints of an SQLite ledger's write-ahead log, on a thread of their own.

In WAL mode every commit appends pages to the ``-wal`` file; a checkpoint copies them into
the database file and syncs both (``synchronous=NORMAL``: three ``fdatasync`` calls).
SQLite checkpoints on its own, in the thread that commits, once the log holds 1,000 pages:
at full speed a run's event loop then stood still for 15-20 ms every 0.6-0.8 s (strace on
the 2-core VM, 2,000 rows over 10 accounts at 50 ms, at a load of 12), and meanwhile no
request went out and no answer was read.

``Checkpointer`` does that work on a daemon thread, over a connection of its own, when the
log has grown as large as SQLite would have let it (``CHECKPOINT_BYTES``; the committing
connection truncates the log when it starts it afresh, so its size on disk is what it
holds). Its checkpoints are ``PASSIVE``: they wait for no reader or writer, so commits go
on meanwhile (the sqlite3 module lets go of the interpreter lock while SQLite works), and
one that commits overtook is run again (``_ROUNDS``), since only a log checkpointed to its
end is started afresh. The committing connection checkpoints itself only past
``BACKSTOP_PAGES`` (should this thread fall behind): the log never grows much beyond what
it did, and its close checkpoints what is left, as before.

What a commit wrote is in the log, durable across a process crash as before: a checkpoint
only moves it. A failed background checkpoint is left to the next one, the backstop or the
close.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path

__all__ = ["BACKSTOP_PAGES", "CHECKPOINT_BYTES", "KEPT_LOG_BYTES", "Checkpointer"]

CHECKPOINT_BYTES = 1000 * (4096 + 24)
"""A log this large (SQLite's own threshold: 1,000 frames of 4 KB pages) is checkpointed."""

BACKSTOP_PAGES = 2000
"""The committing connection's own ``wal_autocheckpoint``: only a log twice the size at
which this thread checkpoints makes a commit checkpoint itself."""

KEPT_LOG_BYTES = 65536
"""``journal_size_limit``: a log started afresh is cut to this size, so the file's size on
disk tells how much it holds once more than this."""

_POLL_SECONDS = 0.05
_ROUNDS = 8


class Checkpointer:
    """A daemon thread that checkpoints ``path``'s log whenever it has grown to
    ``CHECKPOINT_BYTES``; ``close`` ends it."""

    __slots__ = ("_log", "_path", "_stop", "_thread")

    def __init__(self, path: Path) -> None:
        self._path = path
        self._log = path.with_name(path.name + "-wal")
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="payrun-ledger-checkpoint", daemon=True
        )
        try:
            self._thread.start()
        except RuntimeError:
            # No thread to be had ("can't start new thread"): the committing connection's
            # backstop checkpoints instead
            self._stop.set()

    def close(self) -> None:
        """End the thread (after a checkpoint under way) and close its connection."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        try:
            # mode=rw: a ledger file gone meanwhile is not made again, empty
            uri = f"{self._path.resolve().as_uri()}?mode=rw"
            connection = sqlite3.connect(uri, uri=True, isolation_level=None)
        except sqlite3.Error:
            return
        try:
            while not self._stop.wait(_POLL_SECONDS):
                if self._log_bytes() >= CHECKPOINT_BYTES:
                    self._checkpoint(connection)
        finally:
            connection.close()

    def _log_bytes(self) -> int:
        try:
            return os.stat(self._log).st_size
        except OSError:
            return 0

    def _checkpoint(self, connection: sqlite3.Connection) -> None:
        """Checkpoint the log to its end: again while commits came meanwhile (at most
        ``_ROUNDS`` times), since only such a log is started afresh by the next commit."""
        for _ in range(_ROUNDS):
            try:
                busy, logged, moved = connection.execute(
                    "PRAGMA wal_checkpoint(PASSIVE)"
                ).fetchone()
            except sqlite3.Error:
                # Left to the next time, the backstop or the close
                return
            if busy or moved >= logged or self._stop.is_set():
                return
