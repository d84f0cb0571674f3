"""docs/scheduling.md's worked example, run as the page shows it: its environment file,
wrapper script, cron line and systemd unit, for two months in a row against a live-mode
sandbox bank that enforces signatures. Each month's file is paid once, a rerun pays
nothing, a run the bank interrupts is run again, and a refusal reaches a person."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from _run_helpers import refuse
from payrun.sandbox import RunningSandbox, serve_in_thread

ROOT = Path(__file__).parents[1]
PAGE = (ROOT / "docs" / "scheduling.md").read_text(encoding="utf-8")
KEY_ID = "payroll-key-1"
SAMPLE = (ROOT / "samples" / "payroll.csv").read_text(encoding="utf-8")
TOTALS = "40 120143.22"
"""The sample's row count and total, as the payroll system writes them beside the file."""


def _block_after(caption: str) -> str:
    """The code block that follows the first line of the page holding ``caption``."""
    at = PAGE.index(caption)
    found = re.compile(r"```[a-z]*\n(.*?)```", re.S).search(PAGE, at)
    assert found is not None, caption
    return found.group(1)


def _settings(block: str) -> dict[str, str]:
    """NAME=value lines (comments, blank lines and [Section] lines left out)."""
    lines = [line for line in block.splitlines() if "=" in line and not line.startswith("#")]
    return dict(line.split("=", 1) for line in lines)


@pytest.fixture
def bank(tmp_path: Path) -> Iterator[tuple[RunningSandbox, Path]]:
    """A live-mode sandbox that refuses unsigned requests, and the private key file."""
    key = Ed25519PrivateKey.generate()
    private = tmp_path / "signing.pem"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    # As docs/scheduling.md says: payrun refuses a signing key other users can read
    private.chmod(0o600)
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    with serve_in_thread(signature_keys={KEY_ID: public.decode()}, deliver_after_ms=20) as live:
        yield live, private


def _the_page() -> tuple[str, dict[str, str]]:
    """The page's wrapper script and environment file, once its cron line and systemd
    unit are checked to start that wrapper with that file's settings."""
    wrapper_path = "/usr/local/bin/payroll-run"
    env_path = "/etc/payrun/payrun.env"
    script = _block_after(f"`{wrapper_path}`")
    assert script.startswith("#!/bin/bash\n")
    cron = [ln for ln in _block_after("`crontab -e`").splitlines() if ln[:1].isdigit()]
    assert [line.split()[5:] for line in cron] == [[wrapper_path]]
    unit = _settings(_block_after("`/etc/systemd/system/payroll.service`"))
    assert (unit["ExecStart"], unit["EnvironmentFile"]) == (wrapper_path, env_path)
    assert f"env_file=${{PAYRUN_ENV_FILE:-{env_path}}}" in script
    return script, _settings(_block_after(f"`{env_path}`"))


