"""Starting a run's record: a new ledger from the validated file, or the old one checked.

Input: the batch file, its ledger's location and the options. Output: an open ``LedgerStore`` whose
rows are the file's (control totals checked before anything is sent), or, for a dry run,
a ``RowBook`` built without writing anything. Raises ``BatchFileError``,
``ControlTotalsError`` and ``LedgerMismatchError`` (another file, bank or organization).
"""

from __future__ import annotations

import hashlib
import json
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

from payrun._models import (
    BatchInfo,
    LedgerRow,
    RowStatus,
    format_money,
    ledger_row_of,
    utc_now,
)
from payrun.config import RunOptions, Settings, ValidationOptions, redact_url, without_userinfo
from payrun.errors import BatchFileError, ControlTotalsError, LedgerMismatchError
from payrun.intake import open_batch
from payrun.ledger import (
    LedgerLocation,
    LedgerStore,
    is_default_ledger,
    ledger_exists,
    open_ledger,
    refuse_if_running,
)
from payrun.run._book import RowBook
from payrun.validation import ValidTotals, plain_or_verdicts

if TYPE_CHECKING:
    from payrun.bank import Organization

__all__ = [
    "check_control_totals",
    "check_same_bank",
    "dry_run_book",
    "file_rows",
    "file_sha256",
    "open_run_ledger",
    "refuse_other_bank",
    "reopen_unfinished",
]


_STARTED = frozenset({RowStatus.CREATING, RowStatus.CREATED, RowStatus.SUBMITTING})


def open_run_ledger(
    batch_path: Path,
    ledger_path: LedgerLocation,
    validation: ValidationOptions,
    options: RunOptions,
) -> LedgerStore:
    """Open the ledger; a new one gets every row of the validated file (control totals first)."""
    ledger = open_ledger(ledger_path)
    try:
        info = ledger.batch()
        if info is None:
            _record_new_batch(ledger, batch_path, validation, options)
        else:
            _check_same_file(ledger, info, batch_path)
            if info.options != _options_text(validation):
                _apply_new_options(ledger, info, batch_path, validation, options)
            else:
                check_control_totals(
                    info.valid_count,
                    info.valid_total,
                    expect_count=options.expect_count,
                    expect_total=options.expect_total,
                )
    except BaseException:
        if ledger.created:
            # Removed while its lock is held: no other run sees it half gone
            ledger.discard()
        else:
            ledger.close()
        raise
    return ledger


