"""BankClient against single faults (a mock transport) and real sockets that misbehave."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import anyio
import httpx
import pytest

from _transports import mock_transport
from payrun.bank import AdaptiveLimiter, BankClient, PreparedRequest, RetryPolicy, make_transport
from payrun.bank.wire import parse_payment
from payrun.config import Secret, Settings
from payrun.errors import (
    AuthError,
    BankError,
    BankRejectedError,
    BankUnavailableError,
    OutcomeUnknownError,
    RateLimitedError,
)

SECRET = "g-test-sk-very-secret-1234"
BASE = "https://bank.test"
ACCOUNT = "/v0/bank/accounts/ba.one"
PAYEE = "/v0/payees/pe.one"
PAYMENT = "/v0/payments/pm.one"
Handler = Callable[[httpx.Request], httpx.Response]


def _account(number: str = "30000001", sort_code: str = "040004", **extra: Any) -> dict[str, Any]:
    return {
        "account-url": ACCOUNT,
        "display-name": "Payroll",
        "account-status": "open",
        "account-restricted": False,
        "available-balance": {"currency": "GBP", "value": "1000.00"},
        "account-balance": {"currency": "GBP", "value": "1200.50"},
        "owner-url": "/v0/legal-persons/lp.owner",
        "bank-addresses": [
            {"account-holder": "Acme", "bank-id": sort_code, "account-number": number}
        ],
        "account-payments-url": f"{ACCOUNT}/payments",
        "bank-account-restrictions-url": f"{ACCOUNT}/restrictions",
        "some-future-field": {"x": 1},
        **extra,
    }


def _payment(creditor: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "payment-url": PAYMENT,
        "payment-direction": "outbound-payment",
        "creditor": creditor or {"creditor-type": "payee", "payee-url": PAYEE},
        "payment-amount": {"currency": "GBP", "value": "1234.50"},
        "payment-reference": "INV-1",
        "created-at": "2026-11-21T10:00:00.123Z",
        "payment-type": "credit-transfer",
    }


def _submission(status: str = "processing") -> dict[str, Any]:
    return {
        "submission-url": "/v0/submissions/ps.one",
        "payment-url": PAYMENT,
        "submission-status": status,
        "created-at": "2026-11-21T10:00:01+00:00",
    }


class _Recorder:
    """A MockTransport handler replaying scripted answers and recording requests."""

    def __init__(self, *answers: httpx.Response | Exception) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def _bank(
    handler: Handler, *, limiter: AdaptiveLimiter | None = None, attempts: int = 4
) -> BankClient:
    settings = Settings(base_url=BASE, api_key=Secret(SECRET))
    retry = RetryPolicy.no_wait(attempts=attempts)
    return BankClient(mock_transport(handler), settings, limiter=limiter, retry=retry)


def _ok(body: dict[str, Any], status: int = 200) -> httpx.Response:
    return httpx.Response(status, json=body)


async def test_create_payment_sends_the_payee_creditor_and_money() -> None:
    """The create body names the payee, GBP and a two-decimal amount; no reference if None."""
    rec = _Recorder(_ok(_payment(), 201))
    async with _bank(rec) as bank:
        payment = await bank.create_payment(
            ACCOUNT, payee_url=PAYEE, amount=Decimal("1234.5"), reference=None
        )
    request = rec.requests[0]
    assert (request.method, request.url.path) == ("POST", f"{ACCOUNT}/payments")
    assert json.loads(request.content) == {
        "creditor": {"creditor-type": "payee", "payee-url": PAYEE},
        "payment-amount": {"currency": "GBP", "value": "1234.50"},
    }
    assert request.headers["authorization"] == f"ServiceAPIKey {SECRET}"
    assert payment.amount == Decimal("1234.50")
    assert payment.creditor_payee_url == PAYEE
    assert payment.created_at == datetime(2026, 11, 21, 10, 0, 0, 123000, tzinfo=UTC)


async def test_create_payment_sends_the_reference_when_given() -> None:
    """A reference goes out as payment-reference."""
    rec = _Recorder(_ok(_payment(), 201))
    async with _bank(rec) as bank:
        await bank.create_payment(ACCOUNT, payee_url=PAYEE, amount=Decimal(1), reference="R1")
    assert json.loads(rec.requests[0].content)["payment-reference"] == "R1"


async def test_rate_limited_write_is_retried_and_shrinks_the_limit() -> None:
    """A 429 on submit is retried (it never took effect) and halves the in-flight limit."""
    rec = _Recorder(httpx.Response(429), _ok(_submission()))
    limiter = AdaptiveLimiter(50)
    async with _bank(rec, limiter=limiter) as bank:
        submission = await bank.submit_payment(PAYMENT)
    assert submission.status == "processing"
    assert len(rec.requests) == 2
    assert json.loads(rec.requests[1].content) == {"payment-scheme": "fps"}
    assert limiter.limit == 25


async def test_rate_limited_until_attempts_run_out() -> None:
    """Endless 429s end in RateLimitedError after the policy's attempts."""
    rec = _Recorder(httpx.Response(429))
    async with _bank(rec, attempts=3) as bank:
        with pytest.raises(RateLimitedError):
            await bank.get_account(ACCOUNT)
    assert len(rec.requests) == 3


