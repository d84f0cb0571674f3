"""The page's plans and runs as child processes, and their state read back from disk.

"Request approval" is ``payrun plan BATCH --as USER --format json`` and "Pay" is
``payrun run BATCH --plan ID --report R.xlsx``, each ``sys.executable -m payrun`` in its own
session (a signal to the server never reaches it), so the run is the CLI's run: its ledger,
kill -9 safety and exactly-once. A run's stdout, stderr, pid and (once it ends) exit code
are files in the batch's ``runs/`` folder; ``plan_state`` reads them and the ledger, so a
restarted server finds every plan and run where it was. Raises ``ApprovalError``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from payrun._models import FINAL_STATUSES, RowStatus
from payrun.errors import ApprovalError, PayrunError
from payrun.serve._batches import StoredBatch

__all__ = [
    "Bank",
    "Progress",
    "RunFiles",
    "make_plan_child",
    "read_progress",
    "start_run",
]

PLAN_TIMEOUT_S = 600.0
"""Longest a plan's dry run may take (a 10,000-row batch takes seconds)."""
_PAID = frozenset({RowStatus.SUBMITTED, RowStatus.DELIVERED})
_FAILED = frozenset({RowStatus.FAILED, RowStatus.RETURNED, RowStatus.REJECTED})


@dataclass(frozen=True, slots=True)
class Bank:
    """How the children reach the bank (else as the environment configures ``payrun run``)."""

    base_url: str | None = None
    api_key_file: Path | None = None
    settle_wait: float | None = None
    policy: Path | None = None

    def args(self) -> list[str]:
        """The children's bank and policy options (the key by file, never on the line)."""
        found: list[str] = []
        if self.base_url is not None:
            found += ["--base-url", self.base_url]
        if self.api_key_file is not None:
            found += ["--api-key-file", str(self.api_key_file)]
        if self.settle_wait is not None:
            found += ["--settle-wait", str(self.settle_wait)]
        if self.policy is not None:
            found += ["--policy", str(self.policy)]
        return found


def _payrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "payrun", *args]


def make_plan_child(stored: StoredBatch, maker: str, bank: Bank) -> str:
    """Run ``payrun plan`` on the batch as ``maker``; the plan's id, else ``ApprovalError``
    with the command's own last line."""
    command = _payrun(
        "plan",
        str(stored.path),
        "--as",
        maker,
        "--ledger",
        str(stored.ledger),
        "--format",
        "json",
        *bank.args(),
    )
    done = subprocess.run(  # noqa: S603 - our own interpreter and arguments
        command,
        capture_output=True,
        text=True,
        timeout=PLAN_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    if done.returncode in (0, 1):
        try:
            plan_id = json.loads(done.stdout)["plan"]
        except (ValueError, KeyError, TypeError):
            plan_id = None
        if isinstance(plan_id, str):
            return plan_id
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    reason = lines[-1].removeprefix("payrun: ") if lines else f"exit {done.returncode}"
    msg = f"no plan was made: {reason}"
    raise ApprovalError(msg)


@dataclass(frozen=True, slots=True)
class RunFiles:
    """A plan's run files in its batch's ``runs/`` folder."""

    folder: Path
    plan_id: str

    def file(self, suffix: str) -> Path:
        """``<plan id><suffix>`` (the id is a recorded plan's, never a user's text)."""
        return self.folder / f"{self.plan_id}{suffix}"

    @property
    def report(self) -> Path:
        """The run's .xlsx report."""
        return self.file(".xlsx")

    def started(self) -> bool:
        """True once a run of the plan was started here."""
        return self.file(".pid").exists()

    def exit_code(self) -> int | None:
        """The last run's exit code (None: still running, or the server died before it ended)."""
        path = self.file(".exit")
        return int(path.read_text("ascii")) if path.exists() else None

    def alive(self) -> bool:
        """True while the last run's process is running."""
        if not self.started() or self.exit_code() is not None:
            return False
        pid = int(self.file(".pid").read_text("ascii"))
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
        stat = Path(f"/proc/{pid}/stat").read_text("ascii", errors="replace")
        # A zombie (exited, not yet reaped) is not running
        return self.plan_id.encode() in cmdline and ") Z " not in stat

    def output(self) -> str:
        """What the run printed on stdout (the CLI's summary)."""
        path = self.file(".out")
        return path.read_text("utf-8", errors="replace") if path.exists() else ""

    def errors(self) -> str:
        """The last line the run printed on stderr (why it stopped), if any."""
        path = self.file(".err")
        text = path.read_text("utf-8", errors="replace") if path.exists() else ""
        lines = [line for line in text.splitlines() if line.strip()]
        return lines[-1] if lines else ""


def start_run(stored: StoredBatch, plan_id: str, bank: Bank) -> None:
    """Start ``payrun run BATCH --plan ID`` in its own session; a thread records its exit code."""
    files = RunFiles(stored.runs, plan_id)
    stored.runs.mkdir(exist_ok=True, mode=0o700)
    files.file(".exit").unlink(missing_ok=True)
    command = _payrun(
        "run",
        str(stored.path),
        "--plan",
        plan_id,
        "--ledger",
        str(stored.ledger),
        "--report",
        str(files.report),
        *bank.args(),
    )
    with files.file(".out").open("wb") as out, files.file(".err").open("wb") as err:
        child = subprocess.Popen(  # noqa: S603 - our own interpreter and arguments
            command, stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True
        )
    files.file(".pid").write_text(str(child.pid), encoding="ascii")

    def wait() -> None:
        code = child.wait()
        files.file(".exit").write_text(str(code), encoding="ascii")

    threading.Thread(target=wait, name=f"payrun-run-{plan_id[:12]}", daemon=True).start()


@dataclass(frozen=True, slots=True)
class Progress:
    """A run's rows as the ledger holds them now."""

    total: int
    paid: int
    held: int
    failed: int
    pending: int


def read_progress(ledger: Path, planned: int) -> Progress:
    """The rows paid, held, failed and still to go (of the ``planned`` rows)."""
    from payrun.ledger import open_ledger

    try:
        with open_ledger(ledger, readonly=True) as store:
            statuses = [row.status for row in store.rows()]
    except PayrunError:
        statuses = []
    paid = sum(s in _PAID for s in statuses)
    failed = sum(s in _FAILED for s in statuses)
    held = sum(s is RowStatus.HELD for s in statuses)
    going = sum(s not in FINAL_STATUSES and s not in _PAID for s in statuses)
    return Progress(planned, paid, held, failed, min(going, planned))
