"""The run summary: what a run or a dry run did, as text lines and as one JSON object.

Input: a ``RunOutcome`` (and where the report went, the run's mode, the refusal that ended
it). Output: the summary the command prints (``summary_lines``, ``summary_document``) and
the dry run's plan (``dry_run_lines``, ``dry_run_document``). Nothing here prints.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

from payrun._models import LedgerRow, RowStatus, format_money
from payrun.ledger import report_words
from payrun.report._ledger import Totals, report_status

if TYPE_CHECKING:
    from payrun.run import RunOutcome

__all__ = ["dry_run_document", "dry_run_lines", "summary_document", "summary_lines"]

_INCOMPLETE = 3
_MAX_NAMED = 20
"""Rows not paid that the summary names one by one; the report has every row."""
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
    explain = _EXPLAIN.get(outcome.exit_code, "").format(where=where)
    # Submitted is not paid yet: the payee's bank may still fail or return it
    if not create_only and outcome.exit_code == 0 and open_rows:
        return "done: every valid row was submitted (not yet delivered; add --wait to follow them)"
    if not create_only or outcome.exit_code not in (0, 1):
        return explain
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


def _money(amount: Decimal) -> str:
    return f"{Decimal(format_money(amount)):,.2f}"


def _table(title: str, table: dict[str, tuple[int, Decimal]]) -> list[str]:
    lines = [title]
    for status, (count, total) in sorted(table.items()):
        # An invalid row's amount may not be money at all
        if status == RowStatus.INVALID:
            lines.append(f"  {status:<10} {count:>8} rows  {'(not added up)':>17}")
        else:
            lines.append(f"  {status:<10} {count:>8} rows  £{_money(total):>16}")
    return lines


def summary_lines(
    outcome: RunOutcome,
    *,
    report_path: Path | None,
    create_only: bool,
    refusal: str | None = None,
) -> list[str]:
    """The text summary's lines: counts and totals per status and per account, where things
    are, what to do next."""
    totals = Totals.of(outcome.rows)
    lines = _table("rows by status:", totals.by_status)
    for account, table in sorted(totals.by_account.items()):
        lines += _table(f"from {account}:", table)
    named = _named(outcome)
    if named:
        lines.append("rows to look at (all accounts):")
    for row in named[:_MAX_NAMED]:
        name, status = _visible(row.payee_name), report_status(row.status)
        lines.append(f"  row {row.row} ({name}): {status}: {_visible(row.error)}")
    if len(named) > _MAX_NAMED:
        lines.append(
            f"  ... and {len(named) - _MAX_NAMED} more: payrun report"
            f" {'LEDGER' if outcome.ledger_path is None else report_words(outcome.ledger_path)}"
        )
    if outcome.attention:
        rows = ", ".join(str(n) for n in outcome.attention)
        which = "row" if len(outcome.attention) == 1 else "rows"
        lines.append(f"needs attention: {which} {rows}: a person must look first; see the error")
    if outcome.interrupted:
        lines.append("interrupted: nothing new was started; run the same command again to resume")
    lines.append(f"ledger: {outcome.ledger_path}")
    if report_path is not None:
        lines.append(f"report: {report_path}")
    lines.append(_closing(outcome, create_only=create_only, refusal=refusal))
    return lines


def _named(outcome: RunOutcome) -> list[LedgerRow]:
    """Rows the summary names: not paid, needing attention, or left unfinished with a
    reason (the bank was unreachable or busy: the rerun finishes them)."""
    return [
        r
        for r in outcome.rows
        if r.status in _NAMED or r.row in outcome.attention or (r.error and r.status in _UNFINISHED)
    ]


def _visible(text: str | None) -> str:
    """Text on one line: a control character (a tab in an invalid name) shown escaped."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode(), text or "")


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _many(count: int, thing: str) -> str:
    """'1 row', '2 rows'."""
    return f"{count} {thing}" if count == 1 else f"{count} {thing}s"


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
            name, error = _visible(row.payee_name), _visible(row.error)
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
