"""Seeds: the starting state of a sandbox bank, as a JSON object (``--seed FILE``).

A seed is a JSON object; every key is optional and defaults to ``default_seed()``'s::

    {
      "organization": {"display-name": "Acme Payroll Ltd", "organization-mode": "test-mode"},
      "legal-persons": [
        {"key": "bob", "display-name": "Bob Ltd", "legal-person-type": "corporation"}
      ],
      "accounts": [
        {"display-name": "Acme Payroll Operational", "bank-product-type": "operational-account",
         "sort-code": "040004", "account-number": "30000001", "balance": "1000000.00",
         "owner": "org", "account-status": "open",
         "restrictions": [{"restriction-type": "freeze", "restriction-reason-code": "sanctions",
                           "restriction-legal-status": "not-applicable", "applied-by": "service"}]}
      ],
      "payees": [
        {"owner": "org", "account-holder": "Oliver Smith", "sort-code": "309089",
         "account-number": "00705473", "payee-status": "active"}
      ],
      "directory": [
        {"account-holder": "Jane Doe", "sort-code": "112233", "account-number": "12345678",
         "account-classification": "personal"}
      ],
      "builtin-directory": true,
      "message-signature-keys": [
        {"key-id": "payrun-live-1", "public-key-file": "public.pem"}
      ]
    }

``organization-mode`` is ``test-mode`` (the default) or ``live-mode``: the organization then
says it moves real money (so payrun asks before paying), and nothing else changes: the
sandbox never moves money. ``owner`` names a legal person by ``key``; ``"org"`` is the
organization's own legal person (a corporation named like the organization). Account
``balance`` is a decimal string (default ``1000000.00``); ``bank-product-type`` defaults to
``operational-account``, ``account-status`` to ``open``, ``payee-status`` to ``active``,
``applied-by`` to ``user`` (``service`` marks a restriction the bank applied: a sensitive
reason code then hides its details and it cannot be lifted through the API). ``directory``
entries are added to Confirmation of Payee's directory of true names, which starts from the
packaged ``directory.csv`` unless ``builtin-directory`` is false; the sandbox's own accounts
are always in it. ``message-signature-keys`` registers Ed25519 public keys (``public-key``:
the PEM text, or ``public-key-file``: a PEM file, relative to the seed file) under the key
ids the client signs with: the organization is then ``live-mode`` and every request that
needs the API key must carry a valid RFC 9421 signature (``payrun sandbox
--require-signatures`` does the same). Ids are derived from the seed's content, so one seed
always yields the same URLs.
"""

from __future__ import annotations

import copy
import csv
import json
from importlib import resources
from pathlib import Path
from typing import Any

from payrun.sandbox._checks import ACCOUNT_NUMBER, SORT_CODE
from payrun.sandbox._model import LegalPerson, Product, stable_id
from payrun.sandbox._seeding import (
    SeedError,
    add_account,
    add_payee,
    add_restriction,
    register_signature_key,
)
from payrun.sandbox.state import DirectoryEntry, SandboxState

__all__ = [
    "MAX_PUBLIC_KEY_FILE_BYTES",
    "MAX_SEED_BYTES",
    "SeedError",
    "build_state",
    "default_seed",
    "load_directory",
    "load_seed",
]

MAX_SEED_BYTES = 8 * 1024 * 1024
"""A seed file over 8 MiB (tens of thousands of payees) is refused before it is read whole."""
MAX_PUBLIC_KEY_FILE_BYTES = 65_536
"""A PEM public key is a few hundred bytes: a bigger file is not one."""

_MODES = ("test-mode", "live-mode")
"""The organization modes of the bank API: ``live-mode`` moves real money."""

DEFAULT_EMPLOYEE_PAYEES = 5
"""How many directory employees the default seed already has as payees."""

_PRODUCTS = (
    ("Easy Access Savings", "savings-account", "savings"),
    ("Operational Account", "operational-account", "current"),
    ("Client Money Account", "client-money-account", "client-money"),
    ("Safeguarding Account", "safeguarding-account", "safeguarding"),
    ("Embedded Account", "embedded-account", "embedded"),
)


