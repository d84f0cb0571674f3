"""When two payee names are one name: a name's comparison key, as a fraud check compares them.

A name's key is its words, each reduced to a skeleton, in any order and without titles: the
name is put in Unicode NFKC and case-folded, format characters (category Cf: zero-width
spaces and joiners, the soft hyphen) are removed, accents are stripped, look-alike letters
(Cyrillic ``а`` for Latin ``a``, full-width letters, ``0`` for ``o``) are mapped to one
skeleton (Unicode TR39's confusables, through ``disarm``), apostrophes are removed and every
other punctuation mark or hyphen is a space; the titles in ``NAME_TITLES`` are dropped, and
the words are sorted. "Mrs Jane Q Smith", "Smith, Jane Q", "Jané-Q Smith." and "Jаne Q
Smith" with a Cyrillic ``а`` all have the key of "Jane Q Smith"; "John Smith" and "Jane Q
Smithers" do not.

A Bacs file cuts a name to 18 characters: a name of 17 or 18 characters is also the same
name as a longer one that starts with the same letters, titles and order kept (``CUT``),
so "JANE Q SMITHERSONS" is "Jane Q Smithersonson Jones" as a Bacs file carries it.

Each name's forms are computed once (a cache); a plain ASCII name never reaches the
confusables table, whose import alone costs about 30 ms.
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from typing import Generic, TypeVar

__all__ = [
    "BACS_NAME_LENGTH",
    "NAME_TITLES",
    "NameForms",
    "NameIndex",
    "NameMatch",
    "name_forms",
    "name_match",
]

NAME_TITLES = frozenset(
    {"mr", "mrs", "ms", "miss", "mx", "master", "dr", "prof", "sir", "dame", "rev", "revd"}
)
"""Titles (as skeleton words) that a name's key leaves out: "Mrs Jane Q Smith" is "Jane Q Smith"."""

BACS_NAME_LENGTH = 18
"""The characters a Bacs Standard 18 record keeps of a payee's name."""

_CUT_LENGTHS = range(BACS_NAME_LENGTH - 1, BACS_NAME_LENGTH + 1)
"""Lengths of a name that may be a longer name cut to 18 characters (a cut that ended on a
space leaves 17 once the space is stripped)."""

_CACHED_NAMES = 1 << 17
_NOT_ALNUM = re.compile(r"[\W_]+")
_APOSTROPHES = str.maketrans("", "", "'`\u2018\u2019\u02bc\u02bb\u2032\u00b4")
"""Removed, not spaced: "O'Brien" is "OBrien"."""
_ASCII_SKELETON = str.maketrans({"0": "o", "1": "l", "|": "l", '"': "''"})
"""What the TR39 skeleton (``disarm.skeleton_key``, ``digit_policy="tr39"``) does to
lower-case ASCII, which is all it does to it (tests check every ASCII character)."""
_ONE_AS_I = str.maketrans({"1": "i", "|": "i"})
_MARKS = frozenset({"Mn", "Me"})

_T = TypeVar("_T")


class NameMatch(Enum):
    """How two names are one name."""

    SAME = "same"
    """Their keys are equal."""
    CUT = "cut"
    """One is the other as a Bacs file cuts it (18 characters); their keys differ."""


@dataclass(frozen=True, slots=True)
class NameForms:
    """What comparisons need of one name."""

    keys: tuple[str, ...]
    """The skeleton words without titles, sorted, joined by single spaces; a second key
    when the name has a ``1`` (read as ``i``)."""
    letters: str
    """The skeleton words in the name's order, titles kept, joined with no space."""
    may_be_cut: bool
    """17 or 18 characters: perhaps a longer name cut to 18."""
    cut_if_bacs: bool
    """Over 18 characters: a Bacs file would cut it."""


@lru_cache(maxsize=_CACHED_NAMES)
def name_forms(name: str) -> NameForms:
    """The name's keys and the forms the 18-character rule compares (cached)."""
    plain = name.isascii()
    folded = name.lower() if plain else _folded(name)
    words = _skeleton_words(folded, plain=plain)
    keys: tuple[str, ...] = (_key(words, name),)
    if "1" in folded or "|" in folded:
        # TR39 takes 1 for l, and (in capitals) for I: after case folding, for i too
        other = _key(_skeleton_words(folded.translate(_ONE_AS_I), plain=plain), name)
        keys = keys if other == keys[0] else (*keys, other)
    size = len(name.strip())
    return NameForms(
        keys=keys,
        letters="".join(words),
        may_be_cut=size in _CUT_LENGTHS,
        cut_if_bacs=size > BACS_NAME_LENGTH,
    )


def name_match(first: str, second: str) -> NameMatch | None:
    """``SAME`` when the two names share a key, ``CUT`` when one is the other cut to 18
    characters, else None."""
    if first == second:
        return NameMatch.SAME
    one, other = name_forms(first), name_forms(second)
    if any(key in other.keys for key in one.keys):
        return NameMatch.SAME
    if _cut_from(one, other) or _cut_from(other, one):
        return NameMatch.CUT
    return None