@pytest.mark.parametrize("status", [500, 502, 503])
async def test_server_error_on_a_write_is_not_resent(status: int) -> None:
    """A 5xx on create payment raises OutcomeUnknownError after exactly one request."""
    rec = _Recorder(httpx.Response(status), _ok(_payment(), 201))
    async with _bank(rec) as bank:
        with pytest.raises(OutcomeUnknownError) as info:
            await bank.create_payment(ACCOUNT, payee_url=PAYEE, amount=Decimal(1), reference="R")
    assert len(rec.requests) == 1
    assert info.value.status == status


@pytest.mark.parametrize(
    "fault",
    [
        httpx.ReadTimeout("read timed out"),
        httpx.WriteTimeout("write timed out"),
        httpx.RemoteProtocolError("server disconnected"),
        httpx.ReadError("connection reset"),
    ],
)
async def test_lost_answer_on_a_write_is_not_resent(fault: Exception) -> None:
    """A timeout or reset after sending a submit raises OutcomeUnknownError, one request."""
    rec = _Recorder(fault, _ok(_submission()))
    async with _bank(rec) as bank:
        with pytest.raises(OutcomeUnknownError):
            await bank.submit_payment(PAYMENT)
    assert len(rec.requests) == 1


@pytest.mark.parametrize(
    "fault", [httpx.ConnectError("refused"), httpx.ConnectTimeout("connect"), httpx.PoolTimeout("")]
)
async def test_write_that_never_left_is_retried(fault: Exception) -> None:
    """A connection refused before sending is safe to resend, even for create payment."""
    rec = _Recorder(fault, _ok(_payment(), 201))
    async with _bank(rec) as bank:
        payment = await bank.create_payment(
            ACCOUNT, payee_url=PAYEE, amount=Decimal(1), reference=None
        )
    assert payment.url == PAYMENT
    assert len(rec.requests) == 2


async def test_write_that_never_left_gives_up_as_unavailable() -> None:
    """When the bank stays unreachable the error says so and is a BankUnavailableError."""
    rec = _Recorder(httpx.ConnectError("refused"))
    async with _bank(rec, attempts=2) as bank:
        with pytest.raises(BankUnavailableError, match="could not reach the bank"):
            await bank.create_payee(
                "/v0/legal-persons/lp.x", name="A", sort_code="1", account_number="2"
            )
    assert len(rec.requests) == 2


@pytest.mark.parametrize(
    "fault", [httpx.ReadTimeout("slow"), httpx.RemoteProtocolError("eof"), httpx.Response(503)]
)
async def test_read_is_retried_after_a_timeout_reset_or_5xx(
    fault: httpx.Response | Exception,
) -> None:
    """Reads are idempotent: a timeout, a reset or a 5xx is retried."""
    rec = _Recorder(fault, _ok(_account()))
    async with _bank(rec) as bank:
        account = await bank.get_account(ACCOUNT)
    assert account.available_balance == Decimal("1000.00")
    assert len(rec.requests) == 2


async def test_account_search_is_retried_like_a_read() -> None:
    """The accounts search is a read-only POST, so a timeout is retried."""
    results = {"search-results": [_account()]}
    rec = _Recorder(httpx.ReadTimeout("slow"), _ok(results))
    async with _bank(rec) as bank:
        org = await _org(bank)
        found = await bank.find_account(org, sort_code="04-00-04", account_number="30000001")
    assert found is not None


async def test_every_attempt_holds_exactly_one_slot() -> None:
    """Each request, retries included, is on the wire holding one slot; none is kept after."""
    limiter = AdaptiveLimiter(5)
    in_flight: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        in_flight.append(limiter.in_flight)
        return httpx.Response(429) if len(in_flight) < 3 else _ok(_account())

    async with _bank(handler, limiter=limiter) as bank:
        await bank.get_account(ACCOUNT)
    assert in_flight == [1, 1, 1]
    assert limiter.in_flight == 0


@pytest.mark.parametrize("status", [401, 403])
async def test_auth_failure_names_the_fix_and_hides_the_key(status: int) -> None:
    """401/403 raise AuthError; the key is in no message, repr or detail, even if echoed."""
    body = {"errors": [{"title": "Unauthorized", "detail": f"bad key {SECRET}"}]}
    rec = _Recorder(httpx.Response(status, json=body))
    async with _bank(rec) as bank:
        with pytest.raises(AuthError) as info:
            await bank.get_account(ACCOUNT)
        assert SECRET not in repr(bank)
    error = info.value
    for text in (str(error), repr(error), repr(error.args), str(error.detail)):
        assert SECRET not in text
    assert len(rec.requests) == 1
    if status == 401:
        assert "check the API key (PAYRUN_API_KEY" in str(error)