def _record_new_batch(
    ledger: LedgerStore, batch_path: Path, validation: ValidationOptions, options: RunOptions
) -> None:
    with open_batch(batch_path, validation) as batch:
        counter = ValidTotals()
        with ledger.atomic():
            ledger.start(
                BatchInfo(
                    file_path=str(batch_path.resolve()),
                    file_sha256=batch.sha256,
                    valid_count=0,
                    valid_total=Decimal(0),
                    expect_count=options.expect_count,
                    expect_total=options.expect_total,
                    options=_options_text(validation),
                ),
                counter.counted(plain_or_verdicts(batch, validation)),
            )
            check_control_totals(
                counter.count,
                counter.total,
                expect_count=options.expect_count,
                expect_total=options.expect_total,
            )
            ledger.set_valid_totals(counter.count, counter.total)


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes, hex (what the ledger records as the batch's identity)."""
    digest = hashlib.sha256()
    try:
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError as exc:
        msg = f"cannot read {path}: {exc.strerror}"
        raise BatchFileError(msg, path=path) from None
    return digest.hexdigest()


def _check_same_file(ledger: LedgerStore, info: BatchInfo, batch_path: Path) -> None:
    if file_sha256(batch_path) == info.file_sha256:
        return
    # Another file (a link pointed anew)
    if Path(info.file_path) != batch_path.resolve():
        own = is_default_ledger(ledger.location, batch_path)
        way = "name a new one with --ledger" if own else "leave out --ledger, or name a new one"
        msg = (
            f"the ledger {ledger.location} belongs to another batch file, {info.file_path}, not"
            f" {batch_path}: to pay {batch_path.name} with a ledger of its own, {way}"
        )
        raise LedgerMismatchError(msg)
    started = sum(1 for row in ledger.rows() if row.status in _STARTED)
    unfinished = (
        (
            f" ({started} of its payments are created at the bank but not submitted yet:"
            " only that run submits them)"
        )
        if started
        else ""
    )
    # A file name used for every month (current.csv) meets last month's ledger
    new_batch = (
        ""
        if started
        else "if it is a new batch (next month's, saved under this name), give it a file"
        " name of its own (payroll-2026-12.csv) or a new --ledger: each batch has its own"
        " ledger; if it corrects this batch, "
    )
    msg = (
        f"the ledger {ledger.location} was made for a different content of {batch_path.name}"
        f" (the file changed since its first run); {new_batch}first restore the original file"
        f" and run it again until it finishes{unfinished}; only then put the corrected rows,"
        " and only those, in a new file of their own and pay that (the whole new file"
        " on a fresh ledger would hold the rows already paid as possible repeats)"
    )
    raise LedgerMismatchError(msg)


def check_same_bank(ledger: LedgerStore, settings: Settings, org: Organization) -> None:
    """Refuse a ledger used with another bank or organization; bind a new one to this one."""
    info = ledger.batch()
    assert info is not None
    refuse_other_bank(info, ledger.location, settings, org)
    if info.base_url is None:
        ledger.set_batch(base_url=settings.base_url, organization_url=org.url, started_at=utc_now())
    elif info.base_url != settings.base_url:
        # The same bank: a password kept before goes
        ledger.set_batch(base_url=settings.base_url)


def refuse_other_bank(
    info: BatchInfo, location: str, settings: Settings, org: Organization
) -> None:
    """Raise ``LedgerMismatchError`` if the ledger at ``location`` was used with another bank
    or organization (a dry run checks this too, without binding anything)."""
    # An address kept by an older payrun may hold a password
    for what, recorded, now in (
        ("bank", info.base_url and without_userinfo(info.base_url), settings.base_url),
        ("organization", info.organization_url, org.url),
    ):
        if recorded is not None and recorded != now:
            if what == "bank":
                recorded, now = redact_url(recorded), redact_url(now)
            msg = (
                f"the ledger {location} was used with {what} {recorded}, not {now}; run it"
                f" against the same {what} (the same address, written the same way), or start"
                " a fresh ledger with --ledger NEW.ledger.sqlite for another bank (rows this"
                " ledger paid would be held there as possible repeats)"
            )
            raise LedgerMismatchError(msg)


def reopen_unfinished(book: RowBook) -> dict[int, str | None]:
    """Rows held or failed before any payment existed are checked again on every run.

    Returns why each reopened row was held or failed (its error until now): a dry run tells
    by it which rows the run would hold again.
    """
    reopened: dict[int, str | None] = {}
    for row in book.in_status(RowStatus.HELD, RowStatus.FAILED):
        if row.payment_url is None:
            book.set(row.row, status=RowStatus.PENDING, error=None)
        elif row.submission_url is None:
            book.set(row.row, status=RowStatus.CREATED, error=None)
        else:
            continue
        reopened[row.row] = row.error
    return reopened


def dry_run_book(
    batch_path: Path,
    ledger_path: LedgerLocation,
    validation: ValidationOptions,
    options: RunOptions,
) -> tuple[RowBook, BatchInfo | None]:
    """The rows a dry run checks: the ledger's if it exists, else the file's (nothing
    written); and the ledger's batch record, if any (its bank is checked once known).

    A ledger a run is paying right now is refused: its payments in flight are not recorded
    yet, so the dry run would call them repeats from outside the ledger.
    """
    if ledger_exists(ledger_path):
        # LedgerLockedError names the paying process
        refuse_if_running(ledger_path)
        with open_ledger(ledger_path, readonly=True) as ledger:
            info = ledger.batch()
            if info is not None:
                _check_same_file(ledger, info, batch_path)
                rows = ledger.rows()
                if info.options != _options_text(validation):
                    fresh = _file_rows(batch_path, validation)
                    changed = _changed_rows(ledger.location, info, rows, fresh, validation)
                    by_row = {r.row: r for r in changed}
                    rows = [by_row.get(r.row, r) for r in rows]
                _check_totals(rows, options)
                return RowBook(rows), info
    rows = _file_rows(batch_path, validation)
    _check_totals(rows, options)
    return RowBook(rows), None


def _check_totals(rows: list[LedgerRow], options: RunOptions) -> None:
    """The control totals against the valid rows (every row not invalid, paid or not)."""
    valid = [r for r in rows if r.status is not RowStatus.INVALID]
    check_control_totals(
        len(valid),
        sum((r.amount for r in valid), Decimal(0)),
        expect_count=options.expect_count,
        expect_total=options.expect_total,
    )


def _options_text(validation: ValidationOptions) -> str:
    """The validation options a ledger's rows were made with, as the ledger records them."""
    return json.dumps(
        {
            "source_account": validation.source_account,
            "allow_duplicates": validation.allow_duplicates,
            "max_amount": str(validation.max_amount),
            "max_rows": validation.max_rows,
            "sheet": validation.sheet,
        },
        sort_keys=True,
    )


def file_rows(batch_path: Path, validation: ValidationOptions) -> list[LedgerRow]:
    """Every row of the file as a run would record it (valid rows pending), nothing written."""
    return _file_rows(batch_path, validation)


def _file_rows(batch_path: Path, validation: ValidationOptions) -> list[LedgerRow]:
    with open_batch(batch_path, validation) as batch:
        return [ledger_row_of(verdict) for verdict in plain_or_verdicts(batch, validation)]


def _apply_new_options(
    ledger: LedgerStore,
    info: BatchInfo,
    batch_path: Path,
    validation: ValidationOptions,
    options: RunOptions,
) -> None:
    """A rerun with other validation options: rows never sent follow them, sent rows must not.

    Rows never sent to the bank take the file's verdict under the new options (a row made
    valid by ``--allow-duplicates``, a corrected ``--source-account``). If a row already
    sent would change, or the control totals differ under the new options, the run is
    refused and nothing is written.
    """
    fresh = _file_rows(batch_path, validation)
    changed = _changed_rows(ledger.location, info, ledger.rows(), fresh, validation)
    _check_totals(fresh, options)
    valid = [r for r in fresh if r.status is not RowStatus.INVALID]
    with ledger.atomic():
        ledger.replace_rows(changed)
        ledger.set_valid_totals(len(valid), sum((r.amount for r in valid), Decimal(0)))
        ledger.set_batch(options=_options_text(validation))


def _file_key(row: LedgerRow) -> tuple[object, ...]:
    """What a row's payment is, as read from the file (invalid rows: their text and reasons)."""
    invalid = row.status is RowStatus.INVALID
    return (
        row.row_id,
        row.payee_name,
        row.sort_code,
        row.account_number,
        row.amount_text if invalid else row.amount,
        row.reference or None,
        row.source_account,
        invalid,
        row.error if invalid else None,
    )


def _changed_rows(
    location: str,
    info: BatchInfo,
    rows: list[LedgerRow],
    fresh: list[LedgerRow],
    validation: ValidationOptions,
) -> list[LedgerRow]:
    """The file's rows (under the new options) that differ from the ledger's; none sent yet."""
    options = _option_change(info.options, validation)
    if [r.row for r in rows] != [r.row for r in fresh]:
        msg = (
            f"the ledger {location} holds other rows of {Path(info.file_path).name} than"
            f" these options read ({options}); run it with the options of its last run, or"
            " pay with a fresh ledger (--ledger NEW.ledger.sqlite)"
        )
        raise LedgerMismatchError(msg)
    changed: list[LedgerRow] = []
    sent: list[tuple[LedgerRow, LedgerRow]] = []
    for old, new in zip(rows, fresh, strict=True):
        if _file_key(old) == _file_key(new):
            continue
        # A create was (maybe) sent: it stays as it is
        if old.attempts or old.payment_url:
            sent.append((old, new))
        else:
            changed.append(new)
    if sent:
        old, new = sent[0]
        more = f" and {len(sent) - 1} more" if len(sent) > 1 else ""
        msg = (
            f"the ledger {location} was last run with other options ({options}) and has"
            f" already sent row {old.row}{more} to the bank, which would now read"
            f" differently ({_row_change(old, new)}); run it again with those options to"
            " finish it. To pay the rest another way, take the rows already sent"
            " (payrun report) out of the file and use a fresh ledger"
        )
        raise LedgerMismatchError(msg)
    return changed


def _option_change(recorded: str | None, validation: ValidationOptions) -> str:
    """The options that differ, the ledger's last run against this one, as command-line words."""
    if recorded is None:
        return "its options were not recorded by the payrun version that started it"
    first, now = json.loads(recorded), json.loads(_options_text(validation))
    words = []
    for name in sorted(now):
        if first.get(name) != now[name]:
            flag = "--" + name.replace("_", "-")
            words.append(
                f"{flag} {_option_value(first.get(name))} then, {_option_value(now[name])} now"
            )
    return "; ".join(words) or "the same options"


def _option_value(value: object) -> str:
    if value is None or value is False:
        return "not given"
    return "given" if value is True else str(value)


def _row_change(old: LedgerRow, new: LedgerRow) -> str:
    if new.status is RowStatus.INVALID:
        return f"invalid: {new.error}"
    for name in (
        "source_account",
        "payee_name",
        "sort_code",
        "account_number",
        "amount",
        "reference",
        "row_id",
    ):
        if getattr(old, name) != getattr(new, name):
            return f"{name.replace('_', ' ')} {getattr(old, name)} -> {getattr(new, name)}"
    return "changed"


def check_control_totals(
    count: int, total: Decimal, *, expect_count: int | None, expect_total: Decimal | None
) -> None:
    """Refuse to start when the file's valid rows differ from the scheduler's control totals."""
    problems = []
    if expect_count is not None and expect_count != count:
        problems.append(f"{count} valid rows where --expect-count says {expect_count}")
    if expect_total is not None and expect_total != total:
        problems.append(
            f"valid rows total {format_money(total)} where --expect-total says"
            f" {format_money(expect_total)}"
        )
    if problems:
        msg = "control totals differ: " + "; ".join(problems) + " (nothing was sent to the bank)"
        raise ControlTotalsError(msg)
