"""Payee names compared as a fraud check compares them (issue 27 M2; issue 28's cut names).

Look-alike spellings of a name (Unicode tricks, punctuation, titles, word order) are the
same name; different people's names are not; a name of 17 or 18 characters is the same name
as a longer one it may be cut from, as a Bacs file cuts names.
"""

from __future__ import annotations

import string

import pytest

from payrun.run._names import (
    BACS_NAME_LENGTH,
    NAME_TITLES,
    NameIndex,
    NameMatch,
    _folded,
    _skeleton_words,
    name_forms,
    name_match,
)

JANE = "Jane Q Smith"

LOOK_ALIKES = [
    pytest.param("J\u0430n\u0435 Q Smith", id="cyrillic-a-e"),
    pytest.param("Jane\u200b Q Smith", id="zero-width-space"),
    pytest.param("Ja\u200dne Q Smith", id="zero-width-joiner"),
    pytest.param("Ja\u00adne Q Smith", id="soft-hyphen"),
    pytest.param("Jane Q Smith.", id="trailing-dot"),
    pytest.param("Jane Q Smith,", id="trailing-comma"),
    pytest.param("Mrs Jane Q Smith", id="title"),
    pytest.param("Dr. Jane Q Smith", id="title-with-dot"),
    pytest.param("Smith, Jane Q", id="surname-first"),
    pytest.param("Jan\u00e9 Q Smith", id="accent"),
    pytest.param("Jane Q Smi\u0301th", id="combining-accent"),
    pytest.param("\uff2a\uff41\uff4e\uff45 \uff31 \uff33\uff4d\uff49\uff54\uff48", id="full-width"),
    pytest.param("Jane-Q Smith", id="hyphen"),
    pytest.param("JANE  Q  SMITH", id="case-and-spaces"),
    pytest.param("Jane Q Sm\u0131th", id="dotless-i"),
    pytest.param("Jane Q Sm1th", id="digit-one-for-i"),
    pytest.param("J\u0430ne Q. Smith\u200b", id="several-at-once"),
]

DIFFERENT = [
    pytest.param("Jane Smith", "John Smith", id="other-first-name"),
    pytest.param(JANE, "Jane Q Smithers", id="longer-surname"),
    pytest.param(JANE, "Jane Smith", id="initial-missing"),
    pytest.param(JANE, "Jane Q Smyth", id="other-letter"),
    pytest.param("Jane Q Smithers", JANE, id="shorter-surname"),
    pytest.param("Jane Quentina Smithers", "Jane Quentina Smithson", id="both-long"),
    pytest.param("Ana Lee", "Anna Lee", id="doubled-letter"),
]


@pytest.mark.parametrize("spelling", LOOK_ALIKES)
def test_a_look_alike_spelling_is_the_same_name(spelling: str) -> None:
    """Every look-alike spelling of "Jane Q Smith" shares its key."""
    assert name_match(spelling, JANE) is NameMatch.SAME
    assert name_match(JANE, spelling) is NameMatch.SAME
    assert name_forms(JANE).keys[0] in name_forms(spelling).keys


@pytest.mark.parametrize(("first", "second"), DIFFERENT)
def test_different_people_are_not_the_same_name(first: str, second: str) -> None:
    """Names of different people match neither by key nor by the 18-character rule."""
    assert name_match(first, second) is None
    assert name_match(second, first) is None


@pytest.mark.parametrize(
    ("short", "full"),
    [
        pytest.param("JANE QUENTINA SMIT", "Jane Quentina Smithers", id="cut-mid-word"),
        pytest.param("JANE QUENTIN SMIT", "Jane Quentin Smit Jones", id="cut-on-a-space"),
        pytest.param("JANE QUENTINA SMIT", "Jane Quentina Smit-Hughes", id="cut-before-hyphen"),
        pytest.param("J\u0410NE QUENTINA SMIT", "Jane Quentina Smithers", id="cut-look-alike"),
    ],
)
def test_a_name_cut_to_18_characters_is_the_same_name(short: str, full: str) -> None:
    """A name that is a longer name's first 18 characters (normalized) is that name cut."""
    assert len(short) <= BACS_NAME_LENGTH < len(full)
    assert name_match(short, full) is NameMatch.CUT
    assert name_match(full, short) is NameMatch.CUT