@pytest.mark.parametrize(
    ("status", "body", "code"),
    [
        (
            422,
            {"errors": [{"status": "422", "title": "insufficient-funds", "detail": "x"}]},
            "insufficient-funds",
        ),
        (
            422,
            {"errors": [{"title": "Refused", "detail": "account-restricted: frozen"}]},
            "account-restricted",
        ),
        (422, {"errors": [{"code": "payee-deactivated"}]}, "payee-deactivated"),
        (422, "bank-account-closed", "bank-account-closed"),
        (
            422,
            {"errors": [{"title": "payment-amount-exceeds-scheme-limit"}]},
            "payment-amount-exceeds-scheme-limit",
        ),
        (409, {"errors": [{"title": "duplicate-payee", "detail": "exists"}]}, "duplicate-payee"),
        (410, "", None),
        (404, {"errors": [{"title": "Not Found", "detail": "no such payment"}]}, None),
        (400, {"detail": "bad", "source": "/payment-amount"}, None),
    ],
)
async def test_refusals_carry_the_bank_code(status: int, body: Any, code: str | None) -> None:
    """4xx refusals raise BankRejectedError with the code found anywhere in the body."""
    text = body if isinstance(body, str) else json.dumps(body)
    rec = _Recorder(httpx.Response(status, text=text))
    async with _bank(rec) as bank:
        with pytest.raises(BankRejectedError) as info:
            await bank.submit_payment(PAYMENT)
    assert (info.value.status, info.value.code) == (status, code)
    assert len(rec.requests) == 1


async def test_unreadable_answer_to_a_write_is_an_unknown_outcome() -> None:
    """A 201 whose body cannot be read may still have created the payment."""
    rec = _Recorder(httpx.Response(201, text="<html>oops</html>"))
    async with _bank(rec) as bank:
        with pytest.raises(OutcomeUnknownError):
            await bank.create_payment(ACCOUNT, payee_url=PAYEE, amount=Decimal(1), reference=None)


async def test_unreadable_answer_to_a_read_is_a_bank_error() -> None:
    """A read whose answer lacks required fields raises a plain BankError."""
    rec = _Recorder(_ok({"account-url": ACCOUNT}))
    async with _bank(rec) as bank:
        with pytest.raises(BankError, match="could not be read") as info:
            await bank.get_account(ACCOUNT)
    assert type(info.value) is BankError
    assert "it has no " in str(info.value) and "Error" not in str(info.value), info.value


async def test_an_answer_with_a_malformed_field_says_so_in_words() -> None:
    """A field of the wrong kind is named as an unexpected value, not as a Python error."""
    answer = {"payment-url": PAYMENT, "payment-amount": {"value": "ten", "currency": "GBP"}}
    rec = _Recorder(_ok(answer))
    async with _bank(rec) as bank:
        with pytest.raises(BankError, match="could not be read") as info:
            await bank.get_payment(PAYMENT)
    assert "an amount is not a number" in str(info.value), info.value
    assert "Error" not in str(info.value) and "class" not in str(info.value), info.value


async def test_an_html_error_page_is_one_short_line() -> None:
    """A 404 answered with a multi-line HTML page gives a one-line, capped message."""
    page = (
        "<!DOCTYPE html>\n<html>\n<head>\n<title>404 Not Found</title>\n"
        "<style>\nbody { font: 12px sans-serif; }\n</style>\n</head>\n<body>\n"
        "<h1>Not Found</h1>\n\n<p>The requested URL was not found on this server.</p>\n"
        + "<p>padding padding padding</p>\n" * 40
        + "</body>\n</html>\n"
    )
    rec = _Recorder(httpx.Response(404, text=page, headers={"content-type": "text/html"}))
    async with _bank(rec) as bank:
        with pytest.raises(BankRejectedError) as info:
            await bank.get_account(ACCOUNT)
    message = str(info.value)
    assert "\n" not in message and "<" not in message and "font" not in message
    assert "Not Found The requested URL was not found on this server." in message
    assert len(message) < 200


@pytest.mark.parametrize(
    ("body", "problem"),
    [(b"<html>hello</html>", "was not JSON"), (b"[1]", "was JSON but not an object")],
)
async def test_a_2xx_answer_that_is_not_a_json_object_is_said_plainly(
    body: bytes, problem: str
) -> None:
    """A 200 read whose body is not a JSON object names the request, not a decoder's error."""
    rec = _Recorder(httpx.Response(200, content=body))
    async with _bank(rec) as bank:
        with pytest.raises(BankError) as info:
            await bank.get_account(ACCOUNT)
    assert type(info.value) is BankError
    assert str(info.value) == f"the bank's answer to GET {ACCOUNT} {problem}"


async def _org(bank: BankClient) -> Any:
    from payrun.bank.wire import parse_organization

    return parse_organization({"organization-url": "/v0/organizations/og.one"})


