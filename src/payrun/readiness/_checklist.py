"""``payrun check``: is this setup ready to pay? Reads only; never creates anything.

Input: ``Settings`` (base URL, API key, signing key) and optionally a source account
(``/v0/bank/accounts/ba.x`` or ``SORTCODE ACCOUNTNUMBER``, as validation normalizes it).
Output: a ``Readiness``: the organization's name and mode, what the bank's signature check
said of this machine's signature, and each check (passed, or what to fix), in order:
bank, api-key, signing, accounts, source-account. It is ready when every check passed; a
live-mode organization needs a verified signature. Raises as a run does for a bank that
cannot be reached (``BankUnavailableError``, exit 3) or an address that does not answer as
the bank (``ConfigError``); a refused API key is an ``AuthError`` (exit 2), said more
precisely when the bank's signature check refuses the signature too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from payrun._models import format_money
from payrun.config import redact_url
from payrun.errors import AuthError, BankError, ConfigError
from payrun.run import LIVE_MODE, find_organization

# The bank client is imported only by commands that talk to a bank
if TYPE_CHECKING:
    from payrun.bank import BankAccount, BankClient, Organization
    from payrun.config import Settings

__all__ = ["Check", "Readiness", "Signing", "check_readiness"]

Signing = Literal["verified", "refused", "not-configured"]
"""What the bank's signature check said of this machine's signature."""

_HTTP_NOT_FOUND = 404
# Accounts named in the accounts check's message; the rest are counted
_ACCOUNTS_SHOWN = 5


@dataclass(frozen=True, slots=True)
class Check:
    """One item of the checklist: its name, whether it passed, and what it found or what
    to fix."""

    check: str
    ok: bool
    message: str


@dataclass(frozen=True, slots=True)
class Readiness:
    """The answer of ``payrun check``."""

    organization: str
    mode: str
    signing: Signing
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        """Whether payrun can pay from this setup: every check passed."""
        return all(check.ok for check in self.checks)

    def document(self) -> dict[str, Any]:
        """The ``--format json`` object of the contract."""
        return {
            "ok": self.ok,
            "organization": self.organization,
            "mode": self.mode,
            "signing": self.signing,
            "checks": [{"check": c.check, "ok": c.ok, "message": c.message} for c in self.checks],
        }


def _passed(name: str, message: str) -> Check:
    return Check(name, ok=True, message=message)


def _to_fix(name: str, message: str) -> Check:
    return Check(name, ok=False, message=message)


async def check_readiness(settings: Settings, *, source_account: str | None = None) -> Readiness:
    """Read the index, the organization, its accounts (and ``source_account``'s state), and
    with a signing key call the bank's signature check; see the module for what it raises."""
    from payrun.bank import BankClient, make_transport

    async with BankClient(make_transport(), settings) as client:
        org = await _organization(client, settings)
        signing = await _signing(client, settings)
        checks = [
            _passed("bank", f"{redact_url(settings.base_url)} answers as the bank's API"),
            _passed("api-key", f"the API key belongs to {org.display_name} ({org.mode})"),
            _signing_check(org, settings, signing),
            await _accounts_check(client, org),
        ]
        if source_account is not None:
            checks.append(await _source_check(client, org, source_account))
    return Readiness(org.display_name, org.mode, signing, tuple(checks))


async def _organization(client: BankClient, settings: Settings) -> Organization:
    """The organization, or an ``AuthError`` that says whether the signature is refused."""
    try:
        return await find_organization(client, settings, require_signing=False)
    except AuthError:
        if settings.signing is None or await client.signature_verified():
            raise
        msg = (
            f"the bank refused the request, and its signature check refused this machine's"
            f" signature (key id {settings.signing.key_id}): register the public half of"
            " PAYRUN_SIGNING_KEY_FILE in the bank's app and set PAYRUN_SIGNING_KEY_ID to the"
            " key id it shows"
        )
        raise ConfigError(msg) from None


async def _signing(client: BankClient, settings: Settings) -> Signing:
    if settings.signing is None:
        return "not-configured"
    return "verified" if await client.signature_verified() else "refused"


def _signing_check(org: Organization, settings: Settings, signing: Signing) -> Check:
    live = org.mode == LIVE_MODE
    if signing == "verified":
        assert settings.signing is not None
        key_id = settings.signing.key_id
        return _passed("signing", f"the bank verified this machine's signature (key id {key_id})")
    if signing == "refused":
        assert settings.signing is not None
        key_id = settings.signing.key_id
        message = (
            f"the bank refused the signature made with key id {key_id}: register the public"
            " half of PAYRUN_SIGNING_KEY_FILE in the bank's app (Settings > Message"
            " signatures) and set PAYRUN_SIGNING_KEY_ID to the key id it shows"
        )
        return _to_fix("signing", message)
    if live:
        message = (
            "live mode needs every request signed, and no signing key is configured: set"
            " PAYRUN_SIGNING_KEY_FILE and PAYRUN_SIGNING_KEY_ID (docs/live-mode.md)"
        )
        return _to_fix("signing", message)
    return _passed("signing", "no signing key configured (test mode does not need one)")


async def _accounts_check(client: BankClient, org: Organization) -> Check:
    accounts = [account async for account in client.accounts(org)]
    if not accounts:
        message = "the API key sees no bank account: ask a team admin for the key's role"
        return _to_fix("accounts", message)
    shown = "; ".join(_describe(account) for account in accounts[:_ACCOUNTS_SHOWN])
    more = len(accounts) - _ACCOUNTS_SHOWN
    rest = f"; and {more} more" if more > 0 else ""
    return _passed("accounts", f"{len(accounts)} bank account(s) visible: {shown}{rest}")


async def _source_check(client: BankClient, org: Organization, source: str) -> Check:
    account = await _find_account(client, org, source)
    if account is None:
        message = f"no bank account {source} in this organization; check --source-account"
        return _to_fix("source-account", message)
    name = _describe(account)
    if account.status != "open":
        message = f"{name} is {account.status}: only an open account can pay; ask the bank"
        return _to_fix("source-account", message)
    kinds = sorted({r.type or "restricted" for r in await client.active_restrictions(account)})
    if kinds or account.restricted:
        state = " and ".join(kinds) or "restricted"
        message = f"{name} has an active {state} restriction, so it cannot pay out; ask the bank"
        return _to_fix("source-account", message)
    return _passed("source-account", f"{name} can pay")


async def _find_account(client: BankClient, org: Organization, source: str) -> BankAccount | None:
    try:
        if source.startswith("/"):
            return await client.get_account(source)
        sort_code, _, number = source.partition(" ")
        return await client.find_account(org, sort_code=sort_code, account_number=number)
    except BankError as exc:
        if exc.status != _HTTP_NOT_FOUND or isinstance(exc, AuthError):
            raise
        return None


def _describe(account: BankAccount) -> str:
    """``Name (040004 30000001, open, £1,000.00 available)``."""
    address = next(iter(account.bank_addresses), None)
    where = f"{address.sort_code} {address.account_number}, " if address else ""
    available = format_money(account.available_balance)
    return f"{account.display_name} ({where}{account.status}, £{available} available)"
