"""The run's view of the bank: what the bank said before the first payment.

Input: a ``BankClient`` and the organization. Output, as the reads come back: the source
accounts found (``accounts``, by URL), their active restrictions, each owner's payees
(``indexes``: a ``PayeeIndex`` per legal person once its list is read to the end, grown
as payees are created; ``listings``: the lists as they are read, page by page), the recent
payments of each account (``payments``), and every known payee's account and SRD
(``payee_details``, ``payee_srds``). It reads; it judges no row (preflight does) and
creates nothing (``_payees`` does, and adds what it created here).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, NamedTuple, Protocol

import anyio

from payrun._models import LedgerRow
from payrun.errors import AuthError, BankError
from payrun.run._changed import Known
from payrun.run._matching import PayeeFacts
from payrun.run._names import NameIndex, NameMatch, name_match

# The bank client is imported only by runs that talk to a bank
if TYPE_CHECKING:
    from payrun.bank import BankAccount, BankClient, Organization, Payment

__all__ = ["BankView", "PayeeIndex", "PayeeLike", "PayeeListing", "fetch_recent_payments"]

_HTTP_NOT_FOUND = 404


async def fetch_recent_payments(
    client: BankClient, account: BankAccount, *, since: datetime
) -> list[Payment]:
    """The account's outbound payments created since ``since``, oldest first."""
    return [payment async for payment in client.payments(account, created_since=since)]


class BankView:
    """What the bank said of the run's accounts, payees and recent payments; each read
    records its answer here."""

    def __init__(self, client: BankClient, org: Organization) -> None:
        self.client = client
        self.org = org
        self.accounts: dict[str, BankAccount] = {}
        """The source accounts found, by URL (open or not)."""
        self.restrictions: dict[str, list[str]] = {}
        """An open account's URL -> the kinds of its active restrictions."""
        self.indexes: dict[str, PayeeIndex] = {}
        """An owner (legal person) URL -> its payees (once every page is read)."""
        self.listings: dict[str, PayeeListing] = {}
        """An owner URL -> its payee list as it is read (``listing``)."""
        self.payments: dict[str, list[Payment]] = {}
        """An account's URL -> its payments since the read's start, oldest first."""
        self.payee_details: dict[str, PayeeFacts] = {}
        """Payee URL -> its account (and SRD), over every loaded index (growing with them)."""
        self.payee_srds: dict[tuple[str, str], set[str]] = {}
        """The SRDs of ``payee_details``, by payee account (growing with them)."""

    def owner_of(self, account_url: str) -> str:
        """The URL of the legal person owning a found account (and its payees)."""
        return self.accounts[account_url].owner_url

    def index_of(self, row: LedgerRow) -> PayeeIndex:
        """The payees of the owner of the account ``row`` pays from (read already)."""
        return self.indexes[self.owner_of(row.account_url or "")]

    async def resolve(self, source: str) -> tuple[BankAccount | None, str | None]:
        """Look a source account up (a URL or ``SORTCODE NUMBER``) and record it; the
        account, and why it cannot pay when it is not found or not open."""
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
            if exc.status == _HTTP_NOT_FOUND:
                return None, f"no bank account {source} in this organization; check source_account"
            raise
        if account is None:
            return None, f"no bank account {source} in this organization; check source_account"
        self.accounts[account.url] = account
        if account.status != "open":
            name = f"the account {account.display_name}"
            problem = f"{name} is {account.status}: only an open account can pay; ask the bank"
            return account, problem
        return account, None

    async def read_restrictions(self, account: BankAccount) -> None:
        """Record the kinds of the account's active restrictions."""
        found = await self.client.active_restrictions(account)
        self.restrictions[account.url] = [r.type or "restricted" for r in found]

    def listing(self, owner: str) -> PayeeListing:
        """The owner's payee list as ``read_payees`` reads it (made empty when first asked)."""
        listing = self.listings.get(owner)
        if listing is None:
            listing = self.listings[owner] = PayeeListing()
        return listing

    async def read_payees(self, owner: str) -> None:
        """Record the owner's payees, every page: one by one in its ``listing`` (which
        signals each time it grew), and in ``indexes`` only once the list is read to its
        end, so that no check judges a row by part of a list."""
        listing = self.listing(owner)
        try:
            async for payee in self.client.payees(owner):
                listing.index.add(payee)
                listing.grew.set()
                listing.grew = anyio.Event()
        finally:
            listing.finished = True
            listing.grew.set()
        self.indexes[owner] = listing.index
        self._learn(listing.index.details)

    async def read_payments(self, account: BankAccount, since: datetime) -> None:
        """Record the account's payments created since ``since`` (on the bank's clock)."""
        self.payments[account.url] = await fetch_recent_payments(self.client, account, since=since)

    def learn_listed(self, owner: str, payees: Iterable[str]) -> None:
        """Record the details of payees (URLs) already in the owner's ``listing``: rows paid
        to them go out before the list is read to its end."""
        details = self.listing(owner).index.details
        self._learn({url: details[url] for url in payees})

    def add_payee(self, owner: str, payee: PayeeLike) -> None:
        """Record a payee just created for ``owner``."""
        index = self.indexes[owner]
        index.add(payee)
        self._learn({payee.url: index.details[payee.url]})

    def restriction_problem(self, account: BankAccount) -> str | None:
        """Why the restrictions read for an open account stop it paying, if they do."""
        name = f"the account {account.display_name}"
        kinds = sorted(set(self.restrictions.get(account.url, [])))
        if kinds or account.restricted:
            words = {"freeze": "frozen", "block": "blocked"}
            state = " and ".join(words.get(kind, kind) for kind in kinds) or "restricted"
            return f"{name} is {state} by the bank, so it cannot pay out; ask the bank to lift it"
        return None

    def _learn(self, details: Mapping[str, PayeeFacts]) -> None:
        """Add payees' details to ``payee_details`` and ``payee_srds``."""
        self.payee_details.update(details)
        for facts in details.values():
            if facts.srd:
                key = (facts.sort_code, facts.account_number)
                self.payee_srds.setdefault(key, set()).add(facts.srd)


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


@dataclass(slots=True, eq=False)
class PayeeListing:
    """An owner's payee list as it is read: the payees so far (in the bank's order), an
    event set once more have come or the list ended (then replaced by a new one), and
    whether it ended (read to its end, or failed)."""

    index: PayeeIndex = field(default_factory=lambda: PayeeIndex())
    grew: anyio.Event = field(default_factory=anyio.Event)
    finished: bool = False


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
        it is cut from or cut to), or None: what ``lookup`` finds when there is one, and
        what it finds in any longer list of which this one is the start."""
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
