"""The run summary: what a run or a dry run did, as rich tables and text, and as one JSON
object.

Input: a ``RunOutcome`` (and where the report went, the run's mode, the refusal that ended
it). Output: the summary the command prints (``summary_view``, as rich renderables, or
``summary_lines``, plain; ``summary_document``, JSON) and the dry run's plan
(``dry_run_lines``, ``dry_run_document``). Nothing here prints to the standard streams:
``print_blocks`` writes to the console it is given. rich is imported only when a text
summary is built.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

from payrun._models import LedgerRow, RowStatus, format_money
from payrun.ledger import report_words
from payrun.report._attention import Cause, group_causes, row_ranges, visible
from payrun.report._ledger import Totals, report_status

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.table import Table

    from payrun.run import RunOutcome

__all__ = [
    "dry_run_document",
    "dry_run_lines",
    "print_blocks",
    "render_plain",
    "summary_document",
    "summary_lines",
    "summary_view",
]

_INCOMPLETE = 3
_WIDTH = 80
_MAX_CAUSES = 20
"""Causes the summary says one by one; the report has every row."""
_MAX_NAMED_IN_CAUSE = 5
"""A cause with more rows than this lists them as ranges of row numbers."""
_MAX_LISTED = 20
"""Rows a cause names one by one (with the bank's suggested name) before 'and N more'."""
_MAX_RANGES = 12
"""Ranges of row numbers a cause shows before '...' (its count is said; the report has all)."""
_STATUS_STYLES = {
    "failed": "red",
    "rejected": "red",
    "returned": "red",
    "held": "yellow",
    "invalid": "yellow",
}
_INTERRUPTED = (
    "interrupted: nothing new was started; run the same command again to resume"
    " (nothing will be paid twice)"
)
_MAX_JSON_PROBLEMS = 1000
_NAMED = frozenset(
    {RowStatus.INVALID, RowStatus.HELD, RowStatus.FAILED, RowStatus.RETURNED, RowStatus.REJECTED}
)
_NOTHING_TO_DO = frozenset({RowStatus.SUBMITTED, RowStatus.DELIVERED})
_STARTED = frozenset({RowStatus.CREATING, RowStatus.CREATED, RowStatus.SUBMITTING})
_UNFINISHED = _STARTED | {RowStatus.PENDING}
_EXPLAIN = {
    0: "done: every valid row was paid",
    1: "finished, but some rows were not paid (invalid, held, failed, returned or rejected):"
    " see {where}",
    3: "incomplete: run the same command again to resume (nothing will be paid twice)",
}


def _closing(
    outcome: RunOutcome,
    *,
    create_only: bool,
    refusal: str | None = None,
    where: str = "above",
) -> str:
    """The summary's last line (``where``: where the unpaid rows are listed): the refusal
    that ended the run (a 401/403 once payments exist), why a --wait ended early, or what the
    exit code means. A ``--create-only`` run's is true for the rows' states: payments
    waiting for approval, approved (submitted) in the app, or rejected there."""
    if refusal is not None:
        return refusal
    # A rerun alone won't settle it
    if outcome.attention and outcome.exit_code == _INCOMPLETE:
        shown = "rows above" if where == "above" else "rows under attention"
        return (
            f"incomplete: a person must look at the {shown} in the bank's app first;"
            " then run the same command again (nothing will be paid twice)"
        )
    open_rows = any(r.status is RowStatus.SUBMITTED for r in outcome.rows)
    if outcome.wait_ended and open_rows and outcome.exit_code == _INCOMPLETE:
        return f"incomplete: {outcome.wait_ended}"
    # One message for a stop, not 'interrupted' and then 'incomplete'
    if outcome.interrupted and outcome.exit_code == _INCOMPLETE:
        return _INTERRUPTED
    explain = _EXPLAIN.get(outcome.exit_code, "").format(where=where)
    if outcome.changed == 0 and not create_only and outcome.exit_code in (0, 1):
        return _nothing_to_pay(outcome, where=where)
    # Submitted is not paid yet: the payee's bank may still fail or return it
    if not create_only and outcome.exit_code == 0 and open_rows:
        return "done: every valid row was submitted (not yet delivered; add --wait to follow them)"
    if not create_only or outcome.exit_code not in (0, 1):
        return explain
    return _created_closing(outcome, explain)


def _created_closing(outcome: RunOutcome, explain: str) -> str:
    """A --create-only run's last line (exit 0 or 1): the payments waiting for approval."""
    waiting = sum(1 for r in outcome.rows if r.status is RowStatus.CREATED)
    submitted = sum(1 for r in outcome.rows if r.status in _NOTHING_TO_DO)
    payments = "payment" if waiting == 1 else "payments"
    approve = f"approve the {waiting} created {payments} in the bank's app to pay them"
    if outcome.exit_code == 1:
        return f"{explain}; {approve}" if waiting else explain
    if not waiting:
        return "done: every valid row was submitted; no payment is waiting for approval"
    if not submitted:
        return f"done: every valid row was created, and none submitted: {approve}"
    return f"done: every valid row was created, {submitted} of them submitted: {approve}"


def _nothing_to_pay(outcome: RunOutcome, *, where: str) -> str:
    """A rerun that changed no row: what the rows already were, not a second 'done'."""
    paid = [r.status for r in outcome.rows if r.status in _NOTHING_TO_DO]
    states = sorted({str(status) for status in paid}, reverse=True)
    were = " or ".join(states) or "paid"
    if outcome.exit_code == 0:
        every = "the 1 row was" if len(paid) == 1 else f"all {len(paid):,} rows were"
        return f"nothing to pay: {every} already {were}"
    unpaid = sum(1 for r in outcome.rows if r.status in _NAMED)
    already = f"{_many(len(paid), 'row')} already {were}, " if paid else ""
    return (
        f"nothing new to pay: {already}{_many(unpaid, 'row')} not paid (invalid, held,"
        f" failed, returned or rejected): see {where}"
    )


def _money(amount: Decimal) -> str:
    return f"{Decimal(format_money(amount)):,.2f}"


def _many(count: int, thing: str) -> str:
    """'1 row', '2 rows', '1,997 rows'."""
    return f"{count:,} {thing}" if count == 1 else f"{count:,} {thing}s"


def summary_view(
    outcome: RunOutcome,
    *,
    report_path: Path | None,
    create_only: bool,
    refusal: str | None = None,
) -> list[RenderableType]:
    """The text summary as rich renderables, top to bottom: the rows per status (and per
    account when there are several), the rows to look at grouped by cause, where the
    ledger and report are, and what to do next. A ``Text`` with ``no_wrap`` (a path) is
    printed whole, never wrapped."""
    from rich.text import Text

    totals = Totals.of(outcome.rows)
    blocks: list[RenderableType] = [_status_table(totals)]
    if len(totals.by_account) == 1:
        blocks.append(Text(f"every valid row is from {next(iter(totals.by_account))}"))
    blocks += _attention_blocks(outcome)
    if outcome.attention:
        rows = ", ".join(str(n) for n in outcome.attention)
        which = "row" if len(outcome.attention) == 1 else "rows"
        blocks.append(
            Text(f"needs attention: {which} {rows}: a person must look first; see the error")
        )
    blocks.append(Text(f"ledger: {outcome.ledger_path}", no_wrap=True))
    if report_path is not None:
        blocks.append(Text(f"report: {report_path}", no_wrap=True))
    if report_path is None or report_path.suffix.lower() != ".xlsx":
        ledger = _report_words(outcome)
        blocks.append(Text(f"for Excel: payrun report {ledger} -o report.xlsx", no_wrap=True))
    closing = _closing(outcome, create_only=create_only, refusal=refusal)
    blocks.append(Text(closing, style=_closing_style(outcome, refusal=refusal)))
    return blocks


def summary_lines(
    outcome: RunOutcome,
    *,
    report_path: Path | None,
    create_only: bool,
    refusal: str | None = None,
    width: int = _WIDTH,
) -> list[str]:
    """The text summary (``summary_view``) as plain lines ``width`` columns wide."""
    blocks = summary_view(
        outcome, report_path=report_path, create_only=create_only, refusal=refusal
    )
    return render_plain(blocks, width=width).splitlines()


def render_plain(blocks: Sequence[RenderableType], *, width: int = _WIDTH) -> str:
    """Renderables as plain text ``width`` columns wide (no colour), as a pipe gets them."""
    import io

    from rich.console import Console

    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None, highlight=False)
    print_blocks(console, blocks)
    return "".join(line.rstrip() + "\n" for line in out.getvalue().splitlines())


