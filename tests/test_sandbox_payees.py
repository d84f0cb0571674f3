"""Contract tests: payees, Confirmation of Payee and its simulator, seeds (in-process)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from payrun.sandbox import SandboxApp, SeedError, build_state, create_app, default_seed, load_seed
from payrun.sandbox._cop import SIMULATION_TYPES

KEY = "test-key"


@pytest.fixture
def app() -> SandboxApp:
    """A fresh sandbox bank with the default seed."""
    return create_app(api_key=KEY)


async def _org(client: httpx.AsyncClient) -> dict[str, Any]:
    index = (await client.get("/v0/index")).json()
    return (await client.get(index["organization-url"])).json()  # type: ignore[no-any-return]


def _cop_body(
    org: dict[str, Any], name: str, sort_code: str, number: str, kind: str = "personal"
) -> dict[str, Any]:
    return {
        "account-number": number,
        "bank-id": sort_code,
        "account-classification": kind,
        "name": name,
        "requester-legal-person-url": org["own-legal-person-url"],
    }


async def _cop(client: httpx.AsyncClient, *args: str) -> dict[str, Any]:
    org = await _org(client)
    response = await client.post(
        f"{org['organization-url']}/cop-request", json=_cop_body(org, *args)
    )
    assert response.status_code == 201
    return response.json()  # type: ignore[no-any-return]


async def test_default_payees(client: httpx.AsyncClient) -> None:
    """Five active employees from the directory plus one deactivated payee."""
    org = await _org(client)
    payees = (await client.get(f"{org['own-legal-person-url']}/bank/payees")).json()["payees"]
    statuses = sorted(p["payee-status"] for p in payees)
    assert statuses == ["active"] * 5 + ["deactivated"]
    required = {
        "payee-url",
        "legal-person-url",
        "account-holder",
        "account-number",
        "bank-id",
        "country-code",
        "payee-status",
        "created-at",
    }
    assert all(required <= set(p) for p in payees)
    assert {p["account-holder"] for p in payees} >= {"Oliver Smith", "Amelia Jones"}


async def test_create_get_deactivate_payee(client: httpx.AsyncClient) -> None:
    """Create (201), get, deactivate (200), deactivate again (422); duplicates are allowed."""
    org = await _org(client)
    url = f"{org['own-legal-person-url']}/bank/payees"
    body = {"account-holder": "Mia Davies", "account-number": "22039287", "bank-id": "110001"}
    created = await client.post(url, json=body)
    assert created.status_code == 201
    payee = created.json()
    assert payee["payee-status"] == "active"
    assert (await client.get(payee["payee-url"])).json() == payee
    assert (await client.post(url, json=body)).status_code == 201
    deactivated = await client.patch(payee["payee-url"], json={"payee-status": "deactivated"})
    assert deactivated.status_code == 200
    assert deactivated.json()["payee-status"] == "deactivated"
    again = await client.patch(payee["payee-url"], json={"payee-status": "deactivated"})
    assert again.status_code == 422
    assert (
        await client.patch(payee["payee-url"], json={"payee-status": "active"})
    ).status_code == 400


@pytest.mark.parametrize(
    ("body", "pointer"),
    [
        ({"account-number": "22039287", "bank-id": "110001"}, "/account-holder"),
        (
            {"account-holder": "A", "account-number": "2203928", "bank-id": "110001"},
            "/account-number",
        ),
        ({"account-holder": "A", "account-number": "22039287", "bank-id": "11-00-01"}, "/bank-id"),
        (
            {"account-holder": "", "account-number": "22039287", "bank-id": "110001"},
            "/account-holder",
        ),
        ({"account-holder": "A", "account-number": "22039287", "bank-id": "110001", "x": 1}, "/x"),
    ],
)
async def test_payee_schema_errors(
    client: httpx.AsyncClient, body: dict[str, Any], pointer: str
) -> None:
    """Payee bodies are checked field by field: 400 with a pointer."""
    org = await _org(client)
    response = await client.post(f"{org['own-legal-person-url']}/bank/payees", json=body)
    assert response.status_code == 400
    assert response.json()["errors"][0]["source"]["pointer"] == pointer


async def test_cop_exact_match(client: httpx.AsyncClient) -> None:
    """The directory's own name is a verified match."""
    cop = await _cop(client, "Oliver Smith", "309089", "00705473")
    assert cop["cop-response"] == {"status": "verified", "result": "match"}
    assert cop["account"]["name"] == "Oliver Smith"
    assert cop["cop-request-url"].startswith("/v0/cop-requests/cp.")


