"""The per-column rules of a batch row: plain functions, no exceptions, no I/O.

Input: a cell's text and a ``Problems`` collector. Output: the normalised value (or
``None`` when the cell is wrong) with errors and warnings appended to the collector; each
message names the fix. Plain functions, not a pydantic model per row: the rules need
their own messages, and this path is measured in the intake benchmark.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from payrun._models import CENTS, RowProblem

__all__ = [
    "MAX_NAME_LENGTH",
    "MAX_REFERENCE_LENGTH",
    "PLAIN_AMOUNT",
    "PLAIN_TEXT",
    "SHOWN_REFERENCE_LENGTH",
    "UK_COUNTRIES",
    "Problems",
    "check_account_number",
    "check_amount",
    "check_country",
    "check_currency",
    "check_payee_name",
    "check_reference",
    "check_sort_code",
    "is_scientific",
    "normalize_source_account",
    "scientific_damage",
]

MAX_NAME_LENGTH = 140
MAX_REFERENCE_LENGTH = 35
SHOWN_REFERENCE_LENGTH = 18
"""Faster Payments shows the payee only the first 18 characters of a reference."""
_ACCOUNT_DIGITS = 8
_SORT_CODE_DIGITS = 6
_PENCE_PLACES = 2
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_OUTSIDE_CHARSET = re.compile(r"[^A-Za-z0-9 .,&/\-'()+?:]")
_FORMULA_START = ("=", "+", "@")
_PLAIN = re.compile(r"[A-Za-z0-9.,&/\-'()?: ][A-Za-z0-9 .,&/\-'()+?:]*")
"""Text in the UK payment character set that does not start like a formula: no checks due."""
# \u2212: the minus sign
_NEGATIVE_STARTS = ("-", "£-", "(", "\u2212", "£\u2212")
_EXCEL_TEXT = re.compile(r'="[^"]*"')
_SORT_CODE = re.compile(r"([0-9]{2})[- ]?([0-9]{2})[- ]?([0-9]{2})")
_SCIENTIFIC = re.compile(r"[+-]?£?[0-9]*\.?[0-9]+[eE][+-]?[0-9]+")
_PLAIN_AMOUNT = re.compile(r"[0-9]{1,15}\.[0-9]{2}")
_AMOUNT = re.compile(r"£?\s*((?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?|\.[0-9]+)")
_ACCOUNT_PATH = re.compile(r"(?:https?://[^/\s]+)?(/v0/bank/accounts/[A-Za-z0-9._~-]+)/?")
_SORT_ACCOUNT = re.compile(r"([0-9]{2})[- ]?([0-9]{2})[- ]?([0-9]{2})[\s/:-]*([0-9]{8})")
_SOURCE_CACHE_LIMIT = 4096
PLAIN_TEXT = _PLAIN
"""The fast path's test for names and references (see ``check_payee_name``)."""
PLAIN_AMOUNT = _PLAIN_AMOUNT
"""The fast path's test for amounts (see ``check_amount``)."""
_source_cache: dict[str, str | None] = {}


class Problems:
    """Collects one row's errors and warnings."""

    __slots__ = ("errors", "row", "warnings")

    def __init__(self, row: int) -> None:
        self.row = row
        self.errors: list[RowProblem] = []
        self.warnings: list[RowProblem] = []

    def error(self, column: str | None, message: str) -> None:
        """Record an error: the row will not be paid."""
        self.errors.append(RowProblem(self.row, column, message))

    def warn(self, column: str | None, message: str) -> None:
        """Record a warning: the row is still paid."""
        self.warnings.append(RowProblem(self.row, column, message))


def check_payee_name(text: str, problems: Problems) -> str | None:
    """Payee name: 1..140 characters, no control characters, not a formula."""
    name = text.strip()
    if _PLAIN.fullmatch(name) and len(name) <= MAX_NAME_LENGTH:
        # The common case: nothing to report
        return name
    if not name:
        problems.error("payee_name", "payee name is empty: fill in the account holder's name")
        return None
    if _bad_text(name, "payee_name", "payee name", problems):
        return None
    if len(name) > MAX_NAME_LENGTH:
        message = f"payee name has {len(name)} characters; the bank takes at most {MAX_NAME_LENGTH}"
        problems.error("payee_name", message)
        return None
    _warn_charset(name, "payee_name", "payee name", problems)
    return name


