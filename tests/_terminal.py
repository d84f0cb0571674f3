"""``payrun`` on a real pseudo-terminal, as a person at a keyboard runs it: what it
wrote, and keys typed into it (the confirmation and approval questions)."""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from _run_helpers import kill_group

__all__ = ["PAYRUN", "TIMEOUT_S", "Terminal", "on_terminal"]

PAYRUN = Path(sys.executable).with_name("payrun")
"""The installed console script: the real command a person types."""

TIMEOUT_S = 60.0

# Opens the terminal it was given as stdin, so it becomes the controlling terminal of the
# new session (Ctrl-C typed there then reaches payrun), and becomes the command.
_ON_TERMINAL = (
    "import os, sys; os.close(os.open(os.ttyname(0), os.O_RDWR)); os.execv(sys.argv[1],"
    " sys.argv[1:])"
)


@dataclass
class Terminal:
    """``payrun`` running on a pseudo-terminal: what it wrote, and a keyboard."""

    process: subprocess.Popen[bytes]
    master: int
    output: bytearray = field(default_factory=bytearray)

    def _pump(self, wait: float) -> bool:
        """Read what is there within ``wait`` s; False once the terminal is closed."""
        ready, _, _ = select.select([self.master], [], [], wait)
        if not ready:
            return True
        try:
            chunk = os.read(self.master, 65536)
        except OSError:
            return False
        self.output += chunk
        return bool(chunk)

    def wait_for(self, text: bytes) -> None:
        """Read until ``text`` was written; fail with the output so far after a minute."""
        deadline = time.monotonic() + TIMEOUT_S
        while text not in self.output:
            assert time.monotonic() < deadline, f"no {text!r} in:\n{self.text}"
            if not self._pump(0.1) and text not in self.output:
                pytest.fail(f"payrun ended without writing {text!r}:\n{self.text}")

    def type(self, keys: bytes) -> None:
        """Type ``keys`` as a person would."""
        os.write(self.master, keys)

    def finish(self) -> int:
        """Read to the end and return payrun's exit code."""
        deadline = time.monotonic() + TIMEOUT_S
        while self._pump(0.1) and time.monotonic() < deadline:
            if self.process.poll() is not None and not select.select([self.master], [], [], 0.2)[0]:
                break
        return self.process.wait(timeout=TIMEOUT_S)

    @property
    def text(self) -> str:
        """Everything written, as text with the terminal's line ends."""
        return self.output.decode(errors="replace").replace("\r\n", "\n")


@contextlib.contextmanager
def on_terminal(args: Sequence[str], env: Mapping[str, str], cwd: Path) -> Iterator[Terminal]:
    """Start ``payrun ARGS`` with a pseudo-terminal as its stdin, stdout and stderr (a
    dumb terminal 200 columns wide); killed if still running when the block ends."""
    master, slave = os.openpty()
    process = subprocess.Popen(
        [sys.executable, "-c", _ON_TERMINAL, str(PAYRUN), *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env={**env, "TERM": "dumb", "COLUMNS": "200"},
        cwd=cwd,
        start_new_session=True,
    )
    os.close(slave)
    try:
        yield Terminal(process, master)
    finally:
        if process.poll() is None:
            kill_group(process)  # type: ignore[arg-type]
            process.wait(timeout=TIMEOUT_S)
        os.close(master)
