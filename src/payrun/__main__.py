"""``python -m payrun`` and the ``payrun`` console script.

Ctrl-C and SIGTERM are caught before the command line is imported (about 30 ms of
imports): one that comes meanwhile is a recorded stop request, answered with exit 3 and one
line, never a traceback from inside an import. A Ctrl-C in the moment before they are
caught (Python's own handler raises KeyboardInterrupt in ``main``'s first imports) is
recorded the same way. A fleet worker's supervised child (``--child-process``) ignores
them instead: its parent tells it when to stop.

Once the command is done and its output flushed, the process ends at once
(``_end_process``): the interpreter's teardown of every module and object (0.1 s and more
after a run of thousands of rows, on the clock of the scheduler waiting for the exit code)
does nothing the command needs. The ``atexit`` functions still run; while a thread other
than the main one is still running (and would be joined), the process ends as usual.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from payrun.run import StopSignal


def main() -> int:
    """Catch the stop signals, then load the command line and run it."""
    try:
        stop, caught = _catch()
    except KeyboardInterrupt:
        # Ctrl-C before payrun's handlers were in: a stop request all the same (the
        # command line answers it with exit 3 before doing anything)
        stop, caught = _catch()
        if caught:
            stop.request()
    from payrun.cli import main as command_line

    code = command_line(stop=stop, caught=caught)
    _end_process(code)
    return code


def _catch() -> tuple[StopSignal, dict[int, object]]:
    """The run's stop request, with Ctrl-C and SIGTERM made to set it (the handlers
    replaced, none off the main thread); a fleet worker's child ignores them instead."""
    from payrun._signals import CHILD_OPTION, catch_stop_signals, ignore_stop_signals
    from payrun.run import StopSignal

    stop = StopSignal()
    if CHILD_OPTION in sys.argv[1:]:
        # A fleet worker's child: its parent's words on stdin are its only stops
        ignore_stop_signals()
        return stop, {}
    return stop, catch_stop_signals(stop.request)


def _end_process(code: int) -> None:
    """End the process with ``code`` now, without the interpreter's teardown: after the
    ``atexit`` functions, once stdout and stderr are flushed. Returns (for the usual exit,
    before any ``atexit`` function ran) while another thread runs, or when a stream cannot
    be flushed (the usual exit says so as it always did)."""
    import atexit
    import os
    import threading

    main_thread = threading.main_thread()
    if any(t is not main_thread and not t.daemon for t in threading.enumerate()):
        return
    if not _flushed():
        return
    # CPython's own exit runs these; os._exit does not
    atexit._run_exitfuncs()
    # What the atexit functions wrote; a stream that cannot take it now ends the process
    # with 120, as the interpreter's own exit would
    os._exit(code if _flushed() else 120)


def _flushed() -> bool:
    """Flush stdout and stderr; False when one cannot be flushed."""
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        return False
    return True


if __name__ == "__main__":
    raise SystemExit(main())