async def test_organization_follows_index_then_key() -> None:
    """organization() reads the index, the API key, then the organization and its links."""
    answers = {
        "/v0/index": {"api-key-url": "/v0/api-keys/ak.one", "organizations-url": "x"},
        "/v0/api-keys/ak.one": {"organization-url": "/v0/organizations/og.one"},
        "/v0/organizations/og.one": {
            "organization-url": "/v0/organizations/og.one",
            "display-name": "Acme",
            "organization-mode": "test-mode",
            "own-legal-person-url": "/v0/legal-persons/lp.own",
            "organization-events-url": "/v0/organizations/og.one/events",
            "organization-bank-accounts-search-url": "/v0/organizations/og.one/bank/a/search",
        },
    }
    async with _bank(lambda r: _ok(answers[r.url.path])) as bank:
        org = await bank.organization()
    assert org.display_name == "Acme"
    assert org.mode == "test-mode"
    assert org.own_legal_person_url == "/v0/legal-persons/lp.own"
    assert org.accounts_search_url == "/v0/organizations/og.one/bank/a/search"
    assert org.payments_url == "/v0/organizations/og.one/payments"


async def test_find_account_matches_sort_code_and_number_locally() -> None:
    """Search matches account-number prefixes; only the exact address is returned."""
    results = {
        "search-results": [
            _account(number="30000001", sort_code="111111"),
            _account(number="300000012"[:8], sort_code="040004") | {"account-url": "/v0/b/2"},
        ]
    }
    rec = _Recorder(_ok(results))
    async with _bank(rec) as bank:
        org = await _org(bank)
        found = await bank.find_account(org, sort_code="040004", account_number="30000001")
        missing = await bank.find_account(org, sort_code="999999", account_number="30000001")
    assert found is not None and found.url == "/v0/b/2"
    assert missing is None
    assert json.loads(rec.requests[0].content) == {"search-query": "30000001"}


async def test_active_restrictions_filters_and_tolerates_hidden_types() -> None:
    """Restrictions are asked for with the active filter; a sensitive one has type None."""
    body = {
        "bank-account-restrictions": [
            {
                "bank-account-restriction-url": "/r/1",
                "restriction-status": "active",
                "restriction-type": "freeze",
            },
            {"bank-account-restriction-url": "/r/2", "restriction-status": "active"},
            {"bank-account-restriction-url": "/r/3", "restriction-status": "lifted"},
        ],
        "links": {"prev": None, "next": None},
    }
    rec = _Recorder(_ok(body))
    async with _bank(rec) as bank:
        account = await _account_value()
        found = await bank.active_restrictions(account)
    assert [(r.url, r.type) for r in found] == [("/r/1", "freeze"), ("/r/2", None)]
    assert rec.requests[0].url.params["filter[restriction-status][eq]"] == "active"


async def _account_value(**extra: Any) -> Any:
    from payrun.bank.wire import parse_account

    return parse_account(_account(**extra))


@pytest.mark.parametrize("restricted", [True, False])
async def test_active_restrictions_fall_back_to_the_flag_on_404(restricted: bool) -> None:
    """Without a restrictions list (404) the account's restricted flag decides."""
    rec = _Recorder(httpx.Response(404))
    async with _bank(rec) as bank:
        account = await _account_value(**{"account-restricted": restricted})
        found = await bank.active_restrictions(account)
    assert [r.type for r in found] == ([None] if restricted else [])


async def test_payees_follow_next_links() -> None:
    """Payees are listed 200 a page, following links.next until it is null."""
    lp = "/v0/legal-persons/lp.owner"

    def payee(n: int) -> dict[str, Any]:
        return {
            "payee-url": f"/v0/payees/pe.{n}",
            "legal-person-url": lp,
            "account-holder": f"P{n}",
            "account-number": "12345678",
            "bank-id": "040004",
            "payee-status": "active" if n else "deactivated",
            "country-code": "GB",
        }

    cop = {
        "cop-request-url": "/v0/cop-requests/cp.2",
        "account": {"secondary-reference-data": "ROLL 7"},
    }
    pages = [
        _ok({"payees": [payee(0), payee(1)], "links": {"next": f"{lp}/bank/payees?page[after]=x"}}),
        _ok(
            {
                "payees": [{**payee(2), "cop-request-url": "/v0/cop-requests/cp.2"}],
                "links": {"prev": "p", "next": None},
                "included": {"cop-requests": [cop]},
            }
        ),
    ]
    rec = _Recorder(*pages)
    async with _bank(rec) as bank:
        found = [p async for p in bank.payees(lp)]
    assert [p.url for p in found] == ["/v0/payees/pe.0", "/v0/payees/pe.1", "/v0/payees/pe.2"]
    assert found[0].status == "deactivated"
    assert [p.srd for p in found] == [None, None, "ROLL 7"]  # the SRD of its CoP request
    assert rec.requests[0].url.params["page[size]"] == "200"
    assert rec.requests[0].url.params["include"] == "cop-requests"
    assert rec.requests[1].url.params["page[after]"] == "x"


