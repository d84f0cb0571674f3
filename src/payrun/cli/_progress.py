"""Progress for people and for schedulers: a bar on a terminal, log lines otherwise.

``make_observer`` picks a rich progress bar (rows done of total, rate, ETA, failures) when
stderr is a terminal, plain text lines when it is not, and JSON lines with
``--log-format json``. Nothing here ever prints a secret: observers see rows, not settings.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from payrun._models import FINAL_STATUSES, LedgerRow, RowStatus
from payrun.cli._output import reader_may_leave

if TYPE_CHECKING:
    from payrun.run import RunOutcome

__all__ = ["BarObserver", "LineObserver", "finished_line", "make_observer"]

_DONE = FINAL_STATUSES | {RowStatus.SUBMITTED}
_BAD = {RowStatus.FAILED, RowStatus.HELD, RowStatus.RETURNED, RowStatus.REJECTED}
_LINE_EVERY_SECONDS = 2.0


class BarObserver:
    """A rich progress bar on stderr."""

    def __init__(self, *, create_only: bool) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._done_states = _DONE | ({RowStatus.CREATED} if create_only else set())
        self._progress = Progress(
            TextColumn("paying"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]:>7} rows/s"),
            TextColumn("not paid {task.fields[bad]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            transient=False,
            console=Console(stderr=True),
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._task = self._progress.add_task("paying", total=0, rate="", bad=0, start=False)
        self._bad = 0
        self._done = 0
        # Rows already done when paying began: not part of this run's rate
        self._first = 0
        self._start = time.monotonic()

    def started(self, *, total: int, done: int) -> None:
        """Show the bar."""
        self._done = self._first = done
        self._start = time.monotonic()
        self._progress.start()
        self._progress.update(self._task, total=total, completed=done)
        self._progress.start_task(self._task)

    def row_changed(self, before: LedgerRow, after: LedgerRow) -> None:
        """Advance on rows reaching a resting state."""
        if after.status in self._done_states and before.status not in self._done_states:
            self._done += 1
            self._bad += after.status in _BAD
            elapsed = max(time.monotonic() - self._start, 1e-6)
            self._progress.update(
                self._task,
                completed=self._done,
                bad=self._bad,
                rate=f"{(self._done - self._first) / elapsed:,.0f}",
            )
        elif after.status in _BAD and before.status not in _BAD:
            # Returned after delivered
            self._bad += 1
            self._progress.update(self._task, bad=self._bad)

    def note(self, message: str) -> None:
        """Print a line above the bar."""
        self._progress.console.print(message, style="dim")

    def close(self) -> None:
        """Remove the bar's live display."""
        self._progress.stop()


class LineObserver:
    """Plain or JSON log lines: phases, every failed or held row, progress every 2 s."""

    def __init__(self, stream: TextIO, *, json_lines: bool, create_only: bool) -> None:
        self._stream = stream
        self._json = json_lines
        self._done_states = _DONE | ({RowStatus.CREATED} if create_only else set())
        self._total = 0
        self._done = 0
        self._last = 0.0
        self._paying = False

    def _emit(self, event: str, message: str, **fields: object) -> None:
        if self._json:
            record = {
                "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "event": event,
                "message": message,
                **fields,
            }
            line = json.dumps(record, default=str)
        else:
            line = f"{time.strftime('%H:%M:%S')} {message}"
        # A closed log never stops a run
        with reader_may_leave(self._stream, run=True):
            print(line, file=self._stream, flush=True)

    def started(self, *, total: int, done: int) -> None:
        """Log the start of payments."""
        self._total, self._done, self._paying = total, done, True
        self._emit(
            "started",
            f"paying {total - done} of {total} rows ({done} need nothing more: already paid,"
            " invalid, held or failed)",
            total=total,
            done=done,
        )

    def row_changed(self, before: LedgerRow, after: LedgerRow) -> None:
        """Log failed and held rows, and progress every few seconds."""
        if after.status in _BAD:
            self._emit(
                "row",
                f"row {after.row}: {after.status}: {after.error}",
                row=after.row,
                status=str(after.status),
                error=after.error,
            )
        if (
            self._paying
            and after.status in self._done_states
            and before.status not in self._done_states
        ):
            self._done += 1
            now = time.monotonic()
            if now - self._last >= _LINE_EVERY_SECONDS or self._done == self._total:
                self._last = now
                self._emit(
                    "progress",
                    f"{self._done} of {self._total} rows done",
                    done=self._done,
                    total=self._total,
                )

    def note(self, message: str) -> None:
        """Log a phase."""
        self._emit("note", message)

    def close(self) -> None:
        """Nothing to release."""


def finished_line(outcome: RunOutcome, *, report: Path | None) -> None:
    """The JSON log's last line: exit code, rows per status, where the ledger and report are."""
    counts: dict[str, int] = {}
    # The report's status words: an intent shows as its last sure state
    for row in outcome.rows:
        # The report's words, loaded once the run is over
        from payrun.report import report_status

        status = report_status(row.status)
        counts[status] = counts.get(status, 0) + 1
    record = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "event": "finished",
        "message": f"finished with exit code {outcome.exit_code}",
        "exit_code": outcome.exit_code,
        "interrupted": outcome.interrupted,
        "rows": counts,
        "attention": list(outcome.attention),
        "ledger": None if outcome.ledger_path is None else str(outcome.ledger_path),
        "report": None if report is None else str(report),
    }
    with reader_may_leave(sys.stderr, run=True):
        print(json.dumps(record), file=sys.stderr, flush=True)  # noqa: T201 - the log


def make_observer(*, log_format: str, create_only: bool) -> BarObserver | LineObserver:
    """A bar on a terminal (text format), else log lines."""
    if log_format == "text" and sys.stderr.isatty():
        return BarObserver(create_only=create_only)
    return LineObserver(sys.stderr, json_lines=log_format == "json", create_only=create_only)
