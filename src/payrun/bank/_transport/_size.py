"""The answer size cap: no transport reads an answer past ``MAX_ANSWER_BYTES``.

An answer that says (by its Content-Length) or turns out to be larger than the cap raises
``AnswerTooLargeError`` as soon as that is known, and the rest is never read.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from payrun.errors import BankError

__all__ = ["MAX_ANSWER_BYTES", "AnswerTooLargeError", "check_length", "read_capped"]

MAX_ANSWER_BYTES = 16 * 1024 * 1024
"""The largest answer payrun reads (a page of 200 payments is about 0.3 MB)."""


class AnswerTooLargeError(BankError):
    """The bank's answer is larger than ``MAX_ANSWER_BYTES``; the rest of it was not read."""


def check_length(content_length: int | str | None, limit: int = MAX_ANSWER_BYTES) -> None:
    """Refuse an answer whose Content-Length already says it is over ``limit``."""
    try:
        declared = int(content_length) if content_length is not None else 0
    except ValueError:
        return
    if declared > limit:
        msg = f"the bank's answer is {declared} bytes, over payrun's limit of {limit}"
        raise AnswerTooLargeError(msg)


async def read_capped(chunks: AsyncIterator[bytes], limit: int = MAX_ANSWER_BYTES) -> bytes:
    """The body from ``chunks``; stop reading and raise once it passes ``limit`` bytes."""
    parts: list[bytes] = []
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            msg = f"the bank's answer is over payrun's limit of {limit} bytes"
            raise AnswerTooLargeError(msg)
        parts.append(chunk)
    return b"".join(parts)
