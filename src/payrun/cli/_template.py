"""`payrun template`: placeholder until its issue lands (owned by that issue's work)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["execute", "register"]


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the `template` subcommand."""
    parser = subparsers.add_parser("template", help="(not yet available)")
    parser.set_defaults(handler=execute)


def execute(args: argparse.Namespace) -> int:
    """Not yet available."""
    print("payrun template: not yet available", file=sys.stderr)  # noqa: T201
    return 2
