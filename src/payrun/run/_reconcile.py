"""Reconciliation: find out what the bank did with calls whose answer was lost.

Input: rows left ``creating`` or ``submitting`` (after a timeout, a 5xx, a dropped
connection, Ctrl-C or kill -9). Output: each such row moved to what the bank shows:
``created`` (the payment exists), ``pending`` (it does not: safe to create again),
``submitted`` or back to ``created`` (no submission: safe to submit again). Rows the bank
cannot settle without guessing stay ``creating`` with an explanation, and are returned.

Payments are looked for on the bank's clock (``client.clock``): made since a row's first
intent, as the bank stamps it. An answer about another payment than the row's (a
submission of another payment, or one already recorded for another row; a payment read
that names another payment) settles nothing: it is a failed read, and the run stops
(exit 3) with the row as it was.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from payrun._models import LedgerRow, RowStatus
from payrun.run._bankview import fetch_recent_payments
from payrun.run._book import RowBook
from payrun.run._matching import (
    CLOCK_SKEW,
    PayeeFacts,
    PaymentLike,
    payment_match,
    srds_by_account,
)
from payrun.run._submissions import settle_by_submissions

# The bank client is imported only by runs that talk to a bank
if TYPE_CHECKING:
    from payrun.bank import BankClient, Payment
    from payrun.run._state import RunState

__all__ = [
    "Reconciliation",
    "match_half_created",
    "reconcile_rows",
]

_PUZZLING = (
    "the bank answered this row's create with another payment than the one asked for, and"
    " shows no payment matching this row: check the account's payments in the bank's app"
    " (one to this payee for this amount may be this row's, its reference rewritten), reject"
    " any that is this row's, then run again: the row is then created once"
)


async def reconcile_rows(
    run: RunState,
    *,
    payments: Mapping[str, list[Payment]] | None = None,
    answered_otherwise: Collection[int] = (),
    rows: Collection[int] | None = None,
    found_only: bool = False,
) -> list[int]:
    """Settle every ``creating`` and ``submitting`` row (or those of them in ``rows``);
    return rows needing a person.

    ``payments``: the accounts' payments already read (by account URL), looked for first.
    ``answered_otherwise``: rows whose create the bank answered with another payment than
    theirs in this run; one of them the bank shows no payment for stays ``creating`` and
    needs a person (the bank did something: it is not created again in this run).
    ``found_only``: before the rows' settle time, while the bank may still carry out their
    requests: a payment or submission the bank shows is recorded, and a row the bank shows
    nothing for stays as it is (in doubt), never made ready to send again.
    """
    ambiguous = await _reconcile_creating(
        run,
        payments=payments or {},
        answered_otherwise=answered_otherwise,
        rows=rows,
        found_only=found_only,
    )
    await _reconcile_submitting(run.client, run.book, rows=rows, found_only=found_only)
    return ambiguous


async def _reconcile_creating(
    run: RunState,
    *,
    payments: Mapping[str, list[Payment]],
    answered_otherwise: Collection[int],
    rows: Collection[int] | None,
    found_only: bool,
) -> list[int]:
    client, book = run.client, run.book
    accounts, payee_details = run.checks.accounts, run.checks.payee_details
    by_account: dict[str, list[LedgerRow]] = defaultdict(list)
    for row in book.in_status(RowStatus.CREATING):
        if rows is None or row.row in rows:
            by_account[row.account_url or ""].append(row)
    ambiguous: list[int] = []
    for account_url, group in by_account.items():
        account = accounts.get(account_url)
        # The bank no longer shows it: its payments cannot be read
        if account is None:
            for row in group:
                book.set(
                    row.row,
                    error=(
                        f"the bank no longer shows the source account {row.source_account}, so"
                        " payrun cannot check whether this payment was made; ask the bank, then"
                        " run again"
                    ),
                )
            ambiguous.extend(r.row for r in group)
            continue
        offset = client.clock.offset
        since = (
            min(r.intent_at for r in group if r.intent_at) + offset - CLOCK_SKEW
            if any(r.intent_at for r in group)
            else None
        )
        seen = payments.get(account_url)
        if seen is None or (since is not None and seen and seen[0].created_at > since):
            seen = await fetch_recent_payments(client, account, since=since or _epoch())
        result = match_half_created(
            group,
            seen,
            known_payment_urls=book.known_payment_urls(),
            payee_details=payee_details,
            bank_offset=offset,
        )
        for number, url in result.matched.items():
            book.set(number, status=RowStatus.CREATED, payment_url=url, error=None)
        # The bank may still make them: they stay in doubt
        if found_only:
            ambiguous.extend(_flag_ambiguous(book, result.ambiguous))
            continue
        puzzling = [n for n in result.not_made if n in answered_otherwise]
        book.set_many(
            [n for n in result.not_made if n not in answered_otherwise],
            status=RowStatus.PENDING,
            intent_at=None,
            error=None,
        )
        for number in puzzling:
            book.set(number, error=_PUZZLING)
        ambiguous.extend(puzzling)
        ambiguous.extend(_flag_ambiguous(book, result.ambiguous))
    return ambiguous


def _flag_ambiguous(book: RowBook, numbers: list[int]) -> list[int]:
    """Say on each row that several payments match it (a person must look); return them."""
    for number in numbers:
        book.set(
            number,
            error=(
                "several bank payments match this row and the ledger cannot tell which one it"
                " made; check the account's payments in the bank's app, reject any extra"
                " (unsubmitted) one, then run again"
            ),
        )
    return numbers


async def _reconcile_submitting(
    client: BankClient, book: RowBook, *, rows: Collection[int] | None, found_only: bool
) -> None:
    submitting = [r for r in book.in_status(RowStatus.SUBMITTING) if rows is None or r.row in rows]
    # Before the settle time, no submission found is no answer yet
    await settle_by_submissions(
        client, book, submitting, none=None if found_only else RowStatus.CREATED
    )


def _epoch() -> datetime:
    return datetime.fromisoformat("2000-01-01T00:00:00+00:00")


_NO_TIME = datetime.min.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """What the bank shows for rows whose create outcome was unknown."""

    matched: dict[int, str]
    """Row number -> the payment URL the bank holds for it."""
    not_made: list[int]
    """Rows the bank has no payment for: safe to create again."""
    ambiguous: list[int]
    """Rows with more matching payments than rows: a person must look (nothing is guessed)."""


def match_half_created(
    rows: Sequence[LedgerRow],
    payments: Sequence[PaymentLike],
    *,
    known_payment_urls: set[str],
    payee_details: Mapping[str, PayeeFacts],
    bank_offset: timedelta = timedelta(0),
) -> Reconciliation:
    """Match rows left ``creating`` to payments this ledger has not recorded yet.

    A payment counts for a group when the bank made it after the group's first intent
    (``bank_offset``: how far the bank's clock is ahead of ours, its ``created-at`` being
    the bank's time), less ``CLOCK_SKEW``.

    Rows with the same payee account, amount and reference are interchangeable, so a group
    of k such rows with m <= k candidate payments takes them in intent order and the rest
    are created again; m > k is ambiguous and every row of the group needs attention.
    Groups that match one payment at all (a typed reference and the bank's default text for
    a blank one, or two references the payee's SRD replaced) are counted together, and
    each payment goes to one row, the earliest that matches it best; no payment is ever
    given to two rows, and a payment no row is left for makes them all need attention.
    """
    groups: dict[_Key, list[LedgerRow]] = defaultdict(list)
    for row in sorted(rows, key=_by_intent):
        groups[row.payment_key].append(row)
    free = sorted(
        (p for p in payments if p.url not in known_payment_urls), key=lambda p: p.created_at
    )
    claims = _claims(groups, free, payee_details, bank_offset)
    matched: dict[int, str] = {}
    not_made: list[int] = []
    ambiguous: list[int] = []
    for members, urls in _components(groups, claims):
        assigned = _assign(members, [p for p in free if p.url in urls], claims)
        if assigned is None:
            ambiguous.extend(r.row for r in members)
            continue
        matched.update(assigned)
        not_made.extend(r.row for r in members if r.row not in assigned)
    return Reconciliation(matched=matched, not_made=sorted(not_made), ambiguous=sorted(ambiguous))


_Key = tuple[str, ...]


def _by_intent(row: LedgerRow) -> tuple[datetime, int]:
    return (row.intent_at or _NO_TIME, row.row)


def _claims(
    groups: Mapping[_Key, Sequence[LedgerRow]],
    free: Sequence[PaymentLike],
    payees: Mapping[str, PayeeFacts],
    bank_offset: timedelta,
) -> dict[str, dict[_Key, int]]:
    """Payment URL -> the groups it matches (made after their first intent), and how well."""
    claims: dict[str, dict[_Key, int]] = defaultdict(dict)
    srds = srds_by_account(payees)
    for key, group in groups.items():
        since = _since(group, bank_offset)
        for payment in free:
            if since is None or payment.created_at >= since:
                strength = payment_match(group[0], payment, payees, srds)
                if strength:
                    claims[payment.url][key] = strength
    return claims


def _components(
    groups: Mapping[_Key, Sequence[LedgerRow]], claims: Mapping[str, Mapping[_Key, int]]
) -> list[tuple[list[LedgerRow], set[str]]]:
    """Groups joined by any payment they both match: each part's rows (in intent order) and
    the payments they match (each payment in one part only)."""
    parent = {key: key for key in groups}

    def root(key: _Key) -> _Key:
        while parent[key] != key:
            key = parent[key]
        return key

    for claimers in claims.values():
        first, *others = claimers
        for key in others:
            parent[root(key)] = root(first)
    parts: dict[_Key, tuple[list[LedgerRow], set[str]]] = {}
    for key, group in groups.items():
        parts.setdefault(root(key), ([], set()))[0].extend(group)
    for url, claimers in claims.items():
        parts[root(next(iter(claimers)))][1].add(url)
    for members, _ in parts.values():
        members.sort(key=_by_intent)
    return list(parts.values())


def _assign(
    members: Sequence[LedgerRow],
    payments: Sequence[PaymentLike],
    claims: Mapping[str, Mapping[_Key, int]],
) -> dict[int, str] | None:
    """Each payment (oldest first) to the earliest free row that matches it best (a
    reference as typed before the bank's rewrite of one); None when there are more payments
    than rows, or a payment finds no row left: a person must look."""
    if len(payments) > len(members):
        return None
    free = list(members)
    assigned: dict[int, str] = {}
    for payment in payments:
        strengths = claims[payment.url]
        options = [r for r in free if strengths.get(r.payment_key)]
        if not options:
            return None
        # The earliest of the best
        best = max(options, key=lambda r: strengths[r.payment_key])
        assigned[best.row] = payment.url
        free.remove(best)
    return assigned


def _since(group: Sequence[LedgerRow], bank_offset: timedelta) -> datetime | None:
    """The earliest intent of a group on the bank's clock, less the clock skew (None: no
    intent recorded)."""
    intents = [r.intent_at for r in group if r.intent_at]
    return min(intents) + bank_offset - CLOCK_SKEW if intents else None
