"""payrun's one exception tree.

Every error payrun raises on purpose derives from ``PayrunError``, and each class carries
the documented exit code of a command it ends (``.exit_code``, inherited down the tree;
the CLI and the fleet read it, and the codes are named here: ``EXIT_OK`` ...
``EXIT_RUN_AGAIN``)::

    PayrunError                    exit 2 unless a branch below says otherwise
    ├── UsageError                 exit 2: the command cannot start as given
    │   ├── ConfigError            bad settings: base URL, API key, option values
    │   ├── BatchFileError         the batch file itself cannot be used (.path)
    │   ├── ControlTotalsError     --expect-count / --expect-total differ from the file
    │   ├── NotConfirmedError      a live-mode run was not confirmed (no terminal, declined)
    │   ├── PolicyError            the approval policy file cannot be trusted or read
    │   └── ApprovalError          a plan cannot be approved, or a run --plan is refused
    ├── BankError                  exit 3: no answer, or a bad one (.status, .detail)
    │   ├── AuthError              401/403: exit 2
    │   │   └── RefusedMidRunError after payments were created: summary and report still (.rows)
    │   ├── RateLimitedError       429: refused before processing, safe to retry
    │   ├── BankUnavailableError   not sent or refused before sending: safe to retry
    │   ├── OutcomeUnknownError    sent, but the answer was lost (timeout, reset, 5xx)
    │   └── BankRejectedError      4xx refusal; .code is the bank's (e.g. insufficient-funds)
    ├── LedgerError                exit 2: the ledger cannot be used for this run
    │   ├── LedgerWriteError       exit 3: a write failed mid-run (disk full); run again
    │   ├── LedgerMismatchError    the ledger belongs to another file, bank or organization
    │   └── LedgerLockedError      another process is running this ledger (.pid)
    └── InterruptedRunError        exit 3: stopped early (Ctrl-C, SIGTERM); run again to resume

Row-level problems in a batch file are data (``RowProblem``), never exceptions.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from payrun._models import LedgerRow

__all__ = [
    "EXIT_NOT_ALL_PAID",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_RUN_AGAIN",
    "ApprovalError",
    "AuthError",
    "BankError",
    "BankRejectedError",
    "BankUnavailableError",
    "BatchFileError",
    "ConfigError",
    "ControlTotalsError",
    "InterruptedRunError",
    "LedgerError",
    "LedgerLockedError",
    "LedgerMismatchError",
    "LedgerWriteError",
    "NotConfirmedError",
    "OutcomeUnknownError",
    "PayrunError",
    "PolicyError",
    "RateLimitedError",
    "RefusedMidRunError",
    "UsageError",
    "first_payrun_error",
]


EXIT_OK = 0
"""Every row done as asked."""
EXIT_NOT_ALL_PAID = 1
"""Some rows invalid, held or failed: the rest were paid."""
EXIT_REFUSED = 2
"""Usage, configuration, authentication or control totals: nothing more was done."""
EXIT_RUN_AGAIN = 3
"""The bank unavailable, the run interrupted or incomplete: running again resumes."""


def first_payrun_error(error: BaseException) -> PayrunError | None:
    """``error`` itself, or the first ``PayrunError`` inside an exception group (None when
    there is none): what a user is told when concurrent tasks failed."""
    if isinstance(error, PayrunError):
        return error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = first_payrun_error(inner)
            if found is not None:
                return found
    return None


class PayrunError(Exception):
    """Root of every error payrun raises on purpose; ``str()`` is a one-line user message,
    ``exit_code`` the documented exit code of the command it ends."""

    exit_code: int = EXIT_REFUSED


class UsageError(PayrunError):
    """The command cannot start as given (exit 2)."""


class ConfigError(UsageError):
    """A setting is missing or wrong: base URL, API key, option values."""


class BatchFileError(UsageError):
    """The batch file itself cannot be used: missing, unreadable, no header, column absent."""

    def __init__(self, message: str, *, path: Path | str | None = None) -> None:
        super().__init__(message)
        self.path = Path(path) if path is not None else None


class ControlTotalsError(UsageError):
    """The file's valid rows do not match ``--expect-count`` / ``--expect-total``."""


class NotConfirmedError(UsageError):
    """A run paying a live-mode organization was not confirmed: no terminal to ask on and
    no ``--yes``, or the person answered anything but yes. Nothing was created."""


class PolicyError(ConfigError):
    """The approval policy (``--policy``, ``PAYRUN_POLICY_FILE``) is unsafe or unreadable."""


class ApprovalError(UsageError):
    """A plan cannot be made or approved as asked, or a ``run --plan`` does not meet the
    policy: nothing was recorded or created."""


class BankError(PayrunError):
    """The bank answered with an error, or did not answer: nothing is lost, run again."""

    exit_code = EXIT_RUN_AGAIN

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        detail: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.detail = detail


class AuthError(BankError):
    """The bank refused the API key (401) or the caller's role (403)."""

    exit_code = EXIT_REFUSED


class RefusedMidRunError(AuthError):
    """401/403 once payments of the batch exist: the message says what was done and what next.

    ``.rows`` is every row as recorded when the run stopped, so the CLI still prints the
    summary and writes the report (exit 2, as for any authentication or role refusal).
    """

    def __init__(
        self,
        message: str,
        *,
        rows: Sequence[LedgerRow],
        status: int | None = None,
        code: str | None = None,
        detail: str | None = None,
    ) -> None:
        super().__init__(message, status=status, code=code, detail=detail)
        self.rows = tuple(rows)


class RateLimitedError(BankError):
    """429: the bank refused the request before processing it; retrying is safe."""


class BankUnavailableError(BankError):
    """The request never reached the bank (connection refused, DNS); retrying is safe.

    ``reason``: ``"no-such-host"`` when the bank's host name did not resolve, ``"tls"`` when
    the TLS handshake failed (a certificate, or no TLS server at that port), else None.
    """

    reason: str | None = None


class OutcomeUnknownError(BankError):
    """The request was sent but its answer was lost: it may or may not have taken effect.

    ``late``: the bank may still be working on it (no answer came: the wait for it ran out or
    the connection dropped; or a gateway's wait ran out: HTTP 504, 524), so what it did is
    looked up no sooner than the run's settle wait (``RunOptions.settle_wait``) later.
    """

    late = False


class BankRejectedError(BankError):
    """The bank understood the request and refused it (400, 404, 409, 410, 422)."""


class LedgerError(PayrunError):
    """The result ledger cannot be used for this run (exit 2)."""


class LedgerWriteError(LedgerError):
    """A write to the ledger failed mid-run (disk full, say): what was done is kept; fix
    it, run again (exit 3)."""

    exit_code = EXIT_RUN_AGAIN


class LedgerMismatchError(LedgerError):
    """The ledger was made for another file content, bank base URL or organization."""


class LedgerLockedError(LedgerError):
    """Another process holds the ledger's lock."""

    def __init__(self, message: str, *, pid: int | None = None) -> None:
        super().__init__(message)
        self.pid = pid


class InterruptedRunError(PayrunError):
    """The run stopped before every row reached its end; running again resumes (exit 3)."""

    exit_code = EXIT_RUN_AGAIN
