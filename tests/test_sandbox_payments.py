"""Contract tests: payments, submissions, transactions, admissions, events, paging (in-process)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from payrun.sandbox import SandboxApp, create_app

KEY = "test-key"
PAYMENT_FIELDS = {"payment-url", "payment-direction", "creditor", "payment-amount", "created-at"}
SUBMISSION_FIELDS = {
    "submission-url",
    "submission-status",
    "submission-scheme-information",
    "payment-url",
    "account-url",
    "created-at",
}


@pytest.fixture
def app() -> SandboxApp:
    """A fresh sandbox bank whose submissions settle on the next request."""
    return create_app(api_key=KEY, deliver_after_ms=0)


class Bank:
    """Handy URLs of the default seed, found through the API."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client
        self.org: dict[str, Any] = {}
        self.accounts: dict[str, dict[str, Any]] = {}
        self.payees: list[dict[str, Any]] = []

    async def load(self) -> Bank:
        """Find the organization, its accounts and payees."""
        index = (await self.client.get("/v0/index")).json()
        self.org = (await self.client.get(index["organization-url"])).json()
        listed = (await self.client.get(self.org["organization-bank-accounts-url"])).json()[
            "accounts"
        ]
        self.accounts = {a["bank-addresses"][0]["account-number"]: a for a in listed}
        payees_url = f"{self.org['own-legal-person-url']}/bank/payees"
        self.payees = (await self.client.get(payees_url, params={"sort": "created-at"})).json()[
            "payees"
        ]
        return self

    @property
    def operational(self) -> dict[str, Any]:
        """The operational account (040004 30000001)."""
        return self.accounts["30000001"]

    async def pay(
        self, value: str = "10.00", reference: str | None = "Salary", **creditor: Any
    ) -> httpx.Response:
        """Create a payment from the operational account (to the first payee by default)."""
        body: dict[str, Any] = {
            "creditor": creditor
            or {"creditor-type": "payee", "payee-url": self.payees[0]["payee-url"]},
            "payment-amount": {"currency": "GBP", "value": value},
        }
        if reference is not None:
            body["payment-reference"] = reference
        return await self.client.post(self.operational["account-payments-url"], json=body)

    async def submit(self, payment: dict[str, Any], scheme: str = "fps") -> httpx.Response:
        """Submit ``payment`` over ``scheme``."""
        return await self.client.post(
            payment["payment-submissions-url"], json={"payment-scheme": scheme}
        )


@pytest.fixture
async def bank(client: httpx.AsyncClient) -> Bank:
    """The default seed's organization, accounts and payees."""
    return await Bank(client).load()


async def test_create_payment_to_payee(bank: Bank) -> None:
    """201 with the spec's payee creditor shape, the amount and the reference."""
    response = await bank.pay("1234.56", "November salary")
    assert response.status_code == 201
    payment = response.json()
    assert PAYMENT_FIELDS <= set(payment)
    assert payment["payment-direction"] == "outbound-payment"
    assert payment["creditor"]["creditor-type"] == "payee"
    assert payment["creditor"]["payee-url"] == bank.payees[0]["payee-url"]
    assert payment["payment-amount"] == {"currency": "GBP", "value": "1234.56"}
    assert payment["payment-reference"] == "November salary"
    assert "latest-submission-url" not in payment
    assert (await bank.client.get(payment["payment-url"])).json() == payment


async def test_create_payment_uk_domestic_and_internal(bank: Bank) -> None:
    """uk-domestic (new or legacy names) and service/griffin-bank-account creditors are accepted."""
    new = await bank.pay(
        **{
            "creditor-type": "uk-domestic",
            "account-holder": "Ava Wilson",
            "uk-domestic-sort-code": "601613",
            "uk-domestic-account-number": "21514755",
        }
    )
    legacy = await bank.pay(
        **{
            "creditor-type": "uk-domestic",
            "account-holder": "Ava Wilson",
            "bank-id": "601613",
            "account-number": "21514755",
            "bank-id-code": "gbdsc",
            "account-number-code": "bban",
        }
    )
    other = bank.accounts["30000002"]["account-url"]
    internal = await bank.pay(**{"creditor-type": "griffin-bank-account", "account-url": other})
    assert [r.status_code for r in (new, legacy, internal)] == [201, 201, 201]
    assert new.json()["creditor"]["uk-domestic-sort-code"] == "601613"
    assert internal.json()["creditor"]["creditor-type"] == "service-bank-account"


async def test_default_reference(bank: Bank) -> None:
    """Without a reference the payment says 'Sent from' and the owner's name."""
    payment = (await bank.pay(reference=None)).json()
    assert payment["payment-reference"] == "Sent from Acme Payroll Ltd"


