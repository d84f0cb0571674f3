"""Output that outlives its reader: a closed pipe ends the output, never the command.

``payrun report LEDGER | head -3`` closes stdout early, and ``payrun run ... 2>&1 | head``
closes stderr too. A payment run must keep paying and exit with its own code; a listing
ends quietly with its own. The standard recipe: on ``BrokenPipeError``, point the stream's
file descriptor at /dev/null, so no later write (nor the interpreter's last flush) fails.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.console import Console

    from payrun.config import DatabaseURL

__all__ = [
    "error_line",
    "file_path",
    "json_text",
    "ledger_arg",
    "reader_may_leave",
    "silence",
    "stream_console",
    "warning_line",
]


def silence(stream: TextIO) -> None:
    """Send the rest of ``stream``'s output to /dev/null: its reader has gone."""
    try:
        fileno = stream.fileno()
    except (OSError, ValueError):
        # Not backed by a file descriptor (a test's buffer)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fileno)
    finally:
        os.close(devnull)


def error_line(message: str, *, as_json: bool = False, exit_code: int | None = None) -> None:
    """Print the one error line on stderr; with ``--log-format json``, as a JSON log object.

    ``exit_code`` marks the error that ends the command: in JSON, a ``finished`` object
    with that exit code follows it, the last line of every run, as after a normal end, and
    stdout gets its one object (``"event": "error"``), as it gets the summary otherwise.
    No configured secret or key material is ever shown (``payrun._redaction``).
    """
    from payrun._redaction import redact

    message = redact(message)
    lines = [f"payrun: error: {message}"]
    # A scheduler reading JSON lines gets the failure as one of them
    if as_json:
        now = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        record: dict[str, object] = {"time": now, "event": "error", "message": message}
        lines = [json.dumps(record)]
        if exit_code is not None:
            ended = {"time": now, "event": "finished", "exit_code": exit_code}
            lines.append(json.dumps({**ended, "message": f"ended with exit code {exit_code}"}))
            # Stdout's one object: how the command ended
            with reader_may_leave(run=True):
                print(json.dumps({"event": "error", "exit_code": exit_code, "message": message}))  # noqa: T201
    with reader_may_leave(sys.stderr, run=True):
        for line in lines:
            print(line, file=sys.stderr)  # noqa: T201 - the CLI's one error line


def warning_line(message: str, *, as_json: bool = False) -> None:
    """Print one warning line on stderr (the command goes on); with ``--log-format json``,
    as a JSON log object (``"event": "warning"``)."""
    from payrun._redaction import redact

    message = redact(message)
    line = f"payrun: warning: {message}"
    if as_json:
        now = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        line = json.dumps({"time": now, "event": "warning", "message": message})
    with reader_may_leave(sys.stderr, run=True):
        print(line, file=sys.stderr)  # noqa: T201 - a warning, the command goes on


@contextlib.contextmanager
def reader_may_leave(stream: TextIO | None = None, *, run: bool = False) -> Iterator[None]:
    """Write to ``stream`` (default stdout) inside; if its reader has gone, stop quietly.

    ``run``: the output of a payment run (its log, its summary), which must never change
    what was paid nor the exit code: a stream that cannot be written at all (closed, a
    full disk) is silenced too. A listing's output is its result: that failure propagates.
    """
    target = sys.stdout if stream is None else stream
    try:
        yield
        # A block-buffered pipe fails here, or at exit where it cannot be caught
        target.flush()
    except BrokenPipeError:
        silence(target)
    except OSError:
        if not run:
            raise
        silence(target)


def json_text(document: object) -> str:
    """One JSON document for stdout: non-ASCII as itself on a UTF-8 stream, else as \\u
    escapes (an ASCII-only locale would turn it into '?', losing the data)."""
    encoding = (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "")
    return json.dumps(document, ensure_ascii=encoding != "utf8")


def file_path(text: str) -> Path:
    """An argparse type for a file's path: an empty one is a usage error (it would name
    the current folder)."""
    if not text.strip():
        msg = "an empty path: give a file's name"
        raise argparse.ArgumentTypeError(msg)
    return Path(text)


def stream_console(stream: TextIO) -> Console:
    """A rich console on ``stream`` that goes quiet when its reader leaves.

    rich's own answer to a closed pipe is ``SystemExit(1)``, which would turn a paid run's
    exit code into 1; here the stream is silenced instead, as ``reader_may_leave`` does.
    """
    from rich.console import Console

    class _Quietly(Console):
        def on_broken_pipe(self) -> None:
            """The reader has gone: send the rest to /dev/null and print nothing more."""
            silence(stream)
            self.quiet = True

    return _Quietly(file=stream, highlight=False)


def ledger_arg(text: str) -> Path | DatabaseURL:
    """An argparse type for ``--ledger``: a ``postgresql://`` URL (kept as a secret: it may
    hold a password), else a ledger file's path."""
    # Here, not at the top: the CLI's start-up (before it handles Ctrl-C) stays as short
    from payrun.config import database_url

    url = database_url(text)
    return url if url is not None else file_path(text)
