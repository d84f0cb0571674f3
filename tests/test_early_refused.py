"""Rows paid while the payee list is still read (``Preflight.take_early``): never in a run
of an approved plan, nor for a live-mode organization, whoever asks (issue 32's review).

The in-process sandbox bank (an ASGI transport) holds every payee page but the first, so
``read_accounts`` offers its ``early`` callback the rows whose payee is on the first page.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

import anyio
import pytest

from _transports import asgi_transport
from payrun._models import ApprovedRows, LedgerRow, RowStatus, plan_key
from payrun.bank import BankAccount, BankClient, RetryPolicy
from payrun.config import RunOptions, Secret, Settings
from payrun.run._book import RowBook
from payrun.run._preflight import Preflight
from payrun.sandbox import create_app

_SECRET = "sandbox-test-key"
_SETTINGS = Settings(base_url="http://sandbox", api_key=Secret(_SECRET))
_SOURCE = "040004 50000000"
# Two pages of 200: the newest (seeded last) on the first
_PAYEES = 250


def _seed(mode: str) -> dict[str, Any]:
    """One account owned by the organization, with ``_PAYEES`` payees."""
    return {
        "organization": {"display-name": "Early Ltd", "organization-mode": mode},
        "legal-persons": [],
        "accounts": [
            {
                "display-name": "Early",
                "sort-code": "040004",
                "account-number": "50000000",
                "balance": "1000000.00",
                "owner": "org",
            }
        ],
        "payees": [
            {
                "owner": "org",
                "account-holder": f"Supplier {i}",
                "sort-code": "200000",
                "account-number": f"{72000000 + i:08d}",
            }
            for i in range(_PAYEES)
        ],
    }


def _rows() -> list[LedgerRow]:
    """Rows paying payees of the first page (the newest)."""
    return [
        LedgerRow(
            row=n + 2,
            row_id=None,
            payee_name=f"Supplier {i}",
            sort_code="200000",
            account_number=f"{72000000 + i:08d}",
            amount=Decimal("5.00"),
            reference=f"S-{i}",
            source_account=_SOURCE,
            status=RowStatus.PENDING,
        )
        for n, i in enumerate(range(_PAYEES - 10, _PAYEES))
    ]


def _plan(rows: list[LedgerRow]) -> ApprovedRows:
    """An approved plan of every row (no new payee)."""
    return ApprovedRows(
        plan_id="plan-1", rows=frozenset(plan_key(r) for r in rows), new_payee_rows=frozenset()
    )


def _held_app(mode: str) -> Any:
    """The sandbox, answering every payee page but the first after half a second."""
    app = create_app(seed=_seed(mode), api_key=_SECRET)
    serve_api = app._serve_api  # noqa: SLF001 - the server's own request handler

    async def handle(scope: Any, receive: Any, send: Any) -> None:
        query = scope["query_string"]
        later = b"page%5Bafter%5D" in query or b"page[after]" in query
        if scope["method"] == "GET" and scope["path"].endswith("/bank/payees") and later:
            await anyio.sleep(0.5)
        await serve_api(scope, receive, send)

    app._serve_api = handle  # type: ignore[method-assign]  # noqa: SLF001
    return app


async def _offered_early(mode: str, options: Callable[[list[LedgerRow]], RunOptions]) -> int:
    """How many rows ``read_accounts`` offered to pay before the payee list was read."""
    rows = _rows()
    app = _held_app(mode)
    offered: list[LedgerRow] = []

    def early(account: BankAccount, taken: list[LedgerRow]) -> None:
        offered.extend(taken)

    async with BankClient(asgi_transport(app), _SETTINGS, retry=RetryPolicy.no_wait()) as client:
        org = await client.organization()
        checks = Preflight(client, org, RowBook(rows), options(rows))
        await checks.check_accounts()
        await checks.read_accounts(early=early)
    return len(offered)


@pytest.mark.parametrize(
    ("mode", "options"),
    [
        ("test-mode", lambda rows: RunOptions(plan=_plan(rows))),
        ("live-mode", lambda rows: RunOptions()),
    ],
    ids=["plan", "live"],
)
async def test_no_row_is_taken_early_in_a_plans_run_or_for_a_live_organization(
    mode: str, options: Callable[[list[LedgerRow]], RunOptions]
) -> None:
    """Given an ``early`` callback, preflight offers it no row of a ``--plan`` run nor of a
    live-mode organization's run: ``take_early`` itself refuses, not only its caller."""
    assert await _offered_early(mode, options) == 0


async def test_an_ordinary_run_takes_rows_early() -> None:
    """The same rows of a test-mode run without a plan are offered early (the setup above
    can take rows early)."""
    assert await _offered_early("test-mode", lambda rows: RunOptions()) == 10
