"""The organization the API key belongs to: the first request of every run.

Input: a ``BankClient`` and the run's ``Settings``. Output: the ``Organization``. An
address that does not answer as the bank's API, or whose host name does not resolve, is
a setting to correct (``ConfigError``, exit 2), not a bank outage to wait out (exit 3); so
is a live-mode organization with no signing key configured.

A caller that already asked (a fleet's route: ``KnownOrganization``) has the organization
read at once with the index; the index's answer is still what decides: the organization
read is used only when the index names the URL it was read at.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from payrun.config import redact_url
from payrun.errors import BankError, BankRejectedError, BankUnavailableError, ConfigError
from payrun.run._at_once import Read, all_at_once, raise_first_error

# The bank client is imported only by runs that talk to a bank
if TYPE_CHECKING:
    from payrun.bank import BankClient, Organization
    from payrun.config import Settings

__all__ = ["LIVE_MODE", "KnownOrganization", "ask_organization", "find_organization"]

_HTTP_NOT_FOUND = 404


LIVE_MODE = "live-mode"
"""The ``organization-mode`` of an organization that moves real money."""


@dataclass(frozen=True, slots=True)
class KnownOrganization:
    """What an earlier answer said of the key's organization: the URL the bank's index
    named (``at``) and the organization read there."""

    at: str
    organization: Organization


async def find_organization(
    client: BankClient,
    settings: Settings,
    *,
    require_signing: bool = True,
    known: KnownOrganization | None = None,
) -> Organization:
    """The API key's organization; an address that does not answer as the bank is a setting.

    The first request goes to the bank's index: a 404 there, or an answer that is not the
    API's JSON, means the base URL points somewhere else (exit 2: running again won't help).
    With ``require_signing``, a live-mode organization and no signing key configured is a
    ``ConfigError`` too, before anything is created. With ``known``, the organization is
    read at ``known.at`` at once with the index (one round trip, not two, when the index
    still names it).
    """
    org = await _read_organization(client, settings, known)
    if require_signing and org.mode == LIVE_MODE and settings.signing is None:
        msg = (
            f"{org.display_name} is a live-mode organization (real money), and live requests"
            " must be signed: set PAYRUN_SIGNING_KEY_FILE and PAYRUN_SIGNING_KEY_ID (or"
            " --signing-key-file and --signing-key-id); nothing was created (see"
            " docs/live-mode.md)"
        )
        raise ConfigError(msg)
    return org


async def _read_organization(
    client: BankClient, settings: Settings, known: KnownOrganization | None
) -> Organization:
    bank = redact_url(settings.base_url)
    try:
        if known is None:
            return await client.organization()
        return (await ask_organization(client, known)).organization
    except BankError as exc:
        not_found = isinstance(exc, BankRejectedError) and exc.status == _HTTP_NOT_FOUND
        if type(exc) is BankError or not_found:
            msg = (
                f"{bank} does not answer as the bank's API ({exc}); check the"
                " bank's address (--base-url or PAYRUN_BASE_URL)"
            )
            raise ConfigError(msg) from exc
        if isinstance(exc, BankUnavailableError) and exc.reason == "no-such-host":
            msg = (
                f"no such host: the bank's address {bank} has a name that does"
                " not resolve; check --base-url or PAYRUN_BASE_URL (if it is right, this"
                " machine cannot look names up now: run again later)"
            )
            raise ConfigError(msg) from exc
        if isinstance(exc, BankUnavailableError) and exc.reason == "tls":
            msg = (
                f"cannot talk https with {bank}: {exc}; check the address and"
                " port (a plain http server there?), or, for a certificate the bank's own,"
                " SSL_CERT_FILE"
            )
            raise ConfigError(msg) from exc
        raise


async def ask_organization(
    client: BankClient, known: KnownOrganization | None = None
) -> KnownOrganization:
    """The key's organization as the bank says it now, and the URL its index named (the
    bank client's errors as they are). With ``known``, the index and the organization at
    ``known.at`` are read at once: that answer is the organization when the index names
    ``known.at``, else the one it names is read (each error as the reads one after the
    other would have met it; an index that fails cancels the organization's read)."""
    if known is None:
        return KnownOrganization(*await client.located_organization())
    at = known.at
    answers: dict[str, str | Organization] = {}

    async def index() -> None:
        answers["index"] = await client.organization_url()

    async def organization() -> None:
        answers["organization"] = await client.read_organization(at)

    reads = [Read((0, 0), index, fatal=True), Read((1, 0), organization)]
    await all_at_once(reads, workers=len(reads))
    raise_first_error(reads[:1])
    url = answers["index"]
    assert isinstance(url, str)
    if url != at:
        return KnownOrganization(url, await client.read_organization(url))
    raise_first_error(reads)
    found = answers["organization"]
    assert not isinstance(found, str)
    return KnownOrganization(at, found)
