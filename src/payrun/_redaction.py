"""What payrun says passes here first: no configured secret and no key material leaves.

Input: a message about to be shown (an error line, a warning, a log line). Output: the
message with every configured secret (``config.configured_secrets``: the API key, the
signing key's lines, the ledger URL's passwords), as written or escaped, replaced by
``***``; a private key's PEM block, and a quoted text that looks like a key line (one long
token of letters, digits and key punctuation, mixed case and digits), replaced by a note.
A file's text is quoted only through ``excerpt`` (short, escaped, never a key, whatever
its case); a file whose first line is one long token is a key file (``looks_like_a_key_file_line``).
A secret reaches a message by paths no one foresaw (a key file given as the batch, a key
pasted as an option's value): this is where it is stopped, whatever the path.
"""

from __future__ import annotations

import re

__all__ = [
    "KEY_NOT_SHOWN",
    "excerpt",
    "looks_like_a_key",
    "looks_like_a_key_file_line",
    "redact",
    "shown_as_a_key",
]

KEY_NOT_SHOWN = "(a text that looks like a key, not shown)"
"""What a message shows in place of a key line."""

_MASK = "***"
_PRIVATE_PEM = re.compile(
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?:.*?-----END [A-Z0-9 ]*PRIVATE KEY-----)?",
    re.DOTALL,
)
_KEY_MIN_LENGTH = 32
"""The shortest token taken for a key line: bank ids (22 characters) and words are shorter."""
_KEY_TOKEN = re.compile(rf"[A-Za-z0-9_+/=-]{{{_KEY_MIN_LENGTH},}}")
_TOKEN_MIN_LENGTH = 20
"""The shortest first line taken for a key file's: a key is one token, whatever its case."""
_ONE_TOKEN = re.compile(rf"[A-Za-z0-9_+/=.:~-]{{{_TOKEN_MIN_LENGTH},}}")
"""One token of key characters (hex, base64, base32, ``sk_live_...``, a JWT): no spaces,
no CSV separators."""
_QUOTED = re.compile(rf"'([^'\\]{{{_KEY_MIN_LENGTH},}})'|\"([^\"\\]{{{_KEY_MIN_LENGTH},}})\"")


def looks_like_a_key(text: str) -> bool:
    """True when ``text`` is one long token of letters, digits and ``_+/=-`` holding upper
    and lower case letters and digits: an API key, a token, a line of a PEM key."""
    token = text.strip()
    return (
        _KEY_TOKEN.fullmatch(token) is not None
        and any(c.isupper() for c in token)
        and any(c.islower() for c in token)
        and any(c.isdigit() for c in token)
    )


def looks_like_a_key_file_line(text: str) -> bool:
    """True when ``text`` (a file's first line, or its one cell) is one token of 20 or more
    key characters, whatever its case (a hex or base32 key too), or a PEM header."""
    token = text.strip()
    return _ONE_TOKEN.fullmatch(token) is not None or token.startswith("-----BEGIN")


def shown_as_a_key(text: str) -> bool:
    """True when a file's text is never quoted: it looks like a key line (mixed case and
    digits, ``looks_like_a_key``), or is one token of 20 or more key characters holding a
    digit (a hex or one-case key; a long column name holds none)."""
    token = text.strip()
    return looks_like_a_key(token) or (
        _ONE_TOKEN.fullmatch(token) is not None and any(c.isdigit() for c in token)
    )


def excerpt(text: str, limit: int) -> str:
    """A file's text as a message may quote it: its first ``limit`` characters, quoted and
    escaped (``repr``), or ``KEY_NOT_SHOWN`` when ``shown_as_a_key``."""
    if shown_as_a_key(text):
        return KEY_NOT_SHOWN
    return repr(text[:limit])


def redact(message: str) -> str:
    """``message`` with configured secrets, private key blocks and quoted key lines hidden."""
    # Imported here: the CLI's first lines (before Ctrl-C is handled) stay short
    from payrun.config import configured_secrets

    for secret in configured_secrets():
        for form in {secret, secret.encode("unicode_escape").decode(), repr(secret)[1:-1]}:
            message = message.replace(form, _MASK)
    message = _PRIVATE_PEM.sub("(a private key, not shown)", message)
    return _QUOTED.sub(_quoted_key, message)


def _quoted_key(found: re.Match[str]) -> str:
    """A quoted text, or the note in its place when it looks like a key line."""
    text = found.group(1) or found.group(2)
    return KEY_NOT_SHOWN if looks_like_a_key(text) else found.group(0)