def check_reference(text: str, problems: Problems) -> tuple[bool, str | None]:
    """Reference: blank (a warning) or 1..35 characters; returns (ok, reference or None)."""
    reference = text.strip()
    if len(reference) <= SHOWN_REFERENCE_LENGTH and _PLAIN.fullmatch(reference):
        # The common case: nothing to report
        return True, reference
    if not reference:
        problems.warn(
            "reference", 'reference is blank: the bank will send "Sent from <account owner>"'
        )
        return True, None
    if _bad_text(reference, "reference", "reference", problems):
        return False, None
    size = len(reference)
    if size > MAX_REFERENCE_LENGTH:
        message = f"reference has {size} characters; the bank takes at most {MAX_REFERENCE_LENGTH}"
        problems.error("reference", message + ": shorten it")
        return False, None
    if size > SHOWN_REFERENCE_LENGTH:
        shown = reference[:SHOWN_REFERENCE_LENGTH]
        problems.warn(
            "reference",
            f"reference has {size} characters; Faster Payments shows the payee only the first"
            f" {SHOWN_REFERENCE_LENGTH} ({shown!r})",
        )
    _warn_charset(reference, "reference", "reference", problems)
    return True, reference


def check_sort_code(text: str, problems: Problems) -> str | None:
    """Sort code: 6 digits, optionally as 12-34-56 or 12 34 56."""
    if len(text) == _SORT_CODE_DIGITS and text.isdigit() and text.isascii():
        return text
    match = _SORT_CODE.fullmatch(text.strip())
    if match is not None:
        return match[1] + match[2] + match[3]
    shown = text.strip()
    if is_scientific(shown):
        problems.error("sort_code", scientific_damage("sort code", shown))
    elif not shown:
        problems.error("sort_code", "sort code is empty: it must be 6 digits, like 12-34-56")
    elif _EXCEL_TEXT.fullmatch(shown):
        problems.error(
            "sort_code",
            f'sort code {shown} is wrapped in Excel\'s ="..." (a text formula); write the'
            " 6 digits alone, like 12-34-56",
        )
    else:
        problems.error("sort_code", f"sort code must be 6 digits, like 12-34-56; got {shown!r}")
    return None


def check_account_number(text: str, problems: Problems) -> str | None:
    """Account number: exactly 8 digits; never padded."""
    number = text.strip()
    if len(number) == _ACCOUNT_DIGITS and number.isascii() and number.isdigit():
        return number
    if len(number) == _ACCOUNT_DIGITS - 1 and number.isascii() and number.isdigit():
        message = (
            f"account number {number} has 7 digits; UK account numbers have 8: add the leading 0"
            f" if it was lost (0{number}), after checking with the payee"
        )
    elif is_scientific(number):
        message = scientific_damage("account number", number)
    elif not number:
        message = "account number is empty: it must be 8 digits"
    elif _EXCEL_TEXT.fullmatch(number):
        message = (
            f'account number {number} is wrapped in Excel\'s ="..." (a text formula); write'
            " the 8 digits alone"
        )
    else:
        message = f"account number must be 8 digits; got {number!r}"
    problems.error("account_number", message)
    return None


def check_amount(text: str, max_amount: Decimal, problems: Problems) -> Decimal | None:
    """Amount: GBP, > 0, at most 2 decimal places, not above ``max_amount``."""
    if _PLAIN_AMOUNT.fullmatch(text):
        amount = Decimal(text)
        if 0 < amount <= max_amount:
            # The common case: 1234.50 as written by payroll software
            return amount
    shown = text.strip()
    match = _AMOUNT.fullmatch(shown)
    if match is None:
        problems.error("amount", _amount_format_message(shown))
        return None
    number = match[1].replace(",", "")
    try:
        amount = Decimal(number)
    except InvalidOperation:  # pragma: no cover - the pattern admits only plain decimals
        problems.error("amount", _amount_format_message(shown))
        return None
    pence = number.partition(".")[2]
    if len(pence) == _PENCE_PLACES and 0 < amount <= max_amount:
        # The common case: already in pence, nothing to report
        return amount
    if not amount:
        problems.error("amount", "amount is zero: fill in the amount or remove the row")
    elif amount > max_amount:
        problems.error(
            "amount",
            f"amount {shown} is over the £{max_amount:,.2f} limit per payment: split the"
            " payment (or raise --max-amount)",
        )
    elif len(pence.rstrip("0")) > _PENCE_PLACES:
        problems.error("amount", f"amount {shown} has more than 2 decimal places: round to pence")
    else:
        return amount.quantize(CENTS)
    return None