class Schedule:
    """The page's set-up in a temporary folder: the scheduler's command, run for a month."""

    def __init__(self, root: Path, bank: RunningSandbox, signing_key: Path) -> None:
        script, shown = _the_page()
        self.dir = root / "payroll"
        self.dir.mkdir()
        (root / "api-key").write_text(bank.api_key + "\n", encoding="utf-8")
        ours = {
            "PAYRUN_BASE_URL": bank.base_url,
            "PAYRUN_API_KEY_FILE": str(root / "api-key"),
            "PAYRUN_SIGNING_KEY_FILE": str(signing_key),
            "PAYRUN_SIGNING_KEY_ID": KEY_ID,
        }
        assert set(shown) == set(ours), shown
        env_file = root / "payrun.env"
        env_file.write_text("".join(f"{k}={v}\n" for k, v in ours.items()), encoding="utf-8")
        self.wrapper = root / "payroll-run"
        self.wrapper.write_text(script, encoding="utf-8")
        self.wrapper.chmod(0o755)
        self.alerts = root / "alerts.txt"
        alert = root / "alert"
        alert.write_text('#!/bin/sh\n{ echo "SUBJECT: $1"; cat; } >>"$ALERTS"\n', "utf-8")
        alert.chmod(0o755)
        # cron's environment: next to nothing (payrun on PATH; this checkout's code)
        self.env = {
            "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
            "HOME": str(root),
            "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
            "PAYROLL_DIR": str(self.dir),
            "PAYROLL_ALERT": str(alert),
            "PAYROLL_RETRY_WAIT": "1",
            "PAYRUN_ENV_FILE": str(env_file),
            "PAYRUN_SETTLE_WAIT": "1",
            "ALERTS": str(self.alerts),
        }

    def drop(self, month: str, text: str, totals: str) -> None:
        """The payroll system's two files for ``month``."""
        (self.dir / f"payroll-{month}.csv").write_text(text, encoding="utf-8")
        (self.dir / f"payroll-{month}.expect").write_text(totals + "\n", encoding="utf-8")

    def run(self, month: str) -> int:
        """The scheduler starts the wrapper in ``month``; its exit code."""
        done = subprocess.run(
            [str(self.wrapper)],
            env={**self.env, "PAYROLL_MONTH": month},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.stdout == "" and done.stderr == "", done
        return done.returncode

    def said(self) -> str:
        """What the alerts said so far."""
        return self.alerts.read_text(encoding="utf-8") if self.alerts.exists() else ""

    def log(self, month: str) -> str:
        """The month's log: every run's JSON lines."""
        return (self.dir / f"payroll-{month}.log").read_text(encoding="utf-8")


def _payments(bank: RunningSandbox) -> int:
    return len(bank.state.payments)


def test_the_pages_schedule_pays_two_months_once_each_and_alerts_a_person(
    bank: tuple[RunningSandbox, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """November is paid; started again it pays nothing; December's file (its own name,
    its own ledger) is paid after its first run is interrupted by the bank being
    unavailable (exit 3, run again by the wrapper); a December-like file whose totals do
    not match, and a month with no file, are refused and mailed; nothing is paid twice."""
    sandbox, signing_key = bank
    schedule = Schedule(tmp_path, sandbox, signing_key)
    schedule.drop("2026-11", SAMPLE, TOTALS)
    assert schedule.run("2026-11") == 0, schedule.log("2026-11")
    assert _payments(sandbox) == 40 and schedule.said() == ""
    assert schedule.run("2026-11") == 0, schedule.log("2026-11")
    assert _payments(sandbox) == 40 and schedule.said() == ""
    assert "nothing to pay: all 40 rows were already submitted" in schedule.log("2026-11")

    # December: the bank is unavailable until its first run has ended with exit 3
    schedule.drop("2026-12", SAMPLE.replace("NOV", "DEC").replace("-11,", "-12,"), TOTALS)
    december = schedule.dir / "payroll-2026-12.log"

    def outage(method: str, path: str) -> bool:
        return not (december.exists() and '"exit_code": 3' in december.read_text("utf-8"))

    refuse(sandbox, monkeypatch, 503, "Service Unavailable", outage)
    started = time.monotonic()
    assert schedule.run("2026-12") == 0, schedule.log("2026-12")
    finished = re.findall(r'"event": "finished"[^\n]*"exit_code": (\d)', schedule.log("2026-12"))
    assert finished == ["3", "0"], (finished, time.monotonic() - started)
    assert _payments(sandbox) == 80 and schedule.said() == ""

    # A file that does not add up is refused before anything is sent, and mailed
    schedule.drop("2027-01", SAMPLE.replace("NOV", "JAN"), "40 1.00")
    assert schedule.run("2027-01") == 2
    assert "SUBJECT: payroll 2027-01: refused (exit 2)" in schedule.said(), schedule.said()
    assert "control total" in schedule.said().lower(), schedule.said()
    # A month whose file never came is mailed too
    assert schedule.run("2027-02") == 2
    assert "SUBJECT: payroll 2027-02: not paid: no file" in schedule.said(), schedule.said()
    assert _payments(sandbox) == 80
