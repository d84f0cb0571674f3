"""The rows a person must look at, grouped by cause: one reason said once, with its rows.

Input: the rows a summary names (invalid, held, failed, returned, rejected, or left
unfinished for a reason). Output: ``Cause`` groups, in the order of their first row: rows
that share a status and a reason form one group (an account short of funds, frozen or
closed stops all its rows with one reason), and a Confirmation of Payee hold's own detail
(the name the bank suggests) is split from the reason shared by every such hold.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from payrun._models import LedgerRow
from payrun.report._ledger import report_status

__all__ = ["Cause", "group_causes", "row_ranges", "visible"]

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# A close match's own part: what the bank says of this one payee (see run/_payees.py)
_SUGGESTED = re.compile(
    r", the bank says (?:the account holder is (?P<name>'[^']*'|\"[^\"]*\")|the name is close)"
)


def visible(text: str | None) -> str:
    """Text on one line: a control character (a tab in an invalid name) shown escaped."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode(), text or "")


@dataclass(frozen=True, slots=True)
class Cause:
    """One reason and the rows it stops; ``details`` holds each row's own part (or None)."""

    status: str
    reason: str
    rows: tuple[LedgerRow, ...]
    details: tuple[str | None, ...]

    @property
    def account(self) -> str | None:
        """The source account every row of the cause pays from, or None when they differ."""
        accounts = {row.source_account for row in self.rows}
        return accounts.pop() if len(accounts) == 1 else None


def _split(error: str) -> tuple[str, str | None]:
    """A row's error as (the reason it may share with others, its own detail)."""
    found = _SUGGESTED.search(error)
    if found is None:
        return error, None
    reason = error[: found.start()] + error[found.end() :]
    return reason, None if found["name"] is None else f"bank: {found['name']}"


def group_causes(rows: Iterable[LedgerRow]) -> list[Cause]:
    """Group ``rows`` by status and shared reason, in the order of each group's first row."""
    groups: dict[tuple[str, str], list[tuple[LedgerRow, str | None]]] = {}
    for row in sorted(rows, key=lambda r: r.row):
        reason, detail = _split(visible(row.error))
        groups.setdefault((report_status(row.status), reason), []).append((row, detail))
    return [
        Cause(
            status=status,
            reason=reason,
            rows=tuple(row for row, _ in members),
            details=tuple(detail for _, detail in members),
        )
        for (status, reason), members in groups.items()
    ]


def row_ranges(numbers: Sequence[int], *, limit: int | None = None) -> str:
    """Row numbers as ranges: ``2-31, 40, 42-43`` (``numbers`` in ascending order); past
    ``limit`` ranges, ``...`` and the last row."""
    parts: list[str] = []
    start = end = numbers[0] if numbers else 0
    for number in numbers[1:]:
        if number == end + 1:
            end = number
            continue
        parts.append(str(start) if start == end else f"{start}-{end}")
        start = end = number
    if numbers:
        parts.append(str(start) if start == end else f"{start}-{end}")
    if limit is not None and len(parts) > limit:
        parts = [*parts[: limit - 1], "...", str(numbers[-1])]
    return ", ".join(parts)
