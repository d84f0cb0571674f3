"""Execution: create and submit every planned payment, as fast as the bank's limits allow.

Input: rows to create (pending, with a payee) and rows to submit (created), a
``BankClient`` whose ``AdaptiveLimiter`` bounds requests in flight for the organization,
and the ``RowBook`` that commits each intent before its POST and each outcome after it.
Output: the rows' new states in the book, and an ``ExecutionResult`` of counts.

Scheduling (one task group, long-lived workers, no task per row):
- per source account, exactly ``per_account_submits`` submit workers, so an account never
  has more submits in flight; they take the account's slot first and the global slot
  inside the client, never holding a global slot while waiting for an account;
- a pool of create workers runs ahead in the remaining capacity, round-robin over the
  accounts, each account allowed a bounded lead of created-but-unsubmitted payments so
  creates never starve submits and memory stays bounded;
- on a stop request nothing new starts; in-flight requests finish (the caller bounds that);
- accounts may join while the engine runs (``PayingEngine.add``): the run pays an account
  as soon as its checks are done (or, held open, part of its rows before); the engine
  ends once ``seal`` says no more will come and every lane is drained.

A create or submit whose outcome is unknown stays ``creating``/``submitting`` for
``reconciliation``; it is never resent blindly. So does one whose answer is not for what
was asked: a create answer whose payment differs from the request (source account,
creditor, amount, reference) or is already another row's, a submit answer for another
payment or whose submission is another row's (a stale or replayed answer); such a payment
or submission is never recorded as the row's. A 401/403 stops the engine: it is
``ExecutionResult.fatal``, a ``RefusedMidRunError`` saying what was done once payments exist.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import islice
from typing import TYPE_CHECKING

import anyio

from payrun._models import LedgerRow, RowStatus, RowUpdate, utc_now
from payrun.config import DEFAULT_SETTLE_WAIT, RunOptions
from payrun.errors import (
    AuthError,
    BankError,
    BankRejectedError,
    BankUnavailableError,
    OutcomeUnknownError,
    PayrunError,
)
from payrun.run._book import RowBook
from payrun.run._matching import PaymentCheck
from payrun.run._refusal import refused_mid_run
from payrun.run._stop import StopSignal

# The bank client is imported only by runs that talk to a bank
if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from payrun.bank import BankClient, Payment, Submission

__all__ = ["EngineLimits", "ExecutionResult", "PayingEngine", "execute_rows"]

# The bank's answer to submitting a payment someone rejected (payment-rejected)
_GONE = 410
_PAYEE_GONE = "payee-deactivated"
_PAYEE_GONE_AFTER_CREATE = (
    "the payee was deactivated after this payment was created, so it can never be submitted:"
    " reject the payment in the bank's app, add the payee again there, and pay the row in a"
    " new file of its own"
)
_RUN_AGAIN = "once the cause is fixed, run the same command again: this row is tried again"
_NEXT_STEP = {
    "insufficient-funds": "add funds to the source account, then run the same command again:"
    " this row is tried again",
    "account-restricted": "ask the bank to lift the restriction on the source account, then run"
    " the same command again: this row is tried again",
    "bank-account-closed": "the source account is closed: pay this row from another account,"
    " in a new file of its own",
    "payment-amount-exceeds-scheme-limit": "the amount is above the payment scheme's limit:"
    " pay this row another way (a rerun would be refused again)",
    "payee-deactivated": "the payee was deactivated at the bank, and a deactivated payee"
    " cannot be reactivated: add the payee again in the bank's app, then run the same command"
    " again (it looks the payee up again)",
}
"""What to do next after the bank refused a create or submit, by the bank's code."""
# Intents committed with each one for the next rows of its queue (RowBook.intent)
_AHEAD = 32
_OUTBOUND = "outbound-payment"
# How often the engine looks at the stop flag
_WATCH_SECONDS = 0.25
# How long an outcome waits at most for the next intent's commit
_FLUSH_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class EngineLimits:
    """How hard an engine may push: submit workers per account, create workers, whether it
    only creates, and how long the bank may still carry out a request whose answer was lost
    (a timeout, a dropped connection, a gateway's 504: ``ExecutionResult.settle_at``)."""

    per_account_submits: int
    create_workers: int
    create_only: bool = False
    settle_wait: float = DEFAULT_SETTLE_WAIT

    @classmethod
    def of(cls, options: RunOptions) -> EngineLimits:
        """A run's limits, from its options."""
        return cls(
            per_account_submits=options.per_account_submits,
            create_workers=options.max_in_flight,
            create_only=options.create_only,
            settle_wait=options.settle_wait,
        )