def check_currency(text: str, problems: Problems, column: str = "currency") -> None:
    """Currency (or another currency ``column``): blank or GBP (any case)."""
    currency = text.strip()
    if currency and currency.upper() != "GBP":
        problems.error(column, f"{column} must be GBP (payrun pays pounds only): {currency!r}")


def check_country(text: str, problems: Problems) -> None:
    """The payee's bank's country: blank, GB or United Kingdom (any case)."""
    country = text.strip()
    if country and country.upper() not in UK_COUNTRIES:
        problems.error(
            "country",
            f"country must be GB (payrun pays UK accounts only, by Faster Payments): {country!r}",
        )


UK_COUNTRIES = frozenset({"GB", "GBR", "UK", "UNITED KINGDOM"})
"""How a country column names the UK."""


def normalize_source_account(text: str) -> str | None:
    """``/v0/bank/accounts/ba.x`` or ``"SORTCODE ACCOUNTNUMBER"`` from what a user wrote."""
    cached = _source_cache.get(text, "")
    if cached != "":
        return cached
    value = text.strip()
    path = _ACCOUNT_PATH.fullmatch(value)
    pair = _SORT_ACCOUNT.fullmatch(value)
    result = path[1] if path else (f"{pair[1]}{pair[2]}{pair[3]} {pair[4]}" if pair else None)
    if len(_source_cache) < _SOURCE_CACHE_LIMIT:
        _source_cache[text] = result
    return result


def is_scientific(text: str) -> bool:
    """True for numbers written like ``1.23E+07``, the way Excel shows long numbers."""
    return _SCIENTIFIC.fullmatch(text.strip()) is not None


def scientific_damage(label: str, text: str) -> str:
    """The message for a value Excel turned into scientific notation."""
    return (
        f"spreadsheet damage: the {label} is in scientific notation ({text}), which loses"
        " digits; format the column as Text and type it again"
    )


def _amount_format_message(shown: str) -> str:
    if not shown:
        return "amount is empty: fill in the amount, like 1234.50"
    if is_scientific(shown):
        return (
            f"amount {shown!r} is in scientific notation: write it out in full, like 1500.00"
            " (format the column as Number with 2 decimal places)"
        )
    # Accounting format's zero
    if shown.replace("£", "").strip() in {"-", "\u2212"}:
        return f"amount {shown!r} is a zero in accounting format: fill in the amount, like 1234.50"
    if shown.startswith(_NEGATIVE_STARTS) or shown.endswith(("-", "\u2212")):
        return f"amount {shown} is negative: payrun only sends money; remove the row"
    return (
        f"amount {shown!r} is not a number: write it like 1234.50 (commas and a leading £ are fine)"
    )


def _bad_text(text: str, column: str, label: str, problems: Problems) -> bool:
    """Errors shared by names and references: control characters, formula starts."""
    if _CONTROL.search(text):
        problems.error(
            column, f"{label} holds a control character (a tab, line break or similar): retype it"
        )
        return True
    if text.startswith(_FORMULA_START):
        problems.error(
            column,
            f"spreadsheet damage: the {label} starts with {text[0]!r}, which spreadsheets treat"
            f" as a formula; remove the {text[0]!r}",
        )
        return True
    return False


def _warn_charset(text: str, column: str, label: str, problems: Problems) -> None:
    if not (text.isascii() and _OUTSIDE_CHARSET.search(text) is None):
        odd = "".join(sorted(set(_OUTSIDE_CHARSET.findall(text))))[:10]
        if odd:
            problems.warn(
                column,
                f"{label} has characters outside the UK payment character set ({odd!r}); some"
                " banks replace them with spaces",
            )
