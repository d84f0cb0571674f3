"""Bounded-memory duplicate detection: 64-bit digests, never the keys themselves.

Input: a digest (any int, e.g. ``hash()`` of a key tuple) and a row number. Output: the row
that first had that digest, or 0. Up to ``_DICT_LIMIT`` keys live in a dict (one C call per
row); past that they move to flat arrays with open addressing, so a million keys cost
about 24 MB, against about 100 MB for a dict of ints and 130 MB for a set of tuples.
Two distinct keys share a digest with odds of about 1 in 30 million at a million rows;
the only effect is a false "duplicate" error, which blocks a payment, never makes one.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable

__all__ = ["DigestTable"]

_MASK64 = 0xFFFF_FFFF_FFFF_FFFF
_INITIAL_SLOTS = 1024
_GROWTH = 2
_DICT_LIMIT = 131_072
"""Keys kept in the fast dict before moving to the compact arrays (about 15 MB)."""
_ARRAY_SLOTS = 2_097_152
"""Slots the arrays start with (24 MB): room for a million keys at half load, the default
--max-rows, so a big batch never pays for growing them (each growth re-inserts every key
in Python: about 0.4 s a table on the way to a million)."""


class DigestTable:
    """An open-addressing table of 64-bit digests, each with the row that first had it.

    ``remember(digest, row)`` is the hot-loop form of ``first_row``: it returns the first
    row (``row`` itself when the digest is new) and, while the table is a dict, is the
    dict's own ``setdefault`` (no Python frame). Read the attribute at each call, since it
    changes when the table moves to the arrays, and call ``tidy`` every few thousand rows
    (``first_row`` tidies by itself).
    """

    __slots__ = ("_digests", "_mask", "_rows", "_small", "_used", "remember")

    def __init__(self) -> None:
        self._used = 0
        self._small: dict[int, int] | None = {}
        self.remember: Callable[[int, int], int] = self._small.setdefault
        self._allocate(_INITIAL_SLOTS)

    def __len__(self) -> int:
        return self._used if self._small is None else len(self._small)

    def first_row(self, digest: int, row: int) -> int:
        """Return the row that first had ``digest``; else remember ``row`` and return 0.

        Each row number must be passed at most once per table.
        """
        first = self.remember(digest, row)
        if first != row:
            return first
        self.tidy()
        return 0

    def tidy(self) -> None:
        """Move from the dict to the compact arrays once the dict holds its share of keys."""
        small = self._small
        if small is not None and len(small) > _DICT_LIMIT:
            self._small = None
            slots = _ARRAY_SLOTS
            while slots < 2 * _GROWTH * len(small):
                slots *= _GROWTH
            self._allocate(slots)
            # The dict keeps digests as given
            for digest, row in small.items():
                self._probe((digest & _MASK64) or 1, row)
            self.remember = self._array_remember()

    def _array_remember(self) -> Callable[[int, int], int]:
        """``remember`` over the current arrays (a closure: no attribute loads a row)."""
        digests, rows, mask, probe = self._digests, self._rows, self._mask, self._probe
        # Grow at half load
        full = (mask + 1) // 2

        def remember(digest: int, row: int) -> int:
            # 0 marks an empty slot
            key = (digest & _MASK64) or 1
            slot = key & mask
            found = digests[slot]
            # The usual case at half load: the first slot is free
            if found == 0:
                digests[slot] = key
                rows[slot] = row
                self._used += 1
                if self._used >= full:
                    self._grow()
                return row
            if found == key:
                return rows[slot]
            return probe(key, row) or row

        return remember

    def _probe(self, key: int, row: int) -> int:
        digests, mask = self._digests, self._mask
        slot = key & mask
        while True:
            found = digests[slot]
            if found == key:
                return self._rows[slot]
            if found == 0:
                break
            slot = (slot + 1) & mask
        digests[slot] = key
        self._rows[slot] = row
        self._used += 1
        if self._used * 2 > mask:
            self._grow()
        return 0

    def _allocate(self, slots: int) -> None:
        self._digests = array("Q", bytes(8 * slots))
        self._rows = array("I", [0]) * slots
        self._mask = slots - 1

    def _grow(self) -> None:
        old = zip(self._digests, self._rows, strict=True)
        self._allocate((self._mask + 1) * _GROWTH)
        digests, rows, mask = self._digests, self._rows, self._mask
        for key, row in old:
            if key:
                slot = key & mask
                while digests[slot]:
                    slot = (slot + 1) & mask
                digests[slot] = key
                rows[slot] = row
        self.remember = self._array_remember()
