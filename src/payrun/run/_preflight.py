"""Preflight: everything checked with the bank before the first payment is created.

Input: the run's ``RowBook``, a ``BankClient`` and the organization. Output: rows bound to
their bank account and payee, and rows that must not be paid moved to ``failed`` (bad
account, balance short, deactivated payee) or ``held`` (Confirmation of Payee said no,
or a possible repeat of a payment made outside this ledger). In a dry run nothing is
created at the bank: payees that would be created are only counted, and a plan's dry run
(``planning``) asks Confirmation of Payee about them (a CoP request creates nothing),
holding the rows a run would hold and keeping each answer (``payee_checks``). A run of a
plan creates those payees with the plan's CoP request (``planned_cop``), asking no more.

The reads go out together: every account lookup at once (``check_accounts``), then every
account's restrictions, its owner's payees and its recent payments at once
(``read_accounts``; the pages of one list in sequence), so that the chain of requests
before the first payment is as short as the bank allows; an account need not wait for the
last page of a long payee list to pay rows whose payee is already read (``take_early``).
When reads fail, the error raised is the first in a fixed order (the accounts in the
order of ``plans``; for each, its lookup, then restrictions, payees and payments),
whichever answer came first.
"""

from __future__ import annotations

from collections import ChainMap, defaultdict
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from functools import partial
from typing import TYPE_CHECKING, NamedTuple, Protocol, TypeVar

import anyio

from payrun._models import LedgerRow, PayeeCheck, RowStatus, RowUpdate, format_money
from payrun.errors import (
    AuthError,
    BankError,
    BankUnavailableError,
    OutcomeUnknownError,
    RateLimitedError,
)
from payrun.run._book import RowBook
from payrun.run._changed import Known, changed_details_holds
from payrun.run._matching import (
    CLOCK_SKEW,
    PayeeFacts,
    PaymentLike,
    creditor_details,
    reference_match,
    srds_by_account,
)
from payrun.run._names import NameIndex, NameMatch, name_forms, name_match
from payrun.run._payees import confirm_payee, cop_verdict, held_again_reason
from payrun.run._reconcile import fetch_recent_payments
from payrun.run._stop import StopSignal

# The bank client is imported only by runs that talk to a bank
if TYPE_CHECKING:
    from payrun.bank import BankAccount, BankClient, Organization, Payment

__all__ = [
    "AccountPlan",
    "PayeeIndex",
    "PayeeKey",
    "PayeeLike",
    "Preflight",
    "find_repeats",
]

_PAYEE_WORKERS = 20
# Of the organization's in-flight slots, the reads leave this share to payments already
# allowed to start
_READ_SHARE = 0.8
_OPEN = (RowStatus.PENDING, RowStatus.CREATING, RowStatus.CREATED, RowStatus.SUBMITTING)
_MID_CALL = (RowStatus.CREATING, RowStatus.SUBMITTING)
_REJECTED = RowStatus.REJECTED
"""A payment the approver rejected paid nothing: its details are no old detail."""
_T = TypeVar("_T")
PayeeKey = tuple[str, str, str, str]
"""A payee to create: owner legal person, name, sort code, account number."""


@dataclass(slots=True)
class AccountPlan:
    """What preflight found for one source account (printed by a dry run)."""

    source: str
    account: BankAccount | None = None
    problem: str | None = None
    payees_existing: int = 0
    payees_to_create: int = 0
    rows_by_payee: set[int] = field(default_factory=set)
    # A dry run's rows paid to changed bank details under --accept-changed-details
    changed_rows: set[int] = field(default_factory=set)


@dataclass(slots=True, eq=False)
class _Read:
    """One list read by ``read_accounts``: where it stands in the error order, its outcome."""

    order: tuple[int, int]
    work: Callable[[], Awaitable[None]]
    done: anyio.Event = field(default_factory=anyio.Event)
    error: Exception | None = None


@dataclass(slots=True, eq=False)
class _Listing:
    """An owner's payee list as it is read: the payees so far (in the bank's order), and an
    event set once more have come or the list ended (then a new one is waited on)."""

    index: PayeeIndex = field(default_factory=lambda: PayeeIndex())
    grew: anyio.Event = field(default_factory=anyio.Event)
    finished: bool = False


@dataclass(slots=True, eq=False)
class _PayeeJob:
    """One payee being checked and created, and the rows (of any account) waiting for it."""

    rows: list[int]
    done: anyio.Event = field(default_factory=anyio.Event)
    update: RowUpdate | None = None


