"""The docs are checked: every command is in README.md and has help; the commands shown in
README.md and docs/ parse, and the quickstart's output is what the commands print."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from payrun.cli import build_parser, main

ROOT = Path(__file__).parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
COMMANDS = (
    "validate",
    "run",
    "check",
    "report",
    "template",
    "sandbox",
    "fleet",
    "plan",
    "approve",
    "approver-key",
)
DOCS = sorted((ROOT / "docs").glob("*.md"))
_SHELL_ENDS = (">", ">>", "2>&1", "|", "&&", ";")


def _code_blocks(text: str) -> list[str]:
    """The lines inside the text's fenced code blocks (not ```text ones: pictures)."""
    lines: list[str] = []
    language = None
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            language = line.strip().removeprefix("```") if language is None else None
        elif language is not None and language != "text":
            lines.append(line)
    return lines


def _shown_commands() -> list[tuple[str, list[str]]]:
    """Every ``payrun COMMAND ...`` shown in a code block of README.md or docs/, as argv."""
    shown = []
    for path in [ROOT / "README.md", *DOCS]:
        for line in _code_blocks(path.read_text(encoding="utf-8")):
            found = re.search(
                r"(?:^|[\s/=$])payrun (" + "|".join(COMMANDS) + r")(?=\s|$)(.*)", line
            )
            # a synopsis with [optional] parts is not a command to run
            if found is None or " [" in line:
                continue
            words = shlex.split(f"{found.group(1)}{found.group(2)}", comments=True)
            argv = []
            for word in words:
                if word in _SHELL_ENDS or word.startswith((">", "2>")):
                    break
                # A script's "$count": a value the script fills in (checked as a number)
                argv.append("1" if word.startswith("$") else word)
            shown.append((f"{path.name}: {line.strip()}", argv))
    return shown


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


def test_readme_validate_example_runs(samples: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The README's first validate example runs on (a copy of) the committed sample, exit 0."""
    assert main(["validate", str(samples / "payroll.csv")]) == 0
    assert "40" in capsys.readouterr().out


def test_docs_show_commands() -> None:
    """README.md and docs/ show every command (so the check below is not empty)."""
    shown = [argv[0] for _, argv in _shown_commands()]
    assert {"validate", "run", "report", "template", "sandbox"} <= set(shown)


@pytest.mark.parametrize(("where", "argv"), _shown_commands(), ids=lambda v: str(v)[:60])
def test_every_command_shown_in_the_docs_parses(where: str, argv: list[str]) -> None:
    """Each command shown in README.md or docs/ is one payrun accepts (options and choices)."""
    try:
        build_parser().parse_args(argv)
    except SystemExit as exc:
        pytest.fail(f"{where}: payrun would refuse it (exit {exc.code})")


def test_readme_quickstart_output_is_what_validate_prints(samples: Path) -> None:
    """The validate output shown in the README's quickstart is what the command prints now
    (run as shown, beside a copy of ``samples/``)."""
    readme_block = re.search(r"\$ payrun validate samples/payroll.csv\n(.*?)```", README, re.S)
    assert readme_block is not None
    done = subprocess.run(
        [sys.executable, "-m", "payrun", "validate", "samples/payroll.csv"],
        cwd=samples.parent,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0
    assert done.stdout == readme_block.group(1)


def test_the_readme_is_a_front_page() -> None:
    """README.md stays at most 300 lines, with its lines readable (the reference is in docs/)."""
    lines = README.splitlines()
    assert len(lines) <= 300
    assert all("docs/" + path.name in README for path in DOCS)


def test_no_install_hint_names_payrun_on_pypi() -> None:
    """payrun is not on PyPI: ``pip install 'payrun[fleet]'`` would install another project,
    so no message or page says it (the fleet extra is installed from a checkout or the
    wheel, docs/fleet.md)."""
    texts = [README, *(path.read_text(encoding="utf-8") for path in DOCS)]
    texts += [path.read_text(encoding="utf-8") for path in (ROOT / "src").rglob("*.py")]
    assert not [text for text in texts if re.search(r"['\"\s]payrun\[", text)]
