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
from itertools import islice
from typing import NamedTuple

from payrun._models import LedgerRow
from payrun.run._names import BACS_NAME_LENGTH, NameForms, NameIndex, NameMatch, name_forms

__all__ = ["Known", "changed_details_holds", "masked_details"]

_ACCEPT_FLAG = "--accept-changed-details"
"""The run option that pays rows this guard would hold."""

_MAX_LISTED = 3
"""Old details a reason lists before it says how many more there are."""

_Details = tuple[str, str]
"""Sort code, account number."""

_WHAT_TO_DO = (
    " (or two different people share this name); confirm with the payee by phone, on a"
    " number you already had (not one sent with the new details), then run again with"
    f" {_ACCEPT_FLAG}"
)
_CUT_NOTE = (
    f", and the names agree on their first {BACS_NAME_LENGTH} characters, all that a Bacs"
    " file keeps of a name"
)


class Known(NamedTuple):
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
    sources = [index for index in known if index]
    batch = _Batch(rows)
    # What is known of each name, found once however many rows have it
    old_of: dict[str, _Seen] = {}
    batch_of: dict[str, _Seen] = {}
    holds: dict[int, str] = {}
    for row in rows:
        name = row.payee_name
        forms, own = name_forms(name), (row.sort_code, row.account_number)
        old = old_of.get(name)
        if old is None and sources:
            found = [hit for index in sources for hit in index.find_forms(forms)]
            old = old_of[name] = _Seen.of(found) if found else _NOTHING
        if old is not None and old is not _NOTHING and (others := old.other_than(own)):
            holds[row.row] = _changed(row, others)
        elif batch.may_differ(forms):
            seen = batch_of.get(name)
            if seen is None:
                seen = batch_of[name] = _Seen.of(batch.index.find_forms(forms))
            others = seen.other_than(own)
            if others is not None:
                holds[row.row] = _differ(row, others)
    return holds


class _Batch:
    """The rows' names and details, each name's details once; filed by name (``index``) only
    where another name is the same with other details, which is rare (``may_differ``)."""

    __slots__ = ("_crowded", "_linked", "index")

    def __init__(self, rows: Sequence[LedgerRow]) -> None:
        first: dict[str, _Details] = {}
        crowded: set[str] = set()
        short: set[str] = set()
        cut: set[str] = set()
        for row in rows:
            forms, details = name_forms(row.payee_name), (row.sort_code, row.account_number)
            for key in forms.keys:
                if first.setdefault(key, details) != details:
                    crowded.add(key)
            if forms.letters is not None:
                short.add(forms.letters)
            else:
                cut.add(forms.cut_letters or "")
        self._crowded = crowded
        self._linked = short & cut
        self.index: NameIndex[Known] = NameIndex()
        if crowded or self._linked:
            self._file(rows)

    def _file(self, rows: Sequence[LedgerRow]) -> None:
        """File in ``index`` each name's details once, of names that ``may_differ``."""
        filed: set[tuple[str, str, str]] = set()
        for row in rows:
            forms = name_forms(row.payee_name)
            entry = (forms.keys[0], row.sort_code, row.account_number)
            if entry not in filed and self.may_differ(forms):
                filed.add(entry)
                known = Known(row.payee_name, row.sort_code, row.account_number, payee=False)
                self.index.add(row.payee_name, known)

    def may_differ(self, forms: NameForms) -> bool:
        """True when rows of this name may have other details: some of its keys has several
        details, or it or another name is cut from the other."""
        crowded, keys = self._crowded, forms.keys
        if crowded and (keys[0] in crowded or (len(keys) > 1 and keys[1] in crowded)):
            return True
        return bool(self._linked) and (forms.letters or forms.cut_letters) in self._linked


class _Others(NamedTuple):
    """The details a name was known with, other than a row's own."""

    shown: list[Known]
    """The first ``_MAX_LISTED``, in the order a reason lists them."""
    total: int
    payees: int
    """How many are payees'."""
    cut: bool
    """Some are known under a name this one is cut from or cut to (18 characters)."""


@dataclass(frozen=True, slots=True)
class _Seen:
    """What is known of one name: each details once (the first way found), active payees
    first, then deactivated payees, then rows; the same name before a cut one."""

    hits: dict[_Details, tuple[Known, NameMatch]]
    payees: int
    cuts: int

    @classmethod
    def of(cls, ranked: list[tuple[Known, NameMatch]]) -> _Seen:
        """Rank and count what was found."""
        if not ranked:
            return _NOTHING
        if len(ranked) > 1:
            ranked.sort(key=lambda h: (not h[0].payee, not h[0].active, h[1] is NameMatch.CUT))
        hits: dict[_Details, tuple[Known, NameMatch]] = {}
        for hit in ranked:
            hits.setdefault(hit[0].details, hit)
        payees = sum(known.payee for known, _ in hits.values())
        cuts = sum(match is NameMatch.CUT for _, match in hits.values())
        return cls(hits, payees, cuts)

    def other_than(self, own: _Details) -> _Others | None:
        """The details other than ``own`` (None when there are none), in a few steps."""
        mine = self.hits.get(own)
        count = len(self.hits) - (mine is not None)
        if not count:
            return None
        others = (known for details, (known, _) in self.hits.items() if details != own)
        return _Others(
            shown=list(islice(others, _MAX_LISTED)),
            total=count,
            payees=self.payees - (mine is not None and mine[0].payee),
            cut=self.cuts - (mine is not None and mine[1] is NameMatch.CUT) > 0,
        )


_NOTHING = _Seen({}, 0, 0)
"""What is known of a name nothing is known of."""


def _changed(row: LedgerRow, old: _Others) -> str:
    """A payee of this name exists (or existed, or this ledger paid it) with other details."""
    count = f" ({old.payees} payees of this name)" if old.payees > 1 else ""
    now = masked_details(row.sort_code, row.account_number)
    return (
        f"bank details for {_shown(row.payee_name)} changed: was {_listed(row, old)}{count},"
        f" now {now}{_cut_note(old)}{_WHAT_TO_DO}"
    )


def _differ(row: LedgerRow, others: _Others) -> str:
    """No payee of this name exists, and rows of the batch give it different details."""
    now = masked_details(row.sort_code, row.account_number)
    rows = "another row has" if others.total == 1 else f"{others.total} other rows have"
    return (
        f"bank details for {_shown(row.payee_name)} differ within this batch and no payee of"
        f" that name exists yet: this row has {now}, {rows} {_listed(row, others)}"
        f"{_cut_note(others)}{_WHAT_TO_DO}"
    )


def _cut_note(others: _Others) -> str:
    """Why names that differ are taken for one: one is the other cut to 18 characters."""
    return _CUT_NOTE if others.cut else ""


def _listed(row: LedgerRow, others: _Others) -> str:
    """Up to three masked details, each with where it was known, joined with 'or', then how
    many more."""
    shown = " or ".join(_one(row, known) for known in others.shown)
    extra = others.total - len(others.shown)
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