@dataclass(slots=True)
class ExecutionResult:
    """What one execution pass did."""

    created: int = 0
    submitted: int = 0
    failed: int = 0
    unknown: int = 0
    deferred: int = 0
    unreachable: bool = False
    """A request found the bank unreachable after its retries: the pass stopped early."""
    # Anyio's clock: no earlier is the bank asked about a late answer
    settle_at: float = 0.0
    fatal: PayrunError | None = None
    answered_otherwise: set[int] = field(default_factory=set)
    """Rows whose create the bank answered with another payment than theirs: it did
    something, so reconciliation does not create them again on finding nothing."""


@dataclass(slots=True, eq=False)
class _Lane:
    """One source account: rows to create, created rows waiting for a submit worker.

    ``to_submit`` holds (row, took_credit) pairs; a submit worker with nothing to do waits
    on an event of its own in ``idle`` (a deque and events rather than a memory stream,
    whose every receive makes an extra trip through the event loop).
    """

    account_url: str
    credit: float
    to_create: deque[int] = field(default_factory=deque)
    to_submit: deque[tuple[int, bool]] = field(default_factory=deque)
    idle: deque[anyio.Event] = field(default_factory=deque)
    creating: int = 0
    queued: bool = False
    closed: bool = False
    # More rows of the account may come (``PayingEngine.add(..., more=True)``): not closed
    held: bool = False


