"""A stored batch's run handed what a fleet's route found of the key's organization
(``KnownOrganization``): the organization is read at once with the index and with the
source accounts' lookups, and what was known is used only when the bank still says the same.
Against a real sandbox bank (loopback HTTP) and a SQLite ledger."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from _run_helpers import bank_problems, make_rows, watch_requests, write_batch
from payrun.bank import BankClient, make_transport
from payrun.config import RunOptions, Secret, Settings, SigningKey, ValidationOptions
from payrun.errors import AuthError, ConfigError, NotConfirmedError, PayrunError
from payrun.ledger import open_ledger
from payrun.run import KnownOrganization, RunOutcome, open_run_ledger, run_stored_batch
from payrun.sandbox import RunningSandbox, default_seed, serve_in_thread

ROWS = 40


def _settings(bank: RunningSandbox) -> Settings:
    return Settings(base_url=bank.base_url, api_key=Secret(bank.api_key))


def _stored(folder: Path, name: str, trial: int) -> tuple[Path, list[object]]:
    """A batch file's rows stored in a new ledger (as the fleet's submit stores them)."""
    rows = make_rows(trial, ROWS, tag="K")
    batch = write_batch(folder / f"{name}.csv", rows)
    ledger = folder / f"{name}.ledger.sqlite"
    open_run_ledger(batch, ledger, ValidationOptions(), RunOptions()).close()
    return ledger, list(rows)


def _pay(bank: RunningSandbox, ledger: Path, known: KnownOrganization | None) -> RunOutcome:
    options = RunOptions(confirm_payees=False, assume_yes=True, settle_wait=1)
    return anyio.run(
        lambda: run_stored_batch(ledger, _settings(bank), options=options, known=known)
    )


def _found(bank: RunningSandbox) -> KnownOrganization:
    """What a route finds: the URL the index names, and the organization there."""

    async def ask() -> KnownOrganization:
        async with BankClient(make_transport(), _settings(bank)) as client:
            at = await client.organization_url()
            return KnownOrganization(at, await client.read_organization(at))

    return anyio.run(ask)


def _bound_to(ledger: Path) -> str | None:
    """The organization the ledger's batch was bound to by its run."""
    with open_ledger(ledger, readonly=True) as opened:
        info = opened.batch()
    assert info is not None
    return info.organization_url