def _cut_from(short: NameForms, full: NameForms) -> bool:
    """True when ``short`` could be ``full`` cut to 18 characters."""
    return (
        short.may_be_cut
        and full.cut_if_bacs
        and len(full.letters) > len(short.letters)
        and full.letters.startswith(short.letters)
    )


def _key(words: list[str], name: str) -> str:
    """The words without titles (unless that leaves none), sorted, joined by single spaces."""
    kept = [word for word in words if word not in NAME_TITLES] or words
    return " ".join(sorted(kept)) or " ".join(name.casefold().split())


def _folded(name: str) -> str:
    """Without format characters, in NFKC, case-folded, without accents."""
    visible = "".join(ch for ch in name if unicodedata.category(ch) != "Cf")
    return _without_accents(unicodedata.normalize("NFKC", visible).casefold())


def _skeleton_words(folded: str, *, plain: bool) -> list[str]:
    """The words of a folded name, each a TR39 skeleton: what look-alike spellings share."""
    text = folded.translate(_ASCII_SKELETON) if plain else _unicode_skeleton(folded)
    return _NOT_ALNUM.sub(" ", text.translate(_APOSTROPHES)).split()


def _unicode_skeleton(folded: str) -> str:
    """The TR39 skeleton of a folded name, without accents."""
    from disarm import skeleton_key  # noqa: PLC0415 - ~30 ms, only for non-ASCII names

    return _without_accents(skeleton_key(folded, digit_policy="tr39"))


def _without_accents(text: str) -> str:
    """The text without combining marks (accents), composed again."""
    decomposed = unicodedata.normalize("NFD", text)
    bare = "".join(ch for ch in decomposed if unicodedata.category(ch) not in _MARKS)
    return unicodedata.normalize("NFC", bare)


class NameIndex(Generic[_T]):
    """Items filed by name, found by any name that is the same name (``name_match``)."""

    __slots__ = ("_by_key", "_full", "_full_sorted", "_may_be_cut")

    def __init__(self) -> None:
        self._by_key: dict[str, list[_T]] = {}
        # letters -> items, of names that may be cut; of names a Bacs file would cut
        self._may_be_cut: dict[str, list[_T]] = {}
        self._full: list[tuple[str, int, _T]] = []
        self._full_sorted = True

    def add(self, name: str, item: _T) -> None:
        """File ``item`` under ``name``."""
        forms = name_forms(name)
        for key in forms.keys:
            self._by_key.setdefault(key, []).append(item)
        if forms.may_be_cut:
            self._may_be_cut.setdefault(forms.letters, []).append(item)
        if forms.cut_if_bacs:
            self._full.append((forms.letters, len(self._full), item))
            self._full_sorted = False

    def find(self, name: str) -> list[tuple[_T, NameMatch]]:
        """The items filed under the same name, in the order filed; then, once each, those
        filed under a name that this one is cut from or cut to (``CUT``)."""
        forms = name_forms(name)
        same = self._same(forms)
        found = [(item, NameMatch.SAME) for item in same]
        if not self._may_be_cut and not self._full:
            return found
        taken = {id(item) for item in same}
        for item in [*self._full_names(forms), *self._cut_names(forms)]:
            if id(item) not in taken:
                taken.add(id(item))
                found.append((item, NameMatch.CUT))
        return found

    def _same(self, forms: NameForms) -> list[_T]:
        """Items filed under one of the name's keys, once each."""
        if len(forms.keys) == 1:
            return self._by_key.get(forms.keys[0], [])
        items = {id(item): item for key in forms.keys for item in self._by_key.get(key, ())}
        return list(items.values())

    def _full_names(self, short: NameForms) -> list[_T]:
        """Items of longer names that ``short`` may be cut from."""
        if not short.may_be_cut or not self._full:
            return []
        if not self._full_sorted:
            self._full.sort(key=lambda entry: entry[:2])
            self._full_sorted = True
        index = bisect.bisect_left(self._full, (short.letters, -1), key=lambda e: e[:2])
        items: list[_T] = []
        while index < len(self._full) and self._full[index][0].startswith(short.letters):
            letters, _, item = self._full[index]
            if len(letters) > len(short.letters):
                items.append(item)
            index += 1
        return items

    def _cut_names(self, full: NameForms) -> list[_T]:
        """Items of names of 17 or 18 characters that ``full`` may have been cut to."""
        if not full.cut_if_bacs or not self._may_be_cut:
            return []
        letters = full.letters
        return [
            item
            for size in range(1, min(len(letters), BACS_NAME_LENGTH + 1))
            for item in self._may_be_cut.get(letters[:size], ())
        ]