async def test_confirm_and_create_payee_bodies() -> None:
    """CoP and create-payee send the documented kebab-case bodies and parse the answers."""
    cop = {
        "cop-request-url": "/v0/cop/cp.1",
        "account": {},
        "cop-response": {
            "status": "verified",
            "result": "close-match",
            "reason": "close-match-name",
            "suggested-name": "Jon Smith",
        },
    }
    created = {
        "payee-url": PAYEE,
        "legal-person-url": "/lp",
        "account-holder": "John Smith",
        "account-number": "12345678",
        "bank-id": "040004",
        "payee-status": "active",
    }
    rec = _Recorder(_ok(cop, 201), _ok(created, 201))
    async with _bank(rec) as bank:
        org = await _org(bank)
        result = await bank.confirm_payee(
            org,
            name="John Smith",
            sort_code="040004",
            account_number="12345678",
            classification="personal",
            requester_url="/lp",
        )
        new = await bank.create_payee(
            "/lp",
            name="John Smith",
            sort_code="040004",
            account_number="12345678",
            cop_request_url=result.url,
        )
    assert (result.result, result.reason, result.suggested_name) == (
        "close-match",
        "close-match-name",
        "Jon Smith",
    )
    assert rec.requests[0].url.path == "/v0/organizations/og.one/cop-request"
    assert json.loads(rec.requests[0].content) == {
        "account-number": "12345678",
        "bank-id": "040004",
        "account-classification": "personal",
        "name": "John Smith",
        "requester-legal-person-url": "/lp",
    }
    assert json.loads(rec.requests[1].content) == {
        "account-holder": "John Smith",
        "account-number": "12345678",
        "bank-id": "040004",
        "cop-request-url": "/v0/cop/cp.1",
    }
    assert new.status == "active"


async def test_payments_listing_sends_the_reconciliation_filters() -> None:
    """Payments are listed oldest first, 200 a page, since a UTC moment, outbound only."""
    rec = _Recorder(_ok({"payments": [_payment()], "links": {"next": None}}))
    since = datetime(2026, 11, 21, 9, 59, tzinfo=UTC)
    async with _bank(rec) as bank:
        found = [p async for p in bank.payments(await _account_value(), created_since=since)]
    params = rec.requests[0].url.params
    assert rec.requests[0].url.path == f"{ACCOUNT}/payments"
    assert dict(params) == {
        "page[size]": "200",
        "sort": "created-at",
        "filter[created-at][gte]": "2026-11-21T09:59:00Z",
        "filter[payment-direction][eq]": "outbound-payment",
        "include[]": "latest-submission",
    }
    assert [p.reference for p in found] == ["INV-1"]


async def test_payments_listing_reads_the_latest_submission_status_from_included() -> None:
    """The included latest submissions give each payment its submission's status."""
    paid = {**_payment(), "latest-submission-url": "/v0/submissions/ps.1"}
    unpaid = {**_payment(), "payment-url": "/v0/payments/pm.2"}
    included = {
        "submissions": [
            {"submission-url": "/v0/submissions/ps.1", "submission-status": "failed"},
            "not an object",
        ]
    }
    rec = _Recorder(_ok({"payments": [paid, unpaid], "links": {}, "included": included}))
    since = datetime(2026, 11, 21, 9, 59, tzinfo=UTC)
    async with _bank(rec) as bank:
        found = [p async for p in bank.payments(await _account_value(), created_since=since)]
    assert [p.latest_submission_status for p in found] == ["failed", None]


async def test_events_listing_and_parsing() -> None:
    """Events are read by type since a moment, oldest first; payloads stay raw dicts."""
    event = {
        "event-url": "/v0/events/ev.1",
        "event-type": "submission-updated",
        "event-payload": {"submission-url": "/s/1", "submission-status": "delivered"},
        "created-at": "2026-11-21T10:00:02Z",
    }
    rec = _Recorder(_ok({"events": [event], "links": {"next": None}}))
    async with _bank(rec) as bank:
        org = await _org(bank)
        since = datetime(2026, 11, 21, 10, 0)
        found = [
            e async for e in bank.events(org, event_type="submission-updated", created_since=since)
        ]
    params = rec.requests[0].url.params
    assert params["filter[event-type][eq]"] == "submission-updated"
    assert params["filter[created-at][gte]"] == "2026-11-21T10:00:00Z"
    assert params["sort"] == "created-at"
    assert found[0].payload["submission-status"] == "delivered"


async def test_submissions_and_single_reads() -> None:
    """Submissions of a payment, one submission and one payment are read and parsed."""
    rec = _Recorder(
        _ok({"submissions": [_submission()]}),
        _ok(_submission("delivered")),
        _ok(_payment() | {"latest-submission-url": "/v0/submissions/ps.one"}),
    )
    async with _bank(rec) as bank:
        subs = await bank.payment_submissions(PAYMENT)
        one = await bank.get_submission("/v0/submissions/ps.one")
        payment = await bank.get_payment(PAYMENT)
    assert [s.status for s in subs] == ["processing"]
    assert one.status == "delivered"
    assert payment.latest_submission_url == "/v0/submissions/ps.one"
    assert rec.requests[0].url.path == f"{PAYMENT}/submissions"


