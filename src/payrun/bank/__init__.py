"""Port to the bank's REST API: the only package that imports an HTTP client and tenacity.

``BankClient`` sends every request through one ``AdaptiveLimiter`` (the organization's
in-flight limit) under a ``RetryPolicy``, over a ``Transport`` (``make_transport``: the one
HTTP stack, in ``bank._transport``); answers come back as the frozen values of
``payrun.bank.wire``, failures as ``payrun.errors.BankError`` subclasses.
"""

from __future__ import annotations

from payrun.bank._transport import Answer as Answer
from payrun.bank._transport import AttemptHook as AttemptHook
from payrun.bank._transport import MaybeSent as MaybeSent
from payrun.bank._transport import NotSent as NotSent
from payrun.bank._transport import PreparedRequest as PreparedRequest
from payrun.bank._transport import Transport as Transport
from payrun.bank._transport import make_transport as make_transport
from payrun.bank.client import PAGE_SIZE as PAGE_SIZE
from payrun.bank.client import BankClient as BankClient
from payrun.bank.clock import BankClock as BankClock
from payrun.bank.limiter import AdaptiveLimiter as AdaptiveLimiter
from payrun.bank.retry import DEFAULT_RETRY as DEFAULT_RETRY
from payrun.bank.retry import RetryPolicy as RetryPolicy
from payrun.bank.wire import BankAccount as BankAccount
from payrun.bank.wire import BankAddress as BankAddress
from payrun.bank.wire import CopResult as CopResult
from payrun.bank.wire import Event as Event
from payrun.bank.wire import Organization as Organization
from payrun.bank.wire import Payee as Payee
from payrun.bank.wire import Payment as Payment
from payrun.bank.wire import Restriction as Restriction
from payrun.bank.wire import Submission as Submission

__all__ = [
    "DEFAULT_RETRY",
    "PAGE_SIZE",
    "AdaptiveLimiter",
    "Answer",
    "AttemptHook",
    "BankAccount",
    "BankAddress",
    "BankClient",
    "BankClock",
    "CopResult",
    "Event",
    "MaybeSent",
    "NotSent",
    "Organization",
    "Payee",
    "Payment",
    "PreparedRequest",
    "Restriction",
    "RetryPolicy",
    "Submission",
    "Transport",
    "make_transport",
]
