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

A Bacs file cuts a name to 18 characters: a name is also the same name as a longer one
whose first 18 characters (of its normalized form: folded as above, runs of spaces as one)
have its letters, titles and order kept (``CUT``), so "JANE Q SMITHERSONS" is "Jane Q
Smithersonson Jones" as a Bacs file carries it.

Each name's forms are computed once (a cache); a name that is plain ASCII once its accents
are stripped never reaches the confusables table (whose import alone costs about 30 ms): a
short table does for ASCII what it would do.
"""

from __future__ import annotations

import re
import unicodedata
from enum import Enum
from functools import lru_cache
from typing import Any, Generic, NamedTuple, TypeVar

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


class NameForms(NamedTuple):
    """What comparisons need of one name."""

    keys: tuple[str, ...]
    """The skeleton words without titles, sorted, joined by single spaces; a second key
    when the name has a ``1`` (read as ``i``)."""
    letters: str | None
    """For a name of at most 18 characters (normalized), which may be a longer name cut: its
    skeleton words in its order, titles kept, joined with no space."""
    cut_letters: str | None
    """For a longer name: ``letters`` of its first 18 characters, as a Bacs file keeps it."""


@lru_cache(maxsize=_CACHED_NAMES)
def name_forms(name: str) -> NameForms:
    """The name's keys and the forms the 18-character rule compares (cached)."""
    folded = " ".join((name.lower() if name.isascii() else _folded(name)).split())
    # Accents stripped, many a name is plain ASCII: the skeleton's shortcut then applies
    plain = folded.isascii()
    # Letters and spaces only (most names): nothing to map or split on
    simple = plain and folded.replace(" ", "").isalpha()
    words = folded.split() if simple else _skeleton_words(folded, plain=plain)
    keys: tuple[str, ...] = (_key(words, name),)
    if not simple and ("1" in folded or "|" in folded):
        # TR39 takes 1 for l, and (in capitals) for I: after case folding, for i too
        other = _key(_skeleton_words(folded.translate(_ONE_AS_I), plain=plain), name)
        keys = keys if other == keys[0] else (*keys, other)
    if len(folded) <= BACS_NAME_LENGTH:
        return NameForms(keys=keys, letters="".join(words), cut_letters=None)
    start = folded[:BACS_NAME_LENGTH]
    cut = start.split() if simple else _skeleton_words(start, plain=plain)
    return NameForms(keys=keys, letters=None, cut_letters="".join(cut))


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
    """True when ``short`` is ``full`` cut to 18 characters."""
    return short.letters is not None and short.letters == full.cut_letters


def _key(words: list[str], name: str) -> str:
    """The words without titles (unless that leaves none), sorted, joined by single spaces."""
    kept = [word for word in words if word not in NAME_TITLES] or words
    return " ".join(sorted(kept)) or " ".join(name.casefold().split())


def _folded(name: str) -> str:
    """Without format characters, in NFKC, case-folded, without accents."""
    # Format characters do not print (nor does anything else but letters, marks, numbers,
    # punctuation, symbols and the space)
    visible = (
        name
        if name.isprintable()
        else "".join(ch for ch in name if unicodedata.category(ch) != "Cf")
    )
    return _without_accents(unicodedata.normalize("NFKC", visible).casefold())


def _skeleton_words(folded: str, *, plain: bool) -> list[str]:
    """The words of a folded name, each a TR39 skeleton: what look-alike spellings share."""
    text = folded.translate(_ASCII_SKELETON) if plain else _unicode_skeleton(folded)
    return _NOT_ALNUM.sub(" ", text.translate(_APOSTROPHES)).split()


def _unicode_skeleton(folded: str) -> str:
    """The TR39 skeleton of a folded name, without accents."""
    from disarm import skeleton_key  # noqa: PLC0415 - ~30 ms, only for non-ASCII names

    skeleton = skeleton_key(folded, digit_policy="tr39")
    return skeleton if skeleton.isascii() else _without_accents(skeleton)


def _without_accents(text: str) -> str:
    """The text without combining marks (accents), composed again."""
    decomposed = unicodedata.normalize("NFD", text)
    bare = "".join(ch for ch in decomposed if unicodedata.category(ch) not in _MARKS)
    return unicodedata.normalize("NFC", bare)


class NameIndex(Generic[_T]):
    """Items filed by name, found by any name that is the same name (``name_match``)."""

    __slots__ = ("_by_cut", "_by_key", "_by_letters")

    def __init__(self) -> None:
        self._by_key: dict[str, list[_T]] = {}
        # Names of at most 18 characters by their letters; longer names by their cut's
        self._by_letters: dict[str, list[_T]] = {}
        self._by_cut: dict[str, list[_T]] = {}

    def add(self, name: str, item: _T) -> None:
        """File ``item`` under ``name``."""
        forms = name_forms(name)
        for key in forms.keys:
            self._by_key.setdefault(key, []).append(item)
        if forms.letters is not None:
            self._by_letters.setdefault(forms.letters, []).append(item)
        if forms.cut_letters is not None:
            self._by_cut.setdefault(forms.cut_letters, []).append(item)

    def __len__(self) -> int:
        """How many keys items are filed under."""
        return len(self._by_key)

    def find(self, name: str) -> list[tuple[_T, NameMatch]]:
        """The items filed under the same name, in the order filed; then, once each, those
        filed under a name that this one is cut from or cut to (``CUT``)."""
        return self.find_forms(name_forms(name))

    def find_forms(self, forms: NameForms) -> list[tuple[_T, NameMatch]]:
        """``find``, by the name's forms."""
        keys = forms.keys
        same = self._by_key.get(keys[0], _NONE) if len(keys) == 1 else self._same(keys)
        if forms.letters is not None:
            cut = self._by_cut.get(forms.letters, _NONE) if self._by_cut else _NONE
        else:
            cut = self._by_letters.get(forms.cut_letters or "", _NONE)
        if not cut:
            return [(item, NameMatch.SAME) for item in same] if same else []
        taken = {id(item) for item in same}
        found = [(item, NameMatch.SAME) for item in same]
        found.extend((item, NameMatch.CUT) for item in cut if id(item) not in taken)
        return found

    def _same(self, keys: tuple[str, ...]) -> list[_T]:
        """Items filed under one of several keys, once each."""
        items = {id(item): item for key in keys for item in self._by_key.get(key, ())}
        return list(items.values())


_NONE: list[Any] = []
"""No items (never changed)."""