def load_directory() -> list[dict[str, str]]:
    """Read the packaged ``directory.csv`` of true account-holder names."""
    text = resources.files("payrun.sandbox").joinpath("directory.csv").read_text("utf-8")
    return [
        {
            "account-holder": row["account_holder"],
            "sort-code": row["sort_code"],
            "account-number": row["account_number"],
            "account-classification": row["account_classification"],
        }
        for row in csv.DictReader(text.splitlines())
    ]


def default_seed() -> dict[str, Any]:
    """Return the default seed: Acme Payroll Ltd, its two accounts and a few payees."""
    employees = [
        {
            "owner": "org",
            "account-holder": e["account-holder"],
            "sort-code": e["sort-code"],
            "account-number": e["account-number"],
            "payee-status": "active",
        }
        for e in load_directory()
        if e["account-classification"] == "personal"
    ][:DEFAULT_EMPLOYEE_PAYEES]
    retired = {
        "owner": "org",
        "account-holder": "Dormant Supplies Ltd",
        "sort-code": "401276",
        "account-number": "11110000",
        "payee-status": "deactivated",
    }
    return {
        "organization": {"display-name": "Acme Payroll Ltd", "organization-mode": "test-mode"},
        "legal-persons": [],
        "accounts": [
            {
                "display-name": "Acme Payroll Operational",
                "bank-product-type": "operational-account",
                "sort-code": "040004",
                "account-number": "30000001",
                "balance": "1000000.00",
                "owner": "org",
                "account-status": "open",
            },
            {
                "display-name": "Acme Client Money",
                "bank-product-type": "client-money-account",
                "sort-code": "040004",
                "account-number": "30000002",
                "balance": "1000000.00",
                "owner": "org",
                "account-status": "open",
            },
        ],
        "payees": [*employees, retired],
        "directory": [],
        "builtin-directory": True,
    }


