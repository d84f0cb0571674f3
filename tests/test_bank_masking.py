"""``Secrets``: the API key (and later a signing key id) hidden in every spelling."""

from __future__ import annotations

import json

import pytest

from payrun.bank._masking import Secrets

KEY = 'sk_live/AbC+dEf/GhIjK=="q\\z'


def _spellings(key: str) -> list[str]:
    plain = json.dumps(key)[1:-1]
    return [
        key,
        plain,
        plain.replace("/", "\\/"),
        "".join(f"\\u{ord(c):04x}" for c in key),
        "".join(f"\\u{ord(c):04X}" for c in key),
        json.dumps(plain)[1:-1],
        "".join(f"%{ord(c):02X}" for c in key),
    ]


@pytest.mark.parametrize("spelling", _spellings(KEY))
def test_every_spelling_of_a_secret_is_masked(spelling: str) -> None:
    """Raw, JSON-escaped every way (``\\/``, ``\\"``, ``\\\\``, ``\\u00XX``), doubly
    escaped or percent-encoded: each becomes ***."""
    assert Secrets([KEY]).mask(f"echo {spelling}!") == "echo ***!"


def test_every_secret_of_the_set_is_masked_and_none_is_a_no_op() -> None:
    """Several secrets (a key and a key id) are all masked; no secrets change nothing."""
    secrets = Secrets(["key-one-123", "kid-77", None, ""])
    assert secrets.mask("key-one-123 kid-77 other") == "*** *** other"
    assert Secrets().mask("key-one-123") == "key-one-123"
    assert "key" not in repr(secrets)


def test_a_secret_outside_the_basic_plane_is_masked_as_a_surrogate_pair() -> None:
    """JSON writes a character beyond U+FFFF as two escapes; that spelling is masked too."""
    key = "k\U0001f511y-12345"
    assert Secrets([key]).mask(json.dumps(key)) == '"***"'
