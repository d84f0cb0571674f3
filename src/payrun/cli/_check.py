"""`payrun check`: is this setup ready to pay? A checklist read from the bank.

Builds ``Settings`` as ``run`` does, calls ``payrun.readiness.check_readiness`` (reads only), and
prints the checklist (text) or the contract's one JSON object (``--format json``). Exit 0
when payrun can pay from this setup, 2 when something must be fixed first; a bank that
cannot be reached is exit 3 (try again), as for ``run``.
"""

from __future__ import annotations

import argparse
from typing import Any

import anyio

from payrun.cli._bank import add_bank_key_options, bank_settings
from payrun.cli._output import json_text, reader_may_leave
from payrun.errors import ConfigError
from payrun.validation import normalize_source_account

__all__ = ["execute", "register"]

_NOT_READY = 2


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the `check` subcommand."""
    parser = subparsers.add_parser(
        "check",
        allow_abbrev=False,
        help="check that this setup can pay: bank, API key, signing key, accounts",
        description="Read the bank's index, the organization (name, mode), the accounts the"
        " API key sees (and --source-account's state), and with a signing key ask the bank's"
        " signature check. Creates nothing. Exit 0 when payrun can pay from this setup, 2 when"
        " something must be fixed first (a live-mode organization needs a verified"
        " signature), 3 when the bank cannot be reached.",
    )
    parser.add_argument("--base-url", help="bank API base address (default PAYRUN_BASE_URL)")
    add_bank_key_options(parser)
    parser.add_argument(
        "--source-account",
        help="also check this account can pay: an account URL or 'SORTCODE ACCOUNTNUMBER'",
    )
    parser.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="a checklist (text) or one JSON object",
    )
    parser.set_defaults(handler=execute)


def execute(args: argparse.Namespace) -> int:
    """Check the setup and print what passed and what to fix."""
    from payrun.readiness import check_readiness

    source = None
    if args.source_account is not None:
        source = normalize_source_account(args.source_account)
        if source is None:
            msg = (
                f"--source-account {args.source_account!r} is neither an account URL"
                " (/v0/bank/accounts/ba.x) nor 'SORTCODE ACCOUNTNUMBER' (like '040004 30000001')"
            )
            raise ConfigError(msg)
    settings = bank_settings(args)
    readiness = anyio.run(lambda: check_readiness(settings, source_account=source))
    with reader_may_leave():
        if args.format == "json":
            print(json_text(readiness.document()))  # noqa: T201 - the command's result
        else:
            print(f"payrun check: {readiness.organization} ({readiness.mode})")  # noqa: T201
            for check in readiness.checks:
                mark = "ok " if check.ok else "FIX"
                print(f"  {mark} {check.check}: {check.message}")  # noqa: T201
            verdict = "ready to pay" if readiness.ok else "not ready: fix the items marked FIX"
            print(verdict)  # noqa: T201
    return 0 if readiness.ok else _NOT_READY