@pytest.mark.parametrize(
    ("creditor", "sort_code", "number"),
    [
        (
            {
                "creditor-type": "uk-domestic",
                "uk-domestic-sort-code": "040004",
                "uk-domestic-account-number": "12345678",
                "account-holder": "A",
            },
            "040004",
            "12345678",
        ),
        (
            {
                "creditor-type": "uk-domestic",
                "bank-id": "040005",
                "account-number": "87654321",
                "bank-id-code": "gbdsc",
            },
            "040005",
            "87654321",
        ),
        (
            {"creditor-type": "griffin-bank-account", "account-url": "/v0/bank/accounts/ba.2"},
            None,
            None,
        ),
        (
            {"creditor-type": "service-bank-account", "account-url": "/v0/bank/accounts/ba.2"},
            None,
            None,
        ),
        ({"creditor-type": "some-new-shape"}, None, None),
    ],
)
def test_every_creditor_shape_parses(
    creditor: dict[str, Any], sort_code: str | None, number: str | None
) -> None:
    """New and legacy uk-domestic names, bank-account and unknown creditors all parse."""
    payment = parse_payment(_payment(creditor) | {"rejected-at": "2026-11-21T11:00:00Z"})
    assert (payment.creditor_sort_code, payment.creditor_account_number) == (sort_code, number)
    assert payment.creditor_type == creditor["creditor-type"]
    assert payment.rejected


async def test_the_client_sends_the_base_url_authorization_and_accept() -> None:
    """Requests go to the base URL with the settings' Authorization scheme and key, and
    Accept JSON; the key is hidden in the request's repr."""
    settings = Settings(base_url=BASE, api_key=Secret(SECRET), auth_scheme="GriffinAPIKey")
    rec = _Recorder(_ok(_account()))
    transport = mock_transport(rec)
    async with BankClient(transport, settings, retry=RetryPolicy.no_wait()) as bank:
        await bank.get_account(ACCOUNT)
    request = rec.requests[0]
    assert str(request.url) == BASE + ACCOUNT
    assert request.headers["authorization"] == f"GriffinAPIKey {SECRET}"
    assert request.headers["accept"] == "application/json"
    assert SECRET not in repr(transport.requests[0])


# -- real sockets: what each transport raises must classify right ----------------------


@pytest.fixture
def free_port() -> Iterator[int]:
    """A loopback port with nothing listening on it."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    yield port


async def test_refused_connection_is_unavailable(free_port: int) -> None:
    """Connection refused is BankUnavailableError (never sent)."""
    settings = Settings(base_url=f"http://127.0.0.1:{free_port}", api_key=Secret(SECRET))
    transport = make_transport(timeout=5)
    async with BankClient(transport, settings, retry=RetryPolicy.no_wait(attempts=2)) as bank:
        with pytest.raises(BankUnavailableError) as info:
            await bank.create_payment(ACCOUNT, payee_url=PAYEE, amount=Decimal(1), reference=None)
    assert SECRET not in str(info.value)


@asynccontextmanager
async def _raw_bank(
    handler: Callable[[anyio.abc.SocketStream], Awaitable[None]],
) -> AsyncIterator[Settings]:
    """A loopback 'bank' whose every connection goes to ``handler``; yields its settings."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    with anyio.fail_after(10):
        async with listener, anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, handler)
            yield Settings(base_url=f"http://127.0.0.1:{port}", api_key=Secret(SECRET))
            tg.cancel_scope.cancel()


