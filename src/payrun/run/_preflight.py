"""Preflight: everything checked with the bank before the first payment is created.

Input: the run's ``RowBook``, a ``BankClient`` and the organization. Output: rows bound to
their bank account and payee, and rows that must not be paid moved to ``failed`` (bad
account, balance short, deactivated payee) or ``held`` (Confirmation of Payee said no,
or a possible repeat of a payment made outside this ledger). In a dry run nothing is
created at the bank: payees that would be created are only counted, and a plan's dry run
(``planning``) asks Confirmation of Payee about them (a CoP request creates nothing),
holding the rows a run would hold and keeping each answer (``payee_checks``). A run of a
plan creates those payees with the plan's CoP request, asking no more. What the bank said
is kept in a ``BankView`` (``bank``); new payees are checked and created by ``NewPayees``
(``payees``).

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
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import timedelta
from decimal import Decimal
from functools import partial
from typing import TYPE_CHECKING

import anyio

from payrun._models import LedgerRow, PayeeCheck, RowStatus, RowUpdate, format_money
from payrun.errors import PayrunError
from payrun.run._at_once import Read, all_at_once, raise_first_error
from payrun.run._bankview import BankView
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
from payrun.run._names import NameIndex
from payrun.run._organization import LIVE_MODE
from payrun.run._outcome import AccountPlan
from payrun.run._payees import NewPayees, PayeeKey

# The bank client is imported only by runs that talk to a bank
if TYPE_CHECKING:
    from payrun.bank import BankAccount, BankClient, Organization, Payment
    from payrun.config import RunOptions
    from payrun.run._stop import StopSignal

__all__ = [
    "Lookup",
    "PayeeKey",
    "Preflight",
    "find_repeats",
    "look_up_accounts",
]

# Of the organization's in-flight slots, the reads leave this share to payments already
# allowed to start
_READ_SHARE = 0.8
_OPEN = (RowStatus.PENDING, RowStatus.CREATING, RowStatus.CREATED, RowStatus.SUBMITTING)
# Rows a run reopens before its checks (``reopen_unfinished``)
_REOPENED = (RowStatus.HELD, RowStatus.FAILED)
_MID_CALL = (RowStatus.CREATING, RowStatus.SUBMITTING)
_REJECTED = RowStatus.REJECTED
"""A payment the approver rejected paid nothing: its details are no old detail."""
# The places of the payees and payments reads among an account's reads (lookup 0,
# restrictions 1)
_PAYEES_READ, _PAYMENTS_READ = 2, 3
# Given an account and rows it may pay before its owner's payee list is read to its end
_Early = Callable[["BankAccount", list[LedgerRow]], object]
Lookup = tuple["BankAccount | None", "str | None"]
"""A source account looked up: the account, and why it cannot pay (``BankView.resolve``)."""


class Preflight:
    """Runs the checks in order; each step records its verdicts in the book."""

    def __init__(
        self,
        client: BankClient,
        org: Organization,
        book: RowBook,
        options: RunOptions,
        *,
        stop: StopSignal | None = None,
    ) -> None:
        self.book = book
        self.options = options
        self.bank = BankView(client, org)
        self.payees = NewPayees(book, self.bank, options, stop=stop)
        self._stop = stop
        self.plans: dict[str, AccountPlan] = {}
        self._window = timedelta(days=options.duplicate_window_days)
        # Each account's rows (numbers), once bound to it
        self._numbers: dict[str, list[int]] = {}
        # New payees counted in a plan, for the first account found to need them
        self._counted: set[PayeeKey] = set()
        # Rows this ledger paid on earlier runs (not this one's), filed by name when the
        # guard first has rows to judge
        self._paid_rows = [r for r in book.all() if r.payment_url and r.status != _REJECTED]
        self._paid_before: NameIndex[Known] | None = None
        # Rows ``take_early`` judged and bound to a payee: left out of ``rows_of``
        self._taken: set[int] = set()
        # Whether an account's balance covers every row it had to pay (``take_early``)
        self._covered: dict[str, bool] = {}
        # Source accounts already looked up (``adopt_lookups``), by source
        self._looked_up: dict[str, Lookup] = {}

    @property
    def accounts(self) -> dict[str, BankAccount]:
        """The source accounts found, by URL (``BankView.accounts``)."""
        return self.bank.accounts

    @property
    def payments(self) -> dict[str, list[Payment]]:
        """Each account's recent payments (``BankView.payments``)."""
        return self.bank.payments

    @property
    def payee_details(self) -> dict[str, PayeeFacts]:
        """Payee URL -> its account and SRD (``BankView.payee_details``)."""
        return self.bank.payee_details

    @property
    def payee_srds(self) -> dict[tuple[str, str], set[str]]:
        """The SRDs of ``payee_details``, by payee account (``BankView.payee_srds``)."""
        return self.bank.payee_srds

    @property
    def payee_checks(self) -> list[PayeeCheck]:
        """A plan's dry run: the CoP answers about new payees (``NewPayees.checks``)."""
        return self.payees.checks

    @property
    def new_payees(self) -> dict[PayeeKey, list[LedgerRow]]:
        """Payees ``find_payees`` found to check and create, with their rows."""
        return self.payees.found

    def recall_holds(self, last_errors: Mapping[int, str | None]) -> None:
        """A dry run: keep why the reopened rows were held, to tell which would be again."""
        self.payees.recall_holds(last_errors)

    async def check_accounts(self) -> None:
        """Look every source account up at once; fail the unpaid rows of accounts not found
        or not open (``read_accounts`` reads the restrictions of the others)."""
        rows = self.book.in_status(*_OPEN)
        self.plans = {
            source: AccountPlan(source=source)
            for source in sorted({r.source_account for r in rows})
        }
        lookups = [
            Read((index, 0), partial(self._check_plan, plan))
            for index, plan in enumerate(self.plans.values())
        ]
        await all_at_once(lookups, workers=len(lookups))
        raise_first_error(lookups)
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

    def adopt_lookups(self, found: Mapping[str, Lookup]) -> None:
        """Source accounts ``look_up_accounts`` looked up for this organization:
        ``check_accounts`` takes these answers instead of asking again."""
        self._looked_up.update(found)

    async def _check_plan(self, plan: AccountPlan) -> None:
        found = self._looked_up.pop(plan.source, None)
        if found is None:
            found = await self.bank.resolve(plan.source)
        elif found[0] is not None:
            # Recorded as ``resolve`` records what it finds
            self.bank.accounts[found[0].url] = found[0]
        plan.account, plan.problem = found

    def _fail(self, row: LedgerRow, reason: str) -> None:
        prefix = "payment created but not submitted: " if row.payment_url else ""
        self.book.set(row.row, status=RowStatus.FAILED, error=prefix + reason)

    async def read_accounts(
        self, ready: Callable[[BankAccount], object] | None = None, early: _Early | None = None
    ) -> None:
        """Read every account's restrictions, its owner's payees and its recent payments at
        once, and record what they say; ``ready(account)`` is called as each account's reads
        are done and recorded (its rows failed if it cannot pay), before the others' are.
        ``early(account, rows)`` is given, while the owner's payee list is still read and
        the account's other reads are done, the rows ``take_early`` finds may be paid
        already.

        Lists are read in the order of ``plans`` (the pages of one list in sequence),
        holding at most ``_READ_SHARE`` of the organization's slots, so that the payments
        of an account already checked find slots free. Raises, once every read is over,
        the error of the first read that failed in that order.

        Recent payments (repeat guard and reconciliation) are read on the bank's clock: the
        window back from its now, and since rows' intents as it stamps them; an account
        that cannot pay has them read only for rows left mid-call.
        """
        bank = self.bank
        clock = bank.client.clock
        now = clock.now()
        groups = self.book.by_account(*_OPEN)
        reads: list[Read] = []
        owners: dict[str, Read] = {}
        waits: list[tuple[AccountPlan, list[Read]]] = []
        for index, plan in enumerate(self.plans.values()):
            account = plan.account
            if account is None:
                continue
            mine: list[Read] = []
            if plan.problem is None:
                mine.append(Read((index, 1), partial(bank.read_restrictions, account)))
            owner = owners.get(account.owner_url)
            if owner is None:
                bank.listing(account.owner_url)
                owner = owners[account.owner_url] = Read(
                    (index, _PAYEES_READ), partial(bank.read_payees, account.owner_url)
                )
            mine.append(owner)
            rows = groups.get(account.url, [])
            intents = [r.intent_at for r in rows if r.intent_at and r.status == RowStatus.CREATING]
            since = min([now - self._window, *(clock.to_bank(t) - CLOCK_SKEW for t in intents)])
            if rows and (self._window or intents):
                mine.append(
                    Read((index, _PAYMENTS_READ), partial(bank.read_payments, account, since))
                )
            reads.extend(r for r in mine if r is not owner or r.order[0] == index)
            waits.append((plan, mine))
        cap = bank.client.limiter.cap
        async with anyio.create_task_group() as group:
            group.start_soon(partial(all_at_once, reads, workers=max(1, int(cap * _READ_SHARE))))
            for plan, mine in waits:
                group.start_soon(self._account_read, plan, mine, ready, early)
        raise_first_error(reads)

    async def _account_read(
        self,
        plan: AccountPlan,
        reads: list[Read],
        ready: Callable[[BankAccount], object] | None,
        early: _Early | None = None,
    ) -> None:
        """Once an account's reads are done: its restrictions' verdict, then ``ready``;
        before, while its owner's payees are read, ``early`` as ``take_early`` finds rows."""
        account = plan.account
        assert account is not None
        if early is not None:
            await self._before_listed(plan, reads, early)
        for read in reads:
            await read.done.wait()
        if plan.problem is None and account.url in self.bank.restrictions:
            plan.problem = self.bank.restriction_problem(account)
            if plan.problem is not None:
                # As if read after the rows were failed: only rows left mid-call need them
                kept = self.rows_of(account.url, *_MID_CALL)
                if not kept:
                    self.bank.payments.pop(account.url, None)
                    for read in reads:
                        if read.order[1] == _PAYMENTS_READ:
                            read.error = None
                for row in self.rows_of(account.url, RowStatus.PENDING, RowStatus.CREATED):
                    self._fail(row, plan.problem)
        if ready is not None and not any(read.error for read in reads):
            ready(account)

    async def _before_listed(self, plan: AccountPlan, reads: list[Read], early: _Early) -> None:
        """Once the account's reads but its owner's payees are done, and until those are
        read to their end: give ``early`` the rows ``take_early`` finds each time more
        payees have come (none when a read failed or the account cannot pay)."""
        others = [read for read in reads if read.order[1] != _PAYEES_READ]
        for read in others:
            await read.done.wait()
        account = plan.account
        assert account is not None
        if any(read.error for read in others) or plan.problem is not None:
            return
        if self.bank.restriction_problem(account) is not None:
            return
        listing = self.bank.listing(account.owner_url)
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
        Never in a dry run, a run of an approved plan (``--plan``: its rows and payees are
        held to the plan once the list is read) or a live-mode organization's run (nothing is
        created before every account is checked and a person confirmed), nor once the run
        was asked to stop.
        """
        if self._never_early():
            return []
        listing = self.bank.listings.get(account.owner_url)
        if listing is None or listing.finished:
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
        if found and not (self.options.allow_repeat or not self._window):
            found = self._not_repeats(url, pending, found)
        if not found:
            return []
        self.bank.learn_listed(account.owner_url, set(found.values()))
        self.book.set_each({number: {"payee_url": payee} for number, payee in found.items()})
        self._taken.update(found)
        for _ in found:
            self._count_existing(url)
        return [self.book.get(number) for number in found]

    def _never_early(self) -> bool:
        """True when no row of this run may be paid before the payee lists are read."""
        options = self.options
        stopped = self._stop is not None and self._stop.is_set()
        live = self.bank.org.mode == LIVE_MODE
        return options.dry_run or options.plan is not None or live or stopped

    def _not_repeats(
        self, account_url: str, pending: list[LedgerRow], found: dict[int, str]
    ) -> dict[int, str]:
        """Of the rows ``found`` (row -> payee) early, those the repeat guard lets go now
        and would once the list is read; none when its verdict could still change."""
        owner = self.bank.owner_of(account_url)
        details = ChainMap(self.bank.listing(owner).index.details, self.bank.payee_details)
        if not self._repeats_decidable(account_url, details):
            return {}
        repeats = find_repeats(
            [row for row in pending if row.row in found],
            self.bank.payments.get(account_url, []),
            known_payment_urls=self.book.known_payment_urls(),
            payee_details=details,
            srds=self.bank.payee_srds,
        )
        # Held by the guard once the list is read
        return {number: payee for number, payee in found.items() if number not in repeats}

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
            for payment in self.bank.payments.get(account_url, [])
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
        if self.options.allow_repeat or not self._window:
            return
        known = self.book.known_payment_urls()
        groups = self._by_account(accounts, RowStatus.PENDING)
        for account_url, payments in self.bank.payments.items():
            if accounts is not None and account_url not in accounts:
                continue
            rows = groups.get(account_url, [])
            if not rows or not payments:
                continue
            for number, payment in find_repeats(
                rows,
                payments,
                known_payment_urls=known,
                payee_details=self.bank.payee_details,
                srds=self.bank.payee_srds,
            ).items():
                self.book.set(number, status=RowStatus.HELD, error=_repeat_reason(payment))

    def guard_changed_details(self) -> None:
        """Hold pending rows whose payee name is known with other bank details (a payee of
        the owner, active or deactivated, a row this ledger paid on an earlier run, or
        another row of the batch when nothing is known of the name yet), unless
        ``accept_changed_details``. Rows are judged once their owner's payees are read, all
        of that owner's rows together (whichever account they pay from). A dry run under
        ``accept_changed_details`` notes the rows it would have held (a plan counts them)
        and holds none."""
        accept = self.options.accept_changed_details
        if accept and not self.options.dry_run:
            return
        by_owner: dict[str, list[LedgerRow]] = defaultdict(list)
        for row in self.book.in_status(RowStatus.PENDING):
            if row.account_url not in self.bank.accounts:
                continue
            owner = self.bank.owner_of(row.account_url)
            # Rows of an owner whose payees are not read yet are judged with its account
            index = self.bank.indexes.get(owner)
            if index is not None and index.needs_new_payee(row):
                by_owner[owner].append(row)
        holds: dict[int, RowUpdate] = {}
        for owner, rows in by_owner.items():
            known = (self.bank.indexes[owner].known, self._paid_index())
            for number, reason in changed_details_holds(rows, known).items():
                holds[number] = {"status": RowStatus.HELD, "error": reason}
        if accept:
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
        for account in self.bank.accounts.values():
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

    def find_payees(
        self, accounts: Collection[str] | None = None
    ) -> dict[PayeeKey, list[LedgerRow]]:
        """Give the pending rows (of ``accounts``, URLs, or every account) the active payee
        they reuse, fail those whose payee is deactivated; return the payees to create,
        with their rows (in a dry run, those a run would check and create)."""
        missing: list[LedgerRow] = []
        reuse: dict[int, RowUpdate] = {}
        pending = (
            self.book.in_status(RowStatus.PENDING)
            if accounts is None
            else [row for url in accounts for row in self.rows_of(url, RowStatus.PENDING)]
        )
        for row in pending:
            if row.account_url not in self.bank.accounts:
                continue
            index = self.bank.index_of(row)
            # Found or made before
            if row.payee_url and row.payee_url not in index.inactive:
                self._count_existing(row.account_url)
                continue
            url = index.lookup(row.payee_name, row.sort_code, row.account_number)
            if url is not None:
                reuse[row.row] = {"payee_url": url}
                self._count_existing(row.account_url)
            elif index.is_deactivated(row.payee_name, row.sort_code, row.account_number):
                self._fail(row, _deactivated_reason(row))
            else:
                missing.append(row)
        self.book.set_each(reuse)
        groups = self.payees.gather(missing)
        for key, rows in groups.items():
            plan = self._plan_for(rows[0].account_url or "")
            # Counted once, for the first account found to need it
            if plan is not None and key not in self._counted:
                self._counted.add(key)
                plan.payees_to_create += 1
        return groups

    async def create_payees(self, groups: Mapping[PayeeKey, list[LedgerRow]]) -> None:
        """Check and create the payees ``find_payees`` found missing (``NewPayees.create``)."""
        await self.payees.create(groups)


def _repeat_reason(payment: PaymentLike) -> str:
    """Why a row matching ``payment``, made outside this ledger, is held."""
    when = payment.created_at.strftime("%Y-%m-%d %H:%M")
    state = (
        f"submitted ({payment.latest_submission_status})"
        if payment.latest_submission_url and payment.latest_submission_status
        else "submitted"
        if payment.latest_submission_url
        else "created and not submitted yet (a run of its own ledger, or an"
        " approval in the bank's app, would still pay it)"
    )
    return (
        f"possible repeat: the bank already has the same payment, made {when}"
        f" UTC outside this ledger and {state} ({payment.url}); if it really"
        " must be paid again, run again with --allow-repeat (a row another"
        " ledger paid or will pay would be paid twice)"
    )


def _deactivated_reason(row: LedgerRow) -> str:
    """Why a row whose only payee is deactivated fails."""
    return (
        f"the payee {row.payee_name} ({row.sort_code} {row.account_number}) is"
        " deactivated at the bank, and a deactivated payee cannot be reactivated;"
        " confirm the details with the payee, then add them again in the bank's app"
    )


async def look_up_accounts(
    client: BankClient, org: Organization, book: RowBook
) -> dict[str, Lookup]:
    """The source accounts of the book's rows a run may pay (open, or reopened: held,
    failed) looked up at once in ``org``, recording nothing: what ``check_accounts`` would
    find (``Preflight.adopt_lookups``). A lookup that failed is left out: ``check_accounts``
    asks again, and meets its error in its own order."""
    bank = BankView(client, org)
    found: dict[str, Lookup] = {}

    async def one(source: str) -> None:
        found[source] = await bank.resolve(source)

    rows = book.in_status(*_OPEN, *_REOPENED)
    sources = sorted({row.source_account for row in rows})
    reads = [Read((index, 0), partial(one, source)) for index, source in enumerate(sources)]
    await all_at_once(reads, workers=len(reads))
    # A bug is no failed lookup
    raise_first_error(read for read in reads if not isinstance(read.error, PayrunError))
    return found


_DID_NOT_PAY = frozenset({"failed", "returned"})


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
