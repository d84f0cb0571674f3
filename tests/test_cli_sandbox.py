"""`payrun sandbox`: the two announced lines, SIGTERM, and refusing non-loopback hosts."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from payrun.cli import main


def _start(*extra: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "payrun", "sandbox", "--port", "0", *extra]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_announces_url_and_key_then_stops_on_sigterm() -> None:
    """The first two stdout lines are the URL and key, the third the sandbox's own settle
    bound (its latency and jitter plus 1 s); the server answers; SIGTERM stops it."""
    process = _start("--deliver-after-ms", "10", "--latency-ms", "200", "--jitter-ms", "50")
    try:
        assert process.stdout is not None
        first, second = process.stdout.readline(), process.stdout.readline()
        # `export `-prefixed (the contract's optional form): pasted, the shell exports them
        assert first.startswith("export PAYRUN_BASE_URL=http://127.0.0.1:")
        assert second.startswith("export PAYRUN_API_KEY=sandbox-")
        assert process.stdout.readline() == "export PAYRUN_SETTLE_WAIT=1.25\n"
        base_url, key = first.strip().split("=", 1)[1], second.strip().split("=", 1)[1]
        response = httpx.get(
            f"{base_url}/v0/index", headers={"Authorization": f"ServiceAPIKey {key}"}
        )
        assert response.status_code == 200
        assert httpx.get(f"{base_url}/v0/index").status_code == 401
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        assert process.stdout is not None and process.stderr is not None
        process.stdout.close()
        process.stderr.close()


def test_seed_file_is_served(tmp_path: Path) -> None:
    """--seed serves the seed's accounts."""
    seed = {
        "organization": {"display-name": "Seeded Ltd"},
        "accounts": [{"display-name": "Only", "sort-code": "040004", "account-number": "77777777"}],
    }
    path = tmp_path / "seed.json"
    path.write_text(json.dumps(seed), "utf-8")
    process = _start("--seed", str(path))
    try:
        assert process.stdout is not None
        base_url = process.stdout.readline().strip().split("=", 1)[1]
        key = process.stdout.readline().strip().split("=", 1)[1]
        headers = {"Authorization": f"ServiceAPIKey {key}"}
        org_url = httpx.get(f"{base_url}/v0/index", headers=headers).json()["organization-url"]
        accounts = httpx.get(f"{base_url}{org_url}/bank/accounts", headers=headers).json()[
            "accounts"
        ]
        assert [a["display-name"] for a in accounts] == ["Only"]
    finally:
        process.terminate()
        process.wait(timeout=10)
        assert process.stdout is not None and process.stderr is not None
        process.stdout.close()
        process.stderr.close()


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.10", "example.com"])
def test_non_loopback_host_is_refused(host: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A non-loopback host is refused (exit 2) unless --public is given."""
    assert main(["sandbox", "--host", host, "--port", "0"]) == 2
    assert "--public" in capsys.readouterr().err


def test_bad_seed_and_bad_rate_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A broken seed file or a fault rate above 1 exits 2 with a message."""
    path = tmp_path / "seed.json"
    path.write_text("{not json", "utf-8")
    assert main(["sandbox", "--port", "0", "--seed", str(path)]) == 2
    assert "seed" in capsys.readouterr().err
    assert main(["sandbox", "--port", "0", "--fault-rate", "1.5"]) == 2


def test_help_lists_the_options(capsys: pytest.CaptureFixture[str]) -> None:
    """`payrun sandbox --help` documents every option."""
    with pytest.raises(SystemExit):
        main(["sandbox", "--help"])
    text = capsys.readouterr().out
    for option in (
        "--host",
        "--port",
        "--latency-ms",
        "--jitter-ms",
        "--fault-rate",
        "--deliver-after-ms",
        "--seed",
        "--public",
    ):
        assert option in text
