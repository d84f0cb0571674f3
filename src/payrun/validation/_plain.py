"""The fast path: a plain row's normalised fields straight from the file's cells.

Input: one usual row's cells (``payrun.intake.Cells``: the reader's list, picked by column
index, no dict or ``RawRow`` built) and its row number. Output: the row's ``Plain`` fields
when no rule has anything to say about it, else ``None`` (the caller then applies the full
rules to the row's ``RawRow``, which give every message). The path accepts only rows on
which every rule would report nothing, so both paths agree; it is conservative wherever
exactness would cost: padded cells, long cells, leading zeros, typed .xlsx cells other than
a float amount all take the full rules.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from decimal import ROUND_FLOOR, Decimal, InvalidOperation
from typing import Any

from payrun._models import PlainRow
from payrun.validation._rules import (
    MAX_NAME_LENGTH,
    PLAIN_AMOUNT,
    PLAIN_TEXT,
    SHOWN_REFERENCE_LENGTH,
    UK_COUNTRIES,
    normalize_source_account,
)

__all__ = ["Plain", "PlainCheck", "amount_limit", "plain_check"]

Plain = PlainRow
"""A valid row's normalised fields (``payrun._models.PlainRow``)."""
PlainCheck = Callable[[int, Sequence[Any]], Plain | None]

_COLUMNS = (
    "payee_name",
    "sort_code",
    "account_number",
    "amount",
    "reference",
    "source_account",
    "row_id",
    "currency",
)
_SORT_CODE_DIGITS = 6
# 12-34-56, the usual way to write one
_DASHED_SORT_CODE = 8
_ACCOUNT_DIGITS = 8
_LONG_TEXT = 256
"""Source accounts and row ids longer than this take the full rules (which bound cells)."""
_CURRENCY_TEXT = 16
_SOURCE_CACHE_LIMIT = 4096
_EXACT_FLOAT = 1e13
"""Below this a float's cents are exact and its shortest repr has its value (ulp < 0.002)."""
_plain_text = PLAIN_TEXT.fullmatch
_plain_amount = PLAIN_AMOUNT.fullmatch


def amount_limit(max_amount: Decimal) -> int:
    """``max_amount`` in whole cents, rounded down; 0 (no fast path) when not finite."""
    try:
        return max(0, int((max_amount * 100).to_integral_value(ROUND_FLOOR)))
    except (InvalidOperation, OverflowError, ValueError):
        return 0


def _cents_text(cents: int) -> str:
    return f"{cents // 100}.{cents % 100:02d}"


def plain_check(
    positions: Mapping[str, int], max_amount: Decimal, default_source: str | None
) -> PlainCheck:
    """The fast path for rows whose cells sit at ``positions`` (column -> cell index)."""
    i_name, i_sort, i_account, i_amount, i_reference, i_source, i_row_id, i_currency = (
        positions.get(column, -1) for column in _COLUMNS
    )
    more = _more_columns(positions)
    max_cents = amount_limit(max_amount)
    max_text, money = _cents_text(max_cents), _float_amount(max_cents)
    max_len = len(max_text) if max_cents else 0
    sources: dict[str, str] = {}
    cached, source_of = sources.get, _source_lookup(sources, default_source)

    def plain(row: int, cells: Sequence[Any]) -> Plain | None:
        # A typed .xlsx cell (a number, a date) where text belongs fails len() or a str method.
        try:
            name, sort_code, account = cells[i_name], cells[i_sort], cells[i_account]
            text = cells[i_amount]
            if type(text) is not str:
                text = money(text)
            elif not (
                _plain_amount(text)
                and (len(text) < max_len or (len(text) == max_len and text <= max_text))
                and (text[0] != "0" or (len(text) == 4 and text != "0.00"))  # noqa: PLR2004
            ):
                return None
            if len(sort_code) == _DASHED_SORT_CODE and sort_code[2] == sort_code[5] == "-":
                sort_code = sort_code[:2] + sort_code[3:5] + sort_code[6:]
            if not (
                text
                and len(name) <= MAX_NAME_LENGTH
                and len(sort_code) == _SORT_CODE_DIGITS
                and sort_code.isdigit()
                and sort_code.isascii()
                and len(account) == _ACCOUNT_DIGITS
                and account.isdigit()
                and account.isascii()
                and _plain_text(name := name.strip())
            ):
                return None
            reference = None
            if i_reference >= 0:
                reference = cells[i_reference]
                if len(reference) > SHOWN_REFERENCE_LENGTH or not _plain_text(
                    reference := reference.strip()
                ):
                    return None
            source_text = cells[i_source] if i_source >= 0 else ""
            source = cached(source_text) or source_of(source_text)
            row_id = cells[i_row_id] if i_row_id >= 0 else ""
            if (
                source is None
                or len(row_id) > _LONG_TEXT
                or (i_currency >= 0 and not _is_gbp(cells[i_currency]))
                or (more is not None and not more(cells))
                # Blank: isprintable, no row_id
                or not (row_id := row_id.strip()).isprintable()
            ):
                return None
        except (AttributeError, TypeError):
            return None
        return (row, name, sort_code, account, text, reference, source, row_id or None)

    return plain


def _more_columns(positions: Mapping[str, int]) -> Callable[[Sequence[Any]], bool] | None:
    """Whether a row's other currency columns say GBP and its country column GB (None: the
    file has none of them, the usual case)."""
    currencies = [positions[c] for c in ("source_currency", "amount_currency") if c in positions]
    country = positions.get("country", -1)
    if not currencies and country < 0:
        return None

    def fine(cells: Sequence[Any]) -> bool:
        return all(_is_gbp(cells[i]) for i in currencies) and (
            country < 0 or not (text := cells[country].strip()) or text.upper() in UK_COUNTRIES
        )

    return fine


def _is_gbp(text: str) -> bool:
    """Blank or GBP in any case (what ``check_currency`` accepts silently)."""
    if len(text) > _CURRENCY_TEXT:
        return False
    currency = text.strip()
    return not currency or currency.upper() == "GBP"


def _float_amount(max_cents: int) -> Callable[[Any], str]:
    """A numeric .xlsx amount's canonical text when it is whole pence in range, else ``""``."""
    # Below _EXACT_FLOAT, distinct whole-pence amounts are distinct floats, so comparing
    # the float with the float of max_cents compares the pence exactly.
    largest = min(max_cents / 100, _EXACT_FLOAT)

    def money(value: Any) -> str:
        if type(value) is not float or not 0 < value <= largest:
            return ""
        text = f"{value:.2f}"
        # The same float back: the cell is whole pence and its shortest repr (what the full
        # rules read, then quantize to two places) has the value of this text.
        return text if float(text) == value else ""

    return money


def _source_lookup(
    sources: dict[str, str], default_source: str | None
) -> Callable[[str], str | None]:
    """The source account a plain row pays from, cached in ``sources`` by its cell text
    (look there first); None: the full rules."""

    def source_of(text: str) -> str | None:
        if len(text) > _LONG_TEXT:
            return None
        stripped = text.strip()
        source = normalize_source_account(stripped) if stripped else default_source
        if source is not None and len(sources) < _SOURCE_CACHE_LIMIT:
            sources[text] = source
        return source

    return source_of
