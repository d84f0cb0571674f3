"""Confirmation of Payee: compare a name with the directory of true account holders.

Names are normalised before comparing: case, punctuation and spacing are ignored, ``&``
reads as ``and``, and ``Limited`` reads as ``Ltd``. Then, for a known account:

- the same normalised name: ``verified`` / ``match``; but if the classification given
  differs, ``no-match`` with the reason ``match-name-business-personal`` or
  ``match-name-personal-business`` (api-facts §6: Pay.UK treats these as not matched);
- a close name (one name's words contain all of the other's, at least two of them, or a
  ``difflib`` ratio of at least ``CLOSE_RATIO``): ``verified`` / ``close-match`` with
  ``suggested-name`` (and ``suggested-account-classification`` when it differs);
- anything else: ``verified`` / ``no-match``, reason ``no-match-name``.

An account not in the directory is ``unverified`` / ``no-match`` with no reason.
``simulate`` maps each of the 11 simulation types to a fixed answer (api-facts §6).
"""

from __future__ import annotations

import difflib
import re
from typing import Any

from payrun.sandbox.state import DirectoryEntry

__all__ = ["CLOSE_RATIO", "SIMULATION_TYPES", "confirm_payee", "normalise_name", "simulate"]

CLOSE_RATIO = 0.8
"""The ``difflib.SequenceMatcher`` ratio above which two normalised names are close."""
_MIN_SHARED_WORDS = 2
_WORDS = re.compile(r"[a-z0-9]+")
_SYNONYMS = {"limited": "ltd", "co": "company"}

SIMULATION_TYPES: dict[str, tuple[str, str, str | None]] = {
    "full-match": ("verified", "match", None),
    "match-name-business-personal": ("verified", "no-match", "match-name-business-personal"),
    "match-name-personal-business": ("verified", "no-match", "match-name-personal-business"),
    "close-match-name": ("verified", "close-match", "close-match-name"),
    "close-match-name-business-personal": (
        "verified",
        "close-match",
        "close-match-name-business-personal",
    ),
    "close-match-name-personal-business": (
        "verified",
        "close-match",
        "close-match-name-personal-business",
    ),
    "no-match-name": ("verified", "no-match", "no-match-name"),
    "no-match-secondary-ref": ("verified", "no-match", "no-match-secondary-ref"),
    "account-switched": ("verified", "no-match", "account-switched"),
    "account-not-supported": ("unverified", "no-match", "account-not-supported"),
    "account-not-found": ("unverified", "no-match", None),
}
"""Simulation type -> (status, result, reason)."""


def normalise_name(name: str) -> list[str]:
    """Split a name into comparable words: lower case, no dots or apostrophes, ``&`` = and."""
    words = _WORDS.findall(re.sub(r"['.]", "", name.casefold()).replace("&", " and "))
    return [_SYNONYMS.get(word, word) for word in words]


def _is_close(given: list[str], true: list[str]) -> bool:
    small, big = sorted((set(given), set(true)), key=len)
    if len(small) >= _MIN_SHARED_WORDS and small <= big:
        return True
    return difflib.SequenceMatcher(None, " ".join(given), " ".join(true)).ratio() >= CLOSE_RATIO


def _classification_reason(prefix: str, given: str, true: str) -> str:
    return f"{prefix}-{true}-{given}"


def confirm_payee(name: str, classification: str, entry: DirectoryEntry | None) -> dict[str, Any]:
    """Answer a CoP request for ``name`` against the true holder ``entry`` (None: unknown)."""
    if entry is None:
        return {"status": "unverified", "result": "no-match"}
    given, true = normalise_name(name), normalise_name(entry.name)
    differs = classification != entry.classification
    if given == true:
        # Pay.UK's BANM/PANM: the name matches, the account type does not
        if differs:
            reason = _classification_reason("match-name", classification, entry.classification)
            return {"status": "verified", "result": "no-match", "reason": reason}
        return {"status": "verified", "result": "match"}
    if _is_close(given, true):
        reason = (
            _classification_reason("close-match-name", classification, entry.classification)
            if differs
            else "close-match-name"
        )
        answer: dict[str, Any] = {
            "status": "verified",
            "result": "close-match",
            "reason": reason,
            "suggested-name": entry.name,
        }
        if differs:
            answer["suggested-account-classification"] = entry.classification
        return answer
    return {"status": "verified", "result": "no-match", "reason": "no-match-name"}


def simulate(kind: str, name: str, classification: str) -> dict[str, Any]:
    """Answer as the simulation type ``kind`` dictates, whatever the directory says."""
    status, result, reason = SIMULATION_TYPES[kind]
    answer: dict[str, Any] = {"status": status, "result": result}
    if reason:
        answer["reason"] = reason
    if result == "close-match":
        answer["suggested-name"] = f"{name} Ltd" if classification == "business" else f"{name} Jr"
        if kind != "close-match-name":
            other = "personal" if classification == "business" else "business"
            answer["suggested-account-classification"] = other
    return answer
