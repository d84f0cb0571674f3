"""Progress for people and for schedulers: a bar on a terminal, log lines otherwise.

``make_observer`` picks a rich progress bar (rows done of total, rate, ETA, failures) when
stderr is a terminal, plain text lines when it is not, and JSON lines with
``--log-format json``. Nothing here ever prints a secret: observers see rows, not settings.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from payrun._models import FINAL_STATUSES, LedgerRow, RowStatus
from payrun._redaction import redact
from payrun.cli._output import reader_may_leave, stream_console
from payrun.run import QuietObserver

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import BarColumn, Task
    from rich.progress_bar import ProgressBar

    from payrun.run import RunOutcome

__all__ = [
    "BarObserver",
    "LineObserver",
    "QuietObserver",
    "doubt_message",
    "finished_line",
    "make_observer",
]

_DONE = FINAL_STATUSES | {RowStatus.SUBMITTED}
_BAD = {RowStatus.FAILED, RowStatus.HELD, RowStatus.RETURNED, RowStatus.REJECTED}
_LINE_EVERY_SECONDS = 2.0
_MAX_ROW_LINES = 20
_MAX_RANGES = 8
"""Rows not paid the bar prints one by one while paying; the summary groups them all."""


class BarObserver:
    """A rich progress bar on stderr: rows settled of total, rate, rows not paid, time
    elapsed and left; each row not paid printed above it as it happens."""

    def __init__(self, *, create_only: bool, console: Console | None = None) -> None:
        from rich.progress import (
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._done_states = _DONE | ({RowStatus.CREATED} if create_only else set())
        self._progress = Progress(
            TextColumn("{task.fields[label]}"),
            _outcome_bar(),
            TextColumn("{task.completed:>,.0f}/{task.total:,.0f}"),
            TextColumn("{task.fields[rate]:>7} rows/s"),
            TextColumn("not paid {task.fields[bad]}"),
            TextColumn("{task.fields[doubt]}"),
            TextColumn("[dim]elapsed"),
            TimeElapsedColumn(),
            TextColumn("[dim]left"),
            TimeRemainingColumn(),
            transient=False,
            console=console or stream_console(sys.stderr),
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._task = self._progress.add_task(
            "paying",
            total=None,
            rate="",
            bad="0",
            label="paying",
            doubt="",
            start=False,
            visible=False,
        )
        self._bad = 0
        self._done = 0
        self._total = 0
        # Rows already done when paying began: not part of this run's rate
        self._first = 0
        self._start = time.monotonic()
        self._shown = False
        # Rows not paid before the bar shows (the checks before paying), said once per cause
        self._early: list[LedgerRow] = []
        self._lines = 0

    def started(
        self,
        *,
        total: int,
        done: int,
        not_paid: int = 0,
        settled: int = 0,
        settled_not_paid: int = 0,
    ) -> None:
        """Show the bar: say why rows were not paid before it, and when the run resumes.
        Rows this run ``settled`` before it (an account paid while another was checked)
        are drawn done: their changes came before the bar showed."""
        self._done = self._first = done + settled
        self._total = total
        self._bad = not_paid + settled_not_paid
        self._start = time.monotonic()
        for line in _early_lines(self._early):
            self._print(line, style="red")
        paid_before = done - not_paid
        if paid_before > 0:
            # Beside it, a resume after a crash may say which rows are in doubt until when
            self._print(f"resuming: {paid_before:,} of {total:,} already done", style="bold")
        if total <= 0:
            return
        self._shown = True
        self._progress.update(
            self._task,
            total=total,
            completed=min(done, total),
            bad=f"{self._bad:,}",
            visible=True,
        )
        self._restyle()
        self._progress.start()
        self._progress.start_task(self._task)

    def row_changed(self, before: LedgerRow, after: LedgerRow) -> None:
        """Advance on rows reaching a resting state; print a row not paid as it happens."""
        newly_bad = after.status in _BAD and before.status not in _BAD
        if newly_bad:
            self._tell_bad(after)
        if not self._shown:
            return
        if after.status in self._done_states and before.status not in self._done_states:
            self._done = min(self._done + 1, self._total)
            self._bad += newly_bad
            elapsed = max(time.monotonic() - self._start, 1e-6)
            self._progress.update(
                self._task,
                completed=self._done,
                bad=f"{self._bad:,}",
                rate=f"{(self._done - self._first) / elapsed:,.0f}",
            )
            self._restyle()
        elif newly_bad:
            # Returned after delivered
            self._bad += 1
            self._progress.update(self._task, bad=f"{self._bad:,}")

    def _restyle(self) -> None:
        label, style = _look(
            paid=self._done - self._bad, bad=self._bad, left=self._total - self._done
        )
        self._progress.update(self._task, label=label, style=style)

    def _tell_bad(self, row: LedgerRow) -> None:
        """Say a row not paid: once per cause before the bar shows, else row by row (up to
        a limit: the summary groups them all)."""
        # The report's words, loaded on the first row not paid, not before the first request
        from payrun.report import report_status

        status, error = report_status(row.status), row.error or ""
        if not self._shown:
            self._early.append(row)
            return
        self._lines += 1
        if self._lines <= _MAX_ROW_LINES:
            self._print(f"row {row.row} ({row.payee_name}): {status}: {error}", style="red")
        elif self._lines == _MAX_ROW_LINES + 1:
            self._print("more rows not paid: the summary lists them all", style="red")

    def _print(self, message: str, *, style: str) -> None:
        self._progress.console.print(redact(message), style=style, markup=False, highlight=False)

    def note(self, message: str) -> None:
        """Print a line above the bar."""
        self._print(message, style="dim")

    def in_doubt(self, *, count: int, until: datetime | None) -> None:
        """Say above the bar how many rows are in doubt and until when; show it on the bar."""
        text = doubt_message(count, until)
        if text is not None:
            self.note(text)
        self._progress.update(
            self._task, doubt=f"in doubt {count} until {_clock(until)}" if count else ""
        )

    def close(self) -> None:
        """Remove the bar's live display."""
        self._progress.stop()


