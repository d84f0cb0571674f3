"""`payrun plan`: check a batch read-only with the bank and record the plan to approve.

argv -> ``Settings``/``ValidationOptions``/``RunOptions`` (the run's own options) ->
``payrun.approval.make_plan`` (the dry run's checks, then the plan in the ledger) -> the
plan's summary (text, or one JSON object) -> exit 0 (every row planned), 1 (some rows held
or invalid), 2 (nothing can be planned). Also the policy options and the ``--plan`` gate
``payrun run`` uses (``add_plan_options``, ``plan_gate``).
"""

from __future__ import annotations

import argparse
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from payrun._models import ApprovedRows, format_money
from payrun.cli._bank import add_bank_key_options
from payrun.cli._output import file_path, json_text, ledger_arg, reader_may_leave
from payrun.config import (
    DEFAULT_DUPLICATE_WINDOW_DAYS,
    RunOptions,
    ledger_url_from_env,
    login_name,
    policy_path_from_env,
    settle_wait_from_env,
)
from payrun.errors import UsageError
from payrun.intake import show_day

if TYPE_CHECKING:
    from payrun.approval import Plan, Policy

__all__ = [
    "add_plan_options",
    "add_policy_option",
    "execute",
    "plan_gate",
    "plan_lines",
    "policy_of",
    "register",
]


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the `plan` subcommand."""
    from payrun.cli._run import add_file_options, count_arg, days_arg, money_arg, settle_wait_arg

    parser = subparsers.add_parser(
        "plan",
        allow_abbrev=False,
        help="check a batch with the bank and record the plan a second person approves",
        description="Run the dry run's read-only checks and record an immutable plan of the"
        " rows a run would pay (held and invalid rows are left out) in the ledger. Exit 0"
        " when every row is planned, 1 when some are held or invalid, 2 when nothing can"
        " be planned. Then: payrun approve BATCH --plan ID, and payrun run BATCH --plan ID.",
    )
    add_file_options(parser)
    parser.add_argument("--ledger", type=ledger_arg, help="the ledger, as for payrun run")
    parser.add_argument("--sandbox", action="store_true", help="check with the embedded sandbox")
    parser.add_argument("--base-url", help="bank API base address (default PAYRUN_BASE_URL)")
    add_bank_key_options(parser)
    parser.add_argument(
        "--confirm-payees",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="as for payrun run",
    )
    parser.add_argument("--accept-close-match", action="store_true", help="as for payrun run")
    parser.add_argument("--accept-changed-details", action="store_true", help="as for payrun run")
    parser.add_argument("--allow-repeat", action="store_true", help="as for payrun run")
    parser.add_argument(
        "--duplicate-window",
        type=days_arg,
        default=DEFAULT_DUPLICATE_WINDOW_DAYS,
        help="as for payrun run",
    )
    parser.add_argument("--expect-count", type=count_arg, help="control total: valid rows")
    parser.add_argument("--expect-total", type=money_arg, help="control total: their sum")
    parser.add_argument(
        "--settle-wait", type=settle_wait_arg, metavar="SECONDS", help="as for payrun run"
    )
    parser.add_argument("--as", dest="maker", metavar="NAME", help="the maker (default: login)")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output")
    add_policy_option(parser)
    parser.set_defaults(handler=execute, dry_run=True, report=None)


def add_policy_option(parser: argparse.ArgumentParser) -> None:
    """``--policy FILE``: the approval policy (default PAYRUN_POLICY_FILE)."""
    parser.add_argument(
        "--policy",
        type=file_path,
        metavar="FILE",
        help="the approval policy, TOML (default PAYRUN_POLICY_FILE; none: one approval"
        " by anyone but the maker, 7-day expiry, runs need no plan)",
    )


def add_plan_options(parser: argparse.ArgumentParser) -> None:
    """``payrun run``'s ``--plan ID`` and ``--policy FILE``."""
    parser.add_argument(
        "--plan",
        metavar="ID",
        help="pay exactly this approved plan (its id or first 12 hex digits); refused unless"
        " the file still reads as the plan and its approvals meet the policy",
    )
    add_policy_option(parser)


def policy_of(args: argparse.Namespace) -> Policy:
    """The policy ``--policy`` or PAYRUN_POLICY_FILE names (checked), else none."""
    from payrun.approval import load_policy

    return load_policy(args.policy or policy_path_from_env())


def plan_gate(args: argparse.Namespace) -> ApprovedRows | None:
    """Before ``payrun run`` reads or sends anything: with ``--plan``, check the plan and
    take its options; without, refuse when the policy requires a plan. What the run may
    pay (None: a plain run)."""
    path = args.policy or policy_path_from_env()
    if args.plan is None:
        # No policy, or a dry run (it pays nothing): as before, without loading the approvals
        if path is not None and not args.dry_run:
            from payrun.approval import load_policy, refuse_unplanned

            refuse_unplanned(load_policy(path))
        return None
    from payrun.approval import approved_run, load_policy
    from payrun.ledger import ledger_location

    policy = load_policy(path)
    if args.dry_run:
        msg = "--dry-run checks a file and --plan pays an approved one: leave one out"
        raise UsageError(msg)
    if args.sandbox and args.ledger is None:
        msg = "--plan with --sandbox needs --ledger: the ledger the plan was recorded in"
        raise UsageError(msg)
    location = ledger_location(args.ledger, args.batch)
    plan, approved = approved_run(
        location,
        args.batch,
        args.plan,
        policy=policy,
        who=login_name(),
        check=lambda plan: _take_pay_date(args, plan),
    )
    # The rows are read and checked as the plan's were
    for name, value in plan.options.items():
        setattr(args, name, Decimal(value) if name == "max_amount" else value)
    return approved


