"""The ``payrun`` process ends as soon as its command is done: its output flushed, its
``atexit`` functions run, its exit code kept, and no interpreter teardown after that."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from _run_helpers import make_rows, write_batch

_ENTRY = """
import atexit, os, sys

class Marker:
    # Freed by the interpreter's teardown, which a finished command skips
    def __del__(self):
        os.write(2, b"teardown\\n")

marker = Marker()
atexit.register(lambda: print("atexit ran", file=sys.stderr))
from payrun.__main__ import main
raise SystemExit(main())
"""


def _payrun(*words: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _ENTRY, *words],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_finished_command_exits_without_the_interpreter_teardown(tmp_path: Path) -> None:
    """`payrun validate` on a valid file: exit 0, its whole output, the atexit functions
    run, and the process gone without tearing the interpreter down."""
    batch = write_batch(tmp_path / "pay.csv", make_rows(1, 300, tag="exit"))
    done = _payrun("validate", str(batch), "--format", "json")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") >= 1 and done.stdout.rstrip().endswith("}")
    assert "atexit ran" in done.stderr
    assert "teardown" not in done.stderr


def test_a_failed_command_keeps_its_exit_code_and_its_error_line(tmp_path: Path) -> None:
    """A missing file: exit 2 and the one error line, with the same early end."""
    done = _payrun("validate", str(tmp_path / "missing.csv"))
    assert done.returncode == 2
    assert "missing.csv" in done.stderr
    assert "Traceback" not in done.stderr
    assert "atexit ran" in done.stderr
    assert "teardown" not in done.stderr
