"""`payrun check`: the go-live checklist, text and JSON, against sandboxes in test and live
mode over loopback; it reads only and its exit code says whether the setup can pay."""

from __future__ import annotations

import ast
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import payrun
from payrun.cli import main
from payrun.sandbox import RunningSandbox, default_seed, serve_in_thread

KEY_ID = "payrun-live-1"
SOURCE = "040004 30000001"
CHECKS = ["bank", "api-key", "signing", "accounts"]


@pytest.fixture
def key() -> Ed25519PrivateKey:
    """The Ed25519 key the client signs with."""
    return Ed25519PrivateKey.generate()


@pytest.fixture
def key_file(tmp_path: Path, key: Ed25519PrivateKey) -> Path:
    """``key`` as a PEM PKCS#8 file."""
    path = tmp_path / "signing.pem"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    # Readable by its owner only, or payrun refuses it
    path.chmod(0o600)
    return path


def _public(key: Ed25519PrivateKey) -> str:
    pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return pem.decode()


@pytest.fixture
def use_bank(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Start a sandbox (``serve_in_thread`` options) and point PAYRUN_* at it."""
    started: list[Any] = []

    def start(**options: Any) -> RunningSandbox:
        context = serve_in_thread(**options)
        bank: RunningSandbox = context.__enter__()
        started.append(context)
        monkeypatch.setenv("PAYRUN_BASE_URL", bank.base_url)
        monkeypatch.setenv("PAYRUN_API_KEY", bank.api_key)
        return bank

    yield start
    for context in reversed(started):
        context.__exit__(None, None, None)


def _signing(key_file: Path, key_id: str = KEY_ID) -> list[str]:
    return ["--signing-key-file", str(key_file), "--signing-key-id", key_id]


def _check_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main(["check", "--format", "json", *argv])
    document: dict[str, Any] = json.loads(capsys.readouterr().out)
    return code, document


def _made(bank: RunningSandbox) -> tuple[int, int, int, int]:
    state = bank.state
    return len(state.payees), len(state.payments), len(state.cop_requests), len(state.accounts)


def test_a_test_mode_setup_is_ready_and_the_json_is_the_contract_s(
    use_bank: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Test mode, no signing key: exit 0 and exactly the contract's keys and values."""
    bank = use_bank()
    before = _made(bank)
    code, document = _check_json(capsys, "--source-account", SOURCE)
    assert code == 0
    assert set(document) == {"ok", "organization", "mode", "signing", "checks"}
    assert document["ok"] is True and document["organization"] == "Acme Payroll Ltd"
    assert (document["mode"], document["signing"]) == ("test-mode", "not-configured")
    assert [c["check"] for c in document["checks"]] == [*CHECKS, "source-account"]
    for check in document["checks"]:
        assert set(check) == {"check", "ok", "message"} and check["ok"] is True
    assert "2 bank account(s) visible" in document["checks"][3]["message"]
    assert _made(bank) == before


def test_a_live_setup_with_a_registered_key_is_ready(
    use_bank: Any, key: Ed25519PrivateKey, key_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Live mode, the signature verified by the bank's check: exit 0, a text checklist."""
    bank = use_bank(signature_keys={KEY_ID: _public(key)})
    before = _made(bank)
    capsys.readouterr()
    assert main(["check", *_signing(key_file)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "payrun check: Acme Payroll Ltd (live-mode)"
    assert [line.split()[:2] for line in out[1:5]] == [["ok", f"{c}:"] for c in CHECKS]
    assert f"verified this machine's signature (key id {KEY_ID})" in out[3]
    assert out[-1] == "ready to pay"
    code, document = _check_json(capsys, *_signing(key_file))
    assert (code, document["signing"], document["ok"]) == (0, "verified", True)
    assert _made(bank) == before


def test_a_live_organization_without_a_signing_key_is_not_ready(
    use_bank: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Live mode with no signing key (a bank that does not enforce yet): exit 2, the
    signing check failed naming both settings, the text marks what to fix."""
    seed = default_seed()
    seed["organization"] = {**seed["organization"], "organization-mode": "live-mode"}
    use_bank(seed=seed)
    code, document = _check_json(capsys)
    assert code == 2 and document["ok"] is False
    assert (document["mode"], document["signing"]) == ("live-mode", "not-configured")
    signing = document["checks"][2]
    assert signing["check"] == "signing" and signing["ok"] is False
    assert "PAYRUN_SIGNING_KEY_FILE and PAYRUN_SIGNING_KEY_ID" in signing["message"]
    assert main(["check"]) == 2
    out = capsys.readouterr().out
    assert "  FIX signing: live mode needs every request signed" in out
    assert out.splitlines()[-1] == "not ready: fix the items marked FIX"


def test_a_key_the_bank_does_not_know_is_refused(
    use_bank: Any, key_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A signature the bank's check refuses (test mode, nothing registered): exit 2,
    signing "refused", and the fix is to register the key's public half."""
    use_bank()
    code, document = _check_json(capsys, *_signing(key_file))
    assert (code, document["signing"], document["ok"]) == (2, "refused", False)
    assert "register the public half" in document["checks"][2]["message"]


def test_an_enforcing_bank_and_a_wrong_key_id_say_the_signature_is_refused(
    use_bank: Any, key: Ed25519PrivateKey, key_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """When the bank refuses every request, check says whether the signature is why:
    exit 2, one line, no JSON object on stdout."""
    use_bank(signature_keys={KEY_ID: _public(key)})
    capsys.readouterr()
    assert main(["check", "--format", "json", *_signing(key_file, "another-id")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "signature check refused this machine's signature (key id another-id)" in (captured.err)
    assert main(["check"]) == 2
    assert "PAYRUN_SIGNING_KEY_FILE" in capsys.readouterr().err


def test_a_frozen_or_unknown_source_account_is_a_check_to_fix(
    use_bank: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """--source-account: a frozen account and an account not in the organization fail the
    source-account check (exit 2) with the reason; the account's balance is shown."""
    seed = default_seed()
    seed["accounts"][0]["restrictions"] = [{"restriction-type": "freeze"}]
    use_bank(seed=seed)
    code, document = _check_json(capsys, "--source-account", "04-00-04 30000001")
    assert code == 2
    source = document["checks"][-1]
    assert source["check"] == "source-account" and source["ok"] is False
    assert (
        "freeze restriction" in source["message"] and "£1000000.00 available" in source["message"]
    )
    code, document = _check_json(capsys, "--source-account", "040004 39999999")
    assert code == 2 and "no bank account 040004 39999999" in document["checks"][-1]["message"]
    code, document = _check_json(capsys, "--source-account", "040004 30000002")
    assert code == 0 and document["checks"][-1]["message"].endswith("can pay")


def test_a_source_account_of_the_wrong_shape_is_a_usage_error(
    use_bank: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unreadable --source-account: exit 2 before any request."""
    bank = use_bank()
    assert main(["check", "--source-account", "nonsense"]) == 2
    assert "is neither an account URL" in capsys.readouterr().err
    assert bank.state.stats.requests == 0


def test_a_bank_that_cannot_be_reached_is_exit_3(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nothing listening at the address: exit 3 (try again), as for a run, one line."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("PAYRUN_BASE_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("PAYRUN_API_KEY", "k")
    assert main(["check"]) == 3
    assert "could not reach the bank" in capsys.readouterr().err


def test_check_help_states_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    """`payrun check --help` exits 0 and says what 0, 2 and 3 mean."""
    with pytest.raises(SystemExit) as info:
        main(["check", "--help"])
    assert info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Exit 0 when payrun can pay from this setup, 2 when something must be fixed" in out
    assert "--signing-key-file" in out and "--source-account" in out


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604], ids=["0644", "0640", "0604"])
def test_a_signing_key_other_users_can_read_is_refused_with_the_chmod(
    use_bank: Any,
    key: Ed25519PrivateKey,
    key_file: Path,
    mode: int,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A signing key readable by group or others: exit 2, one line naming `chmod 600 PATH`."""
    use_bank(signature_keys={KEY_ID: _public(key)})
    key_file.chmod(mode)
    capsys.readouterr()
    assert main(["check", *_signing(key_file)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"can be read by other users (permissions {mode:04o})" in err, err
    assert f"run `chmod 600 {key_file}`" in err, err
    key_file.chmod(0o600)
    assert main(["check", *_signing(key_file)]) == 0


def test_an_api_key_file_other_users_can_read_is_warned_of_and_used(
    use_bank: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An API key file readable by others: one warning line with the chmod; the check goes on."""
    bank = use_bank()
    monkeypatch.delenv("PAYRUN_API_KEY")
    api_key = tmp_path / "api.key"
    api_key.write_text(bank.api_key + "\n")
    api_key.chmod(0o644)
    capsys.readouterr()
    assert main(["check", "--api-key-file", str(api_key)]) == 0
    done = capsys.readouterr()
    assert done.err == (
        "payrun: warning: the API key file named by --api-key-file can be read by other users"
        f" (permissions 0644): run `chmod 600 {api_key}` so that only you can read the API"
        " key\n"
    )
    assert done.out.splitlines()[-1] == "ready to pay"
    assert bank.api_key not in done.err
    api_key.chmod(0o600)
    assert main(["check", "--api-key-file", str(api_key)]) == 0
    assert capsys.readouterr().err == ""


def _imports(source: Path) -> list[tuple[int, str, list[str]]]:
    """Each ``from payrun... import`` of ``source``: line, module, names."""
    tree = ast.parse(source.read_text(encoding="utf-8"))
    return [
        (node.lineno, node.module or "", [alias.name for alias in node.names])
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("payrun.")
    ]


def test_readiness_imports_only_public_names_of_other_packages() -> None:
    """``payrun check`` lives in its own package, outside run/, and imports no private module
    or name of another payrun package (the root's shared modules, ``payrun._models`` and the
    like, excepted)."""
    sources = sorted((Path(payrun.__file__).parent / "readiness").glob("*.py"))
    assert sources, f"no package payrun.readiness in {Path(payrun.__file__).parent}"
    for source in sources:
        for line, module, names in _imports(source):
            parts = module.split(".")
            if module.startswith("payrun.readiness") or len(parts) == 2:  # noqa: PLR2004
                continue
            private = [part for part in parts[1:] if part.startswith("_")]
            private += [name for name in names if name.startswith("_")]
            assert not private, f"{source.name}:{line} imports {module} {names}"
