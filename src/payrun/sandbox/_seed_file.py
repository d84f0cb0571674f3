"""The shape of a seed file a user hands ``payrun sandbox --seed``, checked with pydantic.

A seed file is untrusted JSON: ``check_seed_file`` validates its shape (objects, lists,
non-empty strings, the allowed words) before ``build_state`` reads it, and turns pydantic's
first error into a ``SeedError`` worded as ``build_state`` words the same problem. What
needs the whole seed (an owner naming a legal person, a sort code's digits) stays in
``build_state``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from payrun.sandbox._seeding import SeedError

__all__ = ["check_seed_file"]

_Text = Annotated[str, StringConstraints(min_length=1)]


class _Entry(BaseModel):
    """An entry of a seed: the keys named here are checked, others are read by the sandbox."""

    model_config = ConfigDict(extra="allow", strict=True)


class _Organization(_Entry):
    display_name: _Text = Field(alias="display-name")
    organization_mode: Literal["test-mode", "live-mode"] = Field(
        "test-mode", alias="organization-mode"
    )


class _LegalPerson(_Entry):
    key: _Text
    display_name: _Text = Field(alias="display-name")
    legal_person_type: Literal["individual", "corporation"] = Field(
        "corporation", alias="legal-person-type"
    )


class _Account(_Entry):
    display_name: _Text = Field(alias="display-name")
    sort_code: _Text = Field(alias="sort-code")
    account_number: _Text = Field(alias="account-number")
    restrictions: list[_Entry] = []


class _Payee(_Entry):
    account_holder: _Text = Field(alias="account-holder")
    sort_code: _Text = Field(alias="sort-code")
    account_number: _Text = Field(alias="account-number")


class _DirectoryEntry(_Payee):
    account_classification: Literal["personal", "business"] = Field(
        "personal", alias="account-classification"
    )


class _SignatureKey(_Entry):
    key_id: _Text = Field(alias="key-id")
    public_key: _Text | None = Field(None, alias="public-key")
    public_key_file: _Text | None = Field(None, alias="public-key-file")


class _Seed(_Entry):
    organization: _Organization
    legal_persons: list[_LegalPerson] = Field(alias="legal-persons")
    accounts: list[_Account]
    payees: list[_Payee]
    directory: list[_DirectoryEntry]
    message_signature_keys: list[_SignatureKey] = Field([], alias="message-signature-keys")


_ALLOWED = {
    "organization-mode": "test-mode or live-mode",
    "legal-person-type": "individual or corporation",
    "account-classification": "personal or business",
}
"""The words a seed key allows, as ``build_state`` lists them."""


def check_seed_file(seed: dict[str, Any]) -> None:
    """Raise ``SeedError`` when a seed (a file's object over the defaults) has the wrong shape."""
    try:
        _Seed.model_validate(seed)
    except ValidationError as exc:
        raise SeedError(_message(exc.errors()[0])) from None


def _message(error: Any) -> str:
    """One pydantic error in ``build_state``'s words."""
    *place, last = error["loc"]
    kind = error["type"]
    if kind == "list_type" and not place and last != "legal-persons":
        return f"{last} must be a list"
    if kind == "list_type":
        # A non-list of entries reads as its first entry not being one
        return f"{_where([*place, last])}[0] must be an object"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"{_where([*place, last])} must be an object"
    if kind == "literal_error":
        return f"{_where(place)}: {last} must be {_ALLOWED[str(last)]}"
    return f"{_where(place)} needs a non-empty string {last!r}"


def _where(loc: list[Any]) -> str:
    """``accounts[0].restrictions[1]`` from pydantic's location of the same entry."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text
