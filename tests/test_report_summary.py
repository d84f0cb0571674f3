"""The run summary as a person reads it: a table, and the rows to look at grouped by cause."""

from __future__ import annotations

import io
import re
from decimal import Decimal
from pathlib import Path

import pytest
from rich.console import Console

from payrun._models import LedgerRow, RowStatus
from payrun.report import print_blocks, summary_lines, summary_view
from payrun.run import RunOutcome

MAIN, CLIENT = "040004 30000001", "040004 30000002"
SHORT = (
    "the available balance of Acme Client Money is £1,000.00, short of the £9,000.00 its"
    " rows need; fund the account, then run again"
)
CLOSE = (
    "Confirmation of Payee: close match, the bank says the account holder is {name!r}; to"
    " pay it as it is, run again with --accept-close-match; to correct the name, put the"
    " corrected row in a new file of its own and pay that file"
)


def _row(number: int, status: RowStatus, **fields: object) -> LedgerRow:
    values: dict[str, object] = {
        "row": number,
        "row_id": None,
        "payee_name": f"Payee {number}",
        "sort_code": "200000",
        "account_number": f"{number:08d}",
        "amount": Decimal("221.85"),
        "reference": "SALARY",
        "source_account": MAIN,
        "status": status,
    }
    return LedgerRow(**{**values, **fields})  # type: ignore[arg-type]


def _outcome() -> RunOutcome:
    """1,997 rows paid, 30 rows of one account stopped by its balance, 3 close matches and
    one invalid row: the run of issue 20."""
    rows = [_row(n, RowStatus.SUBMITTED) for n in range(2, 1999)]
    rows[-1] = rows[-1]._replace(amount=Decimal("443039.50") - Decimal("221.85") * 1996)
    rows += [
        _row(n, RowStatus.FAILED, source_account=CLIENT, amount=Decimal(300), error=SHORT)
        for n in range(1999, 2029)
    ]
    rows += [
        _row(n, RowStatus.HELD, payee_name=name[:-1], error=CLOSE.format(name=name))
        for n, name in ((2029, "Willow Hall"), (2030, "Isla Brown"), (2031, "Freya Thompson"))
    ]
    rows.append(_row(2032, RowStatus.INVALID, error="sort code must be 6 digits; got '12-34'"))
    return RunOutcome(rows=rows, plans=[], ledger_path=Path("pay.csv.ledger.sqlite"), exit_code=1)


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("width", [80, 120])
def test_the_summary_fits_the_width_and_breaks_no_word(width: int) -> None:
    """At 80 and 120 columns every line fits, and each sentence wraps between words only."""
    lines = summary_lines(_outcome(), report_path=None, create_only=False, width=width)
    text = "\n".join(lines)
    assert all(len(line) <= width for line in lines), text
    # A word cut in two would show here as a space inside it
    for sentence in (SHORT, "--accept-close-match; to correct the name"):
        assert _flat(sentence) in _flat(text), text


def test_the_summary_at_80_columns() -> None:
    """The rendering at 80 columns: thousands separators, one line per cause, rows compact."""
    text = "\n".join(summary_lines(_outcome(), report_path=None, create_only=False, width=80))
    assert re.search(r"\n  submitted +1,997 +£443,039\.50\n", text), text
    assert re.search(r"\n  failed +30 +£9,000\.00\n", text), text
    assert re.search(r"\n  invalid +1 +\(not added up\)\n", text), text
    assert re.search(r"\n  total +2,031 +£452,705\.05\n", text), text
    assert not re.search(r"\b1 rows\b", text), text
    # The balance short of funds is said once for its account, with the count and rows
    assert text.count("short of the") == 1, text
    assert "30 rows from 040004 30000002, failed: the available balance" in text, text
    assert "rows 1999-2028" in text, text
    # One reason for the close matches; each row with the name the bank suggests
    assert _flat(text).count("Confirmation of Payee: close match; to pay it as it is") == 1
    assert "rows 2029 (Willow Hal; bank: 'Willow Hall'), 2030 (Isla Brow;" in _flat(text), text
    assert "row 2032 (Payee 2032): invalid: sort code must be 6 digits" in text, text
    attention = text[text.index("rows to look at") :].splitlines()
    assert len(attention) <= 15, text


def test_one_close_match_keeps_the_name_the_bank_suggests() -> None:
    """Exactly one row held by a close match: its line still names the bank's suggestion."""
    rows = [
        _row(2, RowStatus.SUBMITTED),
        _row(3, RowStatus.HELD, payee_name="Willow Hal", error=CLOSE.format(name="Willow Hall")),
    ]
    outcome = RunOutcome(rows=rows, plans=[], ledger_path=Path("p.sqlite"), exit_code=1)
    text = _flat("\n".join(summary_lines(outcome, report_path=None, create_only=False)))
    assert "row 3 (Willow Hal; bank: 'Willow Hall'): held: Confirmation of Payee" in text, text


def test_thirty_rows_short_of_funds_are_a_few_lines() -> None:
    """A short balance on one account stopping 30 rows is said in a few lines, not 67."""
    rows = [_row(n, RowStatus.FAILED, source_account=CLIENT, error=SHORT) for n in range(2, 32)]
    outcome = RunOutcome(rows=rows, plans=[], ledger_path=Path("p.sqlite"), exit_code=1)
    lines = summary_lines(outcome, report_path=None, create_only=False, width=80)
    assert len(lines) <= 14, "\n".join(lines)


def test_an_interrupted_run_says_so_once() -> None:
    """Ctrl-C: one closing message saying to run again, not 'interrupted' then 'incomplete'."""
    rows = [_row(2, RowStatus.SUBMITTED), _row(3, RowStatus.PENDING)]
    outcome = RunOutcome(
        rows=rows, plans=[], ledger_path=Path("p.sqlite"), interrupted=True, exit_code=3
    )
    text = "\n".join(summary_lines(outcome, report_path=None, create_only=False, width=200))
    assert text.count("run the same command again") == 1, text
    assert text.splitlines()[-1].startswith("interrupted: nothing new was started"), text


def _coloured(*, no_color: bool, monkeypatch: pytest.MonkeyPatch) -> str:
    if no_color:
        monkeypatch.setenv("NO_COLOR", "1")
    else:
        monkeypatch.delenv("NO_COLOR", raising=False)
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=100)
    print_blocks(console, summary_view(_outcome(), report_path=None, create_only=False))
    return screen.getvalue()


def test_failed_and_held_rows_are_coloured_on_a_terminal_unless_no_color(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a terminal failed rows are red and held rows yellow; NO_COLOR turns colour off."""
    coloured = _coloured(no_color=False, monkeypatch=monkeypatch)
    assert "\x1b[31m" in coloured and "\x1b[33m" in coloured
    plain = _coloured(no_color=True, monkeypatch=monkeypatch)
    assert "\x1b[31m" not in plain and "\x1b[33m" not in plain


def test_a_pipe_gets_no_colour_and_one_line_per_sentence(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Off a terminal the summary has no escape codes and no sentence wrapped."""
    from payrun.cli._summary import print_summary  # noqa: PLC0415

    print_summary(_outcome(), report_path=None, create_only=False)
    out = capsys.readouterr().out
    assert "\x1b[" not in out
    assert any(line.endswith(SHORT) for line in out.splitlines()), out
