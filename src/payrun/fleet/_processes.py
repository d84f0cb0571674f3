"""``payrun fleet worker --processes N``: one command, N worker processes, the machine used.

One Python process pays its lanes in one interpreter (one core). The command started with
``--processes N`` (N > 1) starts N copies of itself, each a full worker with its own lanes
and activity slots, and supervises them: it tells them to drain when it is told to stop
(first SIGTERM or Ctrl-C: drain; second: cut in-flight requests off), and when one ends on
its own it drains the others and exits with that one's code (3 for one killed by a signal
or that stopped alone). A child hears only its parent, through its standard input
(``drain``, ``cut``; the end of it when the parent died, which drains it too): it ignores
Ctrl-C and SIGTERM, so a signal sent to the whole process group counts once, not twice.
The command's ``--max-batches`` is split across its processes (``split_batches``).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TextIO

from payrun._signals import CHILD_OPTION
from payrun.run import StopSignal

__all__ = [
    "CHILD_OPTION",
    "child_command",
    "default_processes",
    "listen_to_parent",
    "split_batches",
    "supervise",
]

LEDGER_OPTION = "--ledger-url"
MAX_BATCHES_OPTION = "--max-batches"
DRAIN = "drain"
CUT = "cut"
_POLL_SECONDS = 0.25
# A child that ended by a signal, or said nothing: "interrupted, run again"
_INTERRUPTED = 3


def default_processes() -> int:
    """The cores this process may run on (the default of ``--processes``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def split_batches(max_batches: int, processes: int) -> list[int]:
    """The command's ``--max-batches`` shared fairly by its ``processes`` (as equal as can
    be, each at least 1): together they pay no more batches at once than one process
    would."""
    if not 1 <= processes <= max_batches:
        msg = f"--processes {processes} is more than --max-batches {max_batches}"
        raise ValueError(msg)
    share, extra = divmod(max_batches, processes)
    return [share + (1 if number < extra else 0) for number in range(processes)]


def child_command(words: Sequence[str], max_batches: int) -> list[str]:
    """The command line of one child: this interpreter started as this process was (its
    script or ``-m payrun``, its ``-X`` options), then ``words`` (the worker's own
    options) with one process and its share ``max_batches``, less ``--ledger-url``: a
    child has the ledger's URL (its password) in its environment
    (``environ_with_ledger_url``), never on its command line for ``ps`` to show."""
    prefix = [sys.executable, "-m", "payrun"]
    if list(sys.argv[1:]) == list(words):
        # The same interpreter options and entry point (a script, or -m payrun)
        prefix = [sys.executable, *sys.orig_argv[1 : len(sys.orig_argv) - len(sys.argv) + 1]]
    kept = _without(_without(words, LEDGER_OPTION), MAX_BATCHES_OPTION)
    share = [MAX_BATCHES_OPTION, str(max_batches)]
    return [*prefix, *kept, *share, "--processes", "1", CHILD_OPTION]


def _without(words: Sequence[str], option: str) -> list[str]:
    """``words`` less ``option VALUE`` and ``option=VALUE``."""
    kept: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word == option:
            skip = True
        elif not word.startswith(option + "="):
            kept.append(word)
    return kept


def supervise(
    commands: Sequence[Sequence[str]],
    stop: StopSignal,
    say: Callable[[str], None],
    env: Mapping[str, str] | None = None,
) -> int:
    """Run one child of each of ``commands`` (in ``env``, else this process's environment)
    until ``stop`` (or one ends on its own); the command's exit code."""
    processes = len(commands)
    children: list[subprocess.Popen[str]] = []
    level = 0
    failed: tuple[int, int] | None = None
    try:
        for number, command in enumerate(commands, 1):
            child = subprocess.Popen(
                list(command),
                stdin=subprocess.PIPE,
                text=True,
                env=None if env is None else dict(env),
            )
            children.append(child)
            say(f"worker process {number} of {processes} started: pid {child.pid}")
        while any(child.poll() is None for child in children):
            if failed is None and level == 0:
                failed = _ended(children, unasked=True)
                if failed is not None:
                    pid, code = failed
                    say(
                        f"worker process pid {pid} ended with exit code {code}:"
                        " the others hand their batches back and stop"
                    )
            wanted = 2 if stop.must_cut_off() else 1 if stop.is_set() or failed else 0
            if wanted > level:
                level = wanted
                _tell(children, CUT if level == 2 else DRAIN)  # noqa: PLR2004
            time.sleep(_POLL_SECONDS)
    finally:
        # Nothing left behind: the end of its input drains a child still running
        for child in children:
            if child.stdin is not None:
                with contextlib.suppress(OSError):
                    child.stdin.close()
            child.wait()
    if failed is None:
        failed = _ended(children)
    if failed is None:
        return 0
    # Killed by a signal, or stopped on its own: "interrupted, run again"
    return failed[1] if failed[1] > 0 else _INTERRUPTED


def _ended(
    children: Sequence[subprocess.Popen[str]], *, unasked: bool = False
) -> tuple[int, int] | None:
    """The first child that ended with an error (pid, exit code; a signal as -N); with
    ``unasked``, one that ended at all (no stop was asked for: even exit 0 is one down)."""
    for child in children:
        code = child.poll()
        if code is not None and (code != 0 or unasked):
            return child.pid, code
    return None


def _tell(children: Sequence[subprocess.Popen[str]], word: str) -> None:
    """Send ``word`` to every child still running."""
    for child in children:
        if child.poll() is not None or child.stdin is None or child.stdin.closed:
            continue
        try:
            child.stdin.write(word + "\n")
            child.stdin.flush()
        except (BrokenPipeError, OSError):
            continue


def listen_to_parent(stop: StopSignal, stream: TextIO | None = None) -> threading.Thread:
    """In a child: a thread turning the parent's words into stop requests; the end of its
    standard input (the parent gone, even by kill -9) drains this process too. A request
    the process already had (a signal sent to the whole group) is not counted twice."""
    source = sys.stdin if stream is None else stream

    def listen() -> None:
        for line in source:
            word = line.strip()
            if word == DRAIN and not stop.is_set():
                stop.request()
            elif word == CUT:
                while not stop.must_cut_off():
                    stop.request()
        if not stop.is_set():
            stop.request()

    thread = threading.Thread(target=listen, name="payrun-parent", daemon=True)
    thread.start()
    return thread
