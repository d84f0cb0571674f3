"""`payrun approver-key NAME -o FILE`: a private key only its owner can read, never written
over another file, and the policy entry whose public key matches it."""

from __future__ import annotations

import stat
import tomllib
from pathlib import Path

import pytest

from payrun.approval import load_private_key, public_key_pem
from payrun.cli import main


def test_the_key_is_private_and_the_entry_holds_its_public_half(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The key file is mode 0600; the printed [[approver]] entry parses as TOML and holds
    the name and the key's public half (never the private key)."""
    key = tmp_path / "alice.pem"
    assert main(["approver-key", "alice", "-o", str(key)]) == 0
    out = capsys.readouterr().out
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    entry = tomllib.loads(out)["approver"][0]
    assert entry["name"] == "alice"
    assert entry["public_key"] == public_key_pem(load_private_key(key))
    assert "PRIVATE" not in out


def test_an_existing_file_is_never_overwritten(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """-o naming an existing file: exit 2, the file unchanged."""
    key = tmp_path / "alice.pem"
    key.write_text("keep me")
    assert main(["approver-key", "alice", "-o", str(key)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert key.read_text() == "keep me"
