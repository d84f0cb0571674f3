"""How the ``payrun`` command catches Ctrl-C and SIGTERM: handlers that only record a stop
request, so a signal never lands as an exception inside an import, a ledger write or the
event loop.

``payrun.__main__`` installs them before it imports anything else of payrun, which is why
this module imports only the standard library's ``signal`` and ``threading``.
"""

from __future__ import annotations

import signal
import threading

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "CHILD_OPTION",
    "STOP_SIGNALS",
    "catch_stop_signals",
    "ignore_stop_signals",
    "restore_signals",
]

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""What asks payrun to stop: Ctrl-C, and a scheduler's or the system's SIGTERM."""
CHILD_OPTION = "--child-process"
"""The hidden option a fleet worker's supervised child is started with: it ignores the stop
signals and hears only its parent (``payrun.fleet``)."""


def catch_stop_signals(request: Callable[[], None]) -> dict[int, object]:
    """Make each of ``STOP_SIGNALS`` call ``request()``; return the handlers replaced.

    Off the main thread nothing changes (signals reach the main thread only; tests call
    the command line from threads) and the result is empty.
    """
    previous: dict[int, object] = {}
    if threading.current_thread() is not threading.main_thread():
        return previous
    for number in STOP_SIGNALS:
        previous[number] = signal.getsignal(number)
        signal.signal(number, lambda *_: request())
    return previous


def restore_signals(previous: dict[int, object]) -> None:
    """Put back the handlers ``catch_stop_signals`` replaced."""
    for number, handler in previous.items():
        signal.signal(number, handler)  # type: ignore[arg-type]


def ignore_stop_signals() -> None:
    """Ignore each of ``STOP_SIGNALS`` (a supervised child: Ctrl-C or a SIGTERM sent to the
    whole process group, or by a service manager to every process, is its parent's to
    count, which tells the child once). Off the main thread nothing changes."""
    if threading.current_thread() is threading.main_thread():
        for number in STOP_SIGNALS:
            signal.signal(number, signal.SIG_IGN)