@pytest.mark.parametrize(
    ("short", "full"),
    [
        pytest.param("JANE Q SMITH", "Jane Q Smithers", id="short-name-not-cut"),
        pytest.param("JANE QUENTINA SMYT", "Jane Quentina Smithers", id="other-letters"),
        pytest.param("JANE QUENTINA SMIT", "Jane Quentina Smit", id="full-not-longer"),
        pytest.param("QUENTINA SMIT JANE", "Jane Quentina Smithers", id="order-matters-when-cut"),
        pytest.param("Person Number 10", "Person Number 1000", id="not-an-18-character-cut"),
        pytest.param("JANE QUENTINA SMI", "Jane Quentina Smithers", id="cut-too-short"),
    ],
)
def test_what_is_not_a_cut_name(short: str, full: str) -> None:
    """Only the first 18 characters of a longer name's normalized form are its cut."""
    assert name_match(short, full) is not NameMatch.CUT


def test_titles_are_a_named_constant_and_a_name_of_titles_keeps_them() -> None:
    """The common titles are dropped; a name that is only titles is compared as it is."""
    assert {"mr", "mrs", "ms", "miss", "mx", "dr", "prof", "sir", "rev"} <= NAME_TITLES
    assert name_match("Sir Ada Lovelace", "Ada Lovelace") is NameMatch.SAME
    assert name_forms("Dr").keys == ("dr",)
    assert name_match("Dr", "Prof") is None


def test_apostrophes_are_removed_and_other_marks_are_spaces() -> None:
    """O'Brien is OBrien (a Bacs file has no apostrophe); a hyphen splits words."""
    assert name_match("Sean O'Brien", "SEAN OBRIEN") is NameMatch.SAME
    assert name_match("Sean O\u2019Brien", "Sean O'Brien") is NameMatch.SAME
    assert name_match("Mary-Ann Jones", "Ann Mary Jones") is NameMatch.SAME


@pytest.mark.parametrize("char", list(string.printable))
def test_the_ascii_shortcut_agrees_with_the_confusables_table(char: str) -> None:
    """Plain ASCII skips the TR39 table; for every ASCII character it gives what the table
    gives, in a word and alone."""
    for text in (char, f"a{char}b", f"{char}{char}"):
        plain = _skeleton_words(text.lower(), plain=True)
        assert plain == _skeleton_words(_folded(text), plain=False), repr(text)


def test_each_name_is_computed_once() -> None:
    """The forms of a name are cached: the same object each time."""
    assert name_forms("Grace Brewster Hopper") is name_forms("Grace Brewster Hopper")


def test_the_index_finds_same_names_in_order_then_cut_names_once() -> None:
    """Items of the same key come first in the order filed, then items whose names this
    one is cut from or cut to, each once."""
    index: NameIndex[str] = NameIndex()
    index.add("Jane Quentina Smithers", "full")
    index.add("JANE QUENTINA SMITHERS", "full-upper")
    index.add("JANE QUENTINA SMIT", "cut")
    index.add("John Smith", "john")
    assert index.find("Jane Quentina Smithers.") == [
        ("full", NameMatch.SAME),
        ("full-upper", NameMatch.SAME),
        ("cut", NameMatch.CUT),
    ]
    assert index.find("Jane Quentina Smit") == [
        ("cut", NameMatch.SAME),
        ("full", NameMatch.CUT),
        ("full-upper", NameMatch.CUT),
    ]
    assert index.find("Jane Quentina Smit Hughes") == [("cut", NameMatch.CUT)]
    # A Bacs file cuts the name in its own order
    assert [item for item, _ in index.find("Smithers, Jane Quentina")] == ["full", "full-upper"]
    assert index.find("Ada Lovelace") == []


def test_the_index_files_a_name_with_a_digit_under_both_readings() -> None:
    """ "1" reads as l and as i: a name with one is found by either spelling."""
    index: NameIndex[str] = NameIndex()
    index.add("Jane Q Sm1th", "one")
    assert index.find("Jane Q Smith") == [("one", NameMatch.SAME)]
    assert index.find("Jane Q Smlth") == [("one", NameMatch.SAME)]
