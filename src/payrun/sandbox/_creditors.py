"""The three creditor shapes of create-payment, checked strictly and resolved.

- ``{"creditor-type": "payee", "payee-url"}``: a payee of the paying account's owner.
- ``{"creditor-type": "service-bank-account", "account-url"}`` (``griffin-bank-account``
  is accepted as an alias): another sandbox account.
- ``{"creditor-type": "uk-domestic", ...}``: sort code and account number under either the
  new names (``uk-domestic-sort-code``, ``uk-domestic-account-number``) or the legacy ones
  (``bank-id``, ``account-number``); ``account-holder`` and the other optional fields of the
  spec are allowed. A UK-domestic creditor whose details are a sandbox account is paid into it.

The response creditor keeps the shape that was sent (``payee`` with ``payee-url``, as the
spec says), plus ``account-holder``, ``uk-domestic-sort-code`` and
``uk-domestic-account-number`` for convenience.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from payrun.sandbox._checks import ACCOUNT_NUMBER, SORT_CODE, check_keys, choice, text, url_id
from payrun.sandbox._http import ApiError
from payrun.sandbox._model import Account
from payrun.sandbox.state import SandboxState

__all__ = ["CREDITOR_TYPES", "Creditor", "parse_creditor"]

CREDITOR_TYPES = ("payee", "service-bank-account", "griffin-bank-account", "uk-domestic")
_UK_OPTIONAL = (
    "account-holder",
    "uk-domestic-sort-code",
    "uk-domestic-account-number",
    "iban",
    "bic",
    "bban",
    "other-account-identification",
    "other-institution-identification",
    "account-url",
    "account-number",
    "bank-id",
    "bank-id-code",
    "account-number-code",
)
_CODES = {"bank-id-code": "gbdsc", "account-number-code": "bban"}
_LONG_TEXT = {"other-account-identification": 64, "other-institution-identification": 64}
_PATTERNS = {
    "iban": re.compile(r"[A-Z]{2}\d{2}[A-Za-z0-9]{1,30}"),
    "bic": re.compile(r"[A-Za-z0-9]{8,11}"),
    "bban": re.compile(r"[A-Za-z0-9]{1,30}"),
}


@dataclass(frozen=True, slots=True)
class Creditor:
    """A creditor resolved to its UK details, the payee or sandbox account it names."""

    rendered: dict[str, Any]
    sort_code: str
    account_number: str
    holder: str | None
    payee_id: str | None = None
    target_account_id: str | None = None
    srd: str | None = None


def parse_creditor(state: SandboxState, account: Account, value: Any) -> Creditor:
    """Check a request's ``creditor`` object and resolve it, or raise 400/404/422."""
    if not isinstance(value, dict):
        raise ApiError(400, "incorrect-type", "creditor must be an object", pointer="/creditor")
    kind = choice(value, "creditor-type", CREDITOR_TYPES, base="/creditor")
    if kind == "payee":
        return _payee_creditor(state, account, value)
    if kind == "uk-domestic":
        return _uk_creditor(state, value)
    check_keys(value, required=("creditor-type", "account-url"), base="/creditor")
    target_id = url_id(value["account-url"], "bank/accounts", "ba", "/creditor/account-url")
    target = state.accounts.get(target_id)
    if target is None:
        raise ApiError(404, "not-found", "no such bank account", pointer="/creditor/account-url")
    if target.id == account.id:
        raise ApiError(422, "same-account", "an account cannot pay itself")
    rendered = {
        "creditor-type": "service-bank-account",
        "account-url": f"/v0/bank/accounts/{target.id}",
        "account-holder": target.holder,
        "uk-domestic-sort-code": target.sort_code,
        "uk-domestic-account-number": target.account_number,
    }
    return Creditor(
        rendered, target.sort_code, target.account_number, target.holder, None, target.id
    )


def _payee_creditor(state: SandboxState, account: Account, value: dict[str, Any]) -> Creditor:
    check_keys(value, required=("creditor-type", "payee-url"), base="/creditor")
    payee_id = url_id(value["payee-url"], "payees", "pe", "/creditor/payee-url")
    payee = state.payees.get(payee_id)
    if payee is None:
        raise ApiError(404, "not-found", "no such payee", pointer="/creditor/payee-url")
    if payee.legal_person_id != account.owner_id:
        detail = "the payee belongs to another legal person than the account's owner"
        raise ApiError(422, "payee-not-available", detail)
    srd = None
    if payee.cop_request_id:
        srd = state.cop_requests[payee.cop_request_id].account.get("secondary-reference-data")
    target = state.account_by_address.get((payee.sort_code, payee.account_number))
    rendered: dict[str, Any] = {
        "creditor-type": "uk-domestic" if state.bare_payee_creditors else "payee",
        "account-holder": payee.account_holder,
        "uk-domestic-sort-code": payee.sort_code,
        "uk-domestic-account-number": payee.account_number,
    }
    if not state.bare_payee_creditors:
        rendered["payee-url"] = f"/v0/payees/{payee.id}"
    return Creditor(
        rendered,
        payee.sort_code,
        payee.account_number,
        payee.account_holder,
        payee.id,
        target,
        srd[:35] if isinstance(srd, str) and srd else None,
    )


def _uk_field(value: dict[str, Any], new: str, legacy: str, pattern: re.Pattern[str]) -> str:
    found = {
        key: text(value, key, base="/creditor", pattern=pattern)
        for key in (new, legacy)
        if key in value
    }
    if not found:
        raise ApiError(400, "missing-field", f"{new} is required", pointer=f"/creditor/{new}")
    if len(set(found.values())) > 1:
        detail = f"{new} and {legacy} disagree"
        raise ApiError(400, "invalid-value", detail, pointer=f"/creditor/{legacy}")
    return next(iter(found.values()))


def _uk_creditor(state: SandboxState, value: dict[str, Any]) -> Creditor:
    check_keys(value, required=("creditor-type",), optional=_UK_OPTIONAL, base="/creditor")
    for key, code in _CODES.items():
        if key in value and value[key] != code:
            raise ApiError(
                400, "invalid-enum-value", f"{key} must be {code}", pointer=f"/creditor/{key}"
            )
    for key, pattern in _PATTERNS.items():
        if key in value:
            text(value, key, base="/creditor", pattern=pattern)
    for key, limit in _LONG_TEXT.items():
        if key in value:
            text(value, key, base="/creditor", max_len=limit)
    sort_code = _uk_field(value, "uk-domestic-sort-code", "bank-id", SORT_CODE)
    number = _uk_field(value, "uk-domestic-account-number", "account-number", ACCOUNT_NUMBER)
    holder = text(value, "account-holder", base="/creditor") if "account-holder" in value else None
    if "account-url" in value:
        url_id(value["account-url"], "bank/accounts", "ba", "/creditor/account-url")
    target = state.account_by_address.get((sort_code, number))
    rendered: dict[str, Any] = {
        "creditor-type": "uk-domestic",
        "uk-domestic-sort-code": sort_code,
        "uk-domestic-account-number": number,
        "bank-id": sort_code,
        "account-number": number,
    }
    if holder is not None:
        rendered["account-holder"] = holder
    if target is not None:
        rendered["account-url"] = f"/v0/bank/accounts/{target}"
    return Creditor(rendered, sort_code, number, holder, None, target)
