"""The guard against changed bank details (issues 19 and 27): a known payee name, new
details, held.

A row whose payee name (or a look-alike of it, or its first 18 characters as a Bacs file
keeps them) a payee of the paying account's owner (active or deactivated) or a row this
ledger paid has with another sort code or account number, while no active payee has the
row's own name and details, is held with a reason naming old and new details by their last
4 (account number) and last 2 (sort code) digits; ``--accept-changed-details`` pays it. The
real CLI runs against a sandbox bank over loopback HTTP; what was created is read at the bank.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from _run_helpers import (
    ACCOUNTS,
    BatchRow,
    account_urls,
    assert_exactly_once,
    ledger_rows,
    run,
    stats,
    write_batch,
)
from payrun.run._changed import masked_details
from payrun.sandbox import RunningSandbox, default_seed, serve_in_thread

OLD = ("401156", "11111234")
NEW = ("402212", "22229876")
HELD_JANE = (
    "bank details for Jane Q Smith changed: was ..1234 at ..56, now ..9876 at ..12 (or two"
    " different people share this name); confirm with the payee by phone"
)
FLAG = "--accept-changed-details"


def _payee(name: str, details: tuple[str, str], status: str = "active") -> dict[str, str]:
    sort_code, number = details
    return {
        "owner": "org",
        "account-holder": name,
        "sort-code": sort_code,
        "account-number": number,
        "payee-status": status,
    }


@contextlib.contextmanager
def _bank(payees: Sequence[dict[str, str]]) -> Iterator[RunningSandbox]:
    """A fresh sandbox bank whose organization has ``payees`` besides the default ones."""
    seed = default_seed()
    seed["payees"] = [*seed["payees"], *payees]
    with serve_in_thread(seed=seed, rng_seed=19) as sandbox:
        yield sandbox


def _row(n: int, name: str, details: tuple[str, str], amount: str = "100.00") -> BatchRow:
    return BatchRow(f"R-{n}", name, *details, amount, f"CHG-{n}", ACCOUNTS[n % 2])


def _payees_with(bank: RunningSandbox, details: tuple[str, str]) -> int:
    """Payees at the bank with these details."""
    return sum((p.sort_code, p.account_number) == details for p in list(bank.state.payees.values()))


def _payments_for(bank: RunningSandbox, rows: Sequence[BatchRow]) -> int:
    references = {r.reference for r in rows}
    return sum(g["payments"] for g in stats(bank)["payments"] if g["reference"] in references)


def _statuses(ledger: Path) -> dict[str, tuple[str, str | None]]:
    return {r["row_id"]: (r["status"], r["error"]) for r in ledger_rows(ledger)}


def _report(ledger: Path) -> list[dict[str, Any]]:
    """``payrun report LEDGER --format json``, as a person would run it."""
    done = subprocess.run(
        [sys.executable, "-m", "payrun", "report", str(ledger), "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    rows: list[dict[str, Any]] = json.loads(done.stdout)
    return rows


def _no_full_details(text: str, *details: tuple[str, str]) -> None:
    """Neither a whole account number nor a whole sort code of ``details`` is in ``text``."""
    for sort_code, number in details:
        assert number not in text and sort_code not in text, text


def test_new_details_for_a_known_name_are_held_and_nothing_is_created(tmp_path: Path) -> None:
    """Held with old and new details masked; no payee or payment for them at the bank; the
    other rows are paid; the summary and the report show the hold."""
    jane, other = _row(0, "Jane Q Smith", NEW), _row(1, "Ada Lovelace", ("403300", "33330001"))
    batch = write_batch(tmp_path / "pay.csv", [jane, other])
    ledger = tmp_path / "pay.ledger.sqlite"
    with _bank([_payee("Jane Q Smith", OLD)]) as bank:
        done = run(bank, batch, ledger)
        assert done.returncode == 1, done.describe()
        assert _payees_with(bank, NEW) == 0 and _payments_for(bank, [jane]) == 0
        assert _payments_for(bank, [other]) == 1
    status, error = _statuses(ledger)["R-0"]
    assert status == "held" and error is not None and error.startswith(HELD_JANE), error
    assert error.endswith(f"then run again with {FLAG}"), error
    _no_full_details(error, OLD, NEW)
    assert f"row 2 (Jane Q Smith): held: {HELD_JANE}" in done.stdout
    report = {r["row_id"]: r for r in _report(ledger)}
    assert report["R-0"]["status"] == "held" and report["R-0"]["error"] == error
    assert report["R-1"]["status"] == "submitted"


def test_a_rerun_holds_again_and_with_the_flag_pays_exactly_once(tmp_path: Path) -> None:
    """Without the flag a rerun holds the row again; with it the row is paid once, and a
    later rerun pays nothing more."""
    rows = [_row(0, "Jane Q Smith", NEW), _row(1, "Ada Lovelace", ("403300", "33330001"))]
    batch = write_batch(tmp_path / "pay.csv", rows)
    ledger = tmp_path / "pay.ledger.sqlite"
    with _bank([_payee("Jane Q Smith", OLD)]) as bank:
        assert run(bank, batch, ledger).returncode == 1
        again = run(bank, batch, ledger)
        assert again.returncode == 1, again.describe()
        assert _statuses(ledger)["R-0"][0] == "held"
        assert _payees_with(bank, NEW) == 0 and _payments_for(bank, rows[:1]) == 0
        accepted = run(bank, batch, ledger, FLAG)
        assert accepted.returncode == 0, accepted.describe()
        assert_exactly_once(bank, rows, ledger, accepted.describe())
        assert _payees_with(bank, NEW) == 1
        last = run(bank, batch, ledger)
        assert last.returncode == 0, last.describe()
        assert_exactly_once(bank, rows, ledger, last.describe())


def test_the_dry_run_reports_the_hold_and_the_flag_clears_it(tmp_path: Path) -> None:
    """A dry run shows the row held (exit 1) and, with the flag, as paid (exit 0)."""
    batch = write_batch(tmp_path / "pay.csv", [_row(0, "Jane Q Smith", NEW)])
    ledger = tmp_path / "pay.ledger.sqlite"
    with _bank([_payee("Jane Q Smith", OLD)]) as bank:
        held = run(bank, batch, ledger, "--dry-run")
        accepted = run(bank, batch, ledger, "--dry-run", FLAG)
        as_json = run(bank, batch, ledger, "--dry-run", "--log-format", "json")
        assert _payees_with(bank, NEW) == 0
    assert held.returncode == 1, held.describe()
    assert f"row 2 (Jane Q Smith): held: {HELD_JANE}" in held.stdout
    assert accepted.returncode == 0, accepted.describe()
    assert "would pay 1 row, £100.00" in accepted.stdout
    problems = json.loads(as_json.stdout)["problems"]
    assert problems[0]["status"] == "held" and problems[0]["error"].startswith(HELD_JANE)
    assert not ledger.exists()


def test_names_match_ignoring_case_and_spaces_and_known_details_are_paid(tmp_path: Path) -> None:
    """'jane  q   SMITH' with new details is held; the old details under any spelling are paid."""
    new = _row(0, "jane  q   SMITH", NEW)
    old = _row(1, "JANE Q SMITH", OLD)
    batch = write_batch(tmp_path / "pay.csv", [new, old])
    ledger = tmp_path / "pay.ledger.sqlite"
    with _bank([_payee("Jane Q Smith", OLD)]) as bank:
        done = run(bank, batch, ledger)
        assert _payments_for(bank, [old]) == 1 and _payments_for(bank, [new]) == 0
    assert done.returncode == 1, done.describe()
    statuses = _statuses(ledger)
    assert statuses["R-1"] == ("submitted", None)
    error = statuses["R-0"][1] or ""
    assert error.startswith("bank details for jane  q   SMITH changed: was ..1234 at ..56"), error


def test_a_paged_payee_list_with_several_old_payees_is_read_to_its_end(tmp_path: Path) -> None:
    """Old payees on the third page of the bank's list (450 payees, 200 a page) are found,
    each listed, the deactivated one marked so (issue 27 M3)."""
    fillers = [_payee(f"Filler {i:03d}", ("309000", f"70{i:06d}")) for i in range(450)]
    olds = [
        _payee("Jane Q Smith", OLD),
        _payee("Jane Q Smith", ("401178", "11115555")),
        _payee("Jane Q Smith", ("401199", "11117777"), status="deactivated"),
    ]
    batch = write_batch(tmp_path / "pay.csv", [_row(0, "Jane Q Smith", NEW)])
    ledger = tmp_path / "pay.ledger.sqlite"
    with _bank([*fillers, *olds]) as bank:
        done = run(bank, batch, ledger)
        assert _payees_with(bank, NEW) == 0
    assert done.returncode == 1, done.describe()
    error = _statuses(ledger)["R-0"][1] or ""
    was = re.match(
        r"bank details for Jane Q Smith changed: was (.*) \(3 payees of this name\),", error
    )
    assert was is not None, error
    listed = was[1].split(" or ")
    assert sorted(listed[:2]) == ["..1234 at ..56", "..5555 at ..78"]
    assert listed[2] == "..7777 at ..99 (deactivated payee)"
    assert ", now ..9876 at ..12 (or two different people share this name);" in error


def test_a_deactivated_payee_of_the_name_holds_new_details(tmp_path: Path) -> None:
    """Issue 27 M3: the only payee of the name is deactivated, and a row to it with new
    details is held, nothing created for it; the flag pays it once."""
    rows = [_row(0, "Jane Q Smith", NEW)]
    batch = write_batch(tmp_path / "pay.csv", rows)
    ledger = tmp_path / "pay.ledger.sqlite"
    with _bank([_payee("Jane Q Smith", OLD, status="deactivated")]) as bank:
        done = run(bank, batch, ledger)
        assert done.returncode == 1, done.describe()
        assert _payees_with(bank, NEW) == 0 and _payments_for(bank, rows) == 0
        status, error = _statuses(ledger)["R-0"]
        assert status == "held", error
        assert (error or "").startswith(
            "bank details for Jane Q Smith changed: was ..1234 at ..56 (deactivated payee),"
            " now ..9876 at ..12 (or two different people share this name);"
        ), error
        accepted = run(bank, batch, ledger, FLAG)
        assert accepted.returncode == 0, accepted.describe()
        assert_exactly_once(bank, rows, ledger, accepted.describe())


def test_a_name_this_ledger_paid_to_other_details_holds_the_row(tmp_path: Path) -> None:
    """Issue 27 M3: a row this ledger paid on an earlier run is an old detail, from any
    account: a row of another owner's account (no payee of the name there) that failed on
    that run is held on the next, nothing created for it."""
    paid, later = _row(0, "Jane Q Smith", OLD), _row(1, "Jane Q Smith", NEW)
    later = dataclasses.replace(later, source_account="040004 30000003")
    batch = write_batch(tmp_path / "pay.csv", [paid, later])
    ledger = tmp_path / "pay.ledger.sqlite"
    client = {
        "display-name": "Client Money Ltd",
        "sort-code": "040004",
        "account-number": "30000003",
        "balance": "0.00",
        "owner": "client",
    }
    seed = default_seed()
    seed["legal-persons"] = [{"key": "client", "display-name": "Client Ltd"}]
    seed["accounts"] = [*seed["accounts"], client]
    with serve_in_thread(seed=seed, rng_seed=27) as bank:
        first = run(bank, batch, ledger)
        assert first.returncode == 1, first.describe()
        assert _statuses(ledger)["R-1"][0] == "failed" and _payments_for(bank, [paid]) == 1
        url = account_urls(bank)["040004 30000003"]
        funded = httpx.post(
            f"{bank.base_url}/__sandbox/accounts/{url.rsplit('/', 1)[1]}/balance",
            json={"value": "1000.00"},
            timeout=30,
        )
        funded.raise_for_status()
        again = run(bank, batch, ledger)
        assert again.returncode == 1, again.describe()
        assert _payees_with(bank, NEW) == 0 and _payments_for(bank, [later]) == 0
    status, error = _statuses(ledger)["R-1"]
    assert status == "held", error
    assert (error or "").startswith(
        "bank details for Jane Q Smith changed: was ..1234 at ..56 (paid by this ledger for"
        " row 2), now ..9876 at ..12"
    ), error


def test_look_alike_names_are_held_and_the_old_details_reuse_the_payee(tmp_path: Path) -> None:
    """Issue 27 M2: look-alike spellings of a payee's name with new details are held,
    nothing created or paid for them; the payee's own details under a look-alike spelling
    pay that payee (no second payee)."""
    spellings = [
        "J\u0430n\u0435 Q Smith",  # Cyrillic a and e
        "Jane\u200b Q Smith",  # a zero-width space
        "Smith, Jane Q",
        "\uff2a\uff41\uff4e\uff45 Q Smith",  # full-width letters
        "Mrs Jan\u00e9-Q Smith.",
    ]
    news = [(f"40221{n}", f"2222987{n}") for n in range(len(spellings))]
    held = [_row(n, name, news[n]) for n, name in enumerate(spellings)]
    same = _row(len(spellings), "SMITH, Mrs Jane Q", OLD)
    batch = write_batch(tmp_path / "pay.csv", [*held, same])
    ledger = tmp_path / "pay.ledger.sqlite"
    with _bank([_payee("Jane Q Smith", OLD)]) as bank:
        done = run(bank, batch, ledger)
        assert done.returncode == 1, done.describe()
        assert _payments_for(bank, held) == 0
        assert all(_payees_with(bank, details) == 0 for details in news)
        assert _payments_for(bank, [same]) == 1 and _payees_with(bank, OLD) == 1
    statuses = _statuses(ledger)
    for row in held:
        status, error = statuses[row.row_id]
        assert status == "held", (row.payee_name, error)
        assert '..1234 at ..56 (payee "Jane Q Smith"), now ..' in (error or ""), error
    assert statuses[same.row_id] == ("submitted", None)
    zero_width = statuses[held[1].row_id][1] or ""
    assert zero_width.startswith("bank details for Jane\\u200b Q Smith changed:"), zero_width


def test_a_name_cut_to_18_characters_is_the_same_name(tmp_path: Path) -> None:
    """A Bacs-style name (upper case, cut to 18 characters) with new details is held, the
    reason saying the names agree on their first 18 characters; with the payee's own
    details it pays that payee (issue 28's names through issue 27's guard)."""
    cut_new = _row(0, "JANE QUENTINA SMIT", NEW)
    cut_old = _row(1, "JANE QUENTINA SMIT", OLD)
    batch = write_batch(tmp_path / "pay.csv", [cut_new, cut_old])
    ledger = tmp_path / "pay.ledger.sqlite"
    with _bank([_payee("Jane Quentina Smithers", OLD)]) as bank:
        done = run(bank, batch, ledger)
        assert done.returncode == 1, done.describe()
        assert _payments_for(bank, [cut_new]) == 0 and _payees_with(bank, NEW) == 0
        assert _payments_for(bank, [cut_old]) == 1 and _payees_with(bank, OLD) == 1
    status, error = _statuses(ledger)["R-0"]
    assert status == "held", error
    assert (error or "").startswith(
        'bank details for JANE QUENTINA SMIT changed: was ..1234 at ..56 (payee "Jane'
        ' Quentina Smithers"), now ..9876 at ..12, and the names agree on their first 18'
        " characters, all that a Bacs file keeps of a name (or two different people"
    ), error


def test_new_rows_sharing_a_name_with_other_details_are_all_held(tmp_path: Path) -> None:
    """Two new rows of one name and different details are both held (no payee says which is
    right); rows of one name and the same details are not; the flag pays them once."""
    first, second = _row(0, "Sam Lee", NEW), _row(1, "Sam Lee", OLD)
    ada = ("403300", "33330001")
    twice = [_row(2, "Ada Lovelace", ada), _row(3, "Ada Lovelace", ada, "7.00")]
    rows = [first, second, *twice]
    batch = write_batch(tmp_path / "pay.csv", rows)
    ledger = tmp_path / "pay.ledger.sqlite"
    with _bank([]) as bank:
        done = run(bank, batch, ledger)
        assert done.returncode == 1, done.describe()
        assert _payments_for(bank, [first, second]) == 0
        assert _payees_with(bank, NEW) == 0 and _payees_with(bank, OLD) == 0
        statuses = _statuses(ledger)
        assert statuses["R-2"][0] == statuses["R-3"][0] == "submitted"
        assert (statuses["R-0"][1] or "").startswith(
            "bank details for Sam Lee differ within this batch and no payee of that name"
            " exists yet: this row has ..9876 at ..12, another row has ..1234 at ..56 (or two"
        )
        assert (statuses["R-1"][1] or "").startswith(
            "bank details for Sam Lee differ within this batch and no payee of that name"
            " exists yet: this row has ..1234 at ..56, another row has ..9876 at ..12 (or two"
        )
        accepted = run(bank, batch, ledger, FLAG)
        assert accepted.returncode == 0, accepted.describe()
        assert_exactly_once(bank, rows, ledger, accepted.describe())


@pytest.mark.parametrize(
    ("sort_code", "number", "shown"),
    [("123456", "87654321", "..4321 at ..56"), ("000000", "00000000", "..0000 at ..00")],
)
def test_masked_details_show_four_and_two_digits(sort_code: str, number: str, shown: str) -> None:
    """Only the account number's last 4 digits and the sort code's last 2 are shown."""
    assert masked_details(sort_code, number) == shown


def test_look_alike_rows_with_the_same_new_details_share_one_new_payee(tmp_path: Path) -> None:
    """Rows of one owner whose names are one name (case, punctuation, word order) and whose
    details are the same get one new payee, not a look-alike payee each; each is paid once."""
    ada = ("403300", "33330001")
    rows = [
        _row(0, "Ada Lovelace", ada),
        _row(2, "LOVELACE, Ada", ada, "7.00"),
        _row(4, "Ada Lovelace.", ada, "8.00"),
    ]
    batch = write_batch(tmp_path / "pay.csv", rows)
    ledger = tmp_path / "pay.ledger.sqlite"
    with _bank([]) as bank:
        done = run(bank, batch, ledger)
        assert done.returncode == 0, done.describe()
        assert_exactly_once(bank, rows, ledger, done.describe())
        assert _payees_with(bank, ada) == 1
