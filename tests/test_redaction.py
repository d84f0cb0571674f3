"""No configured secret leaves payrun in a message (issue 27, S1), whatever path it takes.

A key file handed over where a batch goes (``validate``, ``run``, ``fleet submit`` through a
manifest's ``file``) was quoted whole by the "columns found" error. Each command here is the
real CLI in a subprocess; the key, the signing key's lines and the ledger password must not
appear in anything it prints, and the one error line still says what to do.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from payrun._redaction import KEY_NOT_SHOWN, excerpt, looks_like_a_key, redact
from payrun.cli._progress import LineObserver
from payrun.config import configured_secrets

API_KEY = "sk_live_4eC39HqLyjWDarjtT1zdp7dcAbCdEf"
"""A key as banks issue them: one long token, mixed case and digits."""
PLAIN_KEY = "payroll-service-key"
"""A key that looks like a word: only its being configured can hide it."""
LEDGER_PASSWORD = "Ledger-pw-29"


def _key_file(folder: Path, key: str, name: str = "pay.key") -> Path:
    path = folder / name
    path.write_text(key + "\n")
    path.chmod(0o600)
    return path


def _pem(folder: Path) -> tuple[Path, list[str]]:
    """A signing key file, and its lines of key material."""
    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    path = folder / "signing.pem"
    path.write_bytes(pem)
    path.chmod(0o600)
    return path, [line for line in pem.decode().splitlines() if not line.startswith("-----")]


def _payrun(folder: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """``payrun ARGS`` in ``folder`` with only ``env``'s PAYRUN_* set: exit code, output."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PAYRUN_")}
    done = subprocess.run(
        [sys.executable, "-m", "payrun", *args],
        env={**clean, **(env or {})},
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def _manifest(folder: Path, batch_file: Path) -> Path:
    path = folder / "fleet.toml"
    path.write_text(
        f'[[batch]]\nname = "acme"\nfile = "{batch_file.name}"\n'
        'base_url = "https://bank.example"\nkey = "acme"\n'
    )
    return path


_NO_BANK = "http://127.0.0.1:9"
_FLEET = ["--temporal", "127.0.0.1:9", "--ledger-url", "postgresql://u@127.0.0.1:9/db"]


@pytest.mark.parametrize("key", [API_KEY, PLAIN_KEY], ids=["key-like", "word-like"])
def test_an_api_key_file_given_as_the_batch_is_never_printed(tmp_path: Path, key: str) -> None:
    """validate, run (key named by PAYRUN_API_KEY_FILE or --api-key-file), check and fleet
    submit of a key file where a batch goes: exit 2, one line, the key nowhere."""
    key_file = _key_file(tmp_path, key)
    env = {"PAYRUN_API_KEY_FILE": str(key_file), "PAYRUN_BASE_URL": _NO_BANK}
    said = [
        _payrun(tmp_path, "validate", "pay.key", env=env),
        _payrun(tmp_path, "run", "pay.key", env=env),
        _payrun(
            tmp_path,
            "run",
            "pay.key",
            "--api-key-file",
            "pay.key",
            env={"PAYRUN_BASE_URL": _NO_BANK},
        ),
        _payrun(tmp_path, "check", "--source-account", key, env=env),
        _payrun(tmp_path, "fleet", "submit", str(_manifest(tmp_path, key_file)), *_FLEET, env=env),
    ]
    for code, output in said:
        assert code == 2, output
        assert len(output.strip().splitlines()) == 1, output
        assert key not in output, output
        assert "Traceback" not in output, output


def test_a_key_file_no_setting_names_is_still_not_quoted(tmp_path: Path) -> None:
    """A key file given as the batch with no setting naming it: refused as a key file,
    its line not shown (validate, run, report, fleet submit's manifest)."""
    key_file = _key_file(tmp_path, API_KEY)
    env = {"PAYRUN_API_KEY": "another-key-entirely", "PAYRUN_BASE_URL": _NO_BANK}
    said = [
        _payrun(tmp_path, "validate", "pay.key"),
        _payrun(tmp_path, "run", "pay.key", env=env),
        _payrun(tmp_path, "report", "pay.key"),
        _payrun(tmp_path, "report", "--ledger", "pay.key"),
        _payrun(tmp_path, "fleet", "submit", str(_manifest(tmp_path, key_file)), *_FLEET),
    ]
    for code, output in said:
        assert code == 2, output
        assert API_KEY not in output and API_KEY[:12] not in output, output
    assert "pay.key looks like a key file (its first line, not shown," in said[0][1]


def test_a_signing_key_given_as_the_batch_shows_no_line_of_it(tmp_path: Path) -> None:
    """The PEM signing key where a batch goes (validate, run, fleet submit): none of its lines."""
    pem, lines = _pem(tmp_path)
    env = {
        "PAYRUN_API_KEY": API_KEY,
        "PAYRUN_BASE_URL": _NO_BANK,
        "PAYRUN_SIGNING_KEY_FILE": str(pem),
        "PAYRUN_SIGNING_KEY_ID": "k1",
    }
    said = [
        _payrun(tmp_path, "validate", "signing.pem"),
        _payrun(tmp_path, "run", "signing.pem", env=env),
        _payrun(tmp_path, "fleet", "submit", str(_manifest(tmp_path, pem)), *_FLEET),
    ]
    for code, output in said:
        assert code == 2, output
        assert not [line for line in lines if line in output], output
        assert "PRIVATE KEY" not in output, output


def test_redact_hides_configured_secrets_in_every_form(monkeypatch: pytest.MonkeyPatch) -> None:
    """The API key, the ledger URL's password (as written and decoded) and a private key
    block are hidden, quoted, escaped or bare; ordinary text is left alone."""
    monkeypatch.setenv("PAYRUN_API_KEY", PLAIN_KEY)
    monkeypatch.setenv(
        "PAYRUN_LEDGER_URL", f"postgresql://u:{LEDGER_PASSWORD}@db/p?sslpassword=Ssl%2Bsecret"
    )
    assert {PLAIN_KEY, LEDGER_PASSWORD, "Ssl+secret", "Ssl%2Bsecret"} <= set(configured_secrets())
    text = (
        f"key {PLAIN_KEY!r}, pw {LEDGER_PASSWORD}, ssl Ssl+secret,"
        " -----BEGIN PRIVATE KEY-----\nMC4CAQ\n-----END PRIVATE KEY----- row 3: sort code"
    )
    shown = redact(text)
    assert shown == "key '***', pw ***, ssl ***, (a private key, not shown) row 3: sort code"
    assert redact("no secret here: /v0/bank/accounts/ba.Kx8sLq0aZ9YbQ1wE3rT5uA") == (
        "no secret here: /v0/bank/accounts/ba.Kx8sLq0aZ9YbQ1wE3rT5uA"
    )


def test_a_quoted_excerpt_is_short_escaped_and_never_a_key_line() -> None:
    """File text is quoted escaped and cut; a key-like line is replaced, a word is not."""
    assert excerpt("Payee\tName\x1b[31m" + "x" * 60, 20) == repr(
        ("Payee\tName\x1b[31m" + "x" * 60)[:20]
    )
    assert excerpt(API_KEY, 40) == KEY_NOT_SHOWN
    assert looks_like_a_key("MC4CAQAwBQYDK2VwBCIEIJ+DYvh6SEqVTm50DFtMDoQikTmiCqirVv9mWG9qfSnF")
    assert not looks_like_a_key("payee_name_and_the_account_number_of_it")
    assert not looks_like_a_key("Jane Q Smith 12345678 Payroll November 2026")


def test_the_run_log_never_shows_a_configured_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    """A log line (text or JSON) carrying the API key shows *** in its place."""
    monkeypatch.setenv("PAYRUN_API_KEY", PLAIN_KEY)
    for json_lines in (False, True):
        stream = io.StringIO()
        LineObserver(stream, json_lines=json_lines, create_only=False).note(
            f"the bank said: bad key {PLAIN_KEY}"
        )
        assert PLAIN_KEY not in stream.getvalue() and "bad key ***" in stream.getvalue()


HEX_KEY = "6f065c87887ac1277af2822b01371a5b2c6a9432"
"""Keys that are one case: hex, lower-case and upper-case base32 tokens."""
ONE_CASE_KEYS = [HEX_KEY, "sk_live_4ec39hqlyjwdarjtt1zdp7dc", "JBSWY3DPEHPK3PXPJBSWY3DP"]


@pytest.mark.parametrize("key", ONE_CASE_KEYS, ids=["hex", "lower", "upper"])
def test_a_one_case_key_file_is_refused_unquoted_by_every_command(tmp_path: Path, key: str) -> None:
    """A hex or one-case key file as the batch (validate, run, fleet submit's manifest file,
    every --input-format): exit 2, one line, not a character run of the key shown."""
    key_file = _key_file(tmp_path, key)
    env = {"PAYRUN_API_KEY": "another-key-entirely", "PAYRUN_BASE_URL": _NO_BANK}
    said = [
        _payrun(tmp_path, "validate", "pay.key"),
        _payrun(tmp_path, "run", "pay.key", env=env),
        _payrun(tmp_path, "fleet", "submit", str(_manifest(tmp_path, key_file)), *_FLEET),
    ]
    said += [
        _payrun(tmp_path, "validate", "pay.key", "--input-format", name)
        for name in ("bacs18", "bankline", "barclays")
    ]
    said.append(_payrun(tmp_path, "run", "pay.key", "--input-format", "bacs18", env=env))
    for code, output in said:
        assert code == 2, output
        assert len(output.strip().splitlines()) == 1, output
        assert key[:6] not in output and key[-6:] not in output, output
        assert "pay.key looks like a key file (its first line, not shown," in output, output


@pytest.mark.parametrize("name", ["bankline", "barclays"])
def test_an_export_reader_quotes_no_more_than_a_short_excerpt(tmp_path: Path, name: str) -> None:
    """A bad cell the export readers name is quoted at most 20 characters (Standard 18's
    fields are shorter), a key never."""
    long_cell = "Q" * 30 + " " + HEX_KEY
    lines = {
        "bankline": ",,," + long_cell + ",,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,",
        "barclays": f"20-00-00,Jane,12345678,1.00,ref,{long_cell}",
    }
    (tmp_path / "pay.txt").write_text(lines[name] + "\n")
    code, output = _payrun(tmp_path, "validate", "pay.txt", "--input-format", name)
    assert code == 2, output
    assert "Q" * 21 not in output and HEX_KEY[:6] not in output, output
    assert "Q" * 8 in output, output


def test_an_excerpt_of_a_one_case_key_is_not_shown() -> None:
    """excerpt hides a long one-case token with digits (hex, base32), not a long column name."""
    for key in ONE_CASE_KEYS:
        assert excerpt(key, 20) == KEY_NOT_SHOWN
    assert excerpt("beneficiary_account_number", 40) == "'beneficiary_account_number'"