@pytest.mark.parametrize(
    ("body", "pointer"),
    [
        ({"payment-amount": {"currency": "GBP", "value": "1.00"}}, "/creditor"),
        (
            {
                "creditor": {"creditor-type": "payee"},
                "payment-amount": {"currency": "GBP", "value": "1.00"},
            },
            "/creditor/payee-url",
        ),
        (
            {
                "creditor": {"creditor-type": "nope"},
                "payment-amount": {"currency": "GBP", "value": "1"},
            },
            "/creditor/creditor-type",
        ),
        ({"creditor": None, "payment-amount": {"currency": "GBP", "value": "1"}}, "/creditor"),
    ],
)
async def test_creditor_schema_errors(bank: Bank, body: dict[str, Any], pointer: str) -> None:
    """Missing or malformed creditors are 400 with a pointer to the field."""
    response = await bank.client.post(bank.operational["account-payments-url"], json=body)
    assert response.status_code == 400
    assert response.json()["errors"][0]["source"]["pointer"] == pointer


@pytest.mark.parametrize(
    ("amount", "pointer"),
    [
        ({"currency": "GBP", "value": "1.001"}, "/payment-amount/value"),
        ({"currency": "GBP", "value": 1.5}, "/payment-amount/value"),
        ({"currency": "GBP", "value": "-1.00"}, "/payment-amount/value"),
        ({"currency": "GBP", "value": "0.00"}, "/payment-amount/value"),
        ({"currency": "EUR", "value": "1.00"}, "/payment-amount/currency"),
        ({"currency": "GBP", "value": "1.00", "extra": 1}, "/payment-amount/extra"),
        ({"value": "1.00"}, "/payment-amount/currency"),
        ("1.00", "/payment-amount"),
    ],
)
async def test_strict_money(bank: Bank, amount: Any, pointer: str) -> None:
    """Money is exactly {currency: GBP, value: decimal string}, else 400 with a pointer."""
    body = {
        "creditor": {"creditor-type": "payee", "payee-url": bank.payees[0]["payee-url"]},
        "payment-amount": amount,
    }
    response = await bank.client.post(bank.operational["account-payments-url"], json=body)
    assert response.status_code == 400
    assert response.json()["errors"][0]["source"]["pointer"] == pointer


@pytest.mark.parametrize("reference", ["", "x" * 36, 12])
async def test_reference_length(bank: Bank, reference: Any) -> None:
    """A reference must be a 1..35 character string."""
    response = await bank.pay(reference=reference)
    assert response.status_code == 400
    assert response.json()["errors"][0]["source"]["pointer"] == "/payment-reference"
    assert (await bank.pay(reference="y" * 35)).status_code == 201


async def test_business_refusals(bank: Bank, app: SandboxApp) -> None:
    """422: payee-deactivated, scheme limit, insufficient-funds, account-restricted, closed."""
    deactivated = next(p for p in bank.payees if p["payee-status"] == "deactivated")
    titles = []
    response = await bank.pay(**{"creditor-type": "payee", "payee-url": deactivated["payee-url"]})
    titles.append(response.json()["errors"][0]["title"])
    titles.append((await bank.pay("1000000.01")).json()["errors"][0]["title"])
    ba = bank.operational["account-url"].rsplit("/", 1)[1]
    await bank.client.post(f"/__sandbox/accounts/{ba}/balance", json={"value": "5.00"})
    titles.append((await bank.pay("5.01")).json()["errors"][0]["title"])
    await bank.client.post(f"/__sandbox/accounts/{ba}/balance", json={"value": "500.00"})
    body = {
        "restriction-type": "freeze",
        "restriction-reason-code": "other",
        "restriction-legal-status": "not-applicable",
        "notes": "x",
    }
    await bank.client.post(bank.operational["bank-account-restrictions-url"], json=body)
    titles.append((await bank.pay()).json()["errors"][0]["title"])
    app.sandbox.accounts[ba].status = "closed"
    titles.append((await bank.pay()).json()["errors"][0]["title"])
    assert titles == [
        "payee-deactivated",
        "payment-amount-exceeds-scheme-limit",
        "insufficient-funds",
        "account-restricted",
        "bank-account-closed",
    ]
    assert app.sandbox.payments == {}


