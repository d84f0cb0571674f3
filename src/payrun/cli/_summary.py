"""Showing `payrun run` results: the report file written, the summary and plan printed."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from payrun._models import LedgerRow
from payrun.cli._output import error_line, json_text, reader_may_leave, stream_console
from payrun.cli._progress import finished_line
from payrun.config import RunOptions
from payrun.errors import PayrunError, RefusedMidRunError
from payrun.ledger import LedgerLocation, ledger_location, report_words
from payrun.report import (
    dry_run_lines,
    print_blocks,
    read_audit_trail,
    summary_document,
    summary_view,
    write_report,
)
from payrun.run import RunOutcome

__all__ = [
    "print_document",
    "print_dry_run",
    "print_summary",
    "refused_outcome",
    "show_run",
    "write_run_report",
]


def _say(text: str = "") -> None:
    print(text)  # noqa: T201 - the summary is the command's output


def write_run_report(
    path: Path, rows: Sequence[LedgerRow], *, ledger: LedgerLocation | None = None
) -> str | None:
    """Write the run report (.csv, .xlsx or .json by extension); why not, if it failed.
    An .xlsx of a run of an approved plan (``ledger``: where its audit trail is) names the
    plan, its maker and its approvers in its summary.

    After a run a failed report is said, not raised: it must not turn paid rows into exit 2.
    """
    try:
        audit = [] if ledger is None else read_audit_trail(ledger)
        write_report(path, rows, audit=audit)
    except PayrunError as error:
        return str(error)
    except Exception as error:
        return f"cannot write the report {path}: {type(error).__name__}: {error}"
    return None


def refused_outcome(refused: RefusedMidRunError, batch: Path, options: RunOptions) -> RunOutcome:
    """The outcome of a run the bank stopped with a 401/403 after payments were created."""
    return RunOutcome(
        rows=list(refused.rows),
        plans=[],
        ledger_path=ledger_location(options.ledger_path, batch),
        exit_code=refused.exit_code,
    )


def show_run(
    outcome: RunOutcome,
    options: RunOptions,
    *,
    as_json: bool,
    refusal: str | None,
    quiet: bool = False,
) -> None:
    """Write the report, print the summary (and the refusal that ended the run, if any)."""
    report = options.report_path
    # A run of an approved plan: its report names the plan
    ledger = outcome.ledger_path if options.plan is not None else None
    failure = write_run_report(report, outcome.rows, ledger=ledger) if report is not None else None
    written = None if failure else report
    # A closed stdout ends the summary, not the exit code
    with reader_may_leave(run=True):
        if as_json:
            document = summary_document(
                outcome,
                report_path=written,
                create_only=options.create_only,
                refusal=refusal,
            )
            print_document(document)
        else:
            print_summary(
                outcome,
                report_path=written,
                create_only=options.create_only,
                refusal=refusal,
                quiet=quiet,
            )
    # The error that ended the run, after the summary of what was done
    if refusal is not None:
        error_line(refusal, as_json=as_json)
    # The payments stand: the run's own exit code, and how to get the report
    if failure:
        error_line(
            f"{failure}; the report was not written: the ledger has every row, so write it"
            f" with: payrun report {_report_words(outcome)} -o {report}",
            as_json=as_json,
        )
    # A scheduler's last line: how the run ended, in one object
    if as_json:
        finished_line(outcome, report=written)


def print_summary(
    outcome: RunOutcome,
    *,
    report_path: Path | None,
    create_only: bool,
    refusal: str | None = None,
    quiet: bool = False,
) -> None:
    """Print the text summary (``payrun.report.summary_view``): coloured on a terminal
    (unless ``NO_COLOR`` is set), as wide as the terminal, plain text on a pipe; with
    ``quiet``, its last line only (what to do next)."""
    blocks = summary_view(
        outcome, report_path=report_path, create_only=create_only, refusal=refusal
    )
    if quiet:
        blocks = blocks[-1:]
    console = stream_console(sys.stdout)
    # Wrapped for a person; one line per sentence for a pipe or a log file
    print_blocks(console, blocks, wrap=console.is_terminal)


def print_dry_run(outcome: RunOutcome, *, confirm_payees: bool = True) -> None:
    """Print the dry run's plan (``payrun.report.dry_run_lines``)."""
    for line in dry_run_lines(outcome, confirm_payees=confirm_payees):
        _say(line)


def print_document(document: dict[str, object]) -> None:
    """One JSON object on one line of stdout."""
    _say(json_text(document))


def _report_words(outcome: RunOutcome) -> str:
    """The ``payrun report`` arguments for the run's ledger."""
    return "LEDGER" if outcome.ledger_path is None else report_words(outcome.ledger_path)