def test_a_known_organization_is_read_at_once_with_the_index_and_the_accounts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Handed the route's answer, the run sends the index, the organization and the account
    searches before any of them is answered (one round trip, not three); without it, the
    organization waits for the index and the searches for the organization. Every row is
    paid once either way."""
    for trial, known in enumerate((False, True)):
        # 50 ms a request: reads sent at once all arrive before the first answer, even on a
        # loaded machine (this bank runs in the test's own process)
        with serve_in_thread(latency_ms=50) as bank:
            ledger, rows = _stored(tmp_path, f"b{trial}", trial)
            given = _found(bank) if known else None
            seen = watch_requests(bank, monkeypatch)
            outcome = _pay(bank, ledger, given)
            assert outcome.exit_code == 0
            assert bank_problems(bank, rows) == []  # type: ignore[arg-type]
        first = {kind: answered for kind, answered in reversed(seen) if kind != "other"}
        # The index asked once, as without the route's answer
        assert [kind for kind, _ in seen].count("index") == 1, seen
        if known:
            assert first == {"index": 0, "organization": 0, "search": 0}, seen
        else:
            assert first["index"] == 0, seen
            assert first["organization"] >= 1, seen
            assert first["search"] >= 2, seen  # noqa: PLR2004


def test_a_known_organization_the_index_no_longer_names_is_not_used(tmp_path: Path) -> None:
    """The key now belongs elsewhere than the route found (the index names another URL):
    the run reads the organization the index names, binds the ledger to it and pays, the
    accounts looked up in the other organization left unused."""
    with serve_in_thread(latency_ms=5) as bank:
        real = _found(bank)
        elsewhere = "/v0/organizations/og-elsewhere"
        stale = KnownOrganization(
            elsewhere,
            replace(
                real.organization,
                url=elsewhere,
                accounts_search_url=f"{elsewhere}/bank/accounts/search",
            ),
        )
        ledger, rows = _stored(tmp_path, "moved", 3)
        outcome = _pay(bank, ledger, stale)
        assert outcome.exit_code == 0
        assert bank_problems(bank, rows) == []  # type: ignore[arg-type]
    assert _bound_to(ledger) == real.organization.url


def test_an_organization_that_changed_since_the_route_is_looked_up_again(
    tmp_path: Path,
) -> None:
    """The index still names the URL the route found, but the organization there says other
    links now: the accounts looked up through the old links (none found there) are
    dropped and looked up again in the organization as it is, and every row is paid."""
    with serve_in_thread(latency_ms=5) as bank:
        real = _found(bank)
        old_links = replace(
            real.organization,
            accounts_search_url=f"{real.organization.url}/bank/accounts/search-gone",
        )
        ledger, rows = _stored(tmp_path, "changed", 4)
        outcome = _pay(bank, ledger, KnownOrganization(real.at, old_links))
        assert outcome.exit_code == 0
        assert [row.status.value for row in outcome.rows] == ["submitted"] * ROWS
        assert bank_problems(bank, rows) == []  # type: ignore[arg-type]
    assert _bound_to(ledger) == real.organization.url


async def _answer(send: Any, status: int, body: bytes) -> None:
    """A raw ASGI answer with a JSON body."""
    headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def test_a_refused_organization_read_cancels_the_account_searches_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 401 on the organization ends the run at once: no account search (503s) is retried."""
    with serve_in_thread(latency_ms=5) as bank:
        given = _found(bank)
        ledger, _ = _stored(tmp_path, "refused", 5)
        searches: list[str] = []

        async def refusing(scope: Any, receive: Any, send: Any) -> None:
            path = str(scope["path"])
            if path == given.at:
                await _answer(send, 401, b'{"errors":[{"title":"unauthorized"}]}')
            elif path.endswith("/bank/accounts/search"):
                searches.append(path)
                await anyio.sleep(0.3)
                await _answer(send, 503, b'{"errors":[{"title":"unavailable"}]}')
            else:
                await serve_api(scope, receive, send)

        serve_api = bank.app._serve_api  # noqa: SLF001 - the server's own request handler
        monkeypatch.setattr(bank.app, "_serve_api", refusing)
        began = time.monotonic()
        with pytest.raises(AuthError):
            _pay(bank, ledger, given)
        took = time.monotonic() - began
    with open_ledger(ledger, readonly=True) as opened:
        sources = len({row.source_account for row in opened.rows()})
    assert len(searches) <= sources, searches
    assert took < 2, took  # noqa: PLR2004


def _live_settings(bank: RunningSandbox, *, signed: bool) -> Settings:
    key = SigningKey("k1", Ed25519PrivateKey.generate()) if signed else None
    return replace(_settings(bank), signing=key)


@pytest.mark.parametrize(
    ("signed", "refused"),
    [(False, ConfigError), (True, NotConfirmedError)],
    ids=["unsigned", "no-one"],
)
def test_a_known_live_organization_the_run_refuses_reads_no_account(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, signed: bool, refused: type[PayrunError]
) -> None:
    """A live-mode organization the run refuses (no signing key, no one) sends no search."""
    seed = default_seed()
    seed["organization"] = {**seed["organization"], "organization-mode": "live-mode"}
    with serve_in_thread(seed=seed) as bank:
        given = _found(bank)
        ledger, _ = _stored(tmp_path, "live", 6)
        seen = watch_requests(bank, monkeypatch)
        settings = _live_settings(bank, signed=signed)
        options = RunOptions(confirm_payees=False, settle_wait=1)
        with pytest.raises(refused):
            anyio.run(lambda: run_stored_batch(ledger, settings, options=options, known=given))
    assert [kind for kind, _ in seen] == ["index", "organization"], seen