def print_blocks(console: Console, blocks: Sequence[RenderableType], *, wrap: bool = True) -> None:
    """Print each block on ``console``: text wrapped between words at its width when
    ``wrap``, else one line per sentence (for a log file or a pipe); a ``no_wrap`` text (a
    path) is always whole."""
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    for block in blocks:
        # Padding would crop an unwrapped line at the console's width
        if not wrap and isinstance(block, Padding) and isinstance(block.renderable, Text):
            block = Text(" " * block.left) + block.renderable
        whole = not isinstance(block, Table) and (
            not wrap or (isinstance(block, Text) and bool(block.no_wrap))
        )
        console.print(block, soft_wrap=whole, crop=not whole)


def _status_table(totals: Totals) -> Table:
    """Count and amount per status, for all accounts and then for each account when there
    are several; a section with several statuses ends with their total."""
    from rich import box
    from rich.table import Table

    grid = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1))
    grid.add_column("rows by status", no_wrap=True)
    grid.add_column("rows", justify="right", no_wrap=True)
    grid.add_column("amount", justify="right", no_wrap=True)
    accounts = sorted(totals.by_account.items())
    sections = [("all accounts", totals.by_status)]
    if len(accounts) > 1:
        sections += [(f"from {account}", table) for account, table in accounts]
    for title, table in sections:
        grid.add_row(title, "", "", style="bold")
        _add_statuses(grid, table)
    return grid


