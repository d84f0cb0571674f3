"""A bank whose lists never end (issue 27, A2).

Every list payrun reads is bounded: by the list's own ``meta.page.total`` where it gives
one, by a page that starts with the item an earlier page started with, by a next page
already read, and by a hard cap (``MAX_LIST_PAGES``). Each ends on one line, exit 3 (a bank
error), with nothing paid. The bank here answers a list with a new ``links.next`` each time;
after ``_GIVE_UP`` pages it ends the list, so that code without the bounds fails these
tests (it pays, or waits out ``--wait``) rather than hanging.

Real CLI runs against the sandbox bank over loopback HTTP, its answers rewritten by
``rewrite_answers``; `payrun run` in a subprocess, or in process (``main``) where the
cap is lowered to keep the test short.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from _run_helpers import (
    Finished,
    count_status,
    ledger_rows,
    make_rows,
    rewrite_answers,
    run,
    write_batch,
)
from _transports import mock_transport
from payrun.bank import BankClient, RetryPolicy
from payrun.bank import client as bank_client
from payrun.cli import main
from payrun.config import Secret, Settings
from payrun.errors import BankError
from payrun.sandbox import RunningSandbox, serve_in_thread

_GIVE_UP = 300
"""Pages after which the test's bank ends its endless list after all."""

_LISTS = {
    "payees": re.compile(r"^/v0/legal-persons/[^/]+/bank/payees$"),
    "payments": re.compile(r"^/v0/bank/accounts/[^/]+/payments$"),
    "accounts": re.compile(r"^/v0/organizations/[^/]+/bank/accounts$"),
    "events": re.compile(r"^/v0/organizations/[^/]+/events$"),
}


@pytest.fixture
def bank() -> Iterator[RunningSandbox]:
    """A fresh sandbox bank for one test."""
    with serve_in_thread(rng_seed=29, deliver_after_ms=50) as sandbox:
        yield sandbox


@dataclass
class Endless:
    """Answers every read of one list with its first page and a new ``links.next``; counts
    the reads. ``shape``: ``repeated`` (the same page again), ``back`` (from the second
    page on, the same next link), ``fresh`` (items never seen before on every page), or
    ``counted`` (fresh, and ``meta.page.total`` counts one page's items)."""

    key: str
    shape: str
    reads: int = 0
    first: dict[str, Any] = field(default_factory=dict)

    def __call__(
        self, method: str, path: str, status: int, body: bytes
    ) -> tuple[int, bytes] | None:
        """The rewrite: this list's page as the shape makes it, else the bank's answer."""
        if method != "GET" or not _LISTS[self.key].match(path):
            return None
        self.reads += 1
        if not self.first:
            self.first = json.loads(body)
        page = json.loads(json.dumps(self.first))
        items: list[dict[str, Any]] = page[self.key]
        if self.shape == "counted":
            page["meta"] = {"page": {"total": len(items)}}
        if self.shape in {"counted", "fresh"}:
            # Other items on every page, none of them seen before
            for item in items:
                for name in ("payee-url", "payment-url", "account-url", "event-url"):
                    if name in item:
                        item[name] = f"{item[name]}x{self.reads}"
        after = "again" if self.shape == "back" and self.reads > 1 else str(self.reads)
        page["links"] = {
            "prev": None,
            "next": None if self.reads >= _GIVE_UP else f"{path}?page[after]={after}",
        }
        return 200, json.dumps(page).encode()


def _one_line(finished: Finished) -> str:
    """The run's error: exactly one line on stderr, no traceback; returned."""
    assert "Traceback" not in finished.stdout + finished.stderr, finished.describe()
    lines = [line for line in finished.stderr.splitlines() if "error" in line.lower()]
    assert len(lines) == 1, finished.describe()
    return lines[0]