async def test_submit_lifecycle_and_balances(bank: Bank, app: SandboxApp) -> None:
    """Submit is 200 processing; available drops at once, account-balance on delivery."""
    payment = (await bank.pay("100.00")).json()
    app.context.deliver_after_s = 3600
    response = await bank.submit(payment)
    assert response.status_code == 200
    submission = response.json()
    assert SUBMISSION_FIELDS <= set(submission)
    assert submission["submission-status"] == "processing"
    assert submission["submission-scheme-information"]["payment-scheme"] == "fps"
    account = (await bank.client.get(bank.operational["account-url"])).json()
    assert account["available-balance"]["value"] == "999900.00"
    assert account["account-balance"]["value"] == "1000000.00"
    assert (await bank.client.post("/__sandbox/settle")).json() == {"settled": 1}
    delivered = (await bank.client.get(submission["submission-url"])).json()
    assert delivered["submission-status"] == "delivered"
    account = (await bank.client.get(bank.operational["account-url"])).json()
    assert account["account-balance"]["value"] == "999900.00"
    again = await bank.client.get(payment["payment-url"])
    assert again.json()["latest-submission-url"] == submission["submission-url"]
    listed = (await bank.client.get(payment["payment-submissions-url"])).json()["submissions"]
    assert [s["submission-url"] for s in listed] == [submission["submission-url"]]


async def test_a_delivered_submission_can_be_returned_by_the_test_control(bank: Bank) -> None:
    """/__sandbox/submissions/{ps}/return: delivered, then returned with its reason; the
    money comes back, a submission-updated event says so, and it cannot be submitted again."""
    payment = (await bank.pay("100.00")).json()
    submission = (await bank.submit(payment)).json()
    ps = submission["submission-url"].rsplit("/", 1)[1]
    returned = await bank.client.post(
        f"/__sandbox/submissions/{ps}/return", json={"reason": "account-closed"}
    )
    assert returned.status_code == 200, returned.text
    assert returned.json()["submission-status"] == "returned"
    read = (await bank.client.get(submission["submission-url"])).json()
    assert read["submission-status"] == "returned"
    assert read["submission-status-reason"] == "account-closed"
    account = (await bank.client.get(bank.operational["account-url"])).json()
    assert account["account-balance"]["value"] == "1000000.00"
    assert account["available-balance"]["value"] == "1000000.00"
    events = (
        await bank.client.get(
            bank.org["organization-events-url"],
            params={"filter[event-type][eq]": "submission-updated", "sort": "created-at"},
        )
    ).json()["events"]
    statuses = [
        e["event-payload"]["submission-status"]
        for e in events
        if e["event-payload"]["submission-url"] == submission["submission-url"]
    ]
    assert statuses == ["delivered", "returned"]
    assert (await bank.submit(payment)).status_code == 422
    again = await bank.client.post(f"/__sandbox/submissions/{ps}/return")
    assert again.status_code == 409
    assert (await bank.client.post("/__sandbox/submissions/ps.nothing/return")).status_code == 404


async def test_unfunded_submission_fails_then_can_be_resubmitted(bank: Bank) -> None:
    """Without the funds the submission fails; a new one is allowed only after a failure."""
    payment = (await bank.pay("100.00")).json()
    ba = bank.operational["account-url"].rsplit("/", 1)[1]
    await bank.client.post(f"/__sandbox/accounts/{ba}/balance", json={"value": "50.00"})
    first = (await bank.submit(payment)).json()
    failed = (await bank.client.get(first["submission-url"])).json()
    assert failed["submission-status"] == "failed"
    assert failed["submission-status-reason"] == "insufficient-funds"
    await bank.client.post(f"/__sandbox/accounts/{ba}/balance", json={"value": "500.00"})
    second = await bank.submit(payment)
    assert second.status_code == 200
    third = await bank.submit(payment)
    assert third.status_code == 422
    assert third.json()["errors"][0]["title"] == "payment-already-submitted"


async def test_book_transfer_credits_the_other_account(bank: Bank) -> None:
    """A book transfer to a sandbox account credits it, with an inbound payment and admission."""
    target = bank.accounts["30000002"]
    payment = (
        await bank.pay(
            "25.00",
            **{"creditor-type": "service-bank-account", "account-url": target["account-url"]},
        )
    ).json()
    assert (await bank.submit(payment, "book-transfer")).status_code == 200
    await bank.client.post("/__sandbox/settle")
    credited = (await bank.client.get(target["account-url"])).json()
    assert credited["account-balance"]["value"] == "1000025.00"
    admissions = (await bank.client.get(target["account-admissions-url"])).json()["admissions"]
    assert admissions[0]["admission-status"] == "delivered"
    inbound = (await bank.client.get(admissions[0]["payment-url"])).json()
    assert inbound["payment-direction"] == "inbound-payment"
    assert (await bank.client.get(inbound["payment-admissions-url"])).json()[
        "admissions"
    ] == admissions


