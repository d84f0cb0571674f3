"""``python -m payrun`` and the ``payrun`` console script.

Ctrl-C and SIGTERM are caught before the command line is imported (about 30 ms of
imports): one that comes meanwhile is a recorded stop request, answered with exit 3 and one
line, never a traceback from inside an import. A fleet worker's supervised child
(``--child-process``) ignores them instead: its parent tells it when to stop.
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

    return command_line(stop=stop, caught=caught)


if __name__ == "__main__":
    raise SystemExit(main())