CASES = {
    # The list counts its items and sends more
    "payees-counted": ("payees", "counted", "it counts 6 in all but has sent 12"),
    # An empty list counted 0 with a next page, again and again
    "payments-counted": ("payments", "counted", "it counts 0 in all but goes on after 2 pages"),
    # The same page under a new link, no count
    "payees-repeated": (
        "payees",
        "repeated",
        "page 2 starts with an item an earlier page started with",
    ),
    # A next link back to a page already read
    "payments-back": ("payments", "back", "its next page is one already read"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_list_that_never_ends_is_a_bank_error_and_nothing_is_paid(
    bank: RunningSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """A payees or payments list read before paying never ends: exit 3 after a few pages,
    on one line saying why, and no payment or payee made."""
    key, shape, why = CASES[case]
    rows = make_rows(29, 4, payees=2, tag="E")
    endless = Endless(key, shape)
    rewrite_answers(bank, monkeypatch, endless)
    payees_before = len(bank.state.payees)
    finished = run(bank, write_batch(tmp_path / "b.csv", rows), tmp_path / "b.ledger.sqlite")
    assert finished.returncode == 3, finished.describe()
    line = _one_line(finished)
    assert f"the bank's list of {key} does not end: {why}" in line, line
    # Each account's list (two accounts, one owner): at most 3 pages each
    assert endless.reads <= 6, endless.reads  # noqa: PLR2004
    assert bank.state.payments == {}
    assert len(bank.state.payees) == payees_before


def _in_process(
    bank: RunningSandbox, monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> Callable[[], int]:
    """``payrun`` in this process against ``bank`` (so that a constant can be lowered)."""
    monkeypatch.setenv("PAYRUN_BASE_URL", bank.base_url)
    monkeypatch.setenv("PAYRUN_API_KEY", bank.api_key)
    monkeypatch.setenv("PAYRUN_SETTLE_WAIT", "1")
    return lambda: main(argv)


def test_a_list_of_fresh_pages_stops_at_the_hard_cap(
    bank: RunningSandbox,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every page of the payees list holds payees never seen before, with no count: the
    list is read to ``MAX_LIST_PAGES`` (lowered to 25 here) and no further; exit 3 on one
    line naming the limit, nothing paid."""
    monkeypatch.setattr(bank_client, "MAX_LIST_PAGES", 25)
    rows = make_rows(29, 2, payees=1, tag="F")
    rows = [rows[0]]
    endless = Endless("payees", "fresh")
    rewrite_answers(bank, monkeypatch, endless)
    batch = write_batch(tmp_path / "b.csv", rows)
    ledger = tmp_path / "b.ledger.sqlite"
    argv = ["run", str(batch), "--ledger", str(ledger), "--no-confirm-payees"]
    capsys.readouterr()
    assert _in_process(bank, monkeypatch, argv)() == 3
    err = capsys.readouterr().err
    assert "the bank's list of payees does not end: it goes on after 25 pages, payrun's limit" in (
        err
    ), err
    assert len([line for line in err.splitlines() if "error" in line]) == 1, err
    assert endless.reads == 25  # noqa: PLR2004
    assert bank.state.payments == {}


def test_check_with_an_accounts_list_that_never_ends_is_a_bank_error(
    bank: RunningSandbox, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`payrun check` lists the key's accounts; a list counting 2 that goes on: exit 3 on
    one line."""
    endless = Endless("accounts", "counted")
    rewrite_answers(bank, monkeypatch, endless)
    capsys.readouterr()
    assert _in_process(bank, monkeypatch, ["check"])() == 3
    err = capsys.readouterr().err
    assert "the bank's list of accounts does not end: it counts 2 in all" in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert endless.reads == 2  # noqa: PLR2004


def test_an_events_list_that_never_ends_is_left_for_reading_each_submission(
    bank: RunningSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With --wait, the organization's events list never ends: each read of it stops after
    two pages, the wait reads each submission instead, and every row ends delivered."""
    rows = make_rows(29, 3, tag="V")
    endless = Endless("events", "counted")
    rewrite_answers(bank, monkeypatch, endless)
    ledger = tmp_path / "b.ledger.sqlite"
    batch = write_batch(tmp_path / "b.csv", rows)
    finished = run(bank, batch, ledger, "--wait", "--wait-timeout", "60")
    assert finished.returncode == 0, finished.describe()
    assert count_status(ledger, "delivered") == len(rows), ledger_rows(ledger)
    assert endless.reads < _GIVE_UP, endless.reads


# -- the client alone: what ends a list, and what does not ----------------------------------

_BASE = "https://bank.test"
_KEY = "g-test-sk-endless-1234"
_ACCOUNT = "/v0/bank/accounts/ba.one"
_LIST = f"{_ACCOUNT}/payments"


def _payment(n: int) -> dict[str, Any]:
    return {
        "payment-url": f"/v0/payments/pm.{n}",
        "payment-direction": "outbound-payment",
        "payment-amount": {"currency": "GBP", "value": "1.00"},
        "created-at": "2026-11-21T10:00:00Z",
    }


def _page(numbers: range, next_link: str | None, total: int | None) -> dict[str, Any]:
    page: dict[str, Any] = {
        "payments": [_payment(n) for n in numbers],
        "links": {"next": next_link},
    }
    if total is not None:
        page["meta"] = {"page": {"total": total}}
    return page


def _client(pages: list[dict[str, Any]], seen: list[httpx.Request]) -> BankClient:
    """A client whose bank answers each request with the next of ``pages``."""

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=pages[min(len(seen), len(pages)) - 1])

    settings = Settings(base_url=_BASE, api_key=Secret(_KEY))
    return BankClient(mock_transport(handler), settings, retry=RetryPolicy.no_wait(attempts=1))


async def test_a_list_that_grows_while_read_and_ends_on_an_empty_page_is_read_whole() -> None:
    """Counts that grow from page to page, and a last page with nothing on it after a full
    one: every item is read, no error."""
    pages = [
        _page(range(2), f"{_LIST}?page[after]=a", 3),
        _page(range(2, 4), f"{_LIST}?page[after]=b", 5),
        _page(range(4, 5), f"{_LIST}?page[after]=c", 5),
        _page(range(0), None, 5),
    ]
    seen: list[httpx.Request] = []
    async with _client(pages, seen) as bank:
        since = datetime(2026, 11, 1, tzinfo=UTC)
        found = [
            p.url async for p in bank.payments("/v0/bank/accounts/ba.one", created_since=since)
        ]
    assert found == [f"/v0/payments/pm.{n}" for n in range(5)]
    assert len(seen) == 4  # noqa: PLR2004


@pytest.mark.parametrize("form", ["https://elsewhere.test", "//elsewhere.test", "http://bank.test"])
async def test_a_next_link_to_another_origin_is_never_sent_the_key(form: str) -> None:
    """A page whose links.next points at another host or scheme: a bank error naming no
    secret, and every request went to the bank's own origin, none elsewhere."""
    pages = [_page(range(1), f"{form}{_LIST}?page[after]=a", None)]
    seen: list[httpx.Request] = []
    since = datetime(2026, 11, 1, tzinfo=UTC)
    with pytest.raises(BankError, match="payrun sent nothing") as raised:
        async with _client(pages, seen) as bank:
            async for _ in bank.payments(_ACCOUNT, created_since=since):
                pass
    assert _KEY not in str(raised.value)
    assert [(r.url.scheme, r.url.host) for r in seen] == [("https", "bank.test")]
