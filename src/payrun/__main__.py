"""``python -m payrun`` and the ``payrun`` console script.

Ctrl-C and SIGTERM are caught before the command line is imported (about 30 ms of
imports): one that comes meanwhile is a recorded stop request, answered with exit 3 and one
line, never a traceback from inside an import.
"""

from __future__ import annotations


def main() -> int:
    """Catch the stop signals, then load the command line and run it."""
    from payrun._signals import catch_stop_signals
    from payrun.run import StopSignal

    stop = StopSignal()
    caught = catch_stop_signals(stop.request)
    from payrun.cli import main as command_line

    return command_line(stop=stop, caught=caught)


if __name__ == "__main__":
    raise SystemExit(main())
