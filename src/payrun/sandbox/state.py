"""The sandbox bank's whole in-memory state: one organization and everything it owns.

``SandboxState`` holds the records of ``_model`` in dicts keyed by id (``ba.…``, ``pm.…``)
with per-owner indexes in creation order, the Confirmation of Payee directory, the queue of
submissions waiting to settle, and ``SandboxStats`` (what ``GET /__sandbox/stats`` shows).
Build one with ``payrun.sandbox.build_state(seed)``; the app mutates it on one event loop,
so no locks are needed.
"""

from __future__ import annotations

import random
import secrets
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from payrun.sandbox._model import (
    Account,
    Admission,
    CopRequest,
    Event,
    LegalPerson,
    Payee,
    Payment,
    Product,
    Restriction,
    Submission,
    Transaction,
    format_pence,
    random_id,
    utc_now,
)

# cryptography loads only for a sandbox that checks signatures
if TYPE_CHECKING:
    from payrun.sandbox._signatures import SignatureCheck

__all__ = ["RATE_LIMIT_REASONS", "DirectoryEntry", "SandboxState", "SandboxStats"]

RATE_LIMIT_REASONS = ("org_in_flight", "account_submits", "injected")
"""Why a 429 was sent: the organization cap, the per-account submit cap, or injection."""


@dataclass(frozen=True, slots=True)
class DirectoryEntry:
    """The true holder of a UK account, as Confirmation of Payee sees it."""

    name: str
    classification: str


@dataclass(slots=True)
class SandboxStats:
    """Counters for ``/__sandbox/stats``: limits seen, 429s sent, faults injected."""

    in_flight: int = 0
    max_in_flight: int = 0
    requests: int = 0
    submits_in_flight: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    max_concurrent_submits: dict[str, int] = field(default_factory=dict)
    rate_limited: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(RATE_LIMIT_REASONS, 0)
    )
    faults_injected: dict[str, int] = field(default_factory=lambda: {"500": 0, "drop": 0})
    answered_depth: int = 0
    """The longest chain of requests, each sent after the previous one's answer, among the
    requests answered so far (a request's depth is one more than this when it arrives)."""
    longest_chain: int = 0
    first_payment_depth: int = 0
    """The depth of the first create-payment request (0: none yet)."""

    first_request_at: float = 0.0
    """When the first request arrived (``time.time()``; 0: none yet)."""
    first_payment_at: float = 0.0
    last_answer_at: float = 0.0

    def arrive(self) -> int:
        """A request arrived: its depth in the longest chain of request -> answer -> request."""
        if not self.first_request_at:
            self.first_request_at = time.time()
        depth = self.answered_depth + 1
        self.longest_chain = max(self.longest_chain, depth)
        return depth

    def payment_arrives(self, depth: int) -> None:
        """A create-payment request of ``depth`` arrived (the first one is remembered)."""
        if not self.first_payment_depth:
            self.first_payment_depth = depth
            self.first_payment_at = time.time()

    def answer(self, depth: int) -> None:
        """The request of ``depth`` is answered: requests arriving from now on follow it."""
        self.answered_depth = max(self.answered_depth, depth)
        self.last_answer_at = time.time()

    def reset(self) -> None:
        """Forget the peaks and counts (requests in flight right now stay counted)."""
        self.answered_depth = 0
        self.longest_chain = 0
        self.first_payment_depth = 0
        self.first_request_at = self.first_payment_at = self.last_answer_at = 0.0
        self.max_in_flight = self.in_flight
        self.requests = 0
        self.max_concurrent_submits = {k: v for k, v in self.submits_in_flight.items() if v}
        self.rate_limited = dict.fromkeys(RATE_LIMIT_REASONS, 0)
        self.faults_injected = {"500": 0, "drop": 0}


