"""Port to the bank's REST API: the only package that imports httpx and tenacity.

``BankClient`` sends every request through one ``AdaptiveLimiter`` (the organization's
in-flight limit) under a ``RetryPolicy``, over an ``httpx.AsyncClient`` made by
``make_http_client``; answers come back as the frozen values of ``payrun.bank.wire``,
failures as ``payrun.errors.BankError`` subclasses.
"""

from __future__ import annotations

from payrun.bank.client import PAGE_SIZE as PAGE_SIZE
from payrun.bank.client import BankClient as BankClient
from payrun.bank.clock import BankClock as BankClock
from payrun.bank.limiter import AdaptiveLimiter as AdaptiveLimiter
from payrun.bank.retry import DEFAULT_RETRY as DEFAULT_RETRY
from payrun.bank.retry import RetryPolicy as RetryPolicy
from payrun.bank.transport import DEFAULT_TRANSPORT as DEFAULT_TRANSPORT
from payrun.bank.transport import HttpClient as HttpClient
from payrun.bank.transport import TransportName as TransportName
from payrun.bank.transport import make_http_client as make_http_client
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
    "DEFAULT_TRANSPORT",
    "HttpClient",
    "PAGE_SIZE",
    "AdaptiveLimiter",
    "BankAccount",
    "BankAddress",
    "BankClient",
    "BankClock",
    "CopResult",
    "Event",
    "Organization",
    "Payee",
    "Payment",
    "Restriction",
    "RetryPolicy",
    "Submission",
    "TransportName",
    "make_http_client",
]
