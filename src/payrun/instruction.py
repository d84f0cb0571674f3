"""``PaymentInstruction``: one valid batch row, as validation hands it to planning.

A frozen pydantic model (house style: values that cross stages are immutable). Kept in
its own module so that importing ``payrun._models`` does not import pydantic.
"""

from __future__ import annotations

from decimal import Decimal

from pydantic import BaseModel, ConfigDict

from payrun._models import payment_key

__all__ = ["PaymentInstruction"]


class PaymentInstruction(BaseModel):
    """One valid batch row: pay ``amount`` GBP to a UK account from ``source_account``.

    ``source_account`` is normalised to either an account path (``/v0/bank/accounts/ba.x``)
    or ``"SORTCODE ACCOUNTNUMBER"`` (``"040004 30000001"``). ``reference`` is ``None`` when
    the file left it blank (the bank then sends "Sent from <owner>").
    """

    # defer_build: the validator is built on first use; runs build instructions without it
    # (payrun.validation._build), and building it at import costs 40 ms of every run's start
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    row: int
    payee_name: str
    sort_code: str
    account_number: str
    amount: Decimal
    reference: str | None = None
    source_account: str
    row_id: str | None = None

    @property
    def payee_key(self) -> tuple[str, str, str]:
        """Name, sort code and account number: what makes a payee the same payee."""
        return (self.payee_name, self.sort_code, self.account_number)

    @property
    def payment_key(self) -> tuple[str, str, str, str]:
        """Sort code, account number, amount and reference: what makes a payment a repeat."""
        return payment_key(self.sort_code, self.account_number, self.amount, self.reference)
