"""The docs are checked: every command is in README.md and has help; README's commands work."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from payrun.cli import main

ROOT = Path(__file__).parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
COMMANDS = ("validate", "run", "report", "template", "sandbox")


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_is_in_readme(command: str) -> None:
    """Each subcommand is shown in README.md as `payrun <command>`."""
    assert f"payrun {command}" in README


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`payrun <command> --help` exits 0 and describes the command."""
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    assert f"usage: payrun {command}" in capsys.readouterr().out


def test_readme_has_setup_test_and_main_job() -> None:
    """README gives the set-up command, the test command and the one-command sandbox run."""
    assert "pip install -e '.[test]'" in README
    assert re.search(r"^pytest$", README, re.MULTILINE)
    assert "payrun run samples/payroll.csv --sandbox" in README


def test_ci_runs_the_readme_test_command() -> None:
    """.ci/run installs the project and runs the README's test command."""
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "pip install" in script and "-e '.[test]'" in script
    assert re.search(r"^pytest\b", script, re.MULTILINE)


def test_readme_validate_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """The README's first validate example runs on the committed sample and exits 0."""
    assert main(["validate", str(ROOT / "samples" / "payroll.csv")]) == 0
    assert "40" in capsys.readouterr().out