def _look(*, paid: int, bad: int, left: int) -> tuple[str, str]:
    """The bar's label and colour: green 'paying' while rows are paid, red when none was."""
    if left > 0:
        return "paying", "green" if bad == 0 else "yellow"
    if paid <= 0:
        return "nothing paid", "red"
    return "paid", "green" if bad == 0 else "yellow"


def _early_lines(early: list[LedgerRow]) -> list[str]:
    """One line per cause of the rows not paid before paying began, with its rows (and
    each row's own detail, such as the name the bank suggests)."""
    from payrun.report import group_causes, row_ranges

    lines = []
    for cause in group_causes(early):
        rows = [row.row for row in cause.rows]
        which = f"row {rows[0]}" if len(rows) == 1 else f"{len(rows):,} rows"
        if any(cause.details):
            shown = [
                f"{row.row} ({detail})" if detail else str(row.row)
                for row, detail in zip(cause.rows, cause.details, strict=True)
            ]
            more = len(shown) - _MAX_RANGES
            numbers = ", ".join(shown[:_MAX_RANGES]) + (f", {more:,} more" if more > 0 else "")
        else:
            numbers = row_ranges(rows, limit=_MAX_RANGES)
        lines.append(f"{which} {cause.status}: {cause.reason} (rows {numbers})")
    return lines


