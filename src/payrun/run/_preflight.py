"""Preflight: everything checked with the bank before the first payment is created.

Input: the run's ``RowBook``, a ``BankClient`` and the organization. Output: rows bound to
their bank account and payee, and rows that must not be paid moved to ``failed`` (bad
account, balance short, deactivated payee) or ``held`` (Confirmation of Payee said no,
or a possible repeat of a payment made outside this ledger). In a dry run nothing is
created at the bank: payees that would be created are only counted.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Protocol, TypeVar

import anyio

from payrun._models import LedgerRow, RowStatus, RowUpdate, format_money
from payrun.errors import (
    AuthError,
    BankError,
    BankUnavailableError,
    OutcomeUnknownError,
    RateLimitedError,
)
from payrun.run._book import RowBook
from payrun.run._changed import changed_details_holds, normalise_name
from payrun.run._matching import (
    CLOCK_SKEW,
    PayeeFacts,
    PaymentLike,
    creditor_details,
    reference_match,
    srds_by_account,
)
from payrun.run._payees import confirm_payee, cop_verdict, held_again_reason
from payrun.run._reconcile import fetch_recent_payments
from payrun.run._stop import StopSignal

# The bank client is imported only by runs that talk to a bank
if TYPE_CHECKING:
    from payrun.bank import BankAccount, BankClient, Organization, Payment

__all__ = [
    "AccountPlan",
    "PayeeIndex",
    "PayeeLike",
    "Preflight",
    "find_repeats",
    "normalise_name",
]

_PAYEE_WORKERS = 20
_OPEN = (RowStatus.PENDING, RowStatus.CREATING, RowStatus.CREATED, RowStatus.SUBMITTING)
_T = TypeVar("_T")
_PayeeKey = tuple[str, str, str, str]
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
        self.plans: dict[str, AccountPlan] = {}
        self.accounts: dict[str, BankAccount] = {}
        self.indexes: dict[str, PayeeIndex] = {}
        self.payments: dict[str, list[Payment]] = {}
        # A dry run's reopened rows: why held or failed
        self.last_errors: dict[int, str] = {}
        # A payee create found the bank gone: create no more
        self.unreachable = False
        # Payees ``plan_payees`` found to check and create, with their rows
        self.new_payees: dict[_PayeeKey, list[LedgerRow]] = {}

    @property
    def payee_details(self) -> dict[str, PayeeFacts]:
        """Payee URL -> its account (and SRD), over every loaded index."""
        details: dict[str, PayeeFacts] = {}
        for index in self.indexes.values():
            details.update(index.details)
        return details

    def recall_holds(self, last_errors: Mapping[int, str | None]) -> None:
        """A dry run: keep why the reopened rows were held, to tell which would be again."""
        self.last_errors = {row: error for row, error in last_errors.items() if error}

    async def check_accounts(self) -> None:
        """Resolve each source account; fail the unpaid rows of accounts that cannot pay."""
        rows = self.book.in_status(*_OPEN)
        self.plans = {
            source: AccountPlan(source=source)
            for source in sorted({r.source_account for r in rows})
        }
        await _run_pool(list(self.plans.values()), self._check_plan)
        bind: dict[int, RowUpdate] = {}
        for row in rows:
            plan = self.plans[row.source_account]
            if plan.account is not None and row.account_url != plan.account.url:
                bind[row.row] = {"account_url": plan.account.url}
        self.book.set_each(bind)
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
        return account, await self._account_problem(account)

    async def _account_problem(self, account: BankAccount) -> str | None:
        name = f"the account {account.display_name}"
        if account.status != "open":
            return f"{name} is {account.status}: only an open account can pay; ask the bank"
        restrictions = await self.client.active_restrictions(account)
        kinds = sorted({r.type or "restricted" for r in restrictions})
        if kinds or account.restricted:
            words = {"freeze": "frozen", "block": "blocked"}
            state = " and ".join(words.get(kind, kind) for kind in kinds) or "restricted"
            return f"{name} is {state} by the bank, so it cannot pay out; ask the bank to lift it"
        return None

    def _fail(self, row: LedgerRow, reason: str) -> None:
        prefix = "payment created but not submitted: " if row.payment_url else ""
        self.book.set(row.row, status=RowStatus.FAILED, error=prefix + reason)

    async def load_payees_and_payments(self) -> None:
        """Load payees and recent payments at the same time (they do not depend on each other)."""
        async with anyio.create_task_group() as group:
            group.start_soon(self.load_payees)
            group.start_soon(self.load_payments)

    async def load_payees(self) -> None:
        """Page once through the payees of every source account's owner (owners in parallel)."""

        async def load(owner: str) -> None:
            self.indexes[owner] = PayeeIndex.build([p async for p in self.client.payees(owner)])

        await _run_pool(sorted({a.owner_url for a in self.accounts.values()}), load)

    async def load_payments(self) -> None:
        """Read each account's recent outbound payments (repeat guard and reconciliation),
        on the bank's clock: the window back from its now, and since rows' intents as it
        stamps them."""
        clock = self.client.clock
        now = clock.now()
        wanted: list[tuple[BankAccount, datetime]] = []
        groups = self.book.by_account(*_OPEN)
        for account in self.accounts.values():
            rows = groups.get(account.url, [])
            intents = [r.intent_at for r in rows if r.intent_at and r.status == RowStatus.CREATING]
            since = min(
                [now - self.duplicate_window, *(clock.to_bank(t) - CLOCK_SKEW for t in intents)]
            )
            if rows and (self.duplicate_window or intents):
                wanted.append((account, since))

        async def load(item: tuple[BankAccount, datetime]) -> None:
            account, since = item
            self.payments[account.url] = await fetch_recent_payments(
                self.client, account, since=since
            )

        await _run_pool(wanted, load)

    def guard_repeats(self) -> None:
        """Hold pending rows that match a recent payment this ledger did not make."""
        if self.allow_repeat or not self.duplicate_window:
            return
        known = self.book.known_payment_urls()
        details = self.payee_details
        groups = self.book.by_account(RowStatus.PENDING)
        for account_url, payments in self.payments.items():
            rows = groups.get(account_url, [])
            for number, payment in find_repeats(
                rows, payments, known_payment_urls=known, payee_details=details
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
        """Hold pending rows whose payee name is known with other bank details (an active
        payee of the owner, or another row of the batch when no payee has the name yet),
        unless ``accept_changed_details``."""
        if self.accept_changed_details:
            return
        by_owner: dict[str, list[LedgerRow]] = defaultdict(list)
        for row in self.book.in_status(RowStatus.PENDING):
            if row.account_url not in self.accounts:
                continue
            owner = self.accounts[row.account_url].owner_url
            index = self.indexes[owner]
            if index.needs_new_payee(row):
                by_owner[owner].append(row)
        holds: dict[int, RowUpdate] = {}
        for owner, rows in by_owner.items():
            for number, reason in changed_details_holds(rows, self.indexes[owner].named).items():
                holds[number] = {"status": RowStatus.HELD, "error": reason}
        self.book.set_each(holds)

    def check_balances(self, *, created: bool = True) -> None:
        """Fail an account's unpaid rows when its available balance cannot cover them.

        ``created``: count rows whose payment exists too (False for ``--create-only``, which
        leaves them to the approver and spends nothing on them)."""
        statuses = (RowStatus.PENDING, RowStatus.CREATED) if created else (RowStatus.PENDING,)
        groups = self.book.by_account(*statuses)
        for account in self.accounts.values():
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

    def plan_payees(self) -> None:
        """Give every pending row an active payee it can reuse, fail rows whose payee is
        deactivated, and list the payees to check and create (``new_payees``)."""
        groups: dict[_PayeeKey, list[LedgerRow]] = defaultdict(list)
        reuse: dict[int, RowUpdate] = {}
        for row in self.book.in_status(RowStatus.PENDING):
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
                groups[(owner, row.payee_name, row.sort_code, row.account_number)].append(row)
        self.book.set_each(reuse)
        if self.dry_run and self.confirm_payees:
            groups = self._hold_again(groups)
        for rows in groups.values():
            plan = self._plan_for(rows[0].account_url or "")
            if plan is not None:
                plan.payees_to_create += 1
        self.new_payees = dict(groups)

    async def create_payees(self) -> None:
        """Check (Confirmation of Payee) and create the payees ``plan_payees`` listed; a dry
        run creates none."""
        if not self.dry_run:
            await _run_pool(list(self.new_payees.items()), self._new_payee)

    def _hold_again(
        self, groups: dict[_PayeeKey, list[LedgerRow]]
    ) -> dict[_PayeeKey, list[LedgerRow]]:
        """Dry run: hold the rows the bank's last Confirmation of Payee answer would hold
        again (a run asks about the same name), as the run would; return the other groups."""
        left: dict[_PayeeKey, list[LedgerRow]] = {}
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

    async def _new_payee(self, item: tuple[_PayeeKey, list[LedgerRow]]) -> None:
        (owner, name, sort_code, number), rows = item
        numbers = [r.row for r in rows]
        # Start nothing
        if self.unreachable or (self.stop is not None and self.stop.is_set()):
            return
        try:
            cop_url = None
            if self.confirm_payees:
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
                    self.book.set_many(numbers, status=RowStatus.HELD, error=held)
                    return
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
            self.book.set_many(
                numbers,
                error=(
                    f"the bank's answer to creating the payee was lost ({exc});"
                    " run the same command again (the payee is looked up first)"
                ),
            )
            return
        except (RateLimitedError, BankUnavailableError) as exc:
            # Nothing happened: later
            self.unreachable = self.unreachable or isinstance(exc, BankUnavailableError)
            self.book.set_many(
                numbers,
                error=(
                    f"payee not created yet: the bank was busy or unreachable ({exc});"
                    " run the same command again to finish"
                ),
            )
            return
        except BankError as exc:
            self.book.set_many(numbers, status=RowStatus.FAILED, error=f"payee not created: {exc}")
            return
        self.indexes[owner].add(payee)
        self.book.set_many(numbers, payee_url=payee.url)


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


@dataclass(slots=True)
class PayeeIndex:
    """The payees of one legal person, looked up by name, sort code and account number."""

    active: dict[tuple[str, str, str], str] = field(default_factory=dict)
    named: dict[str, dict[tuple[str, str], None]] = field(default_factory=dict)
    """Normalised name -> the sort codes and account numbers of its active payees, in
    the bank's order."""
    deactivated: set[tuple[str, str, str]] = field(default_factory=set)
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
        key = (normalise_name(payee.account_holder), payee.sort_code, payee.account_number)
        self.details[payee.url] = PayeeFacts(payee.sort_code, payee.account_number, payee.srd)
        if payee.status == "active":
            self.active.setdefault(key, payee.url)
            self.named.setdefault(key[0], {})[(payee.sort_code, payee.account_number)] = None
        else:
            self.deactivated.add(key)
            self.inactive.add(payee.url)

    def needs_new_payee(self, row: LedgerRow) -> bool:
        """True when no payee can pay ``row`` yet: none found or made for it before, none
        active with its name and details, and none deactivated with them (it fails)."""
        if row.payee_url and row.payee_url not in self.inactive:
            return False
        details = (row.payee_name, row.sort_code, row.account_number)
        return self.lookup(*details) is None and not self.is_deactivated(*details)

    def lookup(self, name: str, sort_code: str, account_number: str) -> str | None:
        """The URL of an active payee with these details, or None."""
        return self.active.get((normalise_name(name), sort_code, account_number))

    def is_deactivated(self, name: str, sort_code: str, account_number: str) -> bool:
        """True when only a deactivated payee has these details."""
        key = (normalise_name(name), sort_code, account_number)
        return key in self.deactivated and key not in self.active


def find_repeats(
    rows: Sequence[LedgerRow],
    payments: Sequence[PaymentLike],
    *,
    known_payment_urls: set[str],
    payee_details: Mapping[str, PayeeFacts],
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
    srds = srds_by_account(payee_details)
    for row in rows:
        for payment in by_key.get(
            (row.sort_code, row.account_number, format_money(row.amount)), []
        ):
            if reference_match(row.reference, payment, payee_details, srds):
                repeats[row.row] = payment
                break
    return repeats