class SandboxState:
    """Everything the sandbox bank knows; mutated only by the app's handlers."""

    def __init__(self, *, api_key: str | None = None) -> None:
        now = utc_now()
        self._seq = 0
        self.rng = random.Random(secrets.randbits(64))
        self.api_key_secret = api_key or f"sandbox-{secrets.token_urlsafe(24)}"
        self.api_key_id = "ak.sandbox"
        self.api_key_name = "payrun-sandbox"
        self.user_id = "ur.sandbox"
        self.org_id = "og.sandbox"
        self.org_name = "Sandbox Organization"
        self.org_mode = "test-mode"
        self.signatures: SignatureCheck | None = None
        """The registered signing keys: set, every keyed request must be signed (live mode)."""
        self.own_legal_person_id = ""
        self.created_at: datetime = now
        self.legal_persons: dict[str, LegalPerson] = {}
        self.products: dict[str, Product] = {}
        self.accounts: dict[str, Account] = {}
        self.account_by_address: dict[tuple[str, str], str] = {}
        self.restrictions: dict[str, Restriction] = {}
        self.payees: dict[str, Payee] = {}
        self.cop_requests: dict[str, CopRequest] = {}
        self.payments: dict[str, Payment] = {}
        self.submissions: dict[str, Submission] = {}
        self.admissions: dict[str, Admission] = {}
        self.transactions: dict[str, Transaction] = {}
        self.events: dict[str, Event] = {}
        self.by_owner: dict[str, list[str]] = defaultdict(list)
        self.directory: dict[tuple[str, str], DirectoryEntry] = {}
        self.pending: list[tuple[float, int, str]] = []
        self.clock_offset = timedelta(0)
        """How far the bank's clock is ahead of the true time (negative: behind): every
        timestamp it makes, ``created-at`` filters and its ``Date`` header use ``now()``."""
        self.bare_payee_creditors = False
        """Show a payment to a payee with a ``uk-domestic`` creditor (no payee URL), as the
        real bank is thought to (api-facts section 3.3); the spec's ``payee`` shape when False."""
        self.stats = SandboxStats()

    def now(self) -> datetime:
        """The bank's time now: the true time plus ``clock_offset``."""
        return utc_now() + self.clock_offset

    # -- ids and ordering -------------------------------------------------------------

    def next_seq(self) -> int:
        """Return the next number of the one creation-order counter."""
        self._seq += 1
        return self._seq

    def new_id(self, prefix: str) -> str:
        """Return a fresh random id with ``prefix`` (``pm``, ``ps``, ...)."""
        return random_id(prefix, self.rng)

    def index(self, owner: str, child_id: str) -> None:
        """Record ``child_id`` under ``owner`` (e.g. ``payments:ba.x``) in creation order."""
        self.by_owner[owner].append(child_id)

    def children(self, owner: str) -> list[str]:
        """Return the ids recorded under ``owner``, oldest first."""
        return self.by_owner.get(owner, [])

    # -- derived facts ----------------------------------------------------------------

    def active_restrictions(self, account_id: str) -> list[Restriction]:
        """Return the account's restrictions that are still active."""
        found = (self.restrictions[r] for r in self.children(f"restrictions:{account_id}"))
        return [r for r in found if r.status == "active"]

    def is_restricted(self, account_id: str) -> bool:
        """Tell whether any restriction is active on the account."""
        return bool(self.active_restrictions(account_id))

    def blocks_outbound(self, account_id: str) -> bool:
        """Tell whether a freeze or a block stops payments out of the account."""
        return any(
            r.restriction_type in {"freeze", "block"} for r in self.active_restrictions(account_id)
        )

    def blocks_inbound(self, account_id: str) -> bool:
        """Tell whether a block stops payments into the account."""
        return any(r.restriction_type == "block" for r in self.active_restrictions(account_id))

    def latest_submission(self, payment: Payment) -> Submission | None:
        """Return the payment's most recent submission, if any."""
        return self.submissions[payment.submission_ids[-1]] if payment.submission_ids else None

    # -- recording --------------------------------------------------------------------

    def add_event(self, event_type: str, payload: dict[str, object]) -> Event:
        """Record an event whose payload is fixed now, as the real service does."""
        event = Event(self.new_id("ev"), event_type, payload, self.now(), self.next_seq())
        self.events[event.id] = event
        return event

    def add_directory_entry(
        self, sort_code: str, account_number: str, entry: DirectoryEntry
    ) -> None:
        """Add or replace the true holder of one UK account."""
        self.directory[(sort_code, account_number)] = entry

    def payment_groups(self) -> list[dict[str, object]]:
        """Count payments, submissions and deliveries per (account, creditor, amount, reference)."""
        groups: dict[tuple[str, str, str, int, str], list[int]] = {}
        submissions = self.submissions
        for payment in self.payments.values():
            if payment.direction != "outbound-payment":
                continue
            key = (
                payment.account_id,
                payment.creditor_sort_code,
                payment.creditor_account_number,
                payment.amount,
                payment.reference,
            )
            counts = groups.setdefault(key, [0, 0, 0])
            counts[0] += 1
            counts[1] += len(payment.submission_ids)
            counts[2] += sum(submissions[s].status == "delivered" for s in payment.submission_ids)
        return [
            {
                "account_url": f"/v0/bank/accounts/{account_id}",
                "sort_code": sort_code,
                "account_number": number,
                "amount": format_pence(amount),
                "reference": reference,
                "payments": counts[0],
                "submissions": counts[1],
                "delivered": counts[2],
            }
            for (account_id, sort_code, number, amount, reference), counts in groups.items()
        ]