def _add_statuses(grid: Table, table: dict[str, tuple[int, Decimal]]) -> None:
    count_all, total_all = 0, Decimal(0)
    for status, (count, total) in sorted(table.items()):
        # An invalid row's amount may not be money at all
        amount = "(not added up)" if status == RowStatus.INVALID else f"£{_money(total)}"
        grid.add_row(f"  {status}", f"{count:,}", amount, style=_STATUS_STYLES.get(status))
        count_all, total_all = count_all + count, total_all + total
    if len(table) > 1:
        grid.add_row("  total", f"{count_all:,}", f"£{_money(total_all)}", style="bold")


def _attention_blocks(outcome: RunOutcome) -> list[RenderableType]:
    """'rows to look at': each cause once, with its rows (ranges when they are many)."""
    from rich.padding import Padding
    from rich.text import Text

    named = _named(outcome)
    if not named:
        return []
    blocks: list[RenderableType] = [Text("rows to look at (all accounts):", style="bold")]
    causes = group_causes(named)
    for cause in causes[:_MAX_CAUSES]:
        style = _STATUS_STYLES.get(cause.status)
        if len(cause.rows) == 1:
            row, detail = cause.rows[0], cause.details[0]
            # The bank's suggested name, as for a cause of many rows
            who = visible(row.payee_name) + (f"; {detail}" if detail else "")
            line = f"row {row.row} ({who}): {cause.status}: {cause.reason}"
            blocks.append(Padding(Text(line, style=style or ""), (0, 0, 0, 2), expand=False))
            continue
        where = f" from {cause.account}" if cause.account else ""
        head = f"{_many(len(cause.rows), 'row')}{where}, {cause.status}: {cause.reason}"
        blocks.append(Padding(Text(head, style=style or ""), (0, 0, 0, 2), expand=False))
        blocks.append(Padding(Text(_listed(cause)), (0, 0, 0, 4), expand=False))
    if len(causes) > _MAX_CAUSES:
        hidden = sum(len(c.rows) for c in causes[_MAX_CAUSES:])
        blocks.append(
            Padding(
                Text(
                    f"... and {_many(hidden, 'more row')}: payrun report {_report_words(outcome)}"
                ),
                (0, 0, 0, 2),
                expand=False,
            )
        )
    return blocks