async def test_book_transfer_to_outside_account_is_422(bank: Bank) -> None:
    """book-transfer needs a sandbox account as creditor."""
    payment = (await bank.pay()).json()
    response = await bank.submit(payment, "book-transfer")
    assert response.status_code == 422


async def test_reject_payment(bank: Bank) -> None:
    """PATCH rejection-reason is 204; then submit is 410 and a second rejection 409."""
    payment = (await bank.pay()).json()
    response = await bank.client.patch(
        payment["payment-url"], json={"rejection-reason": "duplicate"}
    )
    assert response.status_code == 204
    rejected = (await bank.client.get(payment["payment-url"])).json()
    assert rejected["rejection-reason"] == "duplicate"
    assert "rejected-at" in rejected
    assert (await bank.submit(payment)).status_code == 410
    assert (
        await bank.client.patch(payment["payment-url"], json={"rejection-reason": None})
    ).status_code == 409
    other = (await bank.pay()).json()
    assert (
        await bank.client.patch(other["payment-url"], json={"rejection-reason": None})
    ).status_code == 204
    assert (await bank.client.patch(other["payment-url"], json={})).status_code == 400


async def test_payment_list_filters(bank: Bank) -> None:
    """latest-submission-status null/delivered, rejected and direction filters, include."""
    unsubmitted = (await bank.pay("1.00")).json()
    submitted = (await bank.pay("2.00")).json()
    await bank.submit(submitted)
    await bank.client.post("/__sandbox/settle")
    url = bank.operational["account-payments-url"]

    async def urls(**params: Any) -> list[str]:
        listed = (await bank.client.get(url, params=params)).json()
        return [p["payment-url"] for p in listed["payments"]]

    assert await urls(**{"filter[latest-submission-status][in][]": "null"}) == [
        unsubmitted["payment-url"]
    ]
    assert await urls(**{"filter[latest-submission-status][in][]": "delivered"}) == [
        submitted["payment-url"]
    ]
    assert await urls(**{"filter[rejected][eq]": "false"}) == [
        submitted["payment-url"],
        unsubmitted["payment-url"],
    ]
    assert await urls(**{"filter[payment-direction][eq]": "inbound-payment"}) == []
    assert await urls(sort="created-at") == [unsubmitted["payment-url"], submitted["payment-url"]]
    included = (
        await bank.client.get(url, params={"include[]": ["bank-account", "latest-submission"]})
    ).json()
    assert (
        included["included"]["bank-accounts"][0]["account-url"] == bank.operational["account-url"]
    )
    assert len(included["included"]["submissions"]) == 1
    org_list = (await bank.client.get(bank.org["organization-payments-url"])).json()
    assert len(org_list["payments"]) == 2


async def test_created_at_filter(bank: Bank) -> None:
    """filter[created-at][gte] keeps payments created at or after the instant."""
    first = (await bank.pay("1.00")).json()
    second = (await bank.pay("2.00")).json()
    url = bank.operational["account-payments-url"]
    listed = (
        await bank.client.get(url, params={"filter[created-at][gt]": first["created-at"]})
    ).json()
    assert [p["payment-url"] for p in listed["payments"]] == [second["payment-url"]]
    bad = await bank.client.get(url, params={"filter[created-at][gt]": "yesterday"})
    assert bad.status_code == 400


async def test_pagination_cursors_and_carry_over(bank: Bank) -> None:
    """page[size] pages through in order with opaque cursors; other params are carried over."""
    made = [(await bank.pay(f"{n}.00")).json()["payment-url"] for n in range(1, 6)]
    url = bank.operational["account-payments-url"]
    page = (await bank.client.get(url, params={"page[size]": "2", "sort": "created-at"})).json()
    seen = [p["payment-url"] for p in page["payments"]]
    assert page["links"]["prev"] is None
    while page["links"]["next"]:
        assert "sort=created-at" in page["links"]["next"]
        assert "page[size]=2" in page["links"]["next"]
        page = (await bank.client.get(page["links"]["next"])).json()
        seen += [p["payment-url"] for p in page["payments"]]
    assert seen == made
    back = (await bank.client.get(page["links"]["prev"])).json()
    assert [p["payment-url"] for p in back["payments"]] == made[2:4]
    for bad in ("0", "201", "x"):
        assert (await bank.client.get(url, params={"page[size]": bad})).status_code == 400
    assert (await bank.client.get(url, params={"page[after]": "!!"})).status_code == 400


