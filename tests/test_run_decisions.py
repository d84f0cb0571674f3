"""The run's decisions: reconciliation matching, repeat guard, payee index, control totals."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from payrun._models import LedgerRow, RowStatus
from payrun.errors import ControlTotalsError
from payrun.run._bankview import PayeeIndex
from payrun.run._matching import PayeeFacts, PaymentCheck
from payrun.run._payees import account_classification
from payrun.run._preflight import find_repeats
from payrun.run._reconcile import match_half_created
from payrun.run._start import check_control_totals

T0 = datetime(2026, 11, 21, 9, 0, tzinfo=UTC)


@dataclass(frozen=True)
class _Payment:
    url: str
    amount: Decimal
    reference: str | None
    created_at: datetime
    creditor_payee_url: str | None = None
    creditor_sort_code: str | None = "200000"
    creditor_account_number: str | None = "11112222"
    rejected: bool = False
    latest_submission_url: str | None = None
    latest_submission_status: str | None = None


@dataclass(frozen=True)
class _Payee:
    url: str
    account_holder: str
    sort_code: str
    account_number: str
    status: str = "active"
    srd: str | None = None


def _row(
    number: int,
    *,
    amount: str = "100.00",
    reference: str | None = "PAY",
    intent: datetime | None = T0,
) -> LedgerRow:
    return LedgerRow(
        row=number,
        row_id=None,
        payee_name="Ada",
        sort_code="200000",
        account_number="11112222",
        amount=Decimal(amount),
        reference=reference,
        source_account="040004 30000001",
        status=RowStatus.CREATING,
        intent_at=intent,
    )


def _pay(
    url: str,
    *,
    amount: str = "100.00",
    reference: str | None = "PAY",
    at: datetime = T0 + timedelta(seconds=1),
    **kw: object,
) -> _Payment:
    return _Payment(url=url, amount=Decimal(amount), reference=reference, created_at=at, **kw)  # type: ignore[arg-type]


def test_one_match_is_recorded() -> None:
    """A row left creating with exactly one matching payment takes that payment."""
    result = match_half_created(
        [_row(2)], [_pay("/p/1")], known_payment_urls=set(), payee_details={}
    )
    assert result.matched == {2: "/p/1"} and not result.not_made and not result.ambiguous


def test_no_match_means_create_again() -> None:
    """No matching payment: the create never happened, so the row may be created again."""
    result = match_half_created(
        [_row(2)], [_pay("/p/1", amount="99.00")], known_payment_urls=set(), payee_details={}
    )
    assert result.not_made == [2] and not result.matched


def test_payment_before_intent_is_ignored() -> None:
    """Payments older than the intent minus a minute of skew are not this row's."""
    old = _pay("/p/1", at=T0 - timedelta(minutes=5))
    result = match_half_created([_row(2)], [old], known_payment_urls=set(), payee_details={})
    assert result.not_made == [2]


def test_a_payment_is_placed_after_the_intent_on_the_bank_clock() -> None:
    """A bank 3 minutes behind stamps a row's payment 3 minutes before its intent: matched
    with that offset, and a payment older than the intent on the bank's clock is not."""
    made = _pay("/p/1", at=T0 - timedelta(minutes=3) + timedelta(seconds=1))
    behind = timedelta(minutes=-3)
    found = match_half_created(
        [_row(2)], [made], known_payment_urls=set(), payee_details={}, bank_offset=behind
    )
    assert found.matched == {2: "/p/1"}
    older = _pay("/p/2", at=T0 - timedelta(minutes=5))
    result = match_half_created(
        [_row(2)], [older], known_payment_urls=set(), payee_details={}, bank_offset=behind
    )
    assert result.not_made == [2]


def test_a_payment_check_compares_a_payment_with_its_row() -> None:
    """PaymentCheck: the row's amount, creditor and reference match; another amount, payee
    or reference does not; a rejected payment never does."""
    check = PaymentCheck({})
    row = _row(2)._replace(payee_url="/payees/1")

    def to_payee(url: str) -> _Payment:
        return _pay(
            "/p/1", creditor_payee_url=url, creditor_sort_code=None, creditor_account_number=None
        )

    assert check.matches(row, to_payee("/payees/1"))
    assert check.matches(row, _pay("/p/1"))  # shown as the row's account, no payee URL
    assert not check.matches(row, to_payee("/payees/2"))
    assert not check.matches(row, _pay("/p/1", creditor_account_number="99998888"))
    assert not check.matches(row, _pay("/p/1", amount="1.00"))
    assert not check.matches(row, _pay("/p/1", reference="OTHER"))
    assert not check.matches(row, _pay("/p/1", rejected=True))


def test_known_payments_are_not_matched_again() -> None:
    """A payment already recorded for another row is never reused."""
    result = match_half_created(
        [_row(2)], [_pay("/p/1")], known_payment_urls={"/p/1"}, payee_details={}
    )
    assert result.not_made == [2]


