"""``python -m payrun`` and the ``payrun`` console script.

Ctrl-C and SIGTERM are caught before the command line is imported (about 30 ms of
imports): one that comes meanwhile is a recorded stop request, answered with exit 3 and one
line, never a traceback from inside an import. A Ctrl-C in the moment before they are
caught (Python's own handler raises KeyboardInterrupt in ``main``'s first imports) is
recorded the same way. A fleet worker's supervised child (``--child-process``) ignores
them instead: its parent tells it when to stop.
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

    return command_line(stop=stop, caught=caught)


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


if __name__ == "__main__":
    raise SystemExit(main())