async def test_search_payments(bank: Bank) -> None:
    """Payment search matches the reference or the scheme id."""
    payment = (await bank.pay(reference="INV-4242 October")).json()
    submission = (await bank.submit(payment)).json()
    url = bank.org["organization-payments-search-url"]
    by_reference = (await bank.client.post(url, json={"search-query": "INV-4242"})).json()
    assert [p["payment-url"] for p in by_reference["search-results"]] == [payment["payment-url"]]
    scheme_id = submission["unique-scheme-identifier"]
    by_scheme = (await bank.client.post(url, json={"search-query": scheme_id})).json()
    assert by_scheme["meta"]["page"]["total"] == 1
    assert (await bank.client.post(url, json={})).status_code == 400


async def test_transactions_and_events(bank: Bank) -> None:
    """Delivery posts a debit transaction and the payment events, filterable and sortable."""
    payment = (await bank.pay("7.50")).json()
    await bank.submit(payment)
    await bank.client.post("/__sandbox/settle")
    listed = (
        await bank.client.get(
            bank.operational["account-transactions-url"], params={"include": "payment"}
        )
    ).json()
    transaction = listed["account-transactions"][0]
    assert transaction["balance-change"]["value"] == "-7.50"
    assert transaction["balance-change-direction"] == "debit"
    assert transaction["account-balance"]["value"] == "999992.50"
    assert listed["included"]["payments"][0]["payment-url"] == payment["payment-url"]
    assert (await bank.client.get(transaction["account-transaction-url"])).json() == transaction
    events_url = bank.org["organization-events-url"]
    events = (await bank.client.get(events_url, params={"sort": "created-at"})).json()["events"]
    types = [e["event-type"] for e in events]
    for wanted in (
        "account-status-created",
        "payment-created",
        "submission-created",
        "transaction-created",
        "submission-updated",
    ):
        assert wanted in types
    updated = (
        await bank.client.get(events_url, params={"filter[event-type][eq]": "submission-updated"})
    ).json()
    assert updated["events"][0]["event-payload"]["submission-status"] == "delivered"
    event = updated["events"][0]
    assert (await bank.client.get(event["event-url"])).json() == event
    account_events = (await bank.client.get(bank.operational["bank-account-events-url"])).json()[
        "events"
    ]
    assert account_events
    assert (
        await bank.client.get(events_url, params={"filter[event-type][eq]": "nope"})
    ).status_code == 400


async def test_stats_count_payments_per_group(bank: Bank) -> None:
    """/__sandbox/stats groups payments and submissions per account, creditor, amount, reference."""
    payment = (await bank.pay("3.00", "Once")).json()
    await bank.submit(payment)
    await bank.pay("3.00", "Twice")
    await bank.pay("3.00", "Twice")
    stats = (await bank.client.get("/__sandbox/stats")).json()
    groups = {g["reference"]: g for g in stats["payments"]}
    assert groups["Once"]["payments"] == 1
    assert groups["Once"]["submissions"] == 1
    assert groups["Twice"]["payments"] == 2
    assert groups["Twice"]["sort_code"] == bank.payees[0]["bank-id"]
    assert stats["max_in_flight"] >= 1
    assert (await bank.client.post("/__sandbox/stats/reset")).status_code == 204
    assert (await bank.client.get("/__sandbox/stats")).json()["requests"] == 0


async def test_account_submission_list_and_filters(bank: Bank, app: SandboxApp) -> None:
    """Submissions per account: newest first, filter by status, paging links."""
    app.context.deliver_after_s = 3600
    payments = [(await bank.pay(f"{n}.00")).json() for n in (1, 2)]
    made = [(await bank.submit(p)).json()["submission-url"] for p in payments]
    url = bank.operational["account-submissions-url"]
    listed = (await bank.client.get(url)).json()
    assert [s["submission-url"] for s in listed["submissions"]] == made[::-1]
    assert listed["links"] == {"prev": None, "next": None}
    params = {"filter[submission-status][in][]": "delivered"}
    assert (await bank.client.get(url, params=params)).json()["submissions"] == []
    await bank.client.post("/__sandbox/settle")
    assert len((await bank.client.get(url, params=params)).json()["submissions"]) == 2


async def test_payment_cannot_pay_its_own_account(bank: Bank) -> None:
    """A uk-domestic creditor that is the paying account itself is refused."""
    address = bank.operational["bank-addresses"][0]
    creditor = {
        "creditor-type": "uk-domestic",
        "uk-domestic-sort-code": address["bank-id"],
        "uk-domestic-account-number": address["account-number"],
    }
    response = await bank.pay(**creditor)
    assert response.status_code == 422
    assert response.json()["errors"][0]["title"] == "same-account"