async def test_cop_close_match_brightwater(client: httpx.AsyncClient) -> None:
    """The samples' 'Brightwater Cleaning Ltd' is a close match suggesting the true name."""
    cop = await _cop(client, "Brightwater Cleaning Ltd", "560036", "48624250", "business")
    assert cop["cop-response"]["result"] == "close-match"
    assert cop["cop-response"]["suggested-name"] == "Brightwater Cleaning Services Ltd"


@pytest.mark.parametrize(
    "name",
    ["KESTREL IT SOLUTIONS LIMITED", "Kestrel I.T. Solutions Ltd", "kestrel it solutions ltd"],
)
async def test_cop_normalises_names(client: httpx.AsyncClient, name: str) -> None:
    """Case, punctuation and Ltd/Limited do not matter."""
    cop = await _cop(client, name, "204512", "93093357", "business")
    assert cop["cop-response"]["result"] == "match"


async def test_cop_no_match_and_unknown(client: httpx.AsyncClient) -> None:
    """Another name is a no-match; an unknown account is unverified."""
    other = await _cop(client, "Somebody Else", "309089", "00705473")
    assert other["cop-response"] == {
        "status": "verified",
        "result": "no-match",
        "reason": "no-match-name",
    }
    unknown = await _cop(client, "Oliver Smith", "999999", "12345678")
    assert unknown["cop-response"]["status"] == "unverified"


async def test_cop_classification_differs(client: httpx.AsyncClient) -> None:
    """The right name with the wrong classification is no match, the reason says why."""
    cop = await _cop(client, "Summit Legal LLP", "400530", "25711657", "personal")
    assert cop["cop-response"]["result"] == "no-match"
    assert cop["cop-response"]["reason"] == "match-name-business-personal"


@pytest.mark.parametrize("kind", sorted(SIMULATION_TYPES))
async def test_cop_simulation_types(client: httpx.AsyncClient, kind: str) -> None:
    """Each of the 11 simulation types answers with its fixed status and result."""
    org = await _org(client)
    og = org["organization-url"].rsplit("/", 1)[1]
    url = f"/v0/simulation/organizations/{og}/cop-request/simulate/{kind}"
    response = await client.post(url, json=_cop_body(org, "Jo Bloggs", "111111", "22222222"))
    assert response.status_code == 201
    status, result, reason = SIMULATION_TYPES[kind]
    answer = response.json()["cop-response"]
    assert (answer["status"], answer["result"], answer.get("reason")) == (status, result, reason)
    if result == "close-match":
        assert answer["suggested-name"]


async def test_cop_simulation_type_in_body(client: httpx.AsyncClient) -> None:
    """The spec's form, with cop-simulation-type in the body, works too; a bad type is 400."""
    org = await _org(client)
    og = org["organization-url"].rsplit("/", 1)[1]
    body = _cop_body(org, "Jo", "111111", "22222222") | {"cop-simulation-type": "account-switched"}
    response = await client.post(
        f"/v0/simulation/organizations/{og}/cop-request/simulate", json=body
    )
    assert response.json()["cop-response"]["reason"] == "account-switched"
    bad = await client.post(
        f"/v0/simulation/organizations/{og}/cop-request/simulate/nope", json=body
    )
    assert bad.status_code == 400


async def test_payee_with_cop_and_srd(client: httpx.AsyncClient) -> None:
    """A payee keeps its CoP request (include=cop-requests) and its SRD replaces the reference."""
    org = await _org(client)
    body = _cop_body(org, "Mia Davies", "110001", "22039287") | {
        "secondary-reference-data": "ROLL 123"
    }
    cop = (await client.post(f"{org['organization-url']}/cop-request", json=body)).json()
    payees_url = f"{org['own-legal-person-url']}/bank/payees"
    payee = (
        await client.post(
            payees_url,
            json={
                "account-holder": "Mia Davies",
                "account-number": "22039287",
                "bank-id": "110001",
                "cop-request-url": cop["cop-request-url"],
            },
        )
    ).json()
    listed = (await client.get(payees_url, params={"include": "cop-requests"})).json()
    assert listed["included"]["cop-requests"][0]["cop-request-url"] == cop["cop-request-url"]
    accounts = (await client.get(org["organization-bank-accounts-url"])).json()["accounts"]
    payment = await client.post(
        accounts[0]["account-payments-url"],
        json={
            "creditor": {"creditor-type": "payee", "payee-url": payee["payee-url"]},
            "payment-amount": {"currency": "GBP", "value": "1.00"},
            "payment-reference": "ignored",
        },
    )
    assert payment.json()["payment-reference"] == "ROLL 123"


