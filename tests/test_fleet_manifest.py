"""The fleet manifest's bounds (issue 27, A3): a manifest far over any real one's size or
batch count is refused at once, in one line, before it is parsed or anything is reached
(no Temporal, no database is needed to see it)."""

from __future__ import annotations

import resource
import subprocess
import sys
from datetime import date, timedelta
from pathlib import Path

import pytest

from payrun.errors import UsageError
from payrun.fleet._manifest import MAX_MANIFEST_BATCHES, MAX_MANIFEST_BYTES, load_manifest

_BATCH = (
    '[[batch]]\nname = "b{n}"\nfile = "b{n}.csv"\nbase_url = "https://bank.example"\nkey = "k"\n'
)


def _manifest(path: Path, batches: int, *, inline: bool = False) -> Path:
    """A manifest of ``batches`` batches, as tables or as one inline array."""
    if inline:
        entries = ", ".join(
            f'{{name = "b{n}", file = "b{n}.csv", base_url = "https://bank.example", key = "k"}}'
            for n in range(batches)
        )
        path.write_text(f"batch = [{entries}]\n")
    else:
        path.write_text("".join(_BATCH.format(n=n) for n in range(batches)))
    return path


def test_a_huge_manifest_is_refused_at_once_in_one_line(tmp_path: Path) -> None:
    """A 19 MB manifest (200,000 batches): `fleet submit` exits 2 in one line within seconds."""
    manifest = _manifest(tmp_path / "huge.toml", 200_000)
    assert manifest.stat().st_size > 10 * MAX_MANIFEST_BYTES
    # CPU, not wall time: the refusal must not read the file, however loaded the machine
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [sys.executable, "-m", "payrun", "fleet", "submit", str(manifest)]
        + ["--temporal", "127.0.0.1:1", "--ledger-url", "postgresql://u@127.0.0.1:1/db"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line == (
        f"payrun: error: the manifest {manifest} is over 1,024 KiB: a manifest names batches"
        " (a few hundred bytes each), not their rows; give the manifest, or split it into"
        f" manifests of at most {MAX_MANIFEST_BATCHES:,} batches"
    )
    # Start-up alone is about a second of CPU; reading it whole took 12-19 s
    assert cpu < 5, cpu


@pytest.mark.parametrize("inline", [False, True], ids=["tables", "inline-array"])
def test_a_manifest_of_too_many_batches_is_refused_before_they_are_checked(
    tmp_path: Path, inline: bool
) -> None:
    """More than MAX_MANIFEST_BATCHES batches under the size cap: refused, naming the count."""
    manifest = _manifest(tmp_path / "many.toml", MAX_MANIFEST_BATCHES + 1, inline=inline)
    assert manifest.stat().st_size <= MAX_MANIFEST_BYTES
    with pytest.raises(UsageError) as refused:
        load_manifest(manifest)
    assert f"names {MAX_MANIFEST_BATCHES + 1:,} batches, over the" in str(refused.value)


def test_a_base_url_with_a_token_in_its_query_is_refused_unshown(tmp_path: Path) -> None:
    """A base_url with a token in its query: refused in one line (the address is kept in
    the ledger and named in lanes), the token never shown; exit 2 from fleet submit."""
    manifest = tmp_path / "one.toml"
    manifest.write_text(
        '[[batch]]\nname = "a"\nfile = "a.csv"\nkey = "acme"\n'
        'base_url = "https://bank.example/v0?token=Tok-S3cret"\n'
    )
    with pytest.raises(UsageError, match="base_url has a query or fragment in it") as refused:
        load_manifest(manifest)
    assert "Tok-S3cret" not in str(refused.value) and "\n" not in str(refused.value)
    done = subprocess.run(
        [sys.executable, "-m", "payrun", "fleet", "submit", str(manifest)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "Tok-S3cret" not in done.stdout + done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.parametrize("pay_now", [False, True], ids=["refused", "pay_now"])
def test_an_export_before_its_pay_date_is_refused_at_submit_unless_pay_now(
    tmp_path: Path, pay_now: bool
) -> None:
    """A Bankline export to be paid in 20 days: `fleet submit` exits 2 in one line naming
    the date and pay_now, before Temporal or the database is reached (nothing submitted);
    with ``pay_now = true`` the batch passes the check (then the unreachable database
    stops it), and a batch due today passes too."""
    from _exports import Credit, bankline_file
    from payrun.fleet._submit import _check_file

    staff = [Credit("OLIVER SMITH", "309089", "00705473", 210000, "SALARY")]
    due = date.today() + timedelta(days=20)
    (tmp_path / "pay.csv").write_text(bankline_file(staff, credit_date=due), encoding="utf-8")
    manifest = tmp_path / "payday.toml"
    manifest.write_text(
        '[[batch]]\nname = "acme-dec"\nfile = "pay.csv"\nbase_url = "https://bank.example"\n'
        f'key = "acme"\n{"pay_now = true" if pay_now else ""}\n',
        encoding="utf-8",
    )
    done = subprocess.run(
        [sys.executable, "-m", "payrun", "fleet", "submit", str(manifest)]
        + ["--temporal", "127.0.0.1:1", "--ledger-url", "postgresql://u@127.0.0.1:1/db"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    (line,) = done.stderr.strip().splitlines()
    if pay_now:
        assert "paid on" not in line and "127.0.0.1:1" in line, line
        return
    assert done.returncode == 2, line
    assert line.startswith("payrun: error: batch acme-dec: pay.csv is to be paid on"), line
    assert due.strftime("%d %b %Y") in line and "pay_now = true" in line, line
    assert line.endswith("nothing was submitted"), line
    (entry,) = load_manifest(manifest)
    _check_file(entry, today=due)
