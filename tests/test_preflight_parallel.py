"""The preflight's reads in parallel: round trips before the first payment, errors in a
fixed order, and the gate a live-mode run waits at before it creates anything.

Real `payrun run` processes over loopback against a sandbox bank; the sandbox itself counts
the longest chain of requests each sent after the previous one's answer.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from _run_helpers import BatchRow, error_answer, fresh_python, run, stats, write_batch
from payrun.sandbox import RunningSandbox, serve_in_thread

# Long enough that a loaded machine sends a whole wave of reads before any answer comes
_LATENCY_MS = 150


_KEY = Ed25519PrivateKey.generate()
_KEY_ID = "parallel-1"


def _signing_env(directory: Path) -> dict[str, str]:
    """The settings that sign a run's requests with ``_KEY`` (a live organization needs them)."""
    path = directory / "signing.pem"
    path.write_bytes(
        _KEY.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    # Readable by its owner only, or payrun refuses it
    path.chmod(0o600)
    return {"PAYRUN_SIGNING_KEY_FILE": str(path), "PAYRUN_SIGNING_KEY_ID": _KEY_ID}


def _seed(accounts: int, *, mode: str = "test-mode") -> dict[str, Any]:
    """``accounts`` accounts, each owned by its own legal person with one payee; a live-mode
    organization takes requests signed with ``_KEY``."""
    keys = []
    if mode == "live-mode":
        public = _KEY.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        keys = [{"key-id": _KEY_ID, "public-key": public.decode()}]
    return {
        "message-signature-keys": keys,
        "organization": {"display-name": "Parallel Ltd", "organization-mode": mode},
        "legal-persons": [
            {"key": f"o{a}", "display-name": f"Owner {a} Ltd"} for a in range(accounts)
        ],
        "accounts": [
            {
                "display-name": f"Parallel {a}",
                "sort-code": "040004",
                "account-number": _account_number(a),
                "balance": "1000000.00",
                "owner": f"o{a}",
            }
            for a in range(accounts)
        ],
        "payees": [
            {
                "owner": f"o{a}",
                "account-holder": f"Payee {a}",
                "sort-code": "200000",
                "account-number": f"{70000000 + a:08d}",
            }
            for a in range(accounts)
        ],
    }


def _account_number(a: int) -> str:
    return f"{50000000 + a:08d}"


def _rows(accounts: int, *, new_payee: bool = False) -> list[BatchRow]:
    """One row per account to its existing payee (or, ``new_payee``, to a new one)."""
    return [
        BatchRow(
            row_id=f"P{a}",
            payee_name=f"New {a}" if new_payee else f"Payee {a}",
            sort_code="200000",
            account_number=f"{80000000 + a:08d}" if new_payee else f"{70000000 + a:08d}",
            amount=f"{10 + a}.00",
            reference=f"PAR-{a:03d}",
            source_account=f"040004 {_account_number(a)}",
        )
        for a in range(accounts)
    ]


@pytest.fixture
def bank_of(tmp_path: Path) -> Iterator[Callable[..., RunningSandbox]]:
    """Start a sandbox seeded with ``_seed(accounts, mode=...)`` (stopped at the end)."""
    stack: list[Any] = []

    def start(
        accounts: int, *, mode: str = "test-mode", latency_ms: float = _LATENCY_MS
    ) -> RunningSandbox:
        seed = tmp_path / f"seed-{len(stack)}.json"
        seed.write_text(json.dumps(_seed(accounts, mode=mode)), "utf-8")
        context = serve_in_thread(seed=seed, latency_ms=latency_ms)
        stack.append(context)
        return context.__enter__()

    yield start
    for context in reversed(stack):
        context.__exit__(None, None, None)


# 25 accounts: their lists outnumber the read workers (a share of the 50 in-flight slots),
# a second wave follows; and a loaded machine that takes longer than a latency to send a
# wave of 40 reads has its last ones counted one round trip deeper (CI saw 6 once)
@pytest.mark.parametrize(("accounts", "most"), [(3, 4), (25, 6)])
def test_the_first_payment_follows_a_few_round_trips_whatever_the_accounts(
    bank_of: Callable[..., RunningSandbox], tmp_path: Path, accounts: int, most: int
) -> None:
    """Index, organization, all lookups, all lists: 4 round trips before the first payment."""
    bank = bank_of(accounts)
    batch = write_batch(tmp_path / "pay.csv", _rows(accounts))
    done = run(bank, batch, tmp_path / "pay.csv.ledger.sqlite")
    assert done.returncode == 0, done.describe()
    trips = stats(bank)["round_trips"]["before_first_payment"]
    assert 4 <= trips <= most, f"{trips} round trips before the first payment"


def _slow_then_refuse(
    bank: RunningSandbox,
    monkeypatch: pytest.MonkeyPatch,
    rules: list[tuple[Callable[[str, str], bool], float, int | None]],
) -> list[tuple[float, str, str]]:
    """Requests a rule picks are held ``delay`` seconds, then answered ``status`` (None: by
    the bank); returns the log of (time answered, method, path) of every API request."""
    serve_api = bank.app._serve_api  # noqa: SLF001 - the server's own request handler
    log: list[tuple[float, str, str]] = []

    async def handle(scope: Any, receive: Any, send: Any) -> None:
        method, path = scope["method"], scope["path"]
        for when, delay, status in rules:
            if when(method, path):
                await anyio.sleep(delay)
                if status is not None:
                    await error_answer(status, f"refused {status}")(scope, receive, send)
                    log.append((time.monotonic(), method, path))
                    return
                break
        await serve_api(scope, receive, send)
        log.append((time.monotonic(), method, path))

    monkeypatch.setattr(bank.app, "_serve_api", handle)
    return log


def _payees_of(bank: RunningSandbox, account: int) -> str:
    """The payees path of the owner of account ``account``."""
    for found in bank.state.accounts.values():
        if found.account_number == _account_number(account):
            return f"/v0/legal-persons/{found.owner_id}/bank/payees"
    raise AssertionError(account)


@pytest.mark.parametrize("slow", ["first", "second"])
def test_the_error_reported_is_the_first_failed_read_in_order_whichever_failed_first(
    bank_of: Callable[..., RunningSandbox],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    slow: str,
) -> None:
    """Both payee lists refused: the first account's refusal is reported, whichever came first."""
    bank = bank_of(2, latency_ms=0)
    first, second = _payees_of(bank, 0), _payees_of(bank, 1)
    delays = {"first": (1.0, 0.0), "second": (0.0, 1.0)}[slow]
    _slow_then_refuse(
        bank,
        monkeypatch,
        [
            (lambda m, p: m == "GET" and p == first, delays[0], 409),
            (lambda m, p: m == "GET" and p == second, delays[1], 422),
        ],
    )
    batch = write_batch(tmp_path / "pay.csv", _rows(2))
    done = run(bank, batch, tmp_path / "pay.csv.ledger.sqlite")
    assert done.returncode == 3, done.describe()
    assert "refused 409" in done.stderr, done.describe()
    assert "refused 422" not in done.stderr, done.describe()
    assert not stats(bank)["payments"], "nothing is paid when the first account's read failed"


@pytest.mark.parametrize("mode", ["live-mode", "test-mode"])
def test_a_live_run_creates_nothing_before_every_account_is_checked(
    bank_of: Callable[..., RunningSandbox],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
) -> None:
    """One account's payees late: live mode creates nothing before them, test mode pays on."""
    bank = bank_of(2, mode=mode, latency_ms=0)
    slow = _payees_of(bank, 1)
    log = _slow_then_refuse(bank, monkeypatch, [(lambda m, p: m == "GET" and p == slow, 1.0, None)])
    batch = write_batch(tmp_path / "pay.csv", _rows(2, new_payee=True))
    env = _signing_env(tmp_path) if mode == "live-mode" else {}
    done = run(bank, batch, tmp_path / "pay.csv.ledger.sqlite", "--yes", env=env)
    assert done.returncode == 0, done.describe()
    slow_answered = next(t for t, method, path in log if method == "GET" and path == slow)
    creates = [
        t for t, method, path in log if method == "POST" and path.endswith(("/payments", "/payees"))
    ]
    early = [t for t in creates if t < slow_answered]
    if mode == "live-mode":
        assert not early, f"{len(early)} creates answered before every account was checked"
    else:
        # The other account's payee and payment
        assert len(early) >= 2, f"test mode waited: {len(early)} creates before the slow read"


def test_preflight_loads_no_later_phase() -> None:
    """Importing preflight (with what it uses: new payees, the bank view) loads no later
    phase of the run (it once loaded reconciliation, and through it tracking)."""
    code = (
        "import sys\n"
        "import payrun.run._preflight\n"
        "later = ['_execute', '_reconcile', '_track']\n"
        "print(sorted(m for m in later if 'payrun.run.' + m in sys.modules) or 'none')\n"
    )
    assert fresh_python(code).split() == ["none"]
