"""The CLI shell: help text, unknown options, secrets kept off the command line."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from payrun.cli import build_parser, main


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    """`payrun --help` names every subcommand of the contract."""
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for command in ("validate", "run", "report", "template", "sandbox"):
        assert command in out


KEY = "sk-live-7f3a9c1e5b"
"""An API key a user might paste where it does not belong."""


def test_no_parser_accepts_abbreviated_options() -> None:
    """`payrun` and every subcommand refuse abbreviations (`--api-key` is not --api-key-file)."""
    parser = build_parser()
    subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    commands = subparsers[0].choices
    assert set(commands) == {
        "validate",
        "run",
        "check",
        "report",
        "template",
        "sandbox",
        "fleet",
        "plan",
        "serve",
        "approve",
        "approver-key",
    }
    assert not parser.allow_abbrev
    assert [name for name, sub in commands.items() if sub.allow_abbrev] == []


@pytest.mark.parametrize(
    "option", [["--api-key", KEY], [f"--api-key={KEY}"], ["--api-key-fil", KEY]]
)
def test_api_key_on_the_command_line_is_a_usage_error_that_never_shows_it(
    option: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--api-key KEY` exits 2 saying where a key goes, and the key is not echoed."""
    with pytest.raises(SystemExit) as info:
        main(["run", str(tmp_path / "pay.csv"), *option])
    assert info.value.code == 2
    captured = capsys.readouterr()
    assert KEY not in captured.err + captured.out
    assert "PAYRUN_API_KEY" in captured.err


