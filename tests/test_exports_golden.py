"""Golden files: what `payrun validate` prints for each sample payroll export, and the one
line each damaged export is refused with. ``UPDATE_GOLDEN=1`` rewrites them (then read the
diff before committing it)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from datetime import date
from pathlib import Path

import pytest

from _exports import Credit, bacs18_contra, bacs18_data, bacs18_file, bankline_file, barclays_file
from payrun.cli import main

ROOT = Path(__file__).parents[1]
GOLDEN = Path(__file__).with_name("golden")
SAMPLES = ("payroll-bacs18.txt", "payroll-bankline.csv", "payroll-barclays.csv")
SOURCE = "040004 30000001"
STAFF = [
    Credit("OLIVER SMITH", "309089", "00705473", 154986, "SALARY DEC 2025"),
    Credit("AMELIA JONES", "601613", "37704964", 315178, "SALARY DEC 2025"),
]


def check_golden(name: str, text: str) -> None:
    """``text`` is the golden file ``name`` (or becomes it under UPDATE_GOLDEN=1)."""
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8")


@pytest.mark.parametrize("sample", SAMPLES)
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_validate_of_each_sample_is_golden(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], sample: str, fmt: str
) -> None:
    """`payrun validate` of each sample export (a copy: samples/ is only read) prints the
    golden text or JSON."""
    copy = tmp_path / sample
    shutil.copyfile(ROOT / "samples" / sample, copy)
    capsys.readouterr()
    code = main(["validate", str(copy), "--format", fmt, "--source-account", SOURCE])
    assert code == 0
    check_golden(f"validate-{Path(sample).stem}.{fmt}", capsys.readouterr().out)


def _lines(text: str, edit: Callable[[list[str]], None]) -> str:
    lines = text.splitlines()
    edit(lines)
    return "\r\n".join(lines) + "\r\n"


def _set(index: int, value: str) -> Callable[[list[str]], None]:
    def edit(lines: list[str]) -> None:
        lines[index] = value

    return edit


_FULL = bacs18_file(STAFF)
_TOTAL = sum(c.pence for c in STAFF)
MUTATIONS: dict[str, tuple[str, str]] = {
    "short line": ("pay.txt", _lines(_FULL, _set(4, _FULL.splitlines()[4][:30]))),
    "long line": ("pay.txt", _lines(_FULL, _set(4, _FULL.splitlines()[4] + "X" * 10))),
    "lost zero": ("pay.txt", _lines(_FULL, _set(4, _FULL.splitlines()[4][1:]))),
    "wrong UTL1": ("pay.txt", bacs18_file(STAFF, trailer=(_TOTAL, _TOTAL - 1, 1, 2))),
    "UTL1 not digits": ("pay.txt", _lines(_FULL, _set(-1, "UTL1 1,234.56"))),
    "bad processing day": ("pay.txt", _lines(_FULL, _set(3, "UHL1 25400999999"))),
    "contra mismatch": (
        "pay.txt",
        "\r\n".join([*(bacs18_data(c) for c in STAFF), bacs18_contra(_TOTAL + 100)]),
    ),
    "direct debit": ("pay.txt", bacs18_data(STAFF[0], code="01") + "\r\n"),
    "unknown code": ("pay.txt", bacs18_data(STAFF[0], code="Z4") + "\r\n"),
    "no credits": ("pay.txt", _lines(_FULL, lambda lines: lines.__delitem__(slice(4, 7)))),
    "CHAPS row": ("pay.csv", bankline_file(STAFF, record_type="02")),
    "international row": ("pay.csv", bankline_file(STAFF, record_type="04")),
    "other record type": ("pay.csv", bankline_file(STAFF, record_type="03")),
    "bankline debit account": ("pay.csv", bankline_file(STAFF, debit="4000430000001")),
    "bankline credit date": (
        "pay.csv",
        bankline_file(STAFF, credit_date=date(2025, 12, 1)).replace("01122025", "1/12/2025"),
    ),
    "barclays not 99": ("pay.csv", barclays_file(STAFF, code="9")),
    "barclays 5 fields": ("pay.csv", barclays_file(STAFF).replace(',"99"', "")),
    "barclays direct debit": ("pay.csv", barclays_file(STAFF, code="0N")),
}


def test_each_damaged_export_is_refused_with_its_golden_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every mutation of an export is refused (exit 2) with one line, the golden one."""
    lines = []
    for label, (name, text) in MUTATIONS.items():
        path = tmp_path / name
        path.write_text(text, newline="")
        capsys.readouterr()
        assert main(["validate", str(path)]) == 2, label
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1, (label, err)
        lines.append(f"{label}: {err}")
    check_golden("export-refusals.txt", "".join(lines))
