"""`payrun template NAME`: write a blank batch template (payroll or suppliers).

argv -> ``render_template`` -> stdout (CSV) or a file (``-o FILE``; .xlsx defaults to
NAME.xlsx in the current directory and never overwrites) -> exit 0.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from payrun.cli._output import file_path, reader_may_leave
from payrun.errors import ConfigError
from payrun.templates import TEMPLATE_FORMATS, TEMPLATES, render_template, write_template

__all__ = ["execute", "register"]


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the `template` subcommand."""
    parser = subparsers.add_parser(
        "template",
        allow_abbrev=False,
        help="write a blank batch template (payroll or suppliers)",
        description=(
            "Write a blank batch template with the right columns. CSV goes to stdout unless"
            " -o FILE is given; .xlsx goes to NAME.xlsx unless -o FILE is given."
        ),
    )
    parser.add_argument(
        "name", metavar="NAME", choices=tuple(TEMPLATES), help="payroll or suppliers"
    )
    parser.add_argument("--format", choices=TEMPLATE_FORMATS, default="csv", help="csv or xlsx")
    parser.add_argument("-o", "--output", metavar="FILE", type=file_path, help="write to FILE")
    parser.set_defaults(handler=execute)


def execute(args: argparse.Namespace) -> int:
    """Write the template where asked; 0 on success."""
    if args.output is None and args.format == "csv":
        with reader_may_leave():
            sys.stdout.write(render_template(args.name, "csv").decode("utf-8"))
        return 0
    target: Path = args.output or Path(f"{args.name}.xlsx")
    if args.output is None and target.exists():
        msg = f"{target} already exists: pass -o FILE to choose where to write the template"
        raise ConfigError(msg)
    write_template(args.name, args.format, target)
    with reader_may_leave(sys.stderr):
        print(f"wrote {target}", file=sys.stderr)  # noqa: T201 - tells the user where it went
    return 0