def _outcome_bar() -> BarColumn:
    """A bar whose colour says how the run goes (``task.fields['style']``), so a run that
    paid nothing never fills green."""
    from rich.progress import BarColumn

    class OutcomeBar(BarColumn):
        def render(self, task: Task) -> ProgressBar:
            """The bar, in the task's colour."""
            style = str(task.fields.get("style", "green"))
            self.complete_style = self.finished_style = style
            return super().render(task)

    return OutcomeBar()


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
        # Rows not paid before paying began (the checks): said once per cause, not per row
        self._early: list[LedgerRow] | None = []
        # While paying, a reason is said with its first row; its other rows at the end
        self._said: set[tuple[str, str | None]] = set()
        self._repeats: list[LedgerRow] = []

    def _emit(self, event: str, message: str, **fields: object) -> None:
        message = redact(message)
        fields = {k: redact(v) if isinstance(v, str) else v for k, v in fields.items()}
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

    def started(
        self,
        *,
        total: int,
        done: int,
        not_paid: int = 0,
        settled: int = 0,
        settled_not_paid: int = 0,  # noqa: ARG002 - the log names each row not paid
    ) -> None:
        """Log the start of payments (and that the run resumes, when rows were done before);
        rows this run ``settled`` before it count as done."""
        self._total, self._done, self._paying = total, done + settled, True
        self._say_early()
        paid_before = done - not_paid
        if paid_before > 0:
            self._emit(
                "resuming",
                f"resuming: {paid_before:,} of {total:,} already done",
                total=total,
                done=paid_before,
            )
        self._emit(
            "started",
            f"paying {total - done:,} of {total:,} rows ({done:,} need nothing more: already"
            " paid, invalid, held or failed)",
            total=total,
            done=done,
        )
        if settled:
            self._progress(force=self._done == total)

    def row_changed(self, before: LedgerRow, after: LedgerRow) -> None:
        """Log failed and held rows (those of the checks once per cause), and progress
        every few seconds."""
        said = (str(after.status), after.error)
        if after.status in _BAD and self._early is not None:
            self._early.append(after)
        elif after.status in _BAD and said in self._said:
            self._repeats.append(after)
        elif after.status in _BAD:
            self._said.add(said)
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
            self._progress(force=self._done == self._total)

    def _progress(self, *, force: bool) -> None:
        """Log the rows done, every few seconds (and when ``force``)."""
        now = time.monotonic()
        if force or now - self._last >= _LINE_EVERY_SECONDS:
            self._last = now
            self._emit(
                "progress",
                f"{self._done} of {self._total} rows done",
                done=self._done,
                total=self._total,
            )

    def _say_early(self) -> None:
        """Log the rows the checks stopped, one line per cause with its rows (an account
        short of funds stops all its rows with one reason), once."""
        early, self._early = self._early or [], None
        self._say_grouped(early)

    def _say_grouped(self, rows: list[LedgerRow], *, prefix: str = "") -> None:
        """One line (a "rows" event) per cause of ``rows``, with their row numbers."""
        if not rows:
            return
        if not self._json:
            for line in _early_lines(rows):
                self._emit("rows", prefix + line)
            return
        # The report's grouping, loaded only when rows were stopped
        from payrun.report import group_causes

        for cause in group_causes(rows):
            details = {
                str(row.row): detail
                for row, detail in zip(cause.rows, cause.details, strict=True)
                if detail
            }
            self._emit(
                "rows",
                f"{prefix}{_rows(cause.rows)} {cause.status}: {cause.reason}",
                status=cause.status,
                error=cause.reason,
                rows=[row.row for row in cause.rows],
                **({"details": details} if details else {}),
            )

    def note(self, message: str) -> None:
        """Log a phase."""
        self._emit("note", message)

    def in_doubt(self, *, count: int, until: datetime | None) -> None:
        """Log how many rows are in doubt and until when (and when none is left)."""
        text = doubt_message(count, until)
        if text is not None:
            self._emit(
                "in_doubt",
                text,
                count=count,
                until=None if until is None else until.isoformat(),
            )

    def close(self) -> None:
        """Log the rows the checks stopped, if paying never began, and the other rows of
        each reason said while paying."""
        self._say_early()
        repeats, self._repeats = self._repeats, []
        self._say_grouped(repeats, prefix="for the same reason as above, ")


def _rows(rows: tuple[LedgerRow, ...]) -> str:
    """'row 7' for one row, else '30 rows'."""
    return f"row {rows[0].row}" if len(rows) == 1 else f"{len(rows):,} rows"


def doubt_message(count: int, until: datetime | None) -> str | None:
    """The line saying how many rows are in doubt and until when (None: nothing to say)."""
    if not count or until is None:
        return "no row in doubt left: every row sent without its answer was checked"
    rows = "1 row" if count == 1 else f"{count:,} rows"
    return (
        f"{rows} in doubt until {_clock(until)}: payrun checks them with the bank then (their"
        " answers were lost, and the bank may still carry them out; nothing is paid twice)"
    )


def _clock(moment: datetime | None) -> str:
    """A time of day on this machine's clock, as the log lines show it."""
    return "" if moment is None else f"{moment.astimezone():%H:%M:%S}"


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


def make_observer(
    *, log_format: str, create_only: bool, quiet: bool = False
) -> BarObserver | LineObserver | QuietObserver:
    """A bar on a terminal (text format), else log lines; nothing with ``quiet``."""
    if quiet:
        return QuietObserver()
    if log_format == "text" and sys.stderr.isatty():
        return BarObserver(create_only=create_only)
    return LineObserver(sys.stderr, json_lines=log_format == "json", create_only=create_only)
