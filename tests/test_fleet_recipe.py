"""docs/fleet.md's "Five minutes on one laptop" runs as written: a persistent Temporal dev
server, the ledger in PostgreSQL, a sandbox bank, a worker killed mid-batch and another
resuming it, each row paid once.

The block is taken from the document itself. Only what a test machine cannot do as a
laptop does is replaced: the install (done already) and the system PostgreSQL (the
session's throwaway server takes its place); the ports are free ones.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from _fleet_helpers import fleet_env, new_database
from _postgres import Cluster

pytestmark = pytest.mark.fleet

ROOT = Path(__file__).parents[1]
HEADING = "## Five minutes on one laptop"


def _recipe() -> list[str]:
    """The lines of the section's ``sh`` block."""
    text = (ROOT / "docs" / "fleet.md").read_text(encoding="utf-8")
    section = text[text.index(HEADING) :]
    block = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert block is not None, "no ```sh block in the recipe"
    return block.group(1).splitlines()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _script(url: str, temporal_port: int, bank_port: int) -> str:
    """The recipe as this machine runs it."""
    lines = ["set -e"]
    for line in _recipe():
        if line.startswith(("pip install", "sudo apt-get")):
            continue
        if line.startswith("export PAYRUN_LEDGER_URL="):
            line = f"export PAYRUN_LEDGER_URL='{url}'"
        lines.append(line.replace("7233", str(temporal_port)).replace("8100", str(bank_port)))
    return "\n".join(lines) + "\n"


def test_the_five_minute_recipe_runs_as_written(tmp_path: Path, postgres: Cluster) -> None:
    """The recipe pays the sample payroll through a killed worker and its successor, once."""
    steps = _recipe()
    assert any(line.startswith("pip install '.[fleet]'") for line in steps)
    assert any("--db-filename" in line for line in steps), "the recipe's Temporal must persist"
    (tmp_path / "samples").mkdir()
    shutil.copy(ROOT / "samples" / "payroll.csv", tmp_path / "samples" / "payroll.csv")
    bank_port = _free_port()
    script = _script(new_database(postgres.url), _free_port(), bank_port)
    env = fleet_env()
    env.pop("PAYRUN_FLEET_HEARTBEAT_TIMEOUT", None)
    env.pop("PAYRUN_SETTLE_WAIT", None)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    # A file, not a pipe: the recipe's background servers keep their output open
    with (tmp_path / "recipe.out").open("w") as out:
        shell = subprocess.Popen(
            ["bash", "-c", script],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        shell.wait(240)
        output = (tmp_path / "recipe.out").read_text()
        assert shell.returncode == 0, output
        assert output.rstrip().splitlines()[-1] == (
            "organizations: 1 done, 0 paying, 0 queued; rows paid 40 of 40"
        ), output
        assert "demo: done" in output, output
        # The first worker was killed while it paid the batch, not before it had it
        assert re.search(r"^demo: paying on ", output, re.MULTILINE), output
        resumed = (tmp_path / "worker2.log").read_text()
        assert "batch demo" in resumed, f"the second worker never paid the batch:\n{resumed}"
        assert "Traceback" not in resumed + (tmp_path / "worker1.log").read_text()
        with urllib.request.urlopen(f"http://127.0.0.1:{bank_port}/__sandbox/stats") as answer:
            seen = json.load(answer)
        # 40 rows, 40 payments at the bank: none paid twice across the kill
        assert len(seen["payments"]) == 40, seen["payments"]
    finally:
        os.killpg(shell.pid, signal.SIGKILL)
        shell.wait(30)
