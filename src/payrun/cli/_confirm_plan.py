"""The question ``payrun approve`` asks on a terminal: type the plan's first 8 hex digits.

``confirm_plan`` shows the plan's summary on stderr, throws away whatever was typed before
the question (type-ahead must not approve a plan the approver has not seen), and reads one
line from stdin. Only the plan's first 8 hex digits go on; anything else, or the end of
input, refuses with ``NotConfirmedError``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TextIO

from payrun.cli._output import reader_may_leave
from payrun.cli._terminal import discard_typeahead
from payrun.errors import NotConfirmedError

__all__ = ["CONFIRM_DIGITS", "confirm_plan"]

CONFIRM_DIGITS = 8
"""How many of the plan id's hex digits the approver types."""


def confirm_plan(
    plan_id: str,
    lines: Sequence[str],
    *,
    verb: str,
    stdin: TextIO | None = None,
    out: TextIO | None = None,
) -> None:
    """Show ``lines``, ask for the plan's first 8 hex digits, and return only when typed."""
    source = stdin or sys.stdin
    target = out or sys.stderr
    wanted = plan_id[:CONFIRM_DIGITS]
    with reader_may_leave(target):
        for line in lines:
            print(line, file=target)  # noqa: T201 - the question itself
    try:
        descriptor: int | None = source.fileno()
    except (OSError, ValueError):
        # No descriptor (a StringIO): nothing can have been typed ahead
        descriptor = None
    if descriptor is not None:
        discard_typeahead(descriptor)
    with reader_may_leave(target):
        print(  # noqa: T201 - the question itself
            f"type the plan's first {CONFIRM_DIGITS} hex digits ({wanted}) to {verb} it: ",
            end="",
            file=target,
            flush=True,
        )
    typed = source.readline()
    if typed.strip().lower() == wanted:
        return
    said = "no answer (end of input)" if not typed else "that was not the plan's id"
    msg = f"not confirmed: {said}, so nothing was recorded"
    raise NotConfirmedError(msg)