def test_seed_file_round_trip(tmp_path: Path) -> None:
    """A seed file with accounts, payees, legal persons and directory entries builds a state."""
    seed = {
        "legal-persons": [{"key": "bob", "display-name": "Bob Ltd"}],
        "accounts": [
            {
                "display-name": "Bob Main",
                "sort-code": "040004",
                "account-number": "50000001",
                "balance": "12.34",
                "owner": "bob",
            }
        ],
        "payees": [
            {
                "owner": "bob",
                "account-holder": "Jane Doe",
                "sort-code": "112233",
                "account-number": "12345678",
                "payee-status": "active",
            }
        ],
        "directory": [
            {
                "account-holder": "Jane Doe",
                "sort-code": "112233",
                "account-number": "12345678",
                "account-classification": "personal",
            }
        ],
    }
    path = tmp_path / "seed.json"
    path.write_text(json.dumps(seed), "utf-8")
    state = build_state(load_seed(path))
    account = next(iter(state.accounts.values()))
    assert (account.display_name, account.balance, account.holder) == ("Bob Main", 1234, "Bob Ltd")
    assert [p.account_holder for p in state.payees.values()] == ["Jane Doe"]
    assert state.directory[("112233", "12345678")].name == "Jane Doe"
    assert build_state(load_seed(path)).accounts.keys() == state.accounts.keys()


@pytest.mark.parametrize(
    "bad",
    [
        {"accounts": [{"display-name": "X", "sort-code": "04000", "account-number": "50000001"}]},
        {
            "accounts": [
                {
                    "display-name": "X",
                    "sort-code": "040004",
                    "account-number": "50000001",
                    "owner": "ghost",
                }
            ]
        },
        {
            "payees": [
                {
                    "account-holder": "A",
                    "sort-code": "112233",
                    "account-number": "1",
                    "payee-status": "active",
                }
            ]
        },
        {"accounts": "none"},
    ],
)
def test_bad_seed_is_refused(tmp_path: Path, bad: dict[str, Any]) -> None:
    """A broken seed file raises SeedError naming the problem."""
    path = tmp_path / "seed.json"
    path.write_text(json.dumps(bad), "utf-8")
    with pytest.raises(SeedError):
        load_seed(path)


_ACCOUNT = {"display-name": "X", "sort-code": "040004", "account-number": "50000001"}


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"organization": "x"}, "organization must be an object"),
        ({"organization": {"display-name": ""}}, "organization needs a non-empty string"),
        ({"legal-persons": "x"}, r"legal-persons\[0\] must be an object"),
        (
            {"legal-persons": [{"key": "a", "display-name": "B", "legal-person-type": "robot"}]},
            r"legal-persons\[0\]: legal-person-type must be individual or corporation",
        ),
        ({"accounts": "none"}, "accounts must be a list"),
        ({"accounts": [{**_ACCOUNT, "sort-code": 40004}]}, "needs a non-empty string 'sort-code'"),
        ({"accounts": [{**_ACCOUNT, "restrictions": [5]}]}, r"restrictions\[0\] must be an"),
        ({"payees": [{"sort-code": "112233"}]}, "needs a non-empty string 'account-holder'"),
        (
            {"directory": [{"account-holder": "A", "sort-code": "112233", "account-number": "1"}]},
            "sort-code must be 6 digits and account-number 8 digits",
        ),
    ],
)
def test_a_bad_seed_file_is_named_entry_by_entry(tmp_path: Path, bad: Any, message: str) -> None:
    """A seed file of the wrong shape is refused with a SeedError naming the entry and key."""
    path = tmp_path / "seed.json"
    path.write_text(json.dumps(bad), "utf-8")
    with pytest.raises(SeedError, match=message):
        load_seed(path)


def test_default_seed_is_deterministic() -> None:
    """Two states from the default seed have the same account and payee URLs."""
    first, second = build_state(default_seed()), build_state(default_seed())
    assert list(first.accounts) == list(second.accounts)
    assert list(first.payees) == list(second.payees)
    assert first.api_key_secret != second.api_key_secret
