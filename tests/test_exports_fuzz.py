"""Any bytes given as a payroll export end in rows or one clear line, never a traceback.

Each profile (Standard 18, Bankline, Barclays) is handed arbitrary bytes, and good files
with a stretch of arbitrary text written over them, both straight (``read_batch``) and
through ``payrun validate --input-format X`` in process: the reading gives its rows, or a
one-line ``PayrunError`` (exit 1 or 2); never another exception, never exit 3 (which a
scheduler would take for the bank being down, and run again).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from _exports import Credit, bacs18_file, bankline_file, barclays_file
from payrun.cli import main
from payrun.errors import PayrunError
from payrun.intake import read_batch

PROFILES = ("bacs18", "bankline", "barclays")
_CREDITS = [
    Credit("ADA LOVELACE", "200000", "55779911", 150000, "SALARY DEC"),
    Credit("GRACE HOPPER", "200000", "55779922", 123456, "SALARY DEC"),
]
GOOD = {
    "bacs18": bacs18_file(_CREDITS),
    "bankline": bankline_file(_CREDITS),
    "barclays": barclays_file(_CREDITS),
}
_FUZZ = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
_ODD = st.sampled_from('0123456789 ",\r\n.-e£²٣')
_TEXT = st.text(alphabet=st.one_of(_ODD, st.characters(codec="utf-8")), max_size=30)


def _read_all(path: Path, name: str) -> None:
    """Read every row of ``path`` as ``name``: rows, or a one-line PayrunError."""
    try:
        with read_batch(path, input_format=name) as batch:
            for _ in batch.rows:
                pass
    except PayrunError as exc:
        assert "\n" not in str(exc), str(exc)


def _validate(path: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``payrun validate PATH --input-format NAME``: exit 0, 1 or 2, no "unexpected"."""
    code = main(["validate", str(path), "--input-format", name])
    err = capsys.readouterr().err
    assert code in (0, 1, 2), err
    assert "unexpected" not in err and "Traceback" not in err, err


def _overwrite(name: str, at: int, text: str) -> str:
    """A good ``name`` file with ``text`` written over it from character ``at``."""
    good = GOOD[name]
    at %= len(good)
    return good[:at] + text + good[at + len(text) :]


@pytest.mark.parametrize("name", PROFILES)
@_FUZZ
@given(data=st.binary(max_size=400))
@example(data=b"UTL1" + "²".encode() * 40)
def test_any_bytes_end_in_rows_or_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, data: bytes
) -> None:
    """Arbitrary bytes as an export: rows or a one-line PayrunError, read or validated."""
    path = tmp_path / "pay.txt"
    path.write_bytes(data)
    _read_all(path, name)
    _validate(path, name, capsys)


@pytest.mark.parametrize("name", PROFILES)
@_FUZZ
@given(at=st.integers(min_value=0, max_value=10_000), text=_TEXT)
def test_a_damaged_export_ends_in_rows_or_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, at: int, text: str
) -> None:
    """A good export with arbitrary text written over part of it: rows or one line."""
    path = tmp_path / "pay.txt"
    path.write_text(_overwrite(name, at, text), encoding="utf-8", newline="")
    _read_all(path, name)
    _validate(path, name, capsys)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("bacs18", GOOD["bacs18"].replace("UTL1", "UTL1²", 1)),
        ("bacs18", GOOD["bacs18"].replace("UTL10000000", "UTL1000000²", 1)),
        ("bankline", GOOD["bankline"].replace("1500.00", "9e999999", 1)),
        ("barclays", GOOD["barclays"].replace("1500.00", "9e999999", 1)),
        ("barclays", GOOD["barclays"].replace("1500.00", "1e999990", 1)),
        ("bankline", GOOD["bankline"].replace("1500.00", "15\r00.00", 1)),
        ("bankline", GOOD["bankline"].replace("1500.00", "1" * 140_000, 1)),
    ],
    ids=[
        "utl1-superscript",
        "utl1-digit",
        "bankline-overflow",
        "barclays-overflow",
        "huge",
        "lone-cr",
        "field-limit",
    ],
)
def test_known_bad_exports_end_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, text: str
) -> None:
    """A UTL1 holding '²', an amount of 9e999999: one line, not "unexpected" (exit 3)."""
    assert text != GOOD[name]
    path = tmp_path / "pay.txt"
    path.write_text(text, encoding="utf-8", newline="")
    _read_all(path, name)
    _validate(path, name, capsys)
