"""Typed confirmations on a terminal: only what is typed after the question counts.

``discard_typeahead`` drops the keys pressed before a question was shown (type-ahead:
a ``yes`` typed while a run starts, meant for something else), so that a question asked
just after it reads only an answer typed to it. Every typed confirmation calls it just
before showing its question (not after: an answer typed as soon as the question shows
must not be dropped).
"""

from __future__ import annotations

import contextlib
import sys

__all__ = ["discard_typeahead"]


def discard_typeahead(fd: int) -> None:
    """Discard the input waiting unread on terminal ``fd`` (nothing when it is not one)."""
    if sys.platform == "win32":  # pragma: no cover - payrun asks on POSIX terminals
        return
    import termios

    # Not a terminal (a pipe, a closed descriptor): there is no type-ahead to drop
    with contextlib.suppress(termios.error, OSError):
        termios.tcflush(fd, termios.TCIFLUSH)