async def test_a_redirect_to_a_write_is_not_followed_and_is_unknown() -> None:
    """A 307 to create payment: never followed nor resent; an unknown outcome, one request."""
    received: list[bytes] = []

    async def redirect(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            received.append(await stream.receive())
            await stream.send(
                b"HTTP/1.1 307 Temporary Redirect\r\nLocation: http://127.0.0.1:9/elsewhere\r\n"
                b"Content-Length: 0\r\nConnection: close\r\n\r\n"
            )

    async with _raw_bank(redirect) as settings:
        transport = make_transport(timeout=5)
        async with BankClient(transport, settings, retry=RetryPolicy.no_wait()) as bank:
            with pytest.raises(OutcomeUnknownError, match="redirect"):
                await bank.create_payment(
                    ACCOUNT, payee_url=PAYEE, amount=Decimal(1), reference=None
                )
    assert len(received) == 1


async def test_a_timeout_after_sending_a_write_is_unknown() -> None:
    """A server that reads the request and never answers: OutcomeUnknownError, one request."""
    received: list[bytes] = []

    async def never_answer(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            received.append(await stream.receive())
            await anyio.sleep(30)

    async with _raw_bank(never_answer) as settings:
        transport = make_transport(timeout=0.5)
        async with BankClient(transport, settings, retry=RetryPolicy.no_wait()) as bank:
            with pytest.raises(OutcomeUnknownError) as info:
                await bank.create_payment(
                    ACCOUNT, payee_url=PAYEE, amount=Decimal(1), reference=None
                )
    assert len(received) == 1
    assert received[0].startswith(b"POST /v0/bank/accounts/")
    assert info.value.late  # the bank may still be working on it: looked up later


async def test_reset_after_sending_a_write_is_unknown_and_waited_for() -> None:
    """A server that reads the request then hangs up: OutcomeUnknownError, one request, and
    late: whatever hung up, the bank may still carry the request out."""
    received: list[bytes] = []

    async def hang_up(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            received.append(await stream.receive())

    async with _raw_bank(hang_up) as settings:
        transport = make_transport(timeout=5)
        async with BankClient(transport, settings, retry=RetryPolicy.no_wait()) as bank:
            with pytest.raises(OutcomeUnknownError) as info:
                await bank.submit_payment(PAYMENT)
    assert len(received) == 1
    assert received[0].startswith(b"POST /v0/payments/pm.one/submissions")
    assert info.value.late


@pytest.mark.parametrize("coded", [False, True], ids=["plain", "gzip"])
async def test_an_answer_cut_short_of_its_content_length_is_unknown(coded: bool) -> None:
    """A create answer cut short of its Content-Length is an unknown outcome, one request."""
    received: list[bytes] = []

    async def cut_short(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            received.append(await stream.receive())
            coding = b"Content-Encoding: gzip\r\n" if coded else b""
            await stream.send(
                b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
                + coding
                + b'Content-Length: 400\r\n\r\n{"payment-url": "/v0/payments/pm.x"}'
            )

    async with _raw_bank(cut_short) as settings:
        transport = make_transport(timeout=5)
        async with BankClient(transport, settings, retry=RetryPolicy.no_wait()) as bank:
            with pytest.raises(OutcomeUnknownError):
                await bank.create_payment(
                    ACCOUNT, payee_url=PAYEE, amount=Decimal(1), reference=None
                )
    assert len(received) == 1


async def test_a_url_the_transport_cannot_send_is_a_clear_bank_error() -> None:
    """A URL with a bad port is refused before sending, naming the request."""
    transport = make_transport(timeout=5)
    request = PreparedRequest("GET", "http://127.0.0.1:99999/x", {})
    with pytest.raises(BankError, match="cannot send GET http://127.0.0.1:99999/x"):
        await transport.send(request)
    await transport.aclose()


async def test_a_header_with_a_line_break_is_refused_without_its_value() -> None:
    """Were a key with a line break to get this far, nothing is sent and the error (as the
    user sees it) does not quote it."""
    received: list[bytes] = []

    async def record(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            received.append(await stream.receive())

    async with _raw_bank(record) as settings:
        bad = Settings(base_url=settings.base_url, api_key=Secret("abc\ndef-" + SECRET))
        async with BankClient(make_transport(timeout=5), bad) as bank:
            with pytest.raises(BankError, match="cannot send") as info:
                await bank.submit_payment(PAYMENT)
    assert SECRET not in str(info.value)
    assert type(info.value) is BankError
    assert received == []


def test_a_5xx_on_a_read_says_to_run_again_not_that_it_may_have_taken_effect() -> None:
    """A read that the bank failed changed nothing: its message says to run again."""
    from payrun.bank._refusals import error_from_response  # noqa: PLC0415

    read = error_from_response("GET", "/v0/x", 503, "", write=False)
    write = error_from_response("POST", "/v0/x", 503, "", write=True)
    assert "run the same command again" in str(read) and "taken effect" not in str(read)
    assert "may or may not have taken effect" in str(write)


def test_a_gateway_timeout_or_a_timed_out_wait_may_still_be_finished_by_the_bank() -> None:
    """504 (and Cloudflare's 524) and timeouts mark the lost answer late (looked up only
    after a while); a 500 does not: the bank answered, so it is done with the request."""
    from payrun.bank._refusals import error_from_response  # noqa: PLC0415
    from payrun.errors import OutcomeUnknownError  # noqa: PLC0415

    gateway = error_from_response("POST", "/v0/x", 504, "", write=True)
    failed = error_from_response("POST", "/v0/x", 500, "", write=True)
    assert isinstance(gateway, OutcomeUnknownError) and gateway.late
    cloudflare = error_from_response("POST", "/v0/x", 524, "", write=True)
    assert isinstance(cloudflare, OutcomeUnknownError) and cloudflare.late
    assert isinstance(failed, OutcomeUnknownError) and not failed.late


# -- trust at the edge (issue 17): masking, origins, sizes, lists ------------------------

ODD_KEY = 'sk_live/AbC+dEf/GhIjK=="q\\z'


def _odd_bank(handler: Handler, *, base: str = BASE) -> BankClient:
    settings = Settings(base_url=base, api_key=Secret(ODD_KEY))
    return BankClient(mock_transport(handler), settings, retry=RetryPolicy.no_wait(attempts=1))


def _key_forms() -> list[str]:
    plain = json.dumps(ODD_KEY)[1:-1]
    return [ODD_KEY, plain, plain.replace("/", "\\/"), ODD_KEY[:10], plain[:10]]


@pytest.mark.parametrize(
    "spelled",
    [
        json.dumps(ODD_KEY)[1:-1],
        json.dumps(ODD_KEY)[1:-1].replace("/", "\\/"),
        "".join(f"\\u{ord(c):04x}" for c in ODD_KEY),
        "".join(f"\\u{ord(c):04X}" for c in ODD_KEY),
    ],
    ids=["ordinary", "slash", "all-u", "all-U"],
)
@pytest.mark.parametrize("status", [400, 403, 422, 503])
async def test_an_echoed_key_is_masked_after_decoding(spelled: str, status: int) -> None:
    """The key in an error's detail or code, JSON-escaped any way: *** in the message,
    detail and code, even where the detail is cut at 300 characters."""
    body = (
        '{"errors": [{"title": "Bad", "code": "'
        + spelled
        + '", "detail": "'
        + "x" * 285
        + " "
        + spelled
        + '"}]}'
    )
    rec = _Recorder(httpx.Response(status, content=body.encode()))
    async with _odd_bank(rec) as bank:
        with pytest.raises(BankError) as info:
            await bank.create_payment(ACCOUNT, payee_url=PAYEE, amount=Decimal(1), reference=None)
    error = info.value
    shown = f"{error} {error.detail} {error.code}"
    assert [form for form in _key_forms() if form in shown] == []
    assert error.code == "***"


async def test_an_echoed_key_in_a_page_that_is_not_json_is_masked() -> None:
    """An HTML error page echoing the key JSON-escaped: its one line shows *** only."""
    page = "<html><body>bad key " + ODD_KEY.replace("/", "\\/") + "</body></html>"
    rec = _Recorder(httpx.Response(400, content=page.encode()))
    async with _odd_bank(rec) as bank:
        with pytest.raises(BankRejectedError) as info:
            await bank.get_account(ACCOUNT)
    assert "bad key ***" in str(info.value)


async def test_a_list_without_its_array_is_a_bank_error() -> None:
    """A payments page without ``payments``, or with a links.next that is not a URL: a
    BankError naming it, never an empty or shortened list."""
    for page in ({"links": {"next": None}}, {"payments": [], "links": {"next": 7}}):
        rec = _Recorder(_ok(page))
        async with _bank(rec) as bank:
            with pytest.raises(BankError, match="payments list"):
                [p async for p in bank.payments(ACCOUNT, created_since=datetime.now(UTC))]


async def test_a_list_item_that_does_not_parse_is_a_bank_error() -> None:
    """A payments page whose item is not a payment is unreadable, not skipped."""
    rec = _Recorder(_ok({"payments": ["nope"], "links": {"next": None}}))
    async with _bank(rec) as bank:
        with pytest.raises(BankError, match="could not be read"):
            [p async for p in bank.payments(ACCOUNT, created_since=datetime.now(UTC))]


async def test_a_foreign_link_in_a_write_answer_is_an_unknown_outcome_and_not_called() -> None:
    """A created payment on another host: an unknown outcome (the bank acted), and a
    submit to that URL sends nothing."""
    foreign = {**_payment(), "payment-url": "http://evil.test/v0/payments/pm.one"}
    rec = _Recorder(_ok(foreign, 201))
    async with _bank(rec) as bank:
        with pytest.raises(OutcomeUnknownError, match=r"http://evil\.test:80"):
            await bank.create_payment(ACCOUNT, payee_url=PAYEE, amount=Decimal(1), reference=None)
        with pytest.raises(BankError, match="payrun sent nothing") as info:
            await bank.submit_payment("http://evil.test/v0/payments/pm.one")
    assert type(info.value) is BankError
    assert len(rec.requests) == 1


async def test_an_answer_over_the_cap_is_a_bank_error_even_from_a_test_client() -> None:
    """A test's transport reads whole bodies; the cap still makes a read a BankError and a
    write an unknown outcome."""
    big = httpx.Response(200, content=b" " * (16 * 1024 * 1024 + 1))
    async with _bank(_Recorder(big)) as bank:
        with pytest.raises(BankError, match="limit"):
            await bank.get_account(ACCOUNT)
        with pytest.raises(OutcomeUnknownError, match="limit"):
            await bank.submit_payment(PAYMENT)


async def test_a_redirecting_index_is_a_configuration_error() -> None:
    """A 301 from /v0/index means the base URL is wrong: ConfigError (exit 2)."""
    from payrun.errors import ConfigError

    rec = _Recorder(httpx.Response(301, headers={"Location": "https://other.test/v0/index"}))
    async with _bank(rec) as bank:
        with pytest.raises(ConfigError, match="redirect"):
            await bank.organization()
    assert len(rec.requests) == 1


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "until-close"])
async def test_the_transport_stops_reading_an_answer_at_the_cap(declared: bool) -> None:
    """A 200 MB answer: a BankError naming the limit, and the client stops reading (the
    bank gets to send little more than the 16 MB cap plus socket buffers)."""
    total, chunk = 200 * 1024 * 1024, b" " * (1024 * 1024)
    sent: list[int] = [0]

    async def flood(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            await stream.receive()
            length = f"Content-Length: {total}\r\n" if declared else "Connection: close\r\n"
            await stream.send(f"HTTP/1.1 200 OK\r\n{length}\r\n".encode())
            try:
                while sent[0] < total:
                    await stream.send(chunk)
                    sent[0] += len(chunk)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                return

    async with _raw_bank(flood) as settings:
        transport = make_transport(timeout=10)
        async with BankClient(transport, settings, retry=RetryPolicy.no_wait(attempts=1)) as bank:
            with pytest.raises(BankError, match="limit of 16777216 bytes") as info:
                await bank.get_account(ACCOUNT)
        await anyio.sleep(0.2)
    assert type(info.value) is BankError
    assert sent[0] < 48 * 1024 * 1024
