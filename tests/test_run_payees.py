"""Confirmation of Payee verdicts, and the last answer a held row's error keeps."""

from __future__ import annotations

import pytest

from payrun.bank import CopResult
from payrun.run._payees import cop_verdict, held_again_reason


def _answer(
    result: str,
    reason: str | None = None,
    suggested: str | None = None,
    *,
    status: str = "verified",
) -> CopResult:
    return CopResult(
        url="/v0/cop/1", status=status, result=result, reason=reason, suggested_name=suggested
    )


@pytest.mark.parametrize(
    ("answer", "accepted_later"),
    [
        (_answer("close-match", "close-match-name", "Mia Davies"), True),
        (_answer("close-match"), True),
        (_answer("no-match", "no-match-name"), False),
        (_answer("no-match", "account-switched"), False),
        (_answer("no-match", "account-not-supported", status="unverified"), False),
        (_answer("no-match", "match-name-business-personal"), False),
        (_answer("no-match"), False),
        (_answer("no-match", status="unverified"), False),
    ],
)
def test_a_held_rows_last_answer_tells_whether_a_rerun_holds_it_again(
    answer: CopResult, accepted_later: bool
) -> None:
    """Every hold read back: held again with the bank's answer and its advice, unless the
    rerun accepts close matches and the answer was one."""
    error = cop_verdict(answer, accept_close_match=False)
    again = held_again_reason(error, accept_close_match=False)
    assert again is not None and error is not None
    assert again.endswith(error.removeprefix("Confirmation of Payee: ")), again
    assert (held_again_reason(error, accept_close_match=True) is None) is accepted_later


@pytest.mark.parametrize(
    "error",
    [None, "", "possible repeat: the bank already has the same payment", "payee not created"],
)
def test_errors_that_are_no_payee_check_predict_nothing(error: str | None) -> None:
    """Rows held or failed for another reason are checked again, not held by a guess."""
    assert held_again_reason(error, accept_close_match=False) is None


@pytest.mark.parametrize(
    "answer",
    [
        _answer("no-match", "account-not-supported", status="unverified"),
        _answer("no-match", "no-match-secondary-ref"),
        _answer("no-match", "match-name-business-personal"),
    ],
)
def test_holds_a_new_file_cannot_fix_point_to_the_payee_in_the_bank_app(answer: CopResult) -> None:
    """Answers no correction of the row can change say to add the payee in the bank's app
    and run again (payrun reuses it), never to switch the check off for the whole file."""
    held = cop_verdict(answer, accept_close_match=False)
    assert held is not None and "add the payee" in held and "run the same command again" in held
    assert "--no-confirm-payees" not in held and "new file" not in held
