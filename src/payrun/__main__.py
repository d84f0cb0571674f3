"""``python -m payrun`` and the ``payrun`` console script.

Ctrl-C and SIGTERM are caught before the command line is imported (about 30 ms of
imports): one that comes meanwhile is a recorded stop request, answered with exit 3 and one
line, never a traceback from inside an import. A fleet worker's supervised child
(``--child-process``) ignores them instead: its parent tells it when to stop.

Once the command is done and its output flushed, the process ends at once
(``_end_process``): the interpreter's teardown of every module and object (0.1 s and more
after a run of thousands of rows, on the clock of the scheduler waiting for the exit code)
does nothing the command needs. The ``atexit`` functions still run; while a thread other
than the main one is still running (and would be joined), the process ends as usual.
"""

from __future__ import annotations


def main() -> int:
    """Catch the stop signals, then load the command line and run it."""
    import sys

    from payrun._signals import CHILD_OPTION, catch_stop_signals, ignore_stop_signals
    from payrun.run import StopSignal

    stop = StopSignal()
    if CHILD_OPTION in sys.argv[1:]:
        # A fleet worker's child: its parent's words on stdin are its only stops
        ignore_stop_signals()
        caught: dict[int, object] = {}
    else:
        caught = catch_stop_signals(stop.request)
    from payrun.cli import main as command_line

    code = command_line(stop=stop, caught=caught)
    _end_process(code)
    return code


def _end_process(code: int) -> None:
    """End the process with ``code`` now, without the interpreter's teardown: after the
    ``atexit`` functions, once stdout and stderr are flushed. Returns (for the usual exit)
    while another thread runs, or when a stream cannot be flushed (the usual exit says so
    as it always did)."""
    import atexit
    import os
    import sys
    import threading

    main_thread = threading.main_thread()
    if any(t is not main_thread and not t.daemon for t in threading.enumerate()):
        return
    atexit._run_exitfuncs()
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        return
    os._exit(code)


if __name__ == "__main__":
    raise SystemExit(main())
