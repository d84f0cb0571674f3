"""New payees: the rows that need one grouped, Confirmation of Payee asked, the payees created.

Input: the pending rows no payee of the bank can pay (``Preflight.find_payees`` keeps the
others on the payee they reuse), the run's ``BankView`` and options. Output: one payee per
owner, name (a look-alike spelling is one payee) and details, checked and created once for
every row waiting for it, whatever account they pay from; the rows get its URL, or are held
(CoP said no) or failed. In a dry run nothing is created: a plan's dry run (``planning``)
asks CoP about them (a CoP request creates nothing), holding the rows a run would hold and
keeping each answer (``checks``); a run of a plan creates them with the plan's CoP request
(``RunOptions.plan``), asking no more. Once a stop is asked or a create finds the bank gone,
no new payee is checked or created.

A file gives no account type, so payrun guesses it from the name (``account_classification``);
when the bank says the name matches but the account is of the other type (Pay.UK's
BANM/PANM answers), it asks once more with that type. A dry run asks nothing: it reads the
bank's last answer back from a held row's error (``held_again_reason``).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

import anyio

from payrun._models import LedgerRow, PayeeCheck, RowStatus, RowUpdate
from payrun.errors import (
    AuthError,
    BankError,
    BankUnavailableError,
    OutcomeUnknownError,
    RateLimitedError,
)
from payrun.run._names import name_forms

# The bank client is imported only by runs that talk to a bank
if TYPE_CHECKING:
    from payrun.bank import BankClient, CopResult, Organization
    from payrun.config import RunOptions
    from payrun.run._bankview import BankView
    from payrun.run._book import RowBook
    from payrun.run._stop import StopSignal

__all__ = [
    "NewPayees",
    "PayeeKey",
    "account_classification",
    "confirm_payee",
    "cop_verdict",
    "held_again_reason",
]

_NEW_FILE = (
    "put the corrected row in a new file of its own and pay that file (this ledger stays"
    " bound to this file's content)"
)
_OTHER_TYPE = {
    "match-name-business-personal",
    "match-name-personal-business",
}
_FLIP = {"personal": "business", "business": "personal"}
_PAYEE_WORKERS = 20
_T = TypeVar("_T")
PayeeKey = tuple[str, str, str, str]
"""A payee to create: owner legal person, name, sort code, account number."""
_REUSES = "reuses an active payee with the same name and account, without a check"
_PREFIX = "Confirmation of Payee: "
_CLOSE_MATCH = "close match"
# How every hold ``cop_verdict`` writes begins (in every release so far): the bank's
# result, as "close match" or the bank's own word (no-match).
_HELD = re.compile(re.escape(_PREFIX) + rf"(?P<result>{_CLOSE_MATCH}|[a-z-]+)\b")


@dataclass(slots=True, eq=False)
class _PayeeJob:
    """One payee being checked and created, and the rows (of any account) waiting for it."""

    rows: list[int]
    done: anyio.Event = field(default_factory=anyio.Event)
    update: RowUpdate | None = None


class NewPayees:
    """The payees a run checks and creates (a dry run: would), and what their rows become."""

    def __init__(
        self,
        book: RowBook,
        bank: BankView,
        options: RunOptions,
        *,
        stop: StopSignal | None = None,
    ) -> None:
        self.book = book
        self.bank = bank
        self.options = options
        # Once set, no new payee is checked or created
        self._stop = stop
        # A plan's run reuses its CoP answers
        self._planned_cop: Mapping[int, str] = (
            options.plan.cop_requests if options.plan is not None else {}
        )
        # A plan's dry run keeps the CoP answers it got
        self.checks: list[PayeeCheck] = []
        # Payees ``gather`` found to check and create, with their rows
        self.found: dict[PayeeKey, list[LedgerRow]] = {}
        # A dry run's reopened rows: why held or failed
        self._last_errors: dict[int, str] = {}
        # A payee create found the bank gone: create no more
        self._unreachable = False
        self._jobs: dict[PayeeKey, _PayeeJob] = {}
        self._slots: anyio.CapacityLimiter | None = None
        # A payee to create for rows of one name (its key) and details
        self._keys: dict[tuple[str, str, str, str], PayeeKey] = {}

    def recall_holds(self, last_errors: Mapping[int, str | None]) -> None:
        """A dry run: keep why the reopened rows were held, to tell which would be again."""
        self._last_errors = {row: error for row, error in last_errors.items() if error}

    def gather(self, rows: Iterable[LedgerRow]) -> dict[PayeeKey, list[LedgerRow]]:
        """The payees to create for ``rows`` (pending, bound to a found account, no payee
        of the bank able to pay them), with their rows; in a dry run those a run would
        check and create, holding the rows CoP held last time and would hold again."""
        groups: dict[PayeeKey, list[LedgerRow]] = defaultdict(list)
        for row in rows:
            groups[self._key(self.bank.owner_of(row.account_url or ""), row)].append(row)
        options = self.options
        if options.dry_run and options.confirm_payees and not options.planning:
            groups = self._hold_again(groups)
        self.found.update(groups)
        return groups

    def _key(self, owner: str, row: LedgerRow) -> PayeeKey:
        """The payee to create for ``row``: one for every row of the owner with the same
        name (its key: a look-alike spelling is one payee) and details, named as the first."""
        same = (owner, name_forms(row.payee_name).keys[0], row.sort_code, row.account_number)
        key = self._keys.get(same)
        if key is None:
            key = self._keys[same] = (owner, row.payee_name, row.sort_code, row.account_number)
        return key

    def _hold_again(
        self, groups: dict[PayeeKey, list[LedgerRow]]
    ) -> dict[PayeeKey, list[LedgerRow]]:
        """Dry run: hold the rows the bank's last Confirmation of Payee answer would hold
        again (a run asks about the same name), as the run would; return the other groups."""
        left: dict[PayeeKey, list[LedgerRow]] = {}
        accept = self.options.accept_close_match
        for key, rows in groups.items():
            reasons = (
                held_again_reason(self._last_errors.get(r.row), accept_close_match=accept)
                for r in rows
            )
            held = next((reason for reason in reasons if reason), None)
            if held is None:
                left[key] = rows
            else:
                self.book.set_many([r.row for r in rows], status=RowStatus.HELD, error=held)
        return left

    async def create(self, groups: Mapping[PayeeKey, list[LedgerRow]]) -> None:
        """Check and create the payees ``gather`` found (in a dry run nothing, in a plan's
        dry run only the check); rows of another account waiting for the same payee take
        its outcome too."""
        if self.options.dry_run:
            if self.options.planning and self.options.confirm_payees:
                await _run_pool(list(groups.items()), self._check_only)
            return
        if self._slots is None:
            self._slots = anyio.CapacityLimiter(_PAYEE_WORKERS)
        await _run_pool(list(groups.items()), self._job)

    async def _job(self, item: tuple[PayeeKey, list[LedgerRow]]) -> None:
        key, rows = item
        numbers = [r.row for r in rows]
        job = self._jobs.get(key)
        if job is not None and job.done.is_set():
            assert job.update is not None
            self.book.set_many(numbers, **job.update)
            return
        if job is not None:
            # Another account's rows asked for this payee first: they share its outcome
            job.rows.extend(numbers)
            await job.done.wait()
            return
        job = self._jobs[key] = _PayeeJob(numbers)
        try:
            assert self._slots is not None
            planned = next((self._planned_cop[n] for n in numbers if n in self._planned_cop), None)
            async with self._slots:
                job.update = await self._new_payee(key, planned)
        finally:
            if job.update is not None:
                self.book.set_many(job.rows, **job.update)
            else:
                # Nothing was decided: a later account's rows try again
                del self._jobs[key]
            job.done.set()

    async def _check_only(self, item: tuple[PayeeKey, list[LedgerRow]]) -> None:
        """A plan's dry run: ask CoP about one new payee as a run would, hold its rows if
        the answer would hold them, and keep the answer (``checks``)."""
        (owner, name, sort_code, number), rows = item
        numbers = [r.row for r in rows]
        try:
            cop = await self._confirm(owner, name, sort_code, number)
        except (AuthError, OutcomeUnknownError, RateLimitedError, BankUnavailableError):
            raise
        except BankError as exc:
            error = f"Confirmation of Payee could not be asked: {exc}"
            self.book.set_many(numbers, status=RowStatus.FAILED, error=error)
            return
        held = cop_verdict(cop, accept_close_match=self.options.accept_close_match)
        if held:
            self.book.set_many(numbers, status=RowStatus.HELD, error=held)
        self.checks.append(
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

    async def _confirm(self, owner: str, name: str, sort_code: str, number: str) -> CopResult:
        """The bank's CoP answer for a payee ``owner`` would create."""
        return await confirm_payee(
            self.bank.client,
            self.bank.org,
            name=name,
            sort_code=sort_code,
            account_number=number,
            requester_url=owner,
        )

    async def _new_payee(self, key: PayeeKey, planned: str | None = None) -> RowUpdate | None:
        """Check and create one payee (with ``planned``, the approved plan's CoP request,
        it is not asked again); what its rows become (None: nothing was tried)."""
        owner, name, sort_code, number = key
        # Start nothing
        if self._unreachable or (self._stop is not None and self._stop.is_set()):
            return None
        try:
            cop_url = planned
            if self.options.confirm_payees and planned is None:
                cop = await self._confirm(owner, name, sort_code, number)
                held = cop_verdict(cop, accept_close_match=self.options.accept_close_match)
                if held:
                    return {"status": RowStatus.HELD, "error": held}
                cop_url = cop.url
            payee = await self.bank.client.create_payee(
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
            self._unreachable = self._unreachable or isinstance(exc, BankUnavailableError)
            return {
                "error": (
                    f"payee not created yet: the bank was busy or unreachable ({exc});"
                    " run the same command again to finish"
                )
            }
        except BankError as exc:
            return {"status": RowStatus.FAILED, "error": f"payee not created: {exc}"}
        self.bank.add_payee(owner, payee)
        return {"payee_url": payee.url}


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


async def confirm_payee(
    client: BankClient,
    org: Organization,
    *,
    name: str,
    sort_code: str,
    account_number: str,
    requester_url: str,
) -> CopResult:
    """The bank's CoP answer for the name, with the account type it holds."""
    classification = account_classification(name)
    for _ in range(2):
        cop = await client.confirm_payee(
            org,
            name=name,
            sort_code=sort_code,
            account_number=account_number,
            classification=classification,
            requester_url=requester_url,
        )
        if cop.result != "no-match" or cop.reason not in _OTHER_TYPE:
            break
        classification = _FLIP[classification]
    return cop


def cop_verdict(cop: CopResult, *, accept_close_match: bool) -> str | None:
    """None to go ahead, else why the rows are held and what to do."""
    if cop.result == "match":
        return None
    if cop.result == "close-match":
        if accept_close_match:
            return None
        said = (
            f"the account holder is {cop.suggested_name!r}"
            if cop.suggested_name
            else "the name is close"
        )
        return (
            f"{_PREFIX}{_CLOSE_MATCH}, the bank says {said}; to pay it as it is,"
            f" run again with --accept-close-match; to correct the name, {_NEW_FILE}"
        )
    return f"{_PREFIX}{cop.result}{_why(cop)}"


def held_again_reason(last_error: str | None, *, accept_close_match: bool) -> str | None:
    """Why a row Confirmation of Payee held on the last run would be held again, or None.

    A run asks the bank again about the same name (a ledger's row never changes), so the
    bank's last answer, kept in the held row's error, is what a dry run can go by: a close
    match is paid with ``--accept-close-match``, any other answer holds the row again.
    None too when the error is not a Confirmation of Payee hold.
    """
    found = _HELD.match(last_error or "")
    if found is None or (found["result"] == _CLOSE_MATCH and accept_close_match):
        return None
    assert last_error is not None
    return (
        "a run asks Confirmation of Payee again about the same name and would hold it"
        f" again if the bank answers as on the last run: {last_error.removeprefix(_PREFIX)}"
    )


def _why(cop: CopResult) -> str:
    """The bank's reason for a no-match, in words, with the way out."""
    reason = cop.reason
    if reason == "account-switched":
        return (
            " (account-switched): the payee has moved this account to another bank or"
            f" account; ask the payee for their new details, then {_NEW_FILE}"
        )
    if reason == "account-not-supported":
        return (
            " (account-not-supported): the payee's bank cannot check names on this account;"
            " once you have confirmed the details with the payee another way, add the payee"
            f" in the bank's app, then run the same command again (payrun {_REUSES})"
        )
    if reason == "no-match-secondary-ref":
        return (
            " (no-match-secondary-ref): this account needs a secondary reference, such as a"
            " building society roll number; add the payee with it in the bank's app, then"
            f" run the same command again (payrun {_REUSES}, and the bank puts the roll"
            " number on the payment)"
        )
    if reason in _OTHER_TYPE:
        return (
            f" ({reason}): the name matches, but the bank reports another account type"
            " (personal or business) whichever payrun asked about; check the details with"
            f" the payee; if they are right, add the payee in the bank's app, then run the"
            f" same command again (payrun {_REUSES})"
        )
    if reason is None and cop.status == "unverified":
        return (
            ": the bank could not check this account; check the sort code and account number"
            f" with the payee, then {_NEW_FILE}"
        )
    why = f" ({reason})" if reason else ""
    return (
        f"{why}: the name does not match the account holder; check the details with the"
        f" payee, then {_NEW_FILE}"
    )


_BUSINESS_WORDS = re.compile(
    r"\b(ltd|limited|llp|plc|inc|co|company|corp|corporation|group|services|solutions|"
    r"trust|partners|partnership|associates|consulting|holdings)\b|&",
    re.IGNORECASE,
)


def account_classification(name: str) -> str:
    """Guess the account type Confirmation of Payee needs: business names carry Ltd, LLP, &..."""
    return "business" if _BUSINESS_WORDS.search(name) else "personal"
