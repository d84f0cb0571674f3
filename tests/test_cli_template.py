"""`payrun template`: stdout, -o FILE, xlsx default file name."""

from __future__ import annotations

from pathlib import Path

import pytest

from payrun.cli import main
from payrun.templates import render_template


def test_csv_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    """Without -o, the CSV template goes to stdout."""
    assert main(["template", "suppliers"]) == 0
    assert capsys.readouterr().out == render_template("suppliers", "csv").decode()


@pytest.mark.parametrize("fmt", ["csv", "xlsx"])
def test_output_file(tmp_path: Path, fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    """-o FILE writes the template there and says so on stderr."""
    target = tmp_path / f"p.{fmt}"
    assert main(["template", "payroll", "--format", fmt, "-o", str(target)]) == 0
    assert target.read_bytes() == render_template("payroll", fmt)
    assert str(target) in capsys.readouterr().err


def test_xlsx_default_name_never_overwrites(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without -o an .xlsx goes to NAME.xlsx, and an existing file is not overwritten."""
    monkeypatch.chdir(tmp_path)
    assert main(["template", "payroll", "--format", "xlsx"]) == 0
    assert (tmp_path / "payroll.xlsx").exists()
    assert main(["template", "payroll", "--format", "xlsx"]) == 2
    assert "already exists" in capsys.readouterr().err


def test_unknown_name_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown template name exits 2 with argparse's choices."""
    with pytest.raises(SystemExit) as info:
        main(["template", "invoices"])
    assert info.value.code == 2
    assert "payroll" in capsys.readouterr().err