def test_several_matches_need_attention() -> None:
    """Two matching payments for one row: nothing is guessed."""
    result = match_half_created(
        [_row(2)], [_pay("/p/1"), _pay("/p/2")], known_payment_urls=set(), payee_details={}
    )
    assert result.ambiguous == [2] and not result.matched


def test_identical_rows_share_matches_in_order() -> None:
    """Two identical rows and one payment: the first takes it, the second is created again."""
    rows = [_row(2), _row(3, intent=T0 + timedelta(seconds=2))]
    result = match_half_created(rows, [_pay("/p/1")], known_payment_urls=set(), payee_details={})
    assert result.matched == {2: "/p/1"} and result.not_made == [3]


def test_payee_creditor_matched_through_payee_details() -> None:
    """A payee-shaped creditor is matched by the payee's sort code and account number."""
    payment = _pay(
        "/p/1",
        creditor_payee_url="/v0/payees/pe.1",
        creditor_sort_code=None,
        creditor_account_number=None,
    )
    result = match_half_created(
        [_row(2)],
        [payment],
        known_payment_urls=set(),
        payee_details={"/v0/payees/pe.1": PayeeFacts("200000", "11112222")},
    )
    assert result.matched == {2: "/p/1"}


def test_blank_reference_matches_bank_default() -> None:
    """A row with no reference matches the bank's 'Sent from ...' default."""
    result = match_half_created(
        [_row(2, reference=None)],
        [_pay("/p/1", reference="Sent from Acme Payroll Ltd")],
        known_payment_urls=set(),
        payee_details={},
    )
    assert result.matched == {2: "/p/1"}


def _source(row: LedgerRow, source: str) -> LedgerRow:
    return row._replace(source_account=source)


def test_one_payment_is_never_given_to_two_rows_named_two_ways() -> None:
    """Two rows alike but for how they name the source account share one group: the one
    payment goes to the first row's intent, and the other row is created again."""
    rows = [_row(2), _source(_row(3, intent=T0 + timedelta(seconds=2)), "/v0/bank/accounts/ba.1")]
    result = match_half_created(rows, [_pay("/p/1")], known_payment_urls=set(), payee_details={})
    assert result.matched == {2: "/p/1"} and result.not_made == [3]


def test_typed_reference_beats_the_bank_default_for_a_blank_one() -> None:
    """A blank-reference row and a 'Sent from HR' row: the bank's 'Sent from HR' payment is
    the typed row's, not both rows'; the blank row was not made."""
    rows = [_row(2, reference=None), _row(3, reference="Sent from HR")]
    result = match_half_created(
        rows, [_pay("/p/1", reference="Sent from HR")], known_payment_urls=set(), payee_details={}
    )
    assert result.matched == {3: "/p/1"} and result.not_made == [2]


def _srd_payment(url: str, at: datetime = T0 + timedelta(seconds=1)) -> _Payment:
    return _pay(
        url,
        reference="ROLL 0042-7",
        at=at,
        creditor_payee_url="/pe/1",
        creditor_sort_code=None,
        creditor_account_number=None,
    )


SRD_PAYEE = {"/pe/1": PayeeFacts("200000", "11112222", "ROLL 0042-7")}


def test_payment_whose_reference_the_payee_srd_replaced_is_matched() -> None:
    """The bank writes the payee's SRD instead of the row's reference: still the row's."""
    result = match_half_created(
        [_row(2)], [_srd_payment("/p/1")], known_payment_urls=set(), payee_details=SRD_PAYEE
    )
    assert result.matched == {2: "/p/1"} and result.not_made == []


def test_srd_rows_with_other_references_share_the_payments() -> None:
    """Two rows to one SRD payee, same amount, other references: the bank's payments look
    alike, so one payment goes to one row (first intent) and the other is created again;
    two payments for the two rows match one each, never one payment for both."""
    rows = [_row(2, reference="JAN"), _row(3, reference="FEB", intent=T0 + timedelta(seconds=2))]
    one = match_half_created(
        rows, [_srd_payment("/p/1")], known_payment_urls=set(), payee_details=SRD_PAYEE
    )
    assert one.matched == {2: "/p/1"} and one.not_made == [3]
    two = match_half_created(
        rows,
        [_srd_payment("/p/1"), _srd_payment("/p/2", at=T0 + timedelta(seconds=3))],
        known_payment_urls=set(),
        payee_details=SRD_PAYEE,
    )
    assert two.matched == {2: "/p/1", 3: "/p/2"}
    three = match_half_created(
        rows,
        [_srd_payment(f"/p/{n}") for n in range(3)],
        known_payment_urls=set(),
        payee_details=SRD_PAYEE,
    )
    assert three.ambiguous == [2, 3] and three.matched == {}


