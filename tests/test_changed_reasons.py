"""What the payee-change guard says when it holds a row (issue 27 M2, M3): old and new
details masked, and where each old detail was known when that is not an active payee of
the row's name as typed (a deactivated payee, a row this ledger paid, a look-alike name,
a name cut to 18 characters).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from decimal import Decimal

from payrun._models import LedgerRow, RowStatus
from payrun.run._changed import Known, changed_details_holds
from payrun.run._names import NameIndex

OLD = ("401156", "11111234")
NEW = ("402212", "22229876")


def _row(number: int, name: str, details: tuple[str, str] = NEW) -> LedgerRow:
    """A pending row needing a payee, as the guard sees it."""
    return LedgerRow(
        row=number,
        row_id=None,
        payee_name=name,
        sort_code=details[0],
        account_number=details[1],
        amount=Decimal("1.00"),
        reference=None,
        source_account="040004 30000001",
        status=RowStatus.PENDING,
    )


def _known(*entries: Known) -> NameIndex[Known]:
    """``entries`` filed by their names."""
    index: NameIndex[Known] = NameIndex()
    for known in entries:
        index.add(known.name, known)
    return index


def _held(rows: Sequence[LedgerRow], *known: NameIndex[Known]) -> dict[int, str]:
    return changed_details_holds(rows, known)


def test_more_than_three_old_payees_are_counted_not_listed() -> None:
    """Three old details are listed, the rest counted; never a whole number in the text."""
    olds = [(f"4011{i:02d}", f"1111{1000 + i:04d}") for i in range(5)]
    text = _held([_row(2, "Jane")], _known(*(Known("Jane", *d) for d in olds)))[2]
    assert re.search(r"was (\.\.\d{4} at \.\.\d{2} or ){3}2 more \(5 payees of this name\)", text)
    for sort_code, number in [NEW, *olds]:
        assert number not in text and sort_code not in text, text


def test_a_deactivated_payee_and_a_paid_row_are_old_details() -> None:
    """A deactivated payee's details and a paid row's are named for what they are."""
    payees = _known(Known("Jane Q Smith", *OLD, active=False))
    paid = _known(Known("Jane Q Smith", "401178", "11115555", payee=False, row=9))
    text = _held([_row(2, "Jane Q Smith")], payees, paid)[2]
    assert text.startswith(
        "bank details for Jane Q Smith changed: was ..1234 at ..56 (deactivated payee) or"
        " ..5555 at ..78 (paid by this ledger for row 9), now ..9876 at ..12 (or two"
    ), text


def test_details_known_twice_are_listed_once_active_payee_first() -> None:
    """A row this ledger paid to an active payee's details adds nothing to the list."""
    payees = _known(Known("Jane Q Smith", *OLD))
    paid = _known(Known("Jane Q Smith", *OLD, payee=False, row=9))
    text = _held([_row(2, "Jane Q Smith")], paid, payees)[2]
    assert "was ..1234 at ..56, now ..9876 at ..12" in text, text


def test_a_look_alike_name_is_quoted_with_invisible_characters_escaped() -> None:
    """The payee's own spelling is quoted; a zero-width space in the row's name shows."""
    payees = _known(Known("Jane Q Smith", *OLD))
    text = _held([_row(2, "Jane\u200b Q Smith")], payees)[2]
    assert text.startswith(
        'bank details for Jane\\u200b Q Smith changed: was ..1234 at ..56 (payee "Jane Q'
        ' Smith"), now ..9876 at ..12 (or two different people share this name)'
    ), text


def test_a_cut_name_says_the_names_agree_on_18_characters() -> None:
    """When the names only agree on what a Bacs file keeps, the reason says so."""
    payees = _known(Known("Jane Quentina Smithers", *OLD))
    text = _held([_row(2, "JANE QUENTINA SMIT")], payees)[2]
    assert ", now ..9876 at ..12, and the names agree on their first 18 characters, all that" in (
        text
    )


def test_rows_of_look_alike_names_differ_within_the_batch() -> None:
    """With nothing known of the name, look-alike rows with other details hold each other."""
    rows = [_row(2, "Sam Lee"), _row(3, "Lee, Sam", OLD), _row(4, "Ada Lovelace")]
    held = _held(rows, _known())
    assert set(held) == {2, 3}
    assert held[2].startswith(
        "bank details for Sam Lee differ within this batch and no payee of that name exists"
        ' yet: this row has ..9876 at ..12, another row has ..1234 at ..56 (as "Lee, Sam")'
    ), held[2]