class PayingEngine:
    """Creates and submits rows lane by lane; accounts may join while it runs."""

    def __init__(
        self,
        client: BankClient,
        book: RowBook,
        limits: EngineLimits,
        *,
        stop: StopSignal,
        check: PaymentCheck | None = None,
        accounts: int = 1,
    ) -> None:
        """``check`` is what create answers are checked against (the payees' details, which
        may grow while the engine runs; none known when None); ``accounts``: how many
        accounts are expected to join (they share the create workers)."""
        self._client = client
        self._settle_wait = limits.settle_wait
        self._book = book
        self._check = check if check is not None else PaymentCheck({})
        self._submits = limits.per_account_submits
        self._create_workers = limits.create_workers
        self._create_only = limits.create_only
        self._stop = stop
        # Each lane's lead shares the create workers among the accounts expected
        self._lead = (
            math.inf
            if limits.create_only
            else 2 * limits.per_account_submits
            + math.ceil(limits.create_workers / max(1, accounts))
        )
        self._lanes: dict[str, _Lane] = {}
        self._eligible: deque[_Lane] = deque()
        self._creates_left = 0
        # Create workers waiting for work
        self._idle: deque[anyio.Event] = deque()
        # A stop request or a fatal answer: start nothing new
        self._halted = False
        # No account joins any more: idle workers end once the lanes are drained
        self._sealed = False
        self._sealed_event = anyio.Event()
        self._group: TaskGroup | None = None
        self._create_started = 0
        self._planned: set[int] = set()
        self.result = ExecutionResult()

    @property
    def planned(self) -> set[int]:
        """The rows given to the engine so far."""
        return self._planned

    def add(
        self, to_create: list[LedgerRow], to_submit: list[LedgerRow], *, more: bool = False
    ) -> None:
        """Sort rows into per-account lanes (each account joins once, or again while held
        open: ``more`` keeps the accounts' lanes open for rows still to come, until ``add``
        without it, ``release`` or ``seal``); a running engine starts on them at once."""
        accounts = {r.account_url for r in to_create} | {r.account_url for r in to_submit}
        new: list[_Lane] = []
        for account in sorted(a for a in accounts if a):
            lane = self._lanes.get(account)
            if lane is None:
                self._lanes[account] = lane = _Lane(account_url=account, credit=self._lead)
                new.append(lane)
            else:
                # A lane's submit workers end once it is drained: only a held one takes more
                assert lane.held, f"{account} joined twice"
            lane.held = more
        for row in to_create:
            self._lanes[row.account_url or ""].to_create.append(row.row)
            self._planned.add(row.row)
            self._creates_left += 1
        for row in to_submit:
            self._planned.add(row.row)
            if not self._create_only:
                self._lanes[row.account_url or ""].to_submit.append((row.row, False))
        if self._halted:
            self._stop_all()
            return
        for lane in self._lanes.values():
            self._enqueue(lane)
            self._close_if_done(lane)
        if self._group is not None:
            self._start_workers(self._group, new)

    def release(self, account_url: str) -> None:
        """No more rows of the account will come: its lane ends once drained."""
        lane = self._lanes.get(account_url)
        if lane is not None and lane.held:
            lane.held = False
            self._close_if_done(lane)

    def seal(self) -> None:
        """No account joins any more: the engine ends once its lanes are drained."""
        self._sealed = True
        self._sealed_event.set()
        for account_url in list(self._lanes):
            self.release(account_url)
        if self._creates_left == 0:
            self._wake_all()

    def halt(self) -> None:
        """Start nothing new (the preflight failed): in-flight requests finish."""
        self._stop_all()

    def _start_workers(self, group: TaskGroup, lanes: Iterable[_Lane]) -> None:
        if not self._create_only:
            for lane in lanes:
                for _ in range(self._submits):
                    group.start_soon(self._submit_worker, lane)
        # Create workers stay while accounts may still join
        wanted = self._create_workers if not self._sealed else self._creates_left
        for _ in range(min(self._create_workers - self._create_started, wanted)):
            self._create_started += 1
            group.start_soon(self._create_worker)

    async def run(self) -> ExecutionResult:
        """Run every worker until all lanes are drained (and the engine is sealed) or a stop
        is requested."""
        try:
            # Alive: a rerun after a kill knows when requests may have left
            self._book.tick()
            async with anyio.create_task_group() as watching:
                # Until every worker has ended
                watching.start_soon(self._watch_stop)
                async with anyio.create_task_group() as group:
                    self._group = group
                    self._start_workers(group, self._lanes.values())
                    # Holds the group open until sealed, when no worker may be running yet
                    group.start_soon(self._until_sealed)
                self._group = None
                watching.cancel_scope.cancel()
        finally:
            # Intents committed ahead but never used are put back; held outcomes go now
            self._book.withdraw_unused()
            self._book.flush()
        # Say what was done: created, submitted
        if isinstance(self.result.fatal, AuthError):
            self.result.fatal = refused_mid_run(
                self.result.fatal, self._book.all(), create_only=self._create_only
            )
        return self.result

    async def _watch_stop(self) -> None:
        """Look at the stop flag and the sign of life a few times a second, and flush held
        outcomes once a second (until the workers have all ended: the last submits' outcomes
        go to disk on time too)."""
        # A signal handler sets the stop flag (it cannot set an anyio Event): look at it.
        stopped = False
        flush_at = anyio.current_time() + _FLUSH_SECONDS
        while True:
            await anyio.sleep(_WATCH_SECONDS)
            # A commit costs CPU: not more often
            if (now := anyio.current_time()) >= flush_at:
                flush_at = now + _FLUSH_SECONDS
                # An outcome waits at most this long for the next intent
                self._book.flush()
            # On time even while requests only retry or wait for answers
            self._book.alive()
            if not stopped and self._stop.is_set():
                stopped = True
                self._stop_all()

    def _enqueue(self, lane: _Lane) -> None:
        if lane.to_create and lane.credit > 0 and not lane.queued:
            lane.queued = True
            self._eligible.append(lane)
            # Wake one idle create worker, not all of them
            if self._idle:
                self._idle.popleft().set()

    async def _until_sealed(self) -> None:
        """Keep the workers' group open until no account can join any more."""
        await self._sealed_event.wait()

    async def _pick(self) -> tuple[_Lane, int] | None:
        while not self._halted and not self._stop.is_set():
            if self._eligible:
                lane = self._eligible.popleft()
                lane.queued = False
                row = lane.to_create.popleft()
                lane.credit -= 1
                lane.creating += 1
                self._creates_left -= 1
                self._enqueue(lane)
                if self._creates_left == 0 and self._sealed:
                    self._wake_all()
                return lane, row
            if self._creates_left == 0 and self._sealed:
                return None
            idle = anyio.Event()
            self._idle.append(idle)
            await idle.wait()
        return None

    async def _create_worker(self) -> None:
        while (picked := await self._pick()) is not None:
            lane, row = picked
            created = False
            try:
                created = await self._create(row, islice(lane.to_create, _AHEAD))
            finally:
                lane.creating -= 1
                if created and not self._create_only and not lane.closed:
                    lane.to_submit.append((row, True))
                    # Wake one idle submit worker of the account
                    if lane.idle:
                        lane.idle.popleft().set()
                elif not self._create_only:
                    self._release_credit(lane)
                self._close_if_done(lane)

    def _close_if_done(self, lane: _Lane) -> None:
        if not lane.to_create and lane.creating == 0 and not lane.held:
            self._close(lane)

    def _close(self, lane: _Lane) -> None:
        lane.closed = True
        # Idle submit workers drain what is queued, then end
        while lane.idle:
            lane.idle.popleft().set()

    def _release_credit(self, lane: _Lane) -> None:
        lane.credit += 1
        self._enqueue(lane)

    async def _submit_worker(self, lane: _Lane) -> None:
        while not self._halted and not self._stop.is_set():
            if lane.to_submit:
                row, took_credit = lane.to_submit.popleft()
                try:
                    await self._submit(row, (r for r, _ in islice(lane.to_submit, _AHEAD)))
                finally:
                    if took_credit:
                        self._release_credit(lane)
            elif lane.closed:
                return
            else:
                idle = anyio.Event()
                lane.idle.append(idle)
                await idle.wait()

    async def _create(self, number: int, ahead: Iterable[int]) -> bool:
        row = await self._book.intent(number, RowStatus.CREATING, ahead=ahead)
        assert row.account_url is not None and row.payee_url is not None
        sent = utc_now()
        try:
            payment = await self._client.create_payment(
                row.account_url, payee_url=row.payee_url, amount=row.amount, reference=row.reference
            )
        except BankError as exc:
            self._after_failure(number, exc, before=RowStatus.PENDING, action="create")
            return False
        foreign = self._foreign_payment(row, payment)
        if foreign is not None:
            self._not_asked_for(number, "create", f"{foreign} ({payment.url})")
            self.result.answered_otherwise.add(number)
            return False
        self._client.clock.observe_created(payment.created_at, sent=sent, received=utc_now())
        self._book.record(number, status=RowStatus.CREATED, payment_url=payment.url, error=None)
        self.result.created += 1
        return True

    async def _submit(self, number: int, ahead: Iterable[int]) -> None:
        row = await self._book.intent(number, RowStatus.SUBMITTING, ahead=ahead)
        assert row.payment_url is not None
        try:
            submission = await self._client.submit_payment(row.payment_url)
        except BankError as exc:
            self._after_failure(number, exc, before=RowStatus.CREATED, action="submit")
            return
        foreign = self._foreign_submission(row, submission)
        if foreign is not None:
            self._not_asked_for(number, "submit", f"{foreign} ({submission.url})")
            return
        self._book.record(
            number, status=RowStatus.SUBMITTED, submission_url=submission.url, error=None
        )
        self.result.submitted += 1

    def _foreign_payment(self, row: LedgerRow, payment: Payment) -> str | None:
        """Why a create answer's payment is not the one the row asked for (None: it is)."""
        holder = self._book.payment_holder(payment.url)
        if holder is not None and holder != row.row:
            return f"it names the payment already recorded for row {holder}"
        if payment.account_url is not None and payment.account_url != row.account_url:
            return "it names a payment from another account"
        if payment.direction not in ("", _OUTBOUND) or not self._check.matches(row, payment):
            return "it names a payment with another creditor, amount or reference"
        return None

    def _foreign_submission(self, row: LedgerRow, submission: Submission) -> str | None:
        """Why a submit answer is not for the row's payment (None: it is)."""
        holder = self._book.submission_holder(submission.url)
        if holder is not None and holder != row.row:
            return f"it names the submission already recorded for row {holder}"
        if submission.payment_url and submission.payment_url != row.payment_url:
            return f"it names a submission of another payment, {submission.payment_url}"
        return None

    def _not_asked_for(self, number: int, action: str, why: str) -> None:
        """An answer about something else: what the call did is unknown, so the row stays
        mid-call for reconciliation, and what the answer named is not recorded."""
        self._book.record(
            number,
            error=(
                f"the bank's answer to the {action} was not for this row's payment: {why};"
                " payrun checks with the bank what the request did before trying again, so"
                " it is never paid twice"
            ),
        )
        self.result.unknown += 1

    def _after_failure(
        self, number: int, exc: BankError, *, before: RowStatus, action: str
    ) -> None:
        """Record a failed call: refused, never processed, or outcome unknown."""
        if isinstance(exc, AuthError):
            self._book.set(number, status=before, error=str(exc))
            self.result.fatal = exc
            self._stop_all()
        elif isinstance(exc, OutcomeUnknownError):
            # It may have happened: leave the intent for reconciliation, never resend blindly.
            self._book.record(
                number,
                error=(
                    f"the bank's answer to the {action} was lost ({exc}); payrun checks with the"
                    " bank before trying again, so it is never paid twice"
                ),
            )
            self.result.unknown += 1
            # The bank may still be working on it: look only once it had time
            if exc.late:
                self.result.settle_at = anyio.current_time() + self._settle_wait
        elif isinstance(exc, BankRejectedError) and action == "submit" and exc.status == _GONE:
            self._book.record(
                number,
                status=RowStatus.REJECTED,
                error=(
                    f"the payment was rejected at the bank, so it is not paid ({exc}); if it"
                    " must still be paid, put the row in a new file of its own and pay that"
                ),
            )
            self.result.failed += 1
        elif isinstance(exc, BankRejectedError):
            prefix = "payment created but not submitted: " if action == "submit" else ""
            hint = (
                _PAYEE_GONE_AFTER_CREATE
                if action == "submit" and exc.code == _PAYEE_GONE
                else _NEXT_STEP.get(exc.code or "", _RUN_AGAIN)
            )
            error = f"{prefix}{exc}; {hint}"
            failed: RowUpdate = {"status": RowStatus.FAILED, "error": error}
            # a payee deactivated at the bank: the next run looks the payee up again
            if exc.code == _PAYEE_GONE and action == "create":
                failed["payee_url"] = None
            self._book.record(number, **failed)
            self.result.failed += 1
        else:
            # 429 or never sent, after the retry policy gave up: nothing happened
            self._book.record(
                number,
                status=before,
                error=(
                    f"{action} not sent yet: the bank was busy or unreachable ({exc});"
                    " run the same command again to finish"
                ),
            )
            self.result.deferred += 1
            # The bank is gone: start nothing new
            if isinstance(exc, BankUnavailableError):
                # (each row would wait out its own retries)
                self.result.unreachable = True
                self._stop_all()

    def _wake_all(self) -> None:
        """Wake every idle create worker (no work is left, or a stop was requested)."""
        while self._idle:
            self._idle.popleft().set()

    def _stop_all(self) -> None:
        """Start nothing new: drop queued creates, end the submit queues, wake idle workers."""
        self._halted = True
        self._sealed = True
        self._sealed_event.set()
        self._creates_left = 0
        self._eligible.clear()
        for lane in self._lanes.values():
            lane.to_create.clear()
            lane.queued = False
            self._close(lane)
        self._wake_all()


async def execute_rows(
    engine: PayingEngine, to_create: list[LedgerRow], to_submit: list[LedgerRow]
) -> ExecutionResult:
    """One pass of a new ``engine``: create ``to_create`` rows (then submit them) and submit
    ``to_submit`` rows.

    Both lists are emptied once planned (the engine works from row numbers and the book).
    """
    engine.add(to_create, to_submit)
    engine.seal()
    # The engine keeps row numbers: let the rows' old versions be freed
    to_create.clear()
    to_submit.clear()
    return await engine.run()