def _listed(cause: Cause) -> str:
    """A cause's rows: by number and name (and the bank's suggestion) when few or when
    each has its own detail, else as ranges of row numbers."""
    if any(cause.details) or len(cause.rows) <= _MAX_NAMED_IN_CAUSE:
        shown = [
            f"{row.row} ({visible(row.payee_name)}{'; ' + detail if detail else ''})"
            for row, detail in zip(cause.rows, cause.details, strict=True)
        ]
        more = len(shown) - _MAX_LISTED
        listed = ", ".join(shown[:_MAX_LISTED])
        return f"rows {listed}" + (f", and {more:,} more (see the report)" if more > 0 else "")
    return f"rows {row_ranges([row.row for row in cause.rows], limit=_MAX_RANGES)}"


def _named(outcome: RunOutcome) -> list[LedgerRow]:
    """Rows the summary names: not paid, needing attention, or left unfinished with a
    reason (the bank was unreachable or busy: the rerun finishes them)."""
    return [
        r
        for r in outcome.rows
        if r.status in _NAMED or r.row in outcome.attention or (r.error and r.status in _UNFINISHED)
    ]


def _closing_style(outcome: RunOutcome, *, refusal: str | None) -> str:
    if refusal is not None or outcome.exit_code not in (0,):
        return "bold yellow" if outcome.exit_code in (1, _INCOMPLETE) else "bold red"
    return "bold green"


def dry_run_lines(outcome: RunOutcome, *, confirm_payees: bool = True) -> list[str]:
    """The dry run's lines: per account its rows, total, available balance, payees to create
    or check."""
    lines = ["dry run: nothing was created at the bank"]
    pending = [r for r in outcome.rows if r.status is RowStatus.PENDING]
    for plan in outcome.plans:
        rows = [r for r in pending if r.source_account == plan.source]
        total = sum((r.amount for r in rows), Decimal(0))
        lines.append(f"from {plan.source}:")
        if plan.account is not None:
            lines.append(
                f"  account: {plan.account.display_name} ({plan.account.url}),"
                f" available £{_money(plan.account.available_balance)}"
            )
        lines.append(f"  would pay {_many(len(rows), 'row')}, £{_money(total)}")
        lines.append(
            f"  payees: {_many(plan.payees_existing, 'row')} to existing payees,"
            f" {_many(plan.payees_to_create, 'new payee')} to"
            f" {'check and ' if confirm_payees else ''}create"
        )
        if plan.problem:
            lines.append(f"  problem: {plan.problem}")
    done = started = 0
    for row in outcome.rows:
        if row.status is RowStatus.PENDING:
            continue
        if row.status in _NOTHING_TO_DO:
            done += 1
        elif row.status in _STARTED and row.row not in outcome.attention:
            started += 1
        else:
            name, error = visible(row.payee_name), visible(row.error)
            why = "needs attention" if row.row in outcome.attention else report_status(row.status)
            lines.append(f"  row {row.row} ({name}): {why}: {error}")
    if started:
        lines.append(
            f"{_many(started, 'row')} {'was' if started == 1 else 'were'} started by an earlier"
            " run (payment created, or the bank's answer not recorded): a run checks them with"
            " the bank and finishes them"
        )
    if done:
        paid = _many(done, "row")
        lines.append(f"{paid} already paid by this ledger's earlier runs (nothing more to do)")
    lines.append(_dry_run_verdict(outcome, confirm_payees=confirm_payees))
    return lines


