"""`payrun approve`: a second person approves (or rejects) a recorded plan.

argv -> the policy and the approver's key -> ``payrun.approval.approve_plan`` (or
``reject_plan``): the plan is found, checked open and still what the file reads as, the
approver checked against the policy, the summary shown and the plan's first 8 hex digits
asked for on a terminal (unless ``--yes``) -> the signed approval appended to the ledger's
audit trail -> exit 0; 2 when refused (one line, nothing recorded).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from payrun.cli._confirm import stdin_is_terminal
from payrun.cli._output import file_path, ledger_arg, reader_may_leave
from payrun.cli._plan import add_policy_option, plan_lines, policy_of
from payrun.config import ledger_url_from_env
from payrun.errors import NotConfirmedError, UsageError

if TYPE_CHECKING:
    from payrun.approval import Plan

__all__ = ["execute", "register"]


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the `approve` subcommand."""
    parser = subparsers.add_parser(
        "approve",
        allow_abbrev=False,
        help="approve (or reject) a plan someone else made, with your approver key",
        description="Show the plan, ask for its first 8 hex digits on a terminal (unless"
        " --yes), and record your approval: your name, the time, the note and your key's"
        " Ed25519 signature over the plan id. Exit 0 recorded, 2 refused (nothing recorded).",
    )
    parser.add_argument("batch", type=file_path, metavar="BATCH", help="the batch file")
    parser.add_argument("--plan", required=True, metavar="ID", help="the plan id (12+ hex)")
    parser.add_argument("--as", dest="name", required=True, metavar="NAME", help="your name")
    parser.add_argument(
        "--key",
        type=file_path,
        metavar="FILE",
        help="your approver private key (payrun approver-key wrote it); to reject under a"
        " policy too (without one, optional)",
    )
    parser.add_argument("--note", metavar="TEXT", help="a note kept with the decision")
    parser.add_argument("--yes", action="store_true", help="do not ask on the terminal")
    parser.add_argument("--reject", action="store_true", help="reject the plan (needs --note)")
    parser.add_argument("--ledger", type=ledger_arg, help="the ledger, as for payrun run")
    add_policy_option(parser)
    parser.set_defaults(handler=execute)


def execute(args: argparse.Namespace) -> int:
    """Record the approval or rejection and say so."""
    from payrun.approval import approve_plan, reject_plan
    from payrun.ledger import ledger_location

    if not args.name.strip():
        msg = "--as needs your name, as the policy lists it"
        raise UsageError(msg)
    location = ledger_location(args.ledger or ledger_url_from_env(), args.batch)
    confirm = None if args.yes else _asker("reject" if args.reject else "approve")
    if args.reject:
        if not args.note:
            msg = "--reject needs --note TEXT: say why, for the maker and the audit trail"
            raise UsageError(msg)
        plan = reject_plan(
            location,
            args.batch,
            args.plan,
            name=args.name,
            note=args.note,
            policy=policy_of(args),
            key_path=args.key,
            confirm=confirm,
        )
        _say(f"rejected plan {plan.plan_id[:12]} as {args.name}")
        return 0
    if args.key is None:
        msg = "approving needs --key FILE: your approver private key (payrun approver-key)"
        raise UsageError(msg)
    plan = approve_plan(
        location,
        args.batch,
        args.plan,
        name=args.name,
        key_path=args.key,
        note=args.note,
        policy=policy_of(args),
        confirm=confirm,
    )
    _say(f"approved plan {plan.plan_id[:12]} as {args.name}")
    return 0


def _asker(verb: str) -> Callable[[Plan], None]:
    """The terminal question (refused when there is no terminal to ask on)."""
    from payrun.cli._confirm_plan import confirm_plan

    def ask(plan: Plan) -> None:
        if not stdin_is_terminal():
            msg = f"no terminal to ask on: add --yes to {verb} plan {plan.plan_id[:12]}"
            raise NotConfirmedError(msg)
        confirm_plan(plan.plan_id, plan_lines(plan), verb=verb)

    return ask


def _say(line: str) -> None:
    with reader_may_leave():
        print(line)  # noqa: T201 - the command's output
    sys.stdout.flush()
