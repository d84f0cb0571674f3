"""The confirmation before real money (issue 19): a live-mode organization's run asks first.

The real ``payrun`` command runs against a sandbox bank seeded as a live-mode organization,
over loopback HTTP: on a pseudo-terminal (``pty``) it shows what it is about to pay and
reads the answer (``yes`` or the row count pays; anything else, Ctrl-D or Ctrl-C creates
nothing); with no terminal on stdin it refuses with exit 2 unless ``--yes``. Every refusal
is checked at the bank itself: no payee, no Confirmation of Payee request, no payment.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from _run_helpers import (
    ACCOUNTS,
    BatchRow,
    Finished,
    assert_exactly_once,
    ledger_rows,
    run_env,
    write_batch,
)
from _run_helpers import run as _run
from _terminal import Terminal, on_terminal
from payrun.sandbox import RunningSandbox, SeedError, build_state, default_seed, serve_in_thread

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")


QUESTION = b"to go on, anything else to stop: "


KEY_ID = "payrun-confirm-1"
_KEY = Ed25519PrivateKey.generate()
_SIGNING: dict[str, str] = {}
"""The signing settings of every run here (a live organization takes only signed requests)."""


@pytest.fixture(autouse=True, scope="module")
def _signing_key(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Write the module's signing key to a file, as a person's key file would be."""
    path = tmp_path_factory.mktemp("keys") / "signing.pem"
    path.write_bytes(
        _KEY.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    # Readable by its owner only, or payrun refuses it
    path.chmod(0o600)
    _SIGNING.update(PAYRUN_SIGNING_KEY_FILE=str(path), PAYRUN_SIGNING_KEY_ID=KEY_ID)


def run(bank: RunningSandbox, batch: Path, ledger: Path, *extra: str) -> Finished:
    """``payrun run`` to the end, signing its requests."""
    return _run(bank, batch, ledger, *extra, env=_SIGNING)


def _live_seed() -> dict[str, object]:
    """The default seed, its organization in live mode (real money, in a real bank), which
    takes only requests signed with the module's key."""
    seed = default_seed()
    seed["organization"] = {"display-name": "Acme Live Ltd", "organization-mode": "live-mode"}
    public = _KEY.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    seed["message-signature-keys"] = [{"key-id": KEY_ID, "public-key": public.decode()}]
    return seed


@contextlib.contextmanager
def _bank(*, live: bool = True) -> Iterator[RunningSandbox]:
    """A fresh sandbox bank, a live-mode organization unless ``live`` is False."""
    with serve_in_thread(seed=_live_seed() if live else None, rng_seed=19) as sandbox:
        yield sandbox


def _rows() -> list[BatchRow]:
    """Three rows to two new payees, from both accounts: £600.50 in all."""
    return [
        BatchRow("C-1", "Ada Lovelace", "201901", "19000001", "100.25", "LIVE-1", ACCOUNTS[0]),
        BatchRow("C-2", "Ada Lovelace", "201901", "19000001", "200.25", "LIVE-2", ACCOUNTS[0]),
        BatchRow("C-3", "Grace Hopper", "201901", "19000002", "300.00", "LIVE-3", ACCOUNTS[1]),
    ]


def _created(bank: RunningSandbox) -> tuple[int, int, int]:
    """What exists at the bank: payees, Confirmation of Payee requests, payments."""
    state = bank.state
    return len(state.payees), len(state.cop_requests), len(state.payments)


@contextlib.contextmanager
def _on_terminal(bank: RunningSandbox, batch: Path, *extra: str) -> Iterator[Terminal]:
    """Start ``payrun run BATCH`` with a pseudo-terminal as its stdin, stdout and stderr."""
    args = ["run", str(batch), "--no-confirm-payees", *extra]
    with on_terminal(args, {**run_env(bank), **_SIGNING}, batch.parent) as terminal:
        yield terminal


def _ledger(batch: Path) -> Path:
    return batch.with_name(batch.name + ".ledger.sqlite")


def test_a_terminal_shows_the_run_and_yes_pays_it(tmp_path: Path) -> None:
    """On a terminal the run shows rows, total, accounts and new payees; typing yes pays."""
    batch = write_batch(tmp_path / "pay.csv", _rows())
    with _bank() as bank:
        before = _created(bank)
        with _on_terminal(bank, batch) as terminal:
            terminal.wait_for(QUESTION)
            shown = terminal.text
            # Nothing is created before the answer
            assert _created(bank) == before
            terminal.type(b"yes\n")
            assert terminal.finish() == 0, terminal.text
        assert_exactly_once(bank, _rows(), _ledger(batch), terminal.text)
    assert "Acme Live Ltd is a live-mode organization: this run moves real money" in shown
    assert "about to pay 3 rows, £600.50 in all" in shown
    assert f"from Acme Payroll Operational ({ACCOUNTS[0]}): 2 rows, £300.50" in shown
    assert f"from Acme Client Money ({ACCOUNTS[1]}): 1 row, £300.00" in shown
    assert "new payees to create: 2 (Ada Lovelace, Grace Hopper); created without" in shown
    assert "not paid:" not in shown
    assert "type yes (or 3) to go on" in shown


def test_typing_the_row_count_pays_too(tmp_path: Path) -> None:
    """The number of rows shown is accepted as the confirmation."""
    batch = write_batch(tmp_path / "pay.csv", _rows())
    with _bank() as bank, _on_terminal(bank, batch) as terminal:
        terminal.wait_for(QUESTION)
        terminal.type(b" 3 \n")
        assert terminal.finish() == 0, terminal.text
        assert_exactly_once(bank, _rows(), _ledger(batch), terminal.text)


@pytest.mark.parametrize(
    ("keys", "code", "said"),
    [
        (b"no\n", 2, "not confirmed: the answer was not yes, so nothing was created"),
        (b"y\n", 2, "not confirmed: the answer was not yes, so nothing was created"),
        (b"4\n", 2, "not confirmed: the answer was not yes, so nothing was created"),
        (b"\n", 2, "not confirmed: the answer was not yes, so nothing was created"),
        (b"\x04", 2, "not confirmed: no answer (end of input), so nothing was created"),
        (b"\x03", 3, "interrupted at the confirmation: nothing was created"),
    ],
    ids=["no", "y", "wrong-count", "empty", "ctrl-d", "ctrl-c"],
)
def test_any_other_answer_creates_nothing(
    tmp_path: Path, keys: bytes, code: int, said: str
) -> None:
    """Another answer, the end of input (exit 2) or Ctrl-C (exit 3): no payee, no payment."""
    batch = write_batch(tmp_path / "pay.csv", _rows())
    with _bank() as bank, _on_terminal(bank, batch) as terminal:
        before = _created(bank)
        terminal.wait_for(QUESTION)
        terminal.type(keys)
        assert terminal.finish() == code, terminal.text
        assert _created(bank) == before
    assert said in terminal.text
    assert "Traceback" not in terminal.text


def test_yes_typed_before_the_question_is_not_its_answer(tmp_path: Path) -> None:
    """Keys typed while the run starts (type-ahead) are discarded: the question still waits."""
    batch = write_batch(tmp_path / "pay.csv", _rows())
    with _bank() as bank, _on_terminal(bank, batch) as terminal:
        before = _created(bank)
        # Typed at once, long before the question: it waits in the terminal's input queue
        terminal.type(b"yes\n")
        terminal.wait_for(QUESTION)
        asked = len(terminal.output)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and terminal.process.poll() is None:
            terminal._pump(0.1)
        # Still asking, nothing answered after the question, nothing created
        assert terminal.process.poll() is None, terminal.text
        assert b"not confirmed" not in terminal.output[asked:], terminal.text
        assert _created(bank) == before
        terminal.type(b"no\n")
        assert terminal.finish() == 2, terminal.text
        assert _created(bank) == before
    assert "not confirmed: the answer was not yes, so nothing was created" in terminal.text


def test_no_terminal_is_refused_with_exit_2_and_nothing_created(tmp_path: Path) -> None:
    """stdin not a terminal and no --yes: one line, exit 2, nothing at the bank, no ledger."""
    batch = write_batch(tmp_path / "pay.csv", _rows())
    ledger = tmp_path / "pay.ledger.sqlite"
    with _bank() as bank:
        before = _created(bank)
        done = run(bank, batch, ledger)
        assert _created(bank) == before
    assert done.returncode == 2, done.describe()
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.describe()
    assert "Acme Live Ltd is a live-mode organization (real money)" in lines[0]
    assert "stdin is not one" in lines[0] and "--yes" in lines[0]
    assert "Traceback" not in done.stderr + done.stdout
    # A refused first run leaves no ledger behind
    assert not ledger.exists()


def test_no_terminal_refusal_is_one_json_object_for_schedulers(tmp_path: Path) -> None:
    """With --log-format json the refusal is an error object with exit code 2."""
    batch = write_batch(tmp_path / "pay.csv", _rows())
    with _bank() as bank:
        done = run(bank, batch, tmp_path / "pay.ledger.sqlite", "--log-format", "json")
        assert _created(bank)[2] == 0
    assert done.returncode == 2, done.describe()
    error = json.loads(done.stdout)
    assert error["event"] == "error" and error["exit_code"] == 2
    assert "live-mode" in error["message"]


def test_a_json_log_never_asks_even_on_a_terminal(tmp_path: Path) -> None:
    """--log-format json keeps stderr JSON lines: it asks nothing, so it needs --yes."""
    batch = write_batch(tmp_path / "pay.csv", _rows())
    with _bank() as bank:
        before = _created(bank)
        with _on_terminal(bank, batch, "--log-format", "json") as terminal:
            assert terminal.finish() == 2, terminal.text
        assert _created(bank) == before
        with _on_terminal(bank, batch, "--log-format", "json", "--yes") as terminal:
            assert terminal.finish() == 0, terminal.text
        assert_exactly_once(bank, _rows(), _ledger(batch), terminal.text)
    assert QUESTION.decode() not in terminal.text


def test_yes_pays_without_a_terminal_and_control_totals_still_hold(tmp_path: Path) -> None:
    """--yes (a scheduler's run) pays with no question; --expect-total still guards it."""
    batch = write_batch(tmp_path / "pay.csv", _rows())
    ledger = tmp_path / "pay.ledger.sqlite"
    with _bank() as bank:
        wrong = run(bank, batch, ledger, "--yes", "--expect-count", "3", "--expect-total", "600")
        assert wrong.returncode == 2, wrong.describe()
        assert _created(bank)[2] == 0
        done = run(bank, batch, ledger, "--yes", "--expect-count", "3", "--expect-total", "600.50")
        assert done.returncode == 0, done.describe()
        assert_exactly_once(bank, _rows(), ledger, done.describe())
    assert "type yes" not in done.stderr + done.stdout


def test_a_dry_run_never_asks(tmp_path: Path) -> None:
    """A live-mode dry run creates nothing, so it neither asks nor needs --yes."""
    batch = write_batch(tmp_path / "pay.csv", _rows())
    with _bank() as bank:
        done = run(bank, batch, tmp_path / "pay.ledger.sqlite", "--dry-run")
        assert _created(bank)[2] == 0
    assert done.returncode == 0, done.describe()
    assert "would pay" in done.stdout


def test_test_mode_never_asks_on_a_terminal(tmp_path: Path) -> None:
    """A test-mode organization's run on a terminal pays without a question."""
    batch = write_batch(tmp_path / "pay.csv", _rows())
    with _bank(live=False) as bank, _on_terminal(bank, batch) as terminal:
        assert terminal.finish() == 0, terminal.text
        assert_exactly_once(bank, _rows(), _ledger(batch), terminal.text)
    assert QUESTION.decode() not in terminal.text


def test_a_rerun_with_nothing_left_to_pay_asks_nothing(tmp_path: Path) -> None:
    """Once every row is paid, a rerun on a terminal has nothing to confirm."""
    batch = write_batch(tmp_path / "pay.csv", _rows())
    with _bank() as bank:
        first = run(bank, batch, _ledger(batch), "--yes")
        assert first.returncode == 0, first.describe()
        with _on_terminal(bank, batch) as terminal:
            assert terminal.finish() == 0, terminal.text
        assert_exactly_once(bank, _rows(), _ledger(batch), terminal.text)
    assert QUESTION.decode() not in terminal.text


def test_after_a_declined_run_the_question_comes_again_and_pays_once(tmp_path: Path) -> None:
    """Payments left created: a declined rerun submits none; the next, confirmed, pays once."""
    batch = write_batch(tmp_path / "pay.csv", _rows())
    with _bank() as bank:
        # Payments created, none submitted: the rerun's question is about submitting them
        first = run(bank, batch, _ledger(batch), "--yes", "--create-only")
        assert first.returncode == 0, first.describe()
        with _on_terminal(bank, batch) as terminal:
            terminal.wait_for(QUESTION)
            terminal.type(b"no\n")
            assert terminal.finish() == 2, terminal.text
        assert not bank.state.submissions
        assert all(r["status"] == "created" for r in ledger_rows(_ledger(batch)))
        assert "about to pay 3 rows" in terminal.text
        with _on_terminal(bank, batch) as terminal:
            terminal.wait_for(QUESTION)
            terminal.type(b"yes\n")
            assert terminal.finish() == 0, terminal.text
        assert_exactly_once(bank, _rows(), _ledger(batch), terminal.text)


@pytest.mark.parametrize("mode", ["live", "LIVE-MODE", "", 1])
def test_a_seed_names_the_organization_mode_exactly(mode: object) -> None:
    """A seed's organization-mode is test-mode or live-mode; anything else is refused."""
    seed = default_seed()
    seed["organization"] = {"display-name": "Acme", "organization-mode": mode}
    with pytest.raises(SeedError, match="organization-mode must be test-mode or live-mode"):
        build_state(seed)
    assert build_state(_live_seed()).org_mode == "live-mode"