def _dry_run_verdict(outcome: RunOutcome, *, confirm_payees: bool) -> str:
    """The dry run's last line: would everything be paid (and on what condition)."""
    to_check = sum(plan.payees_to_create for plan in outcome.plans) if confirm_payees else 0
    if outcome.exit_code != 0:
        return "some rows would not be paid: see above"
    # A dry run asks Confirmation of Payee nothing: the run may still hold
    if to_check:
        return (
            f"everything would be paid if Confirmation of Payee matches the {to_check} new"
            f" {'payee' if to_check == 1 else 'payees'} (a close match or no match is held,"
            " not paid)"
        )
    return "everything would be paid"


def _counted(table: dict[str, tuple[int, Decimal]]) -> dict[str, dict[str, object]]:
    return {
        status: {
            "count": count,
            "total": None if status == RowStatus.INVALID else format_money(total),
        }
        for status, (count, total) in sorted(table.items())
    }


def _problems(rows: Sequence[LedgerRow]) -> dict[str, object]:
    listed = [
        {
            "row": row.row,
            "row_id": row.row_id,
            "payee_name": row.payee_name,
            "status": report_status(row.status),
            "error": row.error,
        }
        for row in rows[:_MAX_JSON_PROBLEMS]
    ]
    return {"problems": listed, "problems_not_listed": max(0, len(rows) - _MAX_JSON_PROBLEMS)}


def summary_document(
    outcome: RunOutcome,
    *,
    report_path: Path | None,
    create_only: bool,
    refusal: str | None = None,
) -> dict[str, object]:
    """The summary as one JSON object (``--log-format json``): what the text summary says."""
    totals = Totals.of(outcome.rows)
    named = _named(outcome)
    closing = _closing(
        outcome,
        create_only=create_only,
        refusal=refusal,
        where="problems",
    )
    return {
        "event": "summary",
        "exit_code": outcome.exit_code,
        "message": closing,
        "interrupted": outcome.interrupted,
        "rows": _counted(totals.by_status),
        "accounts": {a: _counted(t) for a, t in sorted(totals.by_account.items())},
        **_problems(named),
        "attention": list(outcome.attention),
        "ledger": str(outcome.ledger_path),
        "report": None if report_path is None else str(report_path),
    }


def dry_run_document(outcome: RunOutcome) -> dict[str, object]:
    """The dry run's plan as one JSON object (``--log-format json``)."""
    pending = [r for r in outcome.rows if r.status is RowStatus.PENDING]
    accounts = []
    for plan in outcome.plans:
        rows = [r for r in pending if r.source_account == plan.source]
        account = plan.account
        accounts.append(
            {
                "source": plan.source,
                "account_url": None if account is None else account.url,
                "available_balance": None
                if account is None
                else format_money(account.available_balance),
                "rows": len(rows),
                "total": format_money(sum((r.amount for r in rows), Decimal(0))),
                "payees_existing": plan.payees_existing,
                "payees_to_create": plan.payees_to_create,
                "problem": plan.problem,
            }
        )
    others = [r for r in outcome.rows if r.status is not RowStatus.PENDING]
    return {
        "event": "dry_run",
        "exit_code": outcome.exit_code,
        "accounts": accounts,
        **_problems(
            [
                r
                for r in others
                if r.row in outcome.attention or r.status not in _NOTHING_TO_DO | _STARTED
            ]
        ),
        "attention": list(outcome.attention),
        "started": sum(
            1 for r in others if r.status in _STARTED and r.row not in outcome.attention
        ),
        "already_paid": sum(1 for r in others if r.status in _NOTHING_TO_DO),
    }


def _report_words(outcome: RunOutcome) -> str:
    """The ``payrun report`` arguments for the run's ledger (a URL's password masked)."""
    return "LEDGER" if outcome.ledger_path is None else report_words(outcome.ledger_path)