class Preflight:
    """Runs the checks in order; each step records its verdicts in the book."""

    def __init__(
        self,
        client: BankClient,
        org: Organization,
        book: RowBook,
        *,
        confirm_payees: bool,
        accept_close_match: bool,
        allow_repeat: bool,
        accept_changed_details: bool,
        duplicate_window: timedelta,
        dry_run: bool,
        stop: StopSignal | None = None,
        planning: bool = False,
        planned_cop: Mapping[int, str] | None = None,
    ) -> None:
        self.client = client
        # Once set, no new payee is checked or created
        self.stop = stop
        self.org = org
        self.book = book
        self.confirm_payees = confirm_payees
        self.accept_close_match = accept_close_match
        self.allow_repeat = allow_repeat
        self.accept_changed_details = accept_changed_details
        self.duplicate_window = duplicate_window
        self.dry_run = dry_run
        # A plan's dry run asks CoP about new payees; a plan's run reuses its answers
        self.planning = planning
        self.planned_cop: Mapping[int, str] = planned_cop or {}
        self.payee_checks: list[PayeeCheck] = []
        self.plans: dict[str, AccountPlan] = {}
        self.accounts: dict[str, BankAccount] = {}
        self.indexes: dict[str, PayeeIndex] = {}
        self.payments: dict[str, list[Payment]] = {}
        # A dry run's reopened rows: why held or failed
        self.last_errors: dict[int, str] = {}
        # A payee create found the bank gone: create no more
        self.unreachable = False
        # Payees ``find_payees`` found to check and create, with their rows
        self.new_payees: dict[PayeeKey, list[LedgerRow]] = {}
        self._restrictions: dict[str, list[str]] = {}
        self._payee_jobs: dict[PayeeKey, _PayeeJob] = {}
        self._counted: set[PayeeKey] = set()
        self._payee_slots: anyio.CapacityLimiter | None = None
        # Each account's rows (numbers), once bound to it
        self._numbers: dict[str, list[int]] = {}
        self._details: dict[str, PayeeFacts] = {}
        self._srds: dict[tuple[str, str], set[str]] = {}
        # Rows this ledger paid on earlier runs (not this one's), filed by name when the
        # guard first has rows to judge
        self._paid_rows = [r for r in book.all() if r.payment_url and r.status != _REJECTED]
        self._paid_before: NameIndex[Known] | None = None
        # A payee to create for rows of one name (its key) and details
        self._payee_keys: dict[tuple[str, str, str, str], PayeeKey] = {}
        # Owners' payee lists while they are read (``take_early``)
        self._listings: dict[str, _Listing] = {}
        # Rows ``take_early`` judged and bound to a payee: left out of ``rows_of``
        self._taken: set[int] = set()
        # Whether an account's balance covers every row it had to pay (``take_early``)
        self._covered: dict[str, bool] = {}

    @property
    def payee_details(self) -> dict[str, PayeeFacts]:
        """Payee URL -> its account (and SRD), over every loaded index (growing with them)."""
        return self._details

    @property
    def payee_srds(self) -> dict[tuple[str, str], set[str]]:
        """The SRDs of ``payee_details``, by payee account (growing with them)."""
        return self._srds

    def _learn(self, details: Mapping[str, PayeeFacts]) -> None:
        """Add payees' details to ``payee_details`` and ``payee_srds``."""
        self._details.update(details)
        for facts in details.values():
            if facts.srd:
                self._srds.setdefault((facts.sort_code, facts.account_number), set()).add(facts.srd)

    def recall_holds(self, last_errors: Mapping[int, str | None]) -> None:
        """A dry run: keep why the reopened rows were held, to tell which would be again."""
        self.last_errors = {row: error for row, error in last_errors.items() if error}

    async def check_accounts(self) -> None:
        """Look every source account up at once; fail the unpaid rows of accounts not found
        or not open (``read_accounts`` reads the restrictions of the others)."""
        rows = self.book.in_status(*_OPEN)
        self.plans = {
            source: AccountPlan(source=source)
            for source in sorted({r.source_account for r in rows})
        }
        lookups = [
            _Read((index, 0), partial(self._check_plan, plan))
            for index, plan in enumerate(self.plans.values())
        ]
        await _all_at_once(lookups, workers=len(lookups))
        _raise_first_error(lookups)
        bind: dict[int, RowUpdate] = {}
        for row in rows:
            plan = self.plans[row.source_account]
            if plan.account is not None and row.account_url != plan.account.url:
                bind[row.row] = {"account_url": plan.account.url}
        self.book.set_each(bind)
        for account_url, bound in self.book.by_account(*_OPEN).items():
            self._numbers[account_url] = [row.row for row in bound]
        for row in self.book.in_status(RowStatus.PENDING, RowStatus.CREATED):
            problem = self.plans[row.source_account].problem
            if problem:
                self._fail(row, problem)

    async def _check_plan(self, plan: AccountPlan) -> None:
        plan.account, plan.problem = await self._resolve(plan.source)
        if plan.account is not None:
            self.accounts[plan.account.url] = plan.account

    async def _resolve(self, source: str) -> tuple[BankAccount | None, str | None]:
        try:
            if source.startswith("/"):
                account: BankAccount | None = await self.client.get_account(source)
            else:
                sort_code, _, number = source.partition(" ")
                account = await self.client.find_account(
                    self.org, sort_code=sort_code, account_number=number
                )
        except AuthError:
            raise
        except BankError as exc:
            if exc.status == 404:  # noqa: PLR2004 - HTTP not found
                return None, f"no bank account {source} in this organization; check source_account"
            raise
        if account is None:
            return None, f"no bank account {source} in this organization; check source_account"
        if account.status != "open":
            name = f"the account {account.display_name}"
            problem = f"{name} is {account.status}: only an open account can pay; ask the bank"
            return account, problem
        return account, None

    def _restriction_problem(self, account: BankAccount) -> str | None:
        """Why the restrictions read for an open account stop it paying, if they do."""
        name = f"the account {account.display_name}"
        kinds = sorted(set(self._restrictions.get(account.url, [])))
        if kinds or account.restricted:
            words = {"freeze": "frozen", "block": "blocked"}
            state = " and ".join(words.get(kind, kind) for kind in kinds) or "restricted"
            return f"{name} is {state} by the bank, so it cannot pay out; ask the bank to lift it"
        return None

    def _fail(self, row: LedgerRow, reason: str) -> None:
        prefix = "payment created but not submitted: " if row.payment_url else ""
        self.book.set(row.row, status=RowStatus.FAILED, error=prefix + reason)

    async def read_accounts(
        self,
        ready: Callable[[BankAccount], object] | None = None,
        early: Callable[[BankAccount, list[LedgerRow]], object] | None = None,
    ) -> None:
        """Read every account's restrictions, its owner's payees and its recent payments at
        once, and record what they say; ``ready(account)`` is called as each account's reads
        are done and recorded (its rows failed if it cannot pay), before the others' are.
        ``early(account, rows)`` is given, while the owner's payee list is still being read
        and the account's other reads are done, the rows ``take_early`` finds may be paid
        already.

        Lists are read in the order of ``plans`` (the pages of one list in sequence),
        holding at most ``_READ_SHARE`` of the organization's slots, so that the payments
        of an account already checked find slots free. Raises, once every read is over,
        the error of the first read that failed in that order.

        Recent payments (repeat guard and reconciliation) are read on the bank's clock: the
        window back from its now, and since rows' intents as it stamps them; an account
        that cannot pay has them read only for rows left mid-call.
        """
        clock = self.client.clock
        now = clock.now()
        groups = self.book.by_account(*_OPEN)
        reads: list[_Read] = []
        owners: dict[str, _Read] = {}
        waits: list[tuple[AccountPlan, list[_Read]]] = []
        for index, plan in enumerate(self.plans.values()):
            account = plan.account
            if account is None:
                continue
            mine: list[_Read] = []
            if plan.problem is None:
                mine.append(_Read((index, 1), partial(self._read_restrictions, account)))
            owner = owners.get(account.owner_url)
            if owner is None:
                self._listings[account.owner_url] = _Listing()
                owner = owners[account.owner_url] = _Read(
                    (index, 2), partial(self._read_payees, account.owner_url)
                )
            mine.append(owner)
            rows = groups.get(account.url, [])
            intents = [r.intent_at for r in rows if r.intent_at and r.status == RowStatus.CREATING]
            since = min(
                [now - self.duplicate_window, *(clock.to_bank(t) - CLOCK_SKEW for t in intents)]
            )
            if rows and (self.duplicate_window or intents):
                mine.append(_Read((index, 3), partial(self._read_payments, account, since)))
            reads.extend(r for r in mine if r is not owner or r.order[0] == index)
            waits.append((plan, mine))
        cap = self.client.limiter.cap
        async with anyio.create_task_group() as group:
            group.start_soon(partial(_all_at_once, reads, workers=max(1, int(cap * _READ_SHARE))))
            for plan, mine in waits:
                group.start_soon(self._account_read, plan, mine, ready, early)
        _raise_first_error(reads)

    async def _read_restrictions(self, account: BankAccount) -> None:
        found = await self.client.active_restrictions(account)
        self._restrictions[account.url] = [r.type or "restricted" for r in found]

    async def _read_payees(self, owner: str) -> None:
        listing = self._listings[owner]
        try:
            async for payee in self.client.payees(owner):
                listing.index.add(payee)
                listing.grew.set()
                listing.grew = anyio.Event()
        finally:
            listing.finished = True
            listing.grew.set()
        # Complete: now the checks may use it
        self.indexes[owner] = listing.index
        self._learn(listing.index.details)

    async def _read_payments(self, account: BankAccount, since: datetime) -> None:
        payments = await fetch_recent_payments(self.client, account, since=since)
        self.payments[account.url] = payments

    async def _account_read(
        self,
        plan: AccountPlan,
        reads: list[_Read],
        ready: Callable[[BankAccount], object] | None,
        early: Callable[[BankAccount, list[LedgerRow]], object] | None = None,
    ) -> None:
        """Once an account's reads are done: its restrictions' verdict, then ``ready``;
        before, while its owner's payees are read, ``early`` as ``take_early`` finds rows."""
        account = plan.account
        assert account is not None
        if early is not None:
            await self._before_listed(plan, reads, early)
        for read in reads:
            await read.done.wait()
        if plan.problem is None and account.url in self._restrictions:
            plan.problem = self._restriction_problem(account)
            if plan.problem is not None:
                # As if read after the rows were failed: only rows left mid-call need them
                kept = self.rows_of(account.url, *_MID_CALL)
                if not kept:
                    self.payments.pop(account.url, None)
                    for read in reads:
                        if read.order[1] == 3:  # noqa: PLR2004 - the payments read
                            read.error = None
                for row in self.rows_of(account.url, RowStatus.PENDING, RowStatus.CREATED):
                    self._fail(row, plan.problem)
        if ready is not None and not any(read.error for read in reads):
            ready(account)

    async def _before_listed(
        self,
        plan: AccountPlan,
        reads: list[_Read],
        early: Callable[[BankAccount, list[LedgerRow]], object],
    ) -> None:
        """Once the account's reads but its owner's payees are done, and until those are
        read to their end: give ``early`` the rows ``take_early`` finds each time more
        payees have come (none when a read failed or the account cannot pay)."""
        others = [read for read in reads if read.order[1] != 2]  # noqa: PLR2004 - payees
        for read in others:
            await read.done.wait()
        account = plan.account
        assert account is not None
        if any(read.error for read in others) or plan.problem is not None:
            return
        if self._restriction_problem(account) is not None:
            return
        listing = self._listings[account.owner_url]
        while not listing.finished:
            grew = listing.grew
            rows = self.take_early(account)
            if rows:
                early(account, rows)
            await grew.wait()

    def take_early(self, account: BankAccount) -> list[LedgerRow]:
        """The account's pending rows that may be paid before its owner's payee list is read
        to its end (its other reads done, nothing wrong with the account), each bound to its
        payee; the checks that run once the list is read leave them out (``rows_of``).

        Only what the rest of the list cannot change: a row with no payee yet whose payee,
        active, with the same name and details, is already in the list (the first such,
        as a lookup in the whole list finds it; no new payee is created, and the changed-
        details guard judges only rows that need one), while the account's balance covers
        every row it had to pay (later holds only lower that), and, under the repeat guard,
        every recent payment that could be a repeat names a payee already in the list or
        known (its details, then, are all the guard goes by) and none matches the row.
        """
        listing = self._listings.get(account.owner_url)
        stopped = self.stop is not None and self.stop.is_set()
        if self.dry_run or stopped or listing is None or listing.finished:
            return []
        url = account.url
        pending = self.rows_of(url, RowStatus.PENDING)
        if not (pending and self._covers(account)):
            return []
        index = listing.index
        found = {
            row.row: payee
            for row in pending
            if not row.payee_url
            and (payee := index.same(row.payee_name, row.sort_code, row.account_number))
        }
        if not found:
            return []
        if not (self.allow_repeat or not self.duplicate_window):
            details = ChainMap(index.details, self._details)
            if not self._repeats_decidable(url, details):
                return []
            rows = [row for row in pending if row.row in found]
            for number in find_repeats(
                rows,
                self.payments.get(url, []),
                known_payment_urls=self.book.known_payment_urls(),
                payee_details=details,
                srds=self._srds,
            ):
                # Held by the guard once the list is read
                del found[number]
        self._learn({payee: index.details[payee] for payee in set(found.values())})
        self.book.set_each({number: {"payee_url": payee} for number, payee in found.items()})
        self._taken.update(found)
        for _ in found:
            self._count_existing(url)
        return [self.book.get(number) for number in found]

    def _covers(self, account: BankAccount) -> bool:
        """Whether the account's available balance covers all the rows it has to pay (as
        ``check_balances`` counts them), judged the first time it is asked."""
        covered = self._covered.get(account.url)
        if covered is None:
            rows = self.rows_of(account.url, RowStatus.PENDING, RowStatus.CREATED)
            need = sum((r.amount for r in rows), Decimal(0))
            covered = self._covered[account.url] = need <= account.available_balance
        return covered

    def _repeats_decidable(self, account_url: str, details: Mapping[str, PayeeFacts]) -> bool:
        """True when every recent payment of the account that could be a repeat names a
        payee in ``details``: the repeat guard's verdicts then cannot change as more payees
        are read (a payment to a bare account is judged by the SRDs of all its payees)."""
        known = self.book.known_payment_urls()
        return all(
            payment.creditor_payee_url in details
            for payment in self.payments.get(account_url, [])
            if not (
                payment.url in known
                or payment.rejected
                or payment.latest_submission_status in _DID_NOT_PAY
            )
        )

    def rows_of(self, account_url: str, *statuses: RowStatus) -> list[LedgerRow]:
        """The account's rows now in any of ``statuses``, in row order (not those
        ``take_early`` took)."""
        wanted = set(statuses)
        numbers = self._numbers.get(account_url, ())
        rows = (self.book.get(number) for number in numbers if number not in self._taken)
        return [row for row in rows if row.status in wanted]

    def _by_account(
        self, accounts: Collection[str] | None, *statuses: RowStatus
    ) -> dict[str, list[LedgerRow]]:
        """``RowBook.by_account``, of ``accounts`` only when given."""
        if accounts is None:
            return self.book.by_account(*statuses)
        return {url: self.rows_of(url, *statuses) for url in accounts}

    def guard_repeats(self, accounts: Collection[str] | None = None) -> None:
        """Hold pending rows that match a recent payment this ledger did not make (of
        ``accounts``, URLs, or every account)."""
        if self.allow_repeat or not self.duplicate_window:
            return
        known = self.book.known_payment_urls()
        details = self.payee_details
        groups = self._by_account(accounts, RowStatus.PENDING)
        for account_url, payments in self.payments.items():
            if accounts is not None and account_url not in accounts:
                continue
            rows = groups.get(account_url, [])
            if not rows or not payments:
                continue
            for number, payment in find_repeats(
                rows,
                payments,
                known_payment_urls=known,
                payee_details=details,
                srds=self._srds,
            ).items():
                when = payment.created_at.strftime("%Y-%m-%d %H:%M")
                state = (
                    f"submitted ({payment.latest_submission_status})"
                    if payment.latest_submission_url and payment.latest_submission_status
                    else "submitted"
                    if payment.latest_submission_url
                    else "created and not submitted yet (a run of its own ledger, or an"
                    " approval in the bank's app, would still pay it)"
                )
                self.book.set(
                    number,
                    status=RowStatus.HELD,
                    error=(
                        f"possible repeat: the bank already has the same payment, made {when}"
                        f" UTC outside this ledger and {state} ({payment.url}); if it really"
                        " must be paid again, run again with --allow-repeat (a row another"
                        " ledger paid or will pay would be paid twice)"
                    ),
                )

    def guard_changed_details(self) -> None:
        """Hold pending rows whose payee name is known with other bank details (a payee of
        the owner, active or deactivated, a row this ledger paid on an earlier run, or
        another row of the batch when nothing is known of the name yet), unless
        ``accept_changed_details``. Rows are judged once their owner's payees are read, all
        of that owner's rows together (whichever account they pay from). A dry run under
        ``accept_changed_details`` notes the rows it would have held (a plan counts them)
        and holds none."""
        if self.accept_changed_details and not self.dry_run:
            return
        by_owner: dict[str, list[LedgerRow]] = defaultdict(list)
        for row in self.book.in_status(RowStatus.PENDING):
            if row.account_url not in self.accounts:
                continue
            owner = self.accounts[row.account_url].owner_url
            # Rows of an owner whose payees are not read yet are judged with its account
            index = self.indexes.get(owner)
            if index is not None and index.needs_new_payee(row):
                by_owner[owner].append(row)
        holds: dict[int, RowUpdate] = {}
        for owner, rows in by_owner.items():
            known = (self.indexes[owner].known, self._paid_index())
            for number, reason in changed_details_holds(rows, known).items():
                holds[number] = {"status": RowStatus.HELD, "error": reason}
        if self.accept_changed_details:
            self._count_changed(holds)
            return
        self.book.set_each(holds)

    def _count_changed(self, rows: Iterable[int]) -> None:
        """Note rows paid to changed bank details in their account's plan."""
        for number in rows:
            plan = self._plan_for(self.book.get(number).account_url or "")
            if plan is not None:
                plan.changed_rows.add(number)

    def _paid_index(self) -> NameIndex[Known]:
        """The rows this ledger paid on earlier runs, filed by name (once, when first asked)."""
        if self._paid_before is None:
            self._paid_before = _paid_rows(self._paid_rows)
        return self._paid_before

    def check_balances(
        self, *, created: bool = True, accounts: Collection[str] | None = None
    ) -> None:
        """Fail an account's unpaid rows when its available balance cannot cover them (of
        ``accounts``, URLs, or every account).

        ``created``: count rows whose payment exists too (False for ``--create-only``, which
        leaves them to the approver and spends nothing on them)."""
        statuses = (RowStatus.PENDING, RowStatus.CREATED) if created else (RowStatus.PENDING,)
        groups = self._by_account(accounts, *statuses)
        for account in self.accounts.values():
            if accounts is not None and account.url not in accounts:
                continue
            rows = groups.get(account.url, [])
            need = sum((r.amount for r in rows), Decimal(0))
            if rows and need > account.available_balance:
                reason = (
                    f"the available balance of {account.display_name} is"
                    f" £{account.available_balance:,.2f},"
                    f" short of the £{need:,.2f}"
                    " its rows need; fund the account, then run again"
                )
                plan = self._plan_for(account.url)
                if plan is not None:
                    plan.problem = reason
                for row in rows:
                    self._fail(row, reason)

    def _plan_for(self, account_url: str) -> AccountPlan | None:
        return next(
            (
                p
                for p in self.plans.values()
                if p.account is not None and p.account.url == account_url
            ),
            None,
        )

    def _count_existing(self, account_url: str) -> None:
        plan = self._plan_for(account_url)
        if plan is not None:
            plan.payees_existing += 1

    async def prepare_payees(self) -> None:
        """Give every pending row an active payee: reuse, or check and create one."""
        await self.create_payees(self.find_payees())

    def find_payees(
        self, accounts: Collection[str] | None = None
    ) -> dict[PayeeKey, list[LedgerRow]]:
        """Give the pending rows (of ``accounts``, URLs, or every account) the active payee
        they reuse, fail those whose payee is deactivated; return the payees to create,
        with their rows (in a dry run, those a run would check and create)."""
        groups: dict[PayeeKey, list[LedgerRow]] = defaultdict(list)
        reuse: dict[int, RowUpdate] = {}
        pending = (
            self.book.in_status(RowStatus.PENDING)
            if accounts is None
            else [row for url in accounts for row in self.rows_of(url, RowStatus.PENDING)]
        )
        for row in pending:
            if row.account_url not in self.accounts:
                continue
            index = self.indexes[self.accounts[row.account_url].owner_url]
            # Found or made before
            if row.payee_url and row.payee_url not in index.inactive:
                self._count_existing(row.account_url)
                continue
            url = index.lookup(row.payee_name, row.sort_code, row.account_number)
            if url is not None:
                reuse[row.row] = {"payee_url": url}
                self._count_existing(row.account_url)
            elif index.is_deactivated(row.payee_name, row.sort_code, row.account_number):
                self._fail(
                    row,
                    (
                        f"the payee {row.payee_name} ({row.sort_code} {row.account_number}) is"
                        " deactivated at the bank, and a deactivated payee cannot be reactivated;"
                        " confirm the details with the payee, then add them again in the bank's app"
                    ),
                )
            else:
                owner = self.accounts[row.account_url].owner_url
                groups[self._payee_key(owner, row)].append(row)
        self.book.set_each(reuse)
        if self.dry_run and self.confirm_payees and not self.planning:
            groups = self._hold_again(groups)
        for key, rows in groups.items():
            plan = self._plan_for(rows[0].account_url or "")
            # Counted once, for the first account found to need it
            if plan is not None and key not in self._counted:
                self._counted.add(key)
                plan.payees_to_create += 1
        self.new_payees.update(groups)
        return groups

    def _payee_key(self, owner: str, row: LedgerRow) -> PayeeKey:
        """The payee to create for ``row``: one for every row of the owner with the same
        name (its key: a look-alike spelling is one payee) and details, named as the first."""
        same = (owner, name_forms(row.payee_name).keys[0], row.sort_code, row.account_number)
        key = self._payee_keys.get(same)
        if key is None:
            key = self._payee_keys[same] = (
                owner,
                row.payee_name,
                row.sort_code,
                row.account_number,
            )
        return key

    async def create_payees(self, groups: Mapping[PayeeKey, list[LedgerRow]]) -> None:
        """Check and create the payees ``find_payees`` found missing (in a dry run nothing,
        in a plan's dry run only the check); rows of another account waiting for the same
        payee take its outcome too."""
        if self.dry_run:
            if self.planning and self.confirm_payees:
                await _run_pool(list(groups.items()), self._check_only)
            return
        if self._payee_slots is None:
            self._payee_slots = anyio.CapacityLimiter(_PAYEE_WORKERS)
        await _run_pool(list(groups.items()), self._payee_job)

    async def _payee_job(self, item: tuple[PayeeKey, list[LedgerRow]]) -> None:
        key, rows = item
        numbers = [r.row for r in rows]
        job = self._payee_jobs.get(key)
        if job is not None and job.done.is_set():
            assert job.update is not None
            self.book.set_many(numbers, **job.update)
            return
        if job is not None:
            # Another account's rows asked for this payee first: they share its outcome
            job.rows.extend(numbers)
            await job.done.wait()
            return
        job = self._payee_jobs[key] = _PayeeJob(numbers)
        try:
            assert self._payee_slots is not None
            planned = next((self.planned_cop[n] for n in numbers if n in self.planned_cop), None)
            async with self._payee_slots:
                job.update = await self._new_payee(key, planned)
        finally:
            if job.update is not None:
                self.book.set_many(job.rows, **job.update)
            else:
                # Nothing was decided: a later account's rows try again
                del self._payee_jobs[key]
            job.done.set()

    def _hold_again(
        self, groups: dict[PayeeKey, list[LedgerRow]]
    ) -> dict[PayeeKey, list[LedgerRow]]:
        """Dry run: hold the rows the bank's last Confirmation of Payee answer would hold
        again (a run asks about the same name), as the run would; return the other groups."""
        left: dict[PayeeKey, list[LedgerRow]] = {}
        for key, rows in groups.items():
            reasons = (
                held_again_reason(
                    self.last_errors.get(r.row), accept_close_match=self.accept_close_match
                )
                for r in rows
            )
            held = next((reason for reason in reasons if reason), None)
            if held is None:
                left[key] = rows
            else:
                self.book.set_many([r.row for r in rows], status=RowStatus.HELD, error=held)
        return left

    async def _check_only(self, item: tuple[PayeeKey, list[LedgerRow]]) -> None:
        """A plan's dry run: ask CoP about one new payee as a run would, hold its rows if
        the answer would hold them, and keep the answer (``payee_checks``)."""
        (owner, name, sort_code, number), rows = item
        numbers = [r.row for r in rows]
        try:
            cop = await confirm_payee(
                self.client,
                self.org,
                name=name,
                sort_code=sort_code,
                account_number=number,
                requester_url=owner,
            )
        except (AuthError, OutcomeUnknownError, RateLimitedError, BankUnavailableError):
            raise
        except BankError as exc:
            error = f"Confirmation of Payee could not be asked: {exc}"
            self.book.set_many(numbers, status=RowStatus.FAILED, error=error)
            return
        held = cop_verdict(cop, accept_close_match=self.accept_close_match)
        if held:
            self.book.set_many(numbers, status=RowStatus.HELD, error=held)
        self.payee_checks.append(
            PayeeCheck(
                rows=tuple(sorted(numbers)),
                payee_name=name,
                sort_code=sort_code,
                account_number=number,
                result=cop.result,
                reason=cop.reason,
                suggested_name=cop.suggested_name,
                cop_request_url=cop.url,
                held=held,
            )
        )

    async def _new_payee(self, key: PayeeKey, planned: str | None = None) -> RowUpdate | None:
        """Check and create one payee (with ``planned``, the approved plan's CoP request,
        it is not asked again); what its rows become (None: nothing was tried)."""
        owner, name, sort_code, number = key
        # Start nothing
        if self.unreachable or (self.stop is not None and self.stop.is_set()):
            return None
        try:
            cop_url = planned
            if self.confirm_payees and planned is None:
                cop = await confirm_payee(
                    self.client,
                    self.org,
                    name=name,
                    sort_code=sort_code,
                    account_number=number,
                    requester_url=owner,
                )
                held = cop_verdict(cop, accept_close_match=self.accept_close_match)
                if held:
                    return {"status": RowStatus.HELD, "error": held}
                cop_url = cop.url
            payee = await self.client.create_payee(
                owner,
                name=name,
                sort_code=sort_code,
                account_number=number,
                cop_request_url=cop_url,
            )
        except AuthError:
            raise
        except OutcomeUnknownError as exc:
            return {
                "error": (
                    f"the bank's answer to creating the payee was lost or unusable ({exc});"
                    " run the same command again (the payee is looked up first)"
                )
            }
        except (RateLimitedError, BankUnavailableError) as exc:
            # Nothing happened: later
            self.unreachable = self.unreachable or isinstance(exc, BankUnavailableError)
            return {
                "error": (
                    f"payee not created yet: the bank was busy or unreachable ({exc});"
                    " run the same command again to finish"
                )
            }
        except BankError as exc:
            return {"status": RowStatus.FAILED, "error": f"payee not created: {exc}"}
        self.indexes[owner].add(payee)
        self._learn({payee.url: self.indexes[owner].details[payee.url]})
        return {"payee_url": payee.url}