def load_seed(path: str | Path) -> dict[str, Any]:
    """Read a seed JSON file, fill in the defaults, and check it (``SeedError``)."""
    try:
        loaded = json.loads(_read_limited(Path(path), MAX_SEED_BYTES, f"seed {path}"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        message = f"cannot read seed {path}: {exc}"
        raise SeedError(message) from exc
    if not isinstance(loaded, dict):
        message = f"seed {path} must hold a JSON object"
        raise SeedError(message)
    # Imported here: pydantic costs a tenth of a second, and only a seed file needs it
    from payrun.sandbox._seed_file import check_seed_file

    seed = default_seed() | loaded
    check_seed_file(seed)
    _read_public_key_files(seed, Path(path).parent)
    # Fail now, with the file's name at hand, rather than at serve time
    build_state(seed)
    return seed


def _read_public_key_files(seed: dict[str, Any], folder: Path) -> None:
    """Each signature key's ``public-key-file`` (relative to ``folder``) read as its
    ``public-key``."""
    for n, entry in enumerate(seed.get("message-signature-keys", [])):
        name = entry.pop("public-key-file", None)
        if name is None:
            continue
        where = f"message-signature-keys[{n}].public-key-file {name}"
        try:
            text = _read_limited(folder / name, MAX_PUBLIC_KEY_FILE_BYTES, where)
            entry.setdefault("public-key", text)
        except (OSError, UnicodeDecodeError) as exc:
            message = f"cannot read message-signature-keys[{n}].public-key-file {name}: {exc}"
            raise SeedError(message) from exc


def _read_limited(path: Path, limit: int, what: str) -> str:
    """The UTF-8 text of the file at ``path``; ``SeedError`` when it is over ``limit`` bytes
    (read no further than that)."""
    with path.open("rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        message = f"{what} is over {limit // 1024:,} KiB: not a file the sandbox reads"
        raise SeedError(message)
    return data.decode("utf-8")


def _require(entry: Any, where: str, keys: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(entry, dict):
        message = f"{where} must be an object"
        raise SeedError(message)
    for key in keys:
        if not isinstance(entry.get(key), str) or not entry[key]:
            message = f"{where} needs a non-empty string {key!r}"
            raise SeedError(message)
    return entry


def _check_address(entry: dict[str, Any], where: str) -> tuple[str, str]:
    sort_code, number = entry["sort-code"], entry["account-number"]
    if not SORT_CODE.fullmatch(sort_code) or not ACCOUNT_NUMBER.fullmatch(number):
        message = f"{where}: sort-code must be 6 digits and account-number 8 digits"
        raise SeedError(message)
    return sort_code, number


def build_state(seed: dict[str, Any] | None = None, *, api_key: str | None = None) -> SandboxState:
    """Build a fresh ``SandboxState`` from ``seed`` (default: ``default_seed()``)."""
    seed = copy.deepcopy(default_seed() if seed is None else seed)
    state = SandboxState(api_key=api_key)
    org = _require(seed.get("organization", {}), "organization", ("display-name",))
    state.org_name = org["display-name"]
    state.org_mode = org.get("organization-mode", "test-mode")
    if state.org_mode not in _MODES:
        message = "organization: organization-mode must be test-mode or live-mode"
        raise SeedError(message)
    state.org_id = stable_id("og", state.org_name)
    state.api_key_id = stable_id("ak", state.org_name)
    state.user_id = stable_id("ur", state.org_name)
    owners = _add_legal_persons(state, seed.get("legal-persons", []))
    _add_products(state)
    for n, entry in enumerate(_as_list(seed, "accounts")):
        where = f"accounts[{n}]"
        _require(entry, where, ("display-name", "sort-code", "account-number"))
        account = add_account(state, entry, owners, where, _check_address(entry, where))
        for m, restriction in enumerate(entry.get("restrictions", [])):
            add_restriction(state, account, _require(restriction, f"{where}.restrictions[{m}]", ()))
    for n, entry in enumerate(_as_list(seed, "payees")):
        where = f"payees[{n}]"
        _require(entry, where, ("account-holder", "sort-code", "account-number"))
        add_payee(state, entry, owners, where, _check_address(entry, where))
    _add_directory(state, seed)
    for n, entry in enumerate(_as_list(seed, "message-signature-keys")):
        where = f"message-signature-keys[{n}]"
        _require(entry, where, ("key-id", "public-key"))
        register_signature_key(state, entry["key-id"], entry["public-key"], f"{where}.public-key")
    return state


def _as_list(seed: dict[str, Any], key: str) -> list[Any]:
    value = seed.get(key, [])
    if not isinstance(value, list):
        message = f"{key} must be a list"
        raise SeedError(message)
    return value


def _add_legal_persons(state: SandboxState, entries: Any) -> dict[str, str]:
    now = state.now()
    own = LegalPerson(
        stable_id("lp", "org", state.org_name), "corporation", state.org_name, now, state.next_seq()
    )
    state.legal_persons[own.id] = own
    state.own_legal_person_id = own.id
    owners = {"org": own.id}
    for n, entry in enumerate(entries if isinstance(entries, list) else [None]):
        _require(entry, f"legal-persons[{n}]", ("key", "display-name"))
        kind = entry.get("legal-person-type", "corporation")
        if kind not in {"individual", "corporation"}:
            message = f"legal-persons[{n}]: legal-person-type must be individual or corporation"
            raise SeedError(message)
        person = LegalPerson(
            stable_id("lp", entry["key"]), kind, entry["display-name"], now, state.next_seq()
        )
        state.legal_persons[person.id] = person
        owners[entry["key"]] = person.id
    return owners


def _add_products(state: SandboxState) -> None:
    for name, product_type, product_class in _PRODUCTS:
        product = Product(
            stable_id("bp", product_type),
            name,
            product_type,
            product_class,
            "active",
            state.now(),
            state.next_seq(),
        )
        state.products[product.id] = product


def _add_directory(state: SandboxState, seed: dict[str, Any]) -> None:
    entries = load_directory() if seed.get("builtin-directory", True) else []
    for n, entry in enumerate([*entries, *_as_list(seed, "directory")]):
        where = f"directory[{n}]"
        _require(entry, where, ("account-holder", "sort-code", "account-number"))
        classification = entry.get("account-classification", "personal")
        if classification not in {"personal", "business"}:
            message = f"{where}: account-classification must be personal or business"
            raise SeedError(message)
        address = _check_address(entry, where)
        state.add_directory_entry(*address, DirectoryEntry(entry["account-holder"], classification))
    for account in state.accounts.values():
        state.add_directory_entry(
            account.sort_code, account.account_number, DirectoryEntry(account.holder, "business")
        )
