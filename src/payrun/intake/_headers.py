"""The batch file's columns and how a header row maps onto them.

Input: the header row's cell texts. Output: a ``HeaderMap`` (which file column holds which
canonical column, which columns are unknown). Raises ``BatchFileError`` for a repeated
column or a missing required one. Headers match ignoring case, spaces, hyphens and
underscores, so ``Sort Code``, ``sortcode`` and ``SORT-CODE`` are all ``sort_code``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from payrun._models import RowProblem
from payrun._redaction import KEY_NOT_SHOWN, excerpt, looks_like_a_key_file_line, shown_as_a_key
from payrun.errors import BatchFileError

__all__ = [
    "COLUMNS",
    "GUARD_COLUMNS",
    "ColumnSpec",
    "HeaderMap",
    "known_header",
    "map_header",
    "normalize_header",
    "refuse_a_key_file",
]


@dataclass(frozen=True, slots=True)
class ColumnSpec:
    """One canonical batch-file column: its name, whether it is required, its aliases."""

    name: str
    required: bool
    description: str
    aliases: tuple[str, ...] = ()


COLUMNS: tuple[ColumnSpec, ...] = (
    ColumnSpec(
        "payee_name",
        required=True,
        description="the payee's account holder name",
        aliases=("name", "account_holder", "beneficiary"),
    ),
    ColumnSpec("sort_code", required=True, description="6 digits; 12-34-56 and 12 34 56 accepted"),
    ColumnSpec("account_number", required=True, description="8 digits (keep leading zeros)"),
    ColumnSpec(
        "amount",
        required=True,
        description="GBP, > 0, at most 2 decimal places; 1,234.50 and £1234.50 accepted",
    ),
    ColumnSpec(
        "reference",
        required=False,
        description="payment reference, 1..35 characters",
        # Revolut Business, Wise
        aliases=("payment_reference",),
    ),
    ColumnSpec(
        "source_account",
        required=False,
        description="account to pay from: /v0/bank/accounts/ba.x or SORTCODE ACCOUNTNUMBER;"
        " else --source-account",
    ),
    ColumnSpec("row_id", required=False, description="your unique key for the row"),
    ColumnSpec(
        "currency",
        required=False,
        description="if present, must be GBP",
        # Wise's batch file: the currency the recipient gets
        aliases=("target_currency",),
    ),
)
"""The batch file contract, in template order."""

GUARD_COLUMNS: tuple[ColumnSpec, ...] = (
    ColumnSpec(
        "source_currency",
        required=False,
        description="Wise's sourceCurrency: if present, must be GBP",
    ),
    ColumnSpec(
        "amount_currency",
        required=False,
        description="Wise's amountCurrency: if present, must be GBP",
    ),
    ColumnSpec(
        "country",
        required=False,
        description="the payee's bank's country (Revolut Business): if present, must be GB",
        aliases=("recipient_bank_country", "bank_country"),
    ),
)
"""Columns of other services' bulk-payment CSVs that are read only to be checked (a row
paying another currency or a bank abroad is refused); not in templates."""

_CLIP = 40
"""Header texts quoted in messages are cut to this many characters (one readable line); a
text that looks like a key is never quoted (a key file given as the batch)."""
_MAX_LISTED = 20

_LOOKUP: dict[str, str] = {}
for _spec in (*COLUMNS, *GUARD_COLUMNS):
    for _alias in (_spec.name, *_spec.aliases):
        _LOOKUP[_alias.replace("_", "")] = _spec.name


def normalize_header(text: str) -> str:
    """Fold a header cell for matching: lower case, no spaces, hyphens or underscores."""
    folded = text.strip().lower()
    for char in (" ", "-", "_", "\t", "\u00a0"):
        folded = folded.replace(char, "")
    return folded


def known_header(text: str) -> bool:
    """Whether a header cell names one of payrun's columns (or an alias of one)."""
    return normalize_header(text).replace("_", "") in _LOOKUP


@dataclass(frozen=True, slots=True)
class HeaderMap:
    """Where each known column sits in the file, plus the ignored unknown columns."""

    positions: tuple[tuple[str, int], ...]
    """(canonical name, 0-based file column index), in file order."""
    headers: tuple[str, ...]
    """The header row as written."""
    unknown: tuple[str, ...]

    @property
    def columns(self) -> tuple[str, ...]:
        """The canonical columns present, in file order."""
        return tuple(name for name, _ in self.positions)

    @property
    def warnings(self) -> tuple[RowProblem, ...]:
        """One warning (row 1) for each unknown column, which validation ignores."""
        return tuple(
            RowProblem(
                1,
                KEY_NOT_SHOWN if shown_as_a_key(name) else name[:_CLIP],
                f"unknown column {excerpt(name, _CLIP)} is ignored",
            )
            for name in self.unknown
        )


def map_header(cells: list[str], *, path: Path) -> HeaderMap:
    """Match a header row to the canonical columns; raise for repeats and missing ones."""
    headers = tuple(cell.strip() for cell in cells)
    while headers and not headers[-1]:
        headers = headers[:-1]
    positions: list[tuple[str, int]] = []
    unknown: list[str] = []
    seen: dict[str, int] = {}
    for index, text in enumerate(headers):
        name = _LOOKUP.get(normalize_header(text))
        if name is None:
            if text:
                unknown.append(text)
            continue
        if name in seen:
            first, again = excerpt(headers[seen[name]], _CLIP), excerpt(text, _CLIP)
            msg = (
                f"{path.name}: the header names column {name} twice ({first} and {again});"
                " keep one of them"
            )
            raise BatchFileError(msg, path=path)
        seen[name] = index
        positions.append((name, index))
    _check_required(seen, headers, path=path)
    return HeaderMap(tuple(positions), headers, tuple(unknown))


def refuse_a_key_file(headers: Sequence[str], *, path: Path) -> None:
    """Refuse, without quoting it, a file whose first line is one cell holding a key (one
    token of 20 or more characters, whatever its case) or a PEM header."""
    cells = [h for h in headers if h.strip()]
    if len(cells) != 1 or not looks_like_a_key_file_line(cells[0]):
        return
    msg = (
        f"{path.name} looks like a key file (its first line, not shown, is a key or a PEM"
        " header), not a batch of payments: give the batch file (CSV or .xlsx)"
    )
    raise BatchFileError(msg, path=path)


def _check_required(seen: dict[str, int], headers: tuple[str, ...], *, path: Path) -> None:
    missing = [spec.name for spec in COLUMNS if spec.required and spec.name not in seen]
    if not missing:
        return
    refuse_a_key_file(headers, path=path)
    named = [excerpt(h, _CLIP) for h in headers if h]
    found = ", ".join(named[:_MAX_LISTED]) or "none"
    if len(named) > _MAX_LISTED:
        found += f" and {len(named) - _MAX_LISTED} more"
    if any("\t" in header for header in headers):
        msg = (
            f"{path.name} is separated by tabs: payrun reads CSV separated by commas or"
            " semicolons (in Excel: Save As, CSV UTF-8) or an .xlsx workbook"
        )
        raise BatchFileError(msg, path=path)
    plural = "columns" if len(missing) > 1 else "column"
    msg = (
        f"{path.name}: required {plural} {', '.join(missing)} not found in the header (row 1);"
        f" columns found: {found}"
    )
    raise BatchFileError(msg, path=path)