async def _all_at_once(reads: Sequence[_Read], *, workers: int) -> None:
    """Run the reads in their order, ``workers`` at a time; each keeps its error."""
    queue = list(reads)
    queue.reverse()

    async def worker() -> None:
        while queue:
            read = queue.pop()
            try:
                await read.work()
            except Exception as exc:  # noqa: BLE001 - raised in order by _raise_first_error
                read.error = exc
            finally:
                read.done.set()

    async with anyio.create_task_group() as group:
        for _ in range(min(workers, len(queue))):
            group.start_soon(worker)


def _raise_first_error(reads: Iterable[_Read]) -> None:
    """Raise the error of the first read, in their fixed order, that failed."""
    failed = [read for read in reads if read.error is not None]
    if failed:
        first = min(failed, key=lambda read: read.order)
        assert first.error is not None
        raise first.error


async def _run_pool(items: Iterable[_T], work: Callable[[_T], Awaitable[None]]) -> None:
    """Run ``work`` over ``items`` with a bounded pool of long-lived workers."""
    queue = list(items)
    queue.reverse()

    async def worker() -> None:
        while queue:
            await work(queue.pop())

    async with anyio.create_task_group() as group:
        for _ in range(min(_PAYEE_WORKERS, len(queue))):
            group.start_soon(worker)


