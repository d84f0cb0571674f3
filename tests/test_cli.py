"""The CLI shell: help text, exit-code table."""

from __future__ import annotations

import pytest

from payrun.cli import exit_code_for, main
from payrun.errors import (
    AuthError,
    BankUnavailableError,
    BatchFileError,
    ControlTotalsError,
    InterruptedRunError,
    LedgerLockedError,
)


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    """`payrun --help` names every subcommand of the contract."""
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for command in ("validate", "run", "report", "template", "sandbox"):
        assert command in out


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (BatchFileError("x"), 2),
        (ControlTotalsError("x"), 2),
        (AuthError("x"), 2),
        (LedgerLockedError("x"), 2),
        (InterruptedRunError("x"), 3),
        (BankUnavailableError("x"), 3),
    ],
)
def test_exit_code_table(error: Exception, code: int) -> None:
    """Each error branch maps to its documented exit code."""
    assert exit_code_for(error) == code  # type: ignore[arg-type]
