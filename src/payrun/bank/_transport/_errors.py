"""What a transport raises when an exchange fails without an answer: ``NotSent`` or ``MaybeSent``.

Each transport maps its own library's exceptions to these two at its boundary (as httpx's
``map_httpcore_exceptions`` does), so ``BankClient`` decides what to retry and what to
reconcile without reading any HTTP library's exception types or error text. Neither
reaches a user: ``BankClient`` turns ``NotSent`` into ``BankUnavailableError`` and
``MaybeSent`` into ``OutcomeUnknownError``, naming the request and masking secrets.
"""

from __future__ import annotations

from typing import Literal

from payrun.errors import BankError

__all__ = ["MaybeSent", "NotSent", "NotSentReason"]

NotSentReason = Literal["connect", "no-such-host", "tls"]
"""Why nothing was sent: the connection failed, the host name did not resolve, or the TLS
handshake failed (a certificate, or no TLS server at that port)."""


class NotSent(BankError):
    """No byte of the request reached the bank (connect refused or timed out, no pooled
    connection in time): safe to send again.

    ``kind`` names what failed in a few words; the message is the library's own text.
    """

    def __init__(self, message: str, *, kind: str, reason: NotSentReason = "connect") -> None:
        super().__init__(message)
        self.kind = kind
        self.reason: NotSentReason = reason


class MaybeSent(BankError):
    """The request may have reached the bank, and no answer came: it may have taken effect.

    ``late``: the wait for the answer ran out; otherwise the connection failed (a reset, a
    hang-up). Either way the bank may still be working on it.
    """

    def __init__(self, message: str, *, kind: str, late: bool) -> None:
        super().__init__(message)
        self.kind = kind
        self.late = late
