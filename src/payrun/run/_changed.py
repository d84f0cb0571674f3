"""The changed-bank-details guard: a known payee name with new bank details is held.

Input: the pending rows of one payee owner that need a new payee (no active payee has the
row's name, sort code and account number), and what is known of names before them, filed
by name (``NameIndex`` of ``Known``): the owner's payees, active or deactivated, and the
rows this ledger paid on earlier runs. Output: row number -> why it is held. A row is held
when a name known before it is the same name (``name_match``: look-alike spellings,
titles, word order, a name cut to 18 characters as a Bacs file cuts it) with other
details ("I've changed banks" fraud, or two people sharing a name), or, when nothing is
known of the name yet, when another such row of the batch has the name with other details
(nothing at the bank says which is right). Reasons show only the last 4 digits of an
account number and the last 2 of a sort code. Nothing here talks to the bank.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from payrun._models import LedgerRow
from payrun.run._names import BACS_NAME_LENGTH, NameIndex, NameMatch, name_forms

__all__ = ["ACCEPT_FLAG", "Known", "changed_details_holds", "masked_details"]

ACCEPT_FLAG = "--accept-changed-details"
"""The run option that pays rows this guard would hold."""

_MAX_LISTED = 3
"""Old details a reason lists before it says how many more there are."""

_Details = tuple[str, str]
"""Sort code, account number."""

_WHAT_TO_DO = (
    " (or two different people share this name); confirm with the payee by phone, on a"
    " number you already had (not one sent with the new details), then run again with"
    f" {ACCEPT_FLAG}"
)
_CUT_NOTE = (
    f", and the names agree on their first {BACS_NAME_LENGTH} characters, all that a Bacs"
    " file keeps of a name"
)


@dataclass(frozen=True, slots=True)
class Known:
    """A name known with bank details before a row: a payee's, or a row's this ledger paid."""

    name: str
    sort_code: str
    account_number: str
    payee: bool = True
    """A payee of the owner (else a row of this ledger, ``row``)."""
    active: bool = True
    """For a payee: active (else deactivated)."""
    row: int | None = None

    @property
    def details(self) -> _Details:
        """Sort code, account number."""
        return (self.sort_code, self.account_number)


def masked_details(sort_code: str, account_number: str) -> str:
    """'..1234 at ..56': the last 4 digits of the account number, the last 2 of the sort code."""
    return f"..{account_number[-4:]} at ..{sort_code[-2:]}"


def changed_details_holds(
    rows: Sequence[LedgerRow], known: Iterable[NameIndex[Known]]
) -> dict[int, str]:
    """Row number -> hold reason, for ``rows`` (one owner's rows needing a new payee) whose
    name ``known`` (the owner's payees; rows paid before) or another row has with other
    details."""
    sources = list(known)
    batch = _batch_index(rows)
    holds: dict[int, str] = {}
    for row in rows:
        own = (row.sort_code, row.account_number)
        old = _other_details([hit for index in sources for hit in index.find(row.payee_name)], own)
        if old:
            holds[row.row] = _changed(row, old)
            continue
        others = _other_details(batch.find(row.payee_name), own)
        if others:
            holds[row.row] = _differ(row, others)
    return holds


def _batch_index(rows: Sequence[LedgerRow]) -> NameIndex[Known]:
    """The rows' names and details, each name's details once."""
    index: NameIndex[Known] = NameIndex()
    seen: set[tuple[str, str, str]] = set()
    for row in rows:
        filed = (name_forms(row.payee_name).keys[0], row.sort_code, row.account_number)
        if filed not in seen:
            seen.add(filed)
            index.add(row.payee_name, Known(row.payee_name, *filed[1:], payee=False))
    return index


def _other_details(
    found: Iterable[tuple[Known, NameMatch]], own: _Details
) -> list[tuple[Known, NameMatch]]:
    """What was found with details other than ``own``, each details once: active payees
    first, then deactivated payees, then rows (a look-alike after the same name)."""
    ranked = sorted(
        (hit for hit in found if hit[0].details != own),
        key=lambda hit: (not hit[0].payee, not hit[0].active, hit[1] is NameMatch.CUT),
    )
    kept: dict[_Details, tuple[Known, NameMatch]] = {}
    for hit in ranked:
        kept.setdefault(hit[0].details, hit)
    return list(kept.values())


def _changed(row: LedgerRow, old: Sequence[tuple[Known, NameMatch]]) -> str:
    """A payee of this name exists (or existed, or this ledger paid it) with other details."""
    was = _listed(row, old)
    payees = sum(known.payee for known, _ in old)
    count = f" ({payees} payees of this name)" if payees > 1 else ""
    now = masked_details(row.sort_code, row.account_number)
    return (
        f"bank details for {_shown(row.payee_name)} changed: was {was}{count}, now {now}"
        f"{_cut_note(old)}{_WHAT_TO_DO}"
    )


def _differ(row: LedgerRow, others: Sequence[tuple[Known, NameMatch]]) -> str:
    """No payee of this name exists, and rows of the batch give it different details."""
    now = masked_details(row.sort_code, row.account_number)
    rows = "another row has" if len(others) == 1 else f"{len(others)} other rows have"
    return (
        f"bank details for {_shown(row.payee_name)} differ within this batch and no payee of"
        f" that name exists yet: this row has {now}, {rows} {_listed(row, others)}"
        f"{_cut_note(others)}{_WHAT_TO_DO}"
    )


def _cut_note(found: Sequence[tuple[Known, NameMatch]]) -> str:
    """Why names that differ are taken for one: one is the other cut to 18 characters."""
    return _CUT_NOTE if any(match is NameMatch.CUT for _, match in found) else ""


def _listed(row: LedgerRow, found: Sequence[tuple[Known, NameMatch]]) -> str:
    """Up to three masked details, each with where it was known, joined with 'or', then how
    many more."""
    shown = " or ".join(_one(row, known) for known, _ in found[:_MAX_LISTED])
    extra = len(found) - _MAX_LISTED
    return f"{shown} or {extra} more" if extra > 0 else shown


def _one(row: LedgerRow, known: Known) -> str:
    """'..1234 at ..56', then what had them, unless an active payee or a row of the batch
    of the row's name as typed (case and spacing aside): '(deactivated payee "Jane Smith")'."""
    name = f'"{_shown(known.name)}"' if _plain(known.name) != _plain(row.payee_name) else ""
    if known.payee:
        what = "payee" if known.active else "deactivated payee"
        where = f"{what} {name}" if name or not known.active else ""
    elif known.row is not None:
        where = f"paid by this ledger for row {known.row}" + (f" to {name}" if name else "")
    else:
        where = f"as {name}" if name else ""
    details = masked_details(*known.details)
    return f"{details} ({where.strip()})" if where else details


def _plain(name: str) -> str:
    """The name ignoring case and runs of whitespace."""
    return " ".join(name.casefold().split())


def _shown(name: str) -> str:
    """The name with characters that print as nothing (a zero-width space) escaped."""
    if name.isprintable():
        return name
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode() for ch in name)
