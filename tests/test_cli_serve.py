"""`payrun serve` and `payrun serve add-user` as a user runs them."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from payrun.cli import main


def test_add_user_reads_the_password_file_and_prints_the_policy_entry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An approver is added from --password-file; its key's [[approver]] entry is printed."""
    secret = tmp_path / "pw"
    secret.write_text("a long password\n", encoding="utf-8")
    argv = ["serve", "add-user", "alice", "--role", "approver", "--password-file", str(secret)]
    assert main([*argv, "--ledger-dir", str(tmp_path / "d")]) == 0
    out = capsys.readouterr().out
    assert '[[approver]]\nname = "alice"' in out and "BEGIN PUBLIC KEY" in out
    users = json.loads((tmp_path / "d" / "users.json").read_text(encoding="utf-8"))
    assert users["users"]["alice"]["role"] == "approver"
    assert "a long password" not in (tmp_path / "d" / "users.json").read_text(encoding="utf-8")
    assert (tmp_path / "d" / "keys" / "alice.pem").stat().st_mode & 0o777 == 0o600


def test_add_user_without_a_terminal_or_password_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No terminal to ask on and no --password-file: exit 2, one line, nothing written."""
    argv = ["serve", "add-user", "carol", "--role", "maker", "--users", str(tmp_path / "u.json")]
    assert main(argv) == 2
    assert "--password-file" in capsys.readouterr().err
    assert not (tmp_path / "u.json").exists()


def test_add_user_refuses_a_short_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A password under 8 characters: exit 2."""
    secret = tmp_path / "pw"
    secret.write_text("short\n", encoding="utf-8")
    users = str(tmp_path / "u.json")
    argv = ["serve", "add-user", "carol", "--role", "maker", "--password-file", str(secret)]
    assert main([*argv, "--users", users]) == 2
    assert "at least 8" in capsys.readouterr().err


def test_serve_sandbox_prints_its_url_first_and_stops_on_sigterm(tmp_path: Path) -> None:
    """First stdout line PAYRUN_SERVE_URL=http://127.0.0.1:PORT; it answers; SIGTERM: exit 0."""
    command = [sys.executable, "-m", "payrun", "serve", "--sandbox", "--port", "0"]
    process = subprocess.Popen(  # noqa: S603 - our own interpreter
        [*command, "--ledger-dir", str(tmp_path / "d")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        name, _, url = process.stdout.readline().strip().partition("=")
        assert name == "PAYRUN_SERVE_URL" and url.startswith("http://127.0.0.1:")
        assert httpx.get(url + "/sign-in").status_code == 200
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=30)
        if process.stdout is not None:
            process.stdout.close()
    assert code == 0