def _take_pay_date(args: argparse.Namespace, plan: Plan, *, today: date | None = None) -> None:
    """The run pays on the plan's pay date, the one approved: another ``--pay-date`` is
    refused, and so is a run before it (``--pay-now`` too) -- before the run is recorded."""
    planned = None if plan.pay_date is None else date.fromisoformat(plan.pay_date)
    plan_id = plan.plan_id[:12]
    approved = "with no pay date" if planned is None else f"to pay on {show_day(planned)}"
    if args.pay_date is not None and args.pay_date != planned:
        msg = (
            f"plan {plan_id} was approved {approved}, not {show_day(args.pay_date)}: leave"
            " --pay-date out, or make and approve a new plan for that day"
        )
        raise UsageError(msg)
    today = today or date.today()  # noqa: DTZ011 - the clerk's own calendar day
    if planned is not None and today < planned:
        if args.pay_now:
            msg = (
                f"plan {plan_id} was approved {approved}, so --pay-now cannot pay it before"
                " then: nothing was sent; make and approve a new plan to pay now"
            )
        else:
            msg = (
                f"plan {plan_id} was approved {approved}, and today is {show_day(today)}:"
                " nothing was sent; run it again on that day"
            )
        raise UsageError(msg)
    args.pay_date = planned


def execute(args: argparse.Namespace) -> int:
    """Check the batch, record the plan, and print it."""
    from payrun.approval import make_plan
    from payrun.cli._run import bank_session, validation_options
    from payrun.run import event_loop_options

    if args.ledger is None:
        args.ledger = ledger_url_from_env()
    maker = login_name() if args.maker is None else args.maker.strip()
    if not maker:
        msg = "--as needs a name: who makes the plan"
        raise UsageError(msg)
    policy = policy_of(args)
    validation = validation_options(args)
    with bank_session(args) as (settings, _, bound):
        options = _options(args, bound)
        made = anyio.run(
            lambda: make_plan(
                args.batch,
                settings,
                validation=validation,
                options=options,
                policy=policy,
                maker=maker,
                pay_date=_pay_date(args),
            ),
            backend_options=event_loop_options(),
        )
    with reader_may_leave():
        if args.format == "json":
            print(json_text(made.plan.summary()))  # noqa: T201 - the command's output
        else:
            for line in [*plan_lines(made.plan), *_next_steps(args.batch, made.plan)]:
                print(line)  # noqa: T201 - the command's output
    return made.exit_code


def _options(args: argparse.Namespace, bound: float | None) -> RunOptions:
    """The run's options a plan's checks use."""
    from payrun.config import DEFAULT_SETTLE_WAIT

    wait = args.settle_wait if args.settle_wait is not None else bound
    if wait is None:
        wait = settle_wait_from_env() or DEFAULT_SETTLE_WAIT
    return RunOptions(
        dry_run=True,
        confirm_payees=args.confirm_payees,
        accept_close_match=args.accept_close_match,
        accept_changed_details=args.accept_changed_details,
        allow_repeat=args.allow_repeat,
        duplicate_window_days=args.duplicate_window,
        expect_count=args.expect_count,
        expect_total=args.expect_total,
        ledger_path=args.ledger,
        settle_wait=wait,
    )


def _pay_date(args: argparse.Namespace) -> str | None:
    """The plan's pay date, as YYYY-MM-DD: ``--pay-date``, else the payroll export's own
    (Standard 18's, Bankline's), else None."""
    from payrun.cli._input import pay_date_of
    from payrun.intake import read_export

    export = read_export(args.batch, input_format=args.input_format)
    value = pay_date_of(export, args.pay_date)
    return None if value is None else value.isoformat()


def _when(value: datetime) -> str:
    return value.strftime("%Y-%m-%d %H:%M UTC")


def plan_lines(plan: Plan) -> list[str]:
    """The plan's summary as text: id, rows and totals, payees, who made it and until when."""
    lines = [
        f"plan {plan.plan_id[:12]}: {len(plan.rows)} row(s), £{_pounds(plan.total)} in all",
    ]
    lines += [
        f"  from {source}: {count} row(s), £{_pounds(total)}"
        for source, (count, total) in plan.by_account().items()
    ]
    lines.append(
        f"new payees: {len(plan.new_payee_rows)}; changed bank details:"
        f" {len(plan.changed_detail_rows)}; held: {len(plan.held)}; invalid: {len(plan.invalid)}"
    )
    lines += _cop_lines(plan)
    lines.append(
        f"made by {plan.maker} at {_when(plan.created_at)}; expires {_when(plan.expires_at)}"
    )
    return lines


def _cop_lines(plan: Plan) -> list[str]:
    """The new payees' Confirmation of Payee answers: the counts, then every answer that
    is not a plain match (none when CoP was not asked)."""
    if not plan.payee_checks:
        return []
    lines = [
        f"Confirmation of Payee: {plan.cop_matched} new payee(s) matched;"
        f" {plan.cop_held} row(s) held"
    ]
    for check in plan.payee_checks:
        if check.result == "match" and not check.held:
            continue
        said = f", the bank says {check.suggested_name!r}" if check.suggested_name else ""
        why = f" ({check.reason})" if check.reason else ""
        outcome = "held" if check.held else "accepted"
        rows = ", ".join(str(row) for row in check.rows)
        lines.append(f"  {check.payee_name}, row(s) {rows}: {check.result}{why}{said}: {outcome}")
    return lines


def _pounds(amount: Decimal) -> str:
    return f"{Decimal(format_money(amount)):,.2f}"


def _next_steps(batch: Path, plan: Plan) -> list[str]:
    return [
        f"approve: payrun approve {batch} --plan {plan.plan_id[:12]} --as NAME --key FILE",
        f"then pay: payrun run {batch} --plan {plan.plan_id[:12]}",
    ]