def _bare_srd_payment(url: str, at: datetime = T0 + timedelta(seconds=1)) -> _Payment:
    """A payment to the SRD payee that the bank shows as a bare account (no payee URL)."""
    return _pay(url, reference="ROLL 0042-7", at=at)


def test_an_srd_payment_shown_without_its_payee_still_matches() -> None:
    """The bank may show a payee's payment as a uk-domestic creditor: the SRD of any payee
    of that account still explains its reference, in reconciliation and the repeat guard."""
    result = match_half_created(
        [_row(2)], [_bare_srd_payment("/p/1")], known_payment_urls=set(), payee_details=SRD_PAYEE
    )
    assert result.matched == {2: "/p/1"}
    repeats = find_repeats(
        [_row(2)], [_bare_srd_payment("/p/1")], known_payment_urls=set(), payee_details=SRD_PAYEE
    )
    assert set(repeats) == {2}


def test_a_reference_typed_as_the_srd_does_not_take_every_payment() -> None:
    """Row 2's reference is the SRD itself, row 3's another one; both were made (two
    payments, both carrying the SRD): each row gets one, the typed match first, and nothing
    is created again or called ambiguous."""
    rows = [_row(2, reference="ROLL 0042-7"), _row(3, reference="FEB")]
    payments = [_srd_payment("/p/1"), _srd_payment("/p/2", at=T0 + timedelta(seconds=3))]
    result = match_half_created(rows, payments, known_payment_urls=set(), payee_details=SRD_PAYEE)
    assert result.matched == {2: "/p/1", 3: "/p/2"}
    assert result.not_made == [] and result.ambiguous == []


def test_repeat_guard_sees_through_the_payee_srd() -> None:
    """A recent payment to an SRD payee is a repeat of the row, whatever its reference."""
    repeats = find_repeats(
        [_row(2, reference="INV 1")],
        [_srd_payment("/p/1")],
        known_payment_urls=set(),
        payee_details=SRD_PAYEE,
    )
    assert set(repeats) == {2}


def test_repeat_guard_ignores_payments_that_did_not_pay() -> None:
    """A payment whose latest submission failed or was returned is no repeat; one that is
    pending or delivered is."""
    for status, repeat in (("failed", False), ("returned", False), ("delivered", True)):
        payment = _pay("/p/1", latest_submission_url="/s/1", latest_submission_status=status)
        found = find_repeats([_row(2)], [payment], known_payment_urls=set(), payee_details={})
        assert bool(found) is repeat, status


def test_repeat_guard_flags_outside_payment() -> None:
    """A pending row matching a payment this ledger did not make is a possible repeat."""
    rows = [_row(2), _row(3, amount="5.00")]
    repeats = find_repeats(rows, [_pay("/p/9")], known_payment_urls=set(), payee_details={})
    assert set(repeats) == {2}


def test_repeat_guard_ignores_own_and_rejected_payments() -> None:
    """Payments of this ledger, and rejected payments, are not repeats."""
    payments = [_pay("/p/1"), _pay("/p/2", rejected=True)]
    assert find_repeats([_row(2)], payments, known_payment_urls={"/p/1"}, payee_details={}) == {}


def test_payee_index_reuses_active_and_spots_deactivated() -> None:
    """Active payees are found ignoring case and spacing; deactivated-only is reported."""
    index = PayeeIndex.build(
        [
            _Payee("/pe/1", "Ada  Lovelace", "200000", "11112222"),
            _Payee("/pe/2", "Grace Hopper", "200000", "33334444", status="deactivated"),
        ]
    )
    assert index.lookup("ada lovelace", "200000", "11112222") == "/pe/1"
    assert index.lookup("Grace Hopper", "200000", "33334444") is None
    assert index.is_deactivated("Grace Hopper", "200000", "33334444")
    assert index.details["/pe/2"] == PayeeFacts("200000", "33334444")


def test_control_totals() -> None:
    """Control totals pass when equal and refuse with both numbers when not."""
    check_control_totals(2, Decimal("10.00"), expect_count=2, expect_total=Decimal("10"))
    with pytest.raises(ControlTotalsError, match="3 valid rows where --expect-count says 4"):
        check_control_totals(3, Decimal("10.00"), expect_count=4, expect_total=None)
    with pytest.raises(ControlTotalsError, match="total 10.00 where --expect-total says 11.00"):
        check_control_totals(3, Decimal("10.00"), expect_count=None, expect_total=Decimal("11"))


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("Kestrel IT Solutions Ltd", "business"),
        ("Summit Legal LLP", "business"),
        ("Fenwick & Hale", "business"),
        ("Oliver Smith", "personal"),
    ],
)
def test_account_classification(name: str, kind: str) -> None:
    """Business names are recognised for Confirmation of Payee."""
    assert account_classification(name) == kind