_DID_NOT_PAY = frozenset({"failed", "returned"})


class PayeeLike(Protocol):
    """What preflight reads of a bank payee."""

    @property
    def url(self) -> str: ...
    @property
    def account_holder(self) -> str: ...
    @property
    def sort_code(self) -> str: ...
    @property
    def account_number(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def srd(self) -> str | None: ...


class _Listed(NamedTuple):
    """One payee of a ``PayeeIndex``, filed by its details."""

    name: str
    url: str
    active: bool


@dataclass(slots=True)
class PayeeIndex:
    """The payees of one legal person, looked up by name, sort code and account number; a
    name matches its look-alikes and, as a Bacs file cuts it, its first 18 characters
    (``name_match``)."""

    by_details: dict[tuple[str, str], list[_Listed]] = field(default_factory=dict)
    """Sort code and account number -> the payees with them, in the bank's order."""
    known: NameIndex[Known] = field(default_factory=NameIndex)
    """Every payee's name and details, active or deactivated (the changed-details guard's
    old details)."""
    details: dict[str, PayeeFacts] = field(default_factory=dict)
    inactive: set[str] = field(default_factory=set)
    """URLs of payees that cannot be paid (deactivated)."""

    @classmethod
    def build(cls, payees: Iterable[PayeeLike]) -> PayeeIndex:
        """Index payees; the first active payee with given details wins."""
        index = cls()
        for payee in payees:
            index.add(payee)
        return index

    def add(self, payee: PayeeLike) -> None:
        """Add one payee (for example one just created)."""
        active = payee.status == "active"
        details = (payee.sort_code, payee.account_number)
        self.details[payee.url] = PayeeFacts(payee.sort_code, payee.account_number, payee.srd)
        listed = _Listed(payee.account_holder, payee.url, active)
        self.by_details.setdefault(details, []).append(listed)
        self.known.add(payee.account_holder, Known(payee.account_holder, *details, active=active))
        if not active:
            self.inactive.add(payee.url)

    def needs_new_payee(self, row: LedgerRow) -> bool:
        """True when no payee can pay ``row`` yet: none found or made for it before, none
        active with its name and details, and none deactivated with them (it fails)."""
        if row.payee_url and row.payee_url not in self.inactive:
            return False
        details = (row.payee_name, row.sort_code, row.account_number)
        return self.lookup(*details) is None and not self.is_deactivated(*details)

    def same(self, name: str, sort_code: str, account_number: str) -> str | None:
        """The URL of the first active payee with these details and the same name (not one
        it is cut from or cut to), or None: what ``lookup`` finds when there is one."""
        for listed in self.by_details.get((sort_code, account_number), ()):
            if listed.active and name_match(name, listed.name) is NameMatch.SAME:
                return listed.url
        return None

    def lookup(self, name: str, sort_code: str, account_number: str) -> str | None:
        """The URL of an active payee with these details and the same name, or None (a
        payee of the same key before one whose name this one is cut from or cut to)."""
        return self._find(name, (sort_code, account_number), active=True)

    def is_deactivated(self, name: str, sort_code: str, account_number: str) -> bool:
        """True when only a deactivated payee has these details and the same name."""
        details = (sort_code, account_number)
        return (
            self._find(name, details, active=False) is not None
            and self._find(name, details, active=True) is None
        )

    def _find(self, name: str, details: tuple[str, str], *, active: bool) -> str | None:
        """The first payee (``active`` or not) with the details and the same name, else the
        first with a name this one is cut from or cut to, else None."""
        cut: str | None = None
        for listed in self.by_details.get(details, ()):
            if listed.active is not active:
                continue
            match = name_match(name, listed.name)
            if match is NameMatch.SAME:
                return listed.url
            if match is NameMatch.CUT and cut is None:
                cut = listed.url
        return cut


def _paid_rows(rows: Iterable[LedgerRow]) -> NameIndex[Known]:
    """Rows an earlier run paid, by name."""
    index: NameIndex[Known] = NameIndex()
    for row in rows:
        known = Known(row.payee_name, row.sort_code, row.account_number, payee=False, row=row.row)
        index.add(row.payee_name, known)
    return index


def find_repeats(
    rows: Sequence[LedgerRow],
    payments: Sequence[PaymentLike],
    *,
    known_payment_urls: set[str],
    payee_details: Mapping[str, PayeeFacts],
    srds: Mapping[tuple[str, str], set[str]] | None = None,
) -> dict[int, PaymentLike]:
    """Rows matching a recent payment this ledger did not make: row -> that payment.

    A payment that did not pay (rejected, or its latest submission failed or was returned)
    is no repeat.
    """
    by_key: dict[tuple[str, str, str], list[PaymentLike]] = defaultdict(list)
    for payment in payments:
        if (
            payment.url in known_payment_urls
            or payment.rejected
            or payment.latest_submission_status in _DID_NOT_PAY
        ):
            continue
        details = creditor_details(payment, payee_details)
        if details is not None:
            by_key[(*details, format_money(payment.amount))].append(payment)
    repeats: dict[int, PaymentLike] = {}
    srds = srds_by_account(payee_details) if srds is None else srds
    for row in rows:
        for payment in by_key.get(
            (row.sort_code, row.account_number, format_money(row.amount)), []
        ):
            if reference_match(row.reference, payment, payee_details, srds):
                repeats[row.row] = payment
                break
    return repeats
