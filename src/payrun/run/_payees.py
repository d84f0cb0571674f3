"""Confirmation of Payee for a new payee: ask the bank, and judge its answer.

Input: the payee's name, sort code and account number, and the legal person paying. Output:
the bank's CoP answer, and whether its rows go ahead or are held (with what to do). A file
gives no account type, so payrun guesses it from the name (``account_classification``);
when the bank says the name matches but the account is of the other type (Pay.UK's
BANM/PANM answers), it asks once more with that type. A dry run asks nothing: it reads the
bank's last answer back from a held row's error (``held_again_reason``).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

# The bank client is imported only by runs that talk to a bank
if TYPE_CHECKING:
    from payrun.bank import BankClient, CopResult, Organization

__all__ = [
    "NEW_FILE",
    "account_classification",
    "confirm_payee",
    "cop_verdict",
    "held_again_reason",
]

NEW_FILE = (
    "put the corrected row in a new file of its own and pay that file (this ledger stays"
    " bound to this file's content)"
)
_OTHER_TYPE = {
    "match-name-business-personal",
    "match-name-personal-business",
}
_FLIP = {"personal": "business", "business": "personal"}
_REUSES = "reuses an active payee with the same name and account, without a check"
_PREFIX = "Confirmation of Payee: "
_CLOSE_MATCH = "close match"
# How every hold ``cop_verdict`` writes begins (in every release so far): the bank's
# result, as "close match" or the bank's own word (no-match).
_HELD = re.compile(re.escape(_PREFIX) + rf"(?P<result>{_CLOSE_MATCH}|[a-z-]+)\b")


async def confirm_payee(
    client: BankClient,
    org: Organization,
    *,
    name: str,
    sort_code: str,
    account_number: str,
    requester_url: str,
) -> CopResult:
    """The bank's CoP answer for the name, with the account type it holds."""
    classification = account_classification(name)
    for _ in range(2):
        cop = await client.confirm_payee(
            org,
            name=name,
            sort_code=sort_code,
            account_number=account_number,
            classification=classification,
            requester_url=requester_url,
        )
        if cop.result != "no-match" or cop.reason not in _OTHER_TYPE:
            break
        classification = _FLIP[classification]
    return cop


def cop_verdict(cop: CopResult, *, accept_close_match: bool) -> str | None:
    """None to go ahead, else why the rows are held and what to do."""
    if cop.result == "match":
        return None
    if cop.result == "close-match":
        if accept_close_match:
            return None
        said = (
            f"the account holder is {cop.suggested_name!r}"
            if cop.suggested_name
            else "the name is close"
        )
        return (
            f"{_PREFIX}{_CLOSE_MATCH}, the bank says {said}; to pay it as it is,"
            f" run again with --accept-close-match; to correct the name, {NEW_FILE}"
        )
    return f"{_PREFIX}{cop.result}{_why(cop)}"


def held_again_reason(last_error: str | None, *, accept_close_match: bool) -> str | None:
    """Why a row Confirmation of Payee held on the last run would be held again, or None.

    A run asks the bank again about the same name (a ledger's row never changes), so the
    bank's last answer, kept in the held row's error, is what a dry run can go by: a close
    match is paid with ``--accept-close-match``, any other answer holds the row again.
    None too when the error is not a Confirmation of Payee hold.
    """
    found = _HELD.match(last_error or "")
    if found is None or (found["result"] == _CLOSE_MATCH and accept_close_match):
        return None
    assert last_error is not None
    return (
        "a run asks Confirmation of Payee again about the same name and would hold it"
        f" again if the bank answers as on the last run: {last_error.removeprefix(_PREFIX)}"
    )


def _why(cop: CopResult) -> str:
    """The bank's reason for a no-match, in words, with the way out."""
    reason = cop.reason
    if reason == "account-switched":
        return (
            " (account-switched): the payee has moved this account to another bank or"
            f" account; ask the payee for their new details, then {NEW_FILE}"
        )
    if reason == "account-not-supported":
        return (
            " (account-not-supported): the payee's bank cannot check names on this account;"
            " once you have confirmed the details with the payee another way, add the payee"
            f" in the bank's app, then run the same command again (payrun {_REUSES})"
        )
    if reason == "no-match-secondary-ref":
        return (
            " (no-match-secondary-ref): this account needs a secondary reference, such as a"
            " building society roll number; add the payee with it in the bank's app, then"
            f" run the same command again (payrun {_REUSES}, and the bank puts the roll"
            " number on the payment)"
        )
    if reason in _OTHER_TYPE:
        return (
            f" ({reason}): the name matches, but the bank reports another account type"
            " (personal or business) whichever payrun asked about; check the details with"
            f" the payee; if they are right, add the payee in the bank's app, then run the"
            f" same command again (payrun {_REUSES})"
        )
    if reason is None and cop.status == "unverified":
        return (
            ": the bank could not check this account; check the sort code and account number"
            f" with the payee, then {NEW_FILE}"
        )
    why = f" ({reason})" if reason else ""
    return (
        f"{why}: the name does not match the account holder; check the details with the"
        f" payee, then {NEW_FILE}"
    )


_BUSINESS_WORDS = re.compile(
    r"\b(ltd|limited|llp|plc|inc|co|company|corp|corporation|group|services|solutions|"
    r"trust|partners|partnership|associates|consulting|holdings)\b|&",
    re.IGNORECASE,
)


def account_classification(name: str) -> str:
    """Guess the account type Confirmation of Payee needs: business names carry Ltd, LLP, &..."""
    return "business" if _BUSINESS_WORDS.search(name) else "personal"
