"""``python -m payrun`` for the tests that run payrun in a process of its own and kill it.

The same entry point, imports in the same order, with one constant set as its module is
loaded. A run started right after another was killed gives the bank its settle wait (60 s by
default; ``run_env`` sets ``PAYRUN_SETTLE_WAIT=1``: the test banks answer within about 40 ms)
after that run's last sign of life plus ``ALIVE_SECONDS``, the time between two signs (5 s).
These runs commit a sign every 0.5 s: a kill -9 trial's rerun still waits for its rows in
doubt, and still finds what the bank made meanwhile. With ``AFTER_KILL_STARTED`` set to a
path, the file is made once the interpreter is up, before payrun is imported: a test that
signals payrun's start-up times its signal from there, not from the launch (which a busy
machine may take a second to get through).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import time
from collections.abc import Sequence
from types import ModuleType

SHORTER = {
    "payrun.run._book": {"ALIVE_SECONDS": 0.5},
    # Fleet workers look for batches a restarted Temporal lost every 2 s, not 30
    "payrun.fleet._worker": {"REQUEUE_SECONDS": 2.0},
}
PAUSE_AT = os.environ.get("AFTER_KILL_PAUSE_AT", "")
PAUSE_LONGEST_S = 60.0


def _pause() -> None:
    """Say the process is at ``PAUSE_AT``, then wait for the test's go-ahead."""
    os.close(os.open(os.environ["AFTER_KILL_PAUSED"], os.O_CREAT | os.O_WRONLY, 0o644))
    deadline = time.monotonic() + PAUSE_LONGEST_S
    # A signal that came meanwhile is handled on the way out of a sleep, before the next look
    while not os.path.exists(os.environ["AFTER_KILL_GO"]) and time.monotonic() < deadline:
        time.sleep(0.005)


class _Shorten(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds a module of ``SHORTER`` as usual, then sets its constants once it has run."""

    def __init__(self) -> None:
        self._loaders: dict[str, importlib.abc.Loader] = {}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in SHORTER and fullname != PAUSE_AT:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        self._loaders[fullname] = spec.loader
        spec.loader = self
        return spec

    def exec_module(self, module: ModuleType) -> None:
        if module.__name__ == PAUSE_AT:
            _pause()
        self._loaders[module.__name__].exec_module(module)
        for name, value in SHORTER.get(module.__name__, {}).items():
            setattr(module, name, value)


sys.meta_path.insert(0, _Shorten())
if os.environ.get("AFTER_KILL_STARTED"):
    os.close(os.open(os.environ["AFTER_KILL_STARTED"], os.O_CREAT | os.O_WRONLY, 0o644))

from payrun.__main__ import main  # noqa: E402 - after the finder, as python -m payrun would

raise SystemExit(main())