@pytest.mark.parametrize(
    "argv",
    [
        ["--api-key", KEY, "run", "pay.csv"],  # before the command: read as the command
        ["run", "pay.csv", KEY],  # a key pasted where nothing is expected
        [KEY, "run"],  # a key pasted as the command
        ["run", "pay.csv", "--log-format", "json", "--api-key", KEY],
    ],
)
def test_words_that_may_be_the_key_are_never_echoed(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Wherever a key lands on the command line, the usage error (text or JSON) hides it."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    captured = capsys.readouterr()
    assert KEY not in captured.err + captured.out, captured.err


def test_unknown_options_are_named_without_their_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unknown option is named in the usage error; the value after it is not shown."""
    with pytest.raises(SystemExit) as info:
        main(["run", str(tmp_path / "pay.csv"), "--token", KEY])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--token" in err and KEY not in err


@pytest.mark.parametrize(
    ("option", "environ"),
    [([], {"PAYRUN_API_KEY_FILE": KEY}), (["--api-key-file", KEY], {})],
)
def test_a_key_given_as_the_key_file_name_is_never_shown(
    option: list[str],
    environ: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The key pasted where the key file's name goes exits 2 naming the source, not the key."""
    monkeypatch.setenv("PAYRUN_BASE_URL", "https://bank.example")
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert main(["run", str(tmp_path / "pay.csv"), *option]) == 2
    captured = capsys.readouterr()
    assert KEY not in captured.err + captured.out
    source = option[0] if option else "PAYRUN_API_KEY_FILE"
    assert f"cannot read the API key file named by {source}" in captured.err


def test_version_prints_the_installed_version_and_exits_0(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`payrun --version` prints the package's version (as installed) and exits 0."""
    from importlib.metadata import version

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"payrun {version('payrun')}\n"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["rnu", "x.csv"], "payrun: error: unknown command 'rnu': did you mean run? (commands:"),
        (
            ["validate", "x.csv", "--formt", "json"],
            "unknown option --formt: did you mean --format?",
        ),
        (["run", "x.csv", "--sandbx"], "payrun run: error: unknown option --sandbx: did you mean"),
        (["report", "x", "--format", "jsn"], "invalid choice: 'jsn' (choose from"),
    ],
)
def test_a_typo_is_one_line_with_a_suggestion(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A mistyped command, option or choice exits 2 with one line: what was not known (a
    command's or option's name is no secret) and 'did you mean ...?', no usage dump."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    (line,) = err.splitlines()
    assert said in line and "did you mean" in line and "not shown" not in line, err


def test_an_unknown_option_value_stays_hidden(capsys: pytest.CaptureFixture[str]) -> None:
    """The value after an unknown option may be a secret: the line names the option only."""
    with pytest.raises(SystemExit):
        main(["run", "x.csv", "--dryrun", KEY])
    (line,) = capsys.readouterr().err.splitlines()
    assert line == "payrun run: error: unknown option --dryrun: did you mean --dry-run?", line


def test_payrun_alone_lists_the_commands_one_line_each(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`payrun` with no arguments lists every command with its one-line help (exit 2)."""
    assert main([]) == 2
    out = capsys.readouterr().out
    commands = ("validate", "run", "check", "report", "template", "sandbox", "fleet") + (
        "plan",
        "approve",
        "approver-key",
        "serve",
    )
    for command in commands:
        assert re.search(rf"^  {command} +\S", out, re.MULTILINE), out
    # One line each, a usage line and a way to start: no usage dump
    assert "error" not in out and len(out.splitlines()) <= len(commands) + 6, out


def test_the_shell_completes_commands_options_and_choices(tmp_path: Path) -> None:
    """Tab completion (argcomplete, for bash, zsh and fish) offers payrun's own options."""
    import os  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    def complete(line: str) -> list[str]:
        environ = {
            **os.environ,
            "_ARGCOMPLETE": "1",
            "_ARGCOMPLETE_IFS": "\n",
            "COMP_LINE": line,
            "COMP_POINT": str(len(line)),
        }
        # argcomplete answers on file descriptor 8: the pipe read here
        done = subprocess.run(
            ["bash", "-c", f"'{sys.executable}' -m payrun 8>&1 >/dev/null 2>&1"],
            env=environ,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        return done.stdout.split()

    assert complete("payrun run x.csv --sand") == ["--sandbox"]
    assert complete("payrun va") == ["validate"]
    assert complete("payrun validate x.csv --format ") == ["text", "json"]


_INTERRUPT_WHILE_LOADING = """
import importlib.abc, os, signal, sys

class _CtrlC(importlib.abc.MetaPathFinder):
    # Ctrl-C arrives while the command line is still being imported
    def find_spec(self, fullname, path, target=None):
        if fullname == "payrun.cli":
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, _CtrlC())
if sys.argv.pop(1) == "module":
    import runpy
    runpy.run_module("payrun", run_name="__main__", alter_sys=True)
else:
    from payrun.__main__ import main
    raise SystemExit(main())
"""


@pytest.mark.parametrize("entry", ["module", "script"])
def test_ctrl_c_while_the_command_line_loads_is_exit_3_without_a_traceback(
    entry: str, tmp_path: Path
) -> None:
    """`python -m payrun` and the `payrun` script catch Ctrl-C before importing the command
    line: one that comes during those imports is one line and exit 3, nothing done."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    batch = tmp_path / "pay.csv"
    batch.write_text("payee_name,sort_code,account_number,amount,reference\n")
    done = subprocess.run(
        [sys.executable, "-c", _INTERRUPT_WHILE_LOADING, entry, "validate", str(batch)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr
    assert "KeyboardInterrupt" not in done.stderr
    assert "interrupted before anything was done" in done.stderr
    assert done.stdout == ""


def test_run_help_groups_its_options_and_ends_with_three_examples(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`payrun run --help`: the options in the groups what to pay, the bank, safety and
    output (in that order, each with options), then three examples payrun accepts."""
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = capsys.readouterr().out
    titles = [f"\n{title}:\n" for title in ("what to pay", "the bank", "safety", "output")]
    places = [out.find(title) for title in titles]
    assert -1 not in places and places == sorted(places), out
    for title, then in zip(titles, [*titles[1:], "\nother options:\n"], strict=True):
        section = out[out.index(title) : out.index(then)]
        assert len(re.findall(r"^  --", section, re.MULTILINE)) >= 3, section
    assert out.index("\nsafety:\n") < out.index("--expect-total") < out.index("\noutput:\n")
    examples = out[out.index("\nexamples:\n") :]
    commands = [line.split()[1:] for line in examples.splitlines() if line.startswith("  payrun ")]
    assert len(commands) == 3, examples
    for argv in commands:
        build_parser().parse_args(argv)
