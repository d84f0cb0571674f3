"""The changed-bank-details guard: a known payee name with new bank details is held.

Input: the pending rows of one payee owner that need a new payee (no active payee has the
row's name, sort code and account number), and the bank details of the owner's active
payees by name (``normalise_name``). Output: row number -> why it is held. A row is held
when an active payee has its name and other details ("I've changed banks" fraud, or two
people sharing a name), or, when no payee has that name yet, when another such row of the
batch has the name with other details (the bank's list gives no old details to trust
there). Reasons show only the last 4 digits of an account number and the last 2 of a sort
code. Nothing here talks to the bank.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence

from payrun._models import LedgerRow

__all__ = ["ACCEPT_FLAG", "changed_details_holds", "masked_details", "normalise_name"]

ACCEPT_FLAG = "--accept-changed-details"
"""The run option that pays rows this guard would hold."""

_MAX_LISTED = 3
"""Old details a reason lists before it says how many more there are."""

_Details = tuple[str, str]
"""Sort code, account number."""

_WHAT_TO_DO = (
    " (or two different people share this name); confirm with the payee by phone, on a"
    " number you already had (not one sent with the new details), then run again with"
    f" {ACCEPT_FLAG}"
)


def normalise_name(name: str) -> str:
    """Compare names ignoring case and runs of whitespace."""
    return " ".join(name.casefold().split())


def masked_details(sort_code: str, account_number: str) -> str:
    """'..1234 at ..56': the last 4 digits of the account number, the last 2 of the sort code."""
    return f"..{account_number[-4:]} at ..{sort_code[-2:]}"


def changed_details_holds(
    rows: Sequence[LedgerRow], known: Mapping[str, Collection[_Details]]
) -> dict[int, str]:
    """Row number -> hold reason, for ``rows`` (one owner's rows needing a new payee) whose
    name an active payee (``known``: normalised name -> details) or another row has with
    other details."""
    in_batch: dict[str, dict[_Details, None]] = defaultdict(dict)
    for row in rows:
        in_batch[normalise_name(row.payee_name)][(row.sort_code, row.account_number)] = None
    holds: dict[int, str] = {}
    for row in rows:
        name = normalise_name(row.payee_name)
        own = (row.sort_code, row.account_number)
        old = [details for details in known.get(name, ()) if details != own]
        others = [details for details in in_batch[name] if details != own]
        if old:
            holds[row.row] = _changed(row, old)
        elif others:
            holds[row.row] = _differ(row, others)
    return holds


def _changed(row: LedgerRow, old: Sequence[_Details]) -> str:
    """A payee of this name exists with other details."""
    was = _listed(old)
    payees = f" ({len(old)} payees of this name)" if len(old) > 1 else ""
    now = masked_details(row.sort_code, row.account_number)
    return f"bank details for {row.payee_name} changed: was {was}{payees}, now {now}{_WHAT_TO_DO}"


def _differ(row: LedgerRow, others: Sequence[_Details]) -> str:
    """No payee of this name exists, and rows of the batch give it different details."""
    now = masked_details(row.sort_code, row.account_number)
    rows = "another row has" if len(others) == 1 else f"{len(others)} other rows have"
    return (
        f"bank details for {row.payee_name} differ within this batch and no payee of that"
        f" name exists yet: this row has {now}, {rows} {_listed(others)}{_WHAT_TO_DO}"
    )


def _listed(details: Sequence[_Details]) -> str:
    """Up to three masked details joined with 'or', then how many more."""
    shown = " or ".join(masked_details(*d) for d in details[:_MAX_LISTED])
    extra = len(details) - _MAX_LISTED
    return f"{shown} or {extra} more" if extra > 0 else shown
