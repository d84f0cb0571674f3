"""The exception tree: each branch carries its documented exit code."""

from __future__ import annotations

import pytest

from payrun.errors import (
    AuthError,
    BankUnavailableError,
    BatchFileError,
    ControlTotalsError,
    InterruptedRunError,
    LedgerLockedError,
    LedgerWriteError,
    PayrunError,
    RefusedMidRunError,
)


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (BatchFileError("x"), 2),
        (ControlTotalsError("x"), 2),
        (AuthError("x"), 2),
        (LedgerLockedError("x"), 2),
        (InterruptedRunError("x"), 3),
        (BankUnavailableError("x"), 3),
        (LedgerWriteError("x"), 3),
        (RefusedMidRunError("x", rows=[]), 2),
        (PayrunError("x"), 2),
    ],
)
def test_exit_code_table(error: PayrunError, code: int) -> None:
    """Each error branch carries its documented exit code."""
    assert error.exit_code == code
