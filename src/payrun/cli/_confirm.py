"""The question a live-mode run asks on a terminal before it creates anything.

``TerminalConfirmer`` shows what the run is about to pay (rows, total, per source account,
new payees) on stderr and reads one line from stdin, a terminal: ``yes`` (any case) or the
number of rows goes on; anything else, or the end of input, does not; Ctrl-C (the run's
``StopSignal``) ends the question. Only what is typed after the question is shown counts:
keys pressed before it (type-ahead) are discarded. stdin is read without blocking the
event loop, so Ctrl-C is seen at once.
"""

from __future__ import annotations

import os
import re
import select
import sys
from decimal import Decimal
from typing import TextIO

import anyio

from payrun._models import format_money
from payrun.cli._output import reader_may_leave
from payrun.cli._terminal import discard_typeahead
from payrun.run import ConfirmAnswer, RunPreview, StopSignal

__all__ = ["TerminalConfirmer", "preview_lines", "stdin_is_terminal"]

_MAX_NAMED_PAYEES = 10
# How often the question looks for an answer or Ctrl-C
_POLL_SECONDS = 0.05
_LINE_LIMIT = 4096
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def stdin_is_terminal() -> bool:
    """True when a person can answer on stdin."""
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (OSError, ValueError):
        return False


def _money(amount: Decimal) -> str:
    return f"£{Decimal(format_money(amount)):,.2f}"


def _rows(count: int) -> str:
    return f"{count} row" if count == 1 else f"{count} rows"


def _visible(text: str) -> str:
    """A name on one line: control characters shown escaped."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode(), text)


def preview_lines(preview: RunPreview) -> list[str]:
    """What the question shows: organization, rows and total, per account, new payees."""
    verb = "create (not submit: approve them in the bank's app)" if preview.create_only else "pay"
    lines = [
        f"{_visible(preview.organization)} is a live-mode organization: this run moves real money",
        f"about to {verb} {_rows(preview.rows)}, {_money(preview.total)} in all",
    ]
    lines += [
        f"  from {_visible(a.name)} ({_visible(a.source)}): {_rows(a.rows)}, {_money(a.total)}"
        for a in preview.accounts
    ]
    payees = preview.new_payees
    if payees:
        named = ", ".join(_visible(name) for name in payees[:_MAX_NAMED_PAYEES])
        more = len(payees) - _MAX_NAMED_PAYEES
        named += f" and {more} more" if more > 0 else ""
        check = (
            "each checked with Confirmation of Payee first: a close match or no match holds"
            " its rows"
            if preview.confirm_payees
            else "created without a Confirmation of Payee check (--no-confirm-payees)"
        )
        lines.append(f"  new payees to create: {len(payees)} ({named}); {check}")
    if preview.not_paid:
        lines.append(
            f"not paid: {_rows(preview.not_paid)} invalid, held or failed (listed at the end)"
        )
    return lines


class TerminalConfirmer:
    """Asks on the terminal (stdin) whether the run shown may go on."""

    def __init__(self, stop: StopSignal, *, out: TextIO | None = None) -> None:
        self._stop = stop
        self._out = out or sys.stderr

    async def __call__(self, preview: RunPreview) -> ConfirmAnswer:
        """Show ``preview``, ask, and return the answer."""
        # A "yes" typed before the question is shown is not an answer to it; dropped first,
        # so that an answer typed as soon as the question shows is never dropped
        discard_typeahead(sys.stdin.fileno())
        with reader_may_leave(self._out, run=True):
            for line in preview_lines(preview):
                print(line, file=self._out)  # noqa: T201 - the question itself
            print(  # noqa: T201 - the question itself
                f"type yes (or {preview.rows}) to go on, anything else to stop: ",
                end="",
                file=self._out,
                flush=True,
            )
        typed = await self._read_line()
        if typed is None:
            # The terminal shows ^C or ^D with no line end
            with reader_may_leave(self._out, run=True):
                print(file=self._out, flush=True)  # noqa: T201 - ends the question's line
            return ConfirmAnswer.INTERRUPTED if self._stop.is_set() else ConfirmAnswer.NO_ANSWER
        answer = typed.strip().casefold()
        return (
            ConfirmAnswer.CONFIRMED
            if answer in ("yes", str(preview.rows))
            else ConfirmAnswer.DECLINED
        )

    async def _read_line(self) -> str | None:
        """One line typed on stdin; None at the end of input or once a stop is asked for."""
        fd = sys.stdin.fileno()
        typed = b""
        while not self._stop.is_set():
            ready, _, _ = select.select([fd], [], [], 0)
            if not ready:
                await anyio.sleep(_POLL_SECONDS)
                continue
            chunk = os.read(fd, _LINE_LIMIT)
            if not chunk:
                return None
            typed += chunk
            if b"\n" in typed or len(typed) > _LINE_LIMIT:
                return typed.split(b"\n", 1)[0].decode(errors="replace")
        return None
