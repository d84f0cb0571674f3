"""The organization the API key belongs to: the first request of every run.

Input: a ``BankClient`` and the run's ``Settings``. Output: the ``Organization``. An
address that does not answer as the bank's API, or whose host name does not resolve, is
a setting to correct (``ConfigError``, exit 2), not a bank outage to wait out (exit 3); so
is a live-mode organization with no signing key configured.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from payrun.config import redact_url
from payrun.errors import BankError, BankRejectedError, BankUnavailableError, ConfigError

# The bank client is imported only by runs that talk to a bank
if TYPE_CHECKING:
    from payrun.bank import BankClient, Organization
    from payrun.config import Settings

__all__ = ["LIVE_MODE", "find_organization"]

_HTTP_NOT_FOUND = 404


LIVE_MODE = "live-mode"
"""The ``organization-mode`` of an organization that moves real money."""


async def find_organization(
    client: BankClient, settings: Settings, *, require_signing: bool = True
) -> Organization:
    """The API key's organization; an address that does not answer as the bank is a setting.

    The first request goes to the bank's index: a 404 there, or an answer that is not the
    API's JSON, means the base URL points somewhere else (exit 2: running again won't help).
    With ``require_signing``, a live-mode organization and no signing key configured is a
    ``ConfigError`` too, before anything is created.
    """
    org = await _read_organization(client, settings)
    if require_signing and org.mode == LIVE_MODE and settings.signing is None:
        msg = (
            f"{org.display_name} is a live-mode organization (real money), and live requests"
            " must be signed: set PAYRUN_SIGNING_KEY_FILE and PAYRUN_SIGNING_KEY_ID (or"
            " --signing-key-file and --signing-key-id); nothing was created (see"
            " docs/live-mode.md)"
        )
        raise ConfigError(msg)
    return org


async def _read_organization(client: BankClient, settings: Settings) -> Organization:
    bank = redact_url(settings.base_url)
    try:
        return await client.organization()
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
