"""The fleet manifest: a TOML list of batches, read with tomllib and checked with pydantic.

Input: the manifest's path. Output: ``BatchEntry`` values with every path made absolute
(a batch's ``file`` is relative to the manifest) and every value checked: names unique,
base URLs as ``payrun run`` accepts them, key names that are plain file names, a cut-off
with its time zone. Raises ``UsageError`` (exit 2) naming the first problem, before
anything is read from a batch file or sent anywhere; a file over ``MAX_MANIFEST_BYTES``
or of more than ``MAX_MANIFEST_BATCHES`` batches is refused before it is parsed.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from payrun.config import check_base_url, parse_settle_wait
from payrun.errors import ConfigError, UsageError

__all__ = ["KEY_GROUP", "MAX_MANIFEST_BATCHES", "MAX_MANIFEST_BYTES", "BatchEntry", "load_manifest"]

MAX_MANIFEST_BYTES = 1024 * 1024
"""A manifest's batches take a few hundred bytes each: a bigger file is a mistake (or an
attack), refused before it is read whole (a 19 MB one took 425 MB and 15 s to refuse)."""
MAX_MANIFEST_BATCHES = 5_000
"""Batches one manifest may submit: each becomes a ledger batch and a workflow at once."""
_BATCH_TABLE = re.compile(rb"^[ \t]*\[\[[ \t]*batch[ \t]*\]\]", re.MULTILINE)

KEY_GROUP = r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}"
"""A key group's name (a regular expression): it ends its workers' task queue's name."""
_KEY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_AMOUNT = re.compile(r"[0-9]+(\.[0-9]{1,2})?")
_NAME_MAX = 200


class _Batch(BaseModel):
    """One ``[[batch]]`` table as written."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(min_length=1, max_length=_NAME_MAX)
    file: str = Field(min_length=1)
    base_url: str = Field(min_length=1)
    key: str
    source_account: str | None = None
    expect_count: int | None = Field(default=None, ge=0)
    expect_total: str | None = None
    # Quoted, as the contract writes it, or a TOML date-time
    cutoff: datetime | None = Field(default=None, strict=False)
    confirm_payees: bool = True
    # Seconds, as --settle-wait: an integer or a decimal number in TOML
    settle_wait: float | None = Field(default=None, strict=False)
    input_format: Literal["auto", "payrun", "bacs18", "bankline", "barclays"] = "auto"
    # An approved plan the lane verifies before paying (payrun plan, payrun approve)
    plan: str | None = Field(default=None, pattern=r"^[0-9a-f]{12,64}$")
    # Pay a payroll export before its pay date (as --pay-now); else submit refuses it
    pay_now: bool = False
    # Paid only by the workers started with --key-group NAME (they hold its keys)
    key_group: str | None = Field(default=None, pattern=f"^{KEY_GROUP}$")

    @field_validator("name")
    @classmethod
    def _plain_name(cls, value: str) -> str:
        if value != value.strip() or not value.isprintable():
            msg = "a name without leading or trailing spaces or control characters"
            raise ValueError(msg)
        return value

    @field_validator("key")
    @classmethod
    def _key_file_name(cls, value: str) -> str:
        if not _KEY_NAME.fullmatch(value) or value.endswith((".pem", ".keyid")):
            msg = (
                "a key name is a plain file name in the workers' --keys folder (letters,"
                " digits, '.', '_', '-'; not a path)"
            )
            raise ValueError(msg)
        return value

    @field_validator("expect_total")
    @classmethod
    def _amount(cls, value: str | None) -> str | None:
        if value is not None and not _AMOUNT.fullmatch(value.strip()):
            msg = 'an amount in pounds as a string, such as "1234.50"'
            raise ValueError(msg)
        return value

    @field_validator("settle_wait")
    @classmethod
    def _settle_wait(cls, value: float | None) -> float | None:
        if value is not None:
            try:
                parse_settle_wait(str(value), source="settle_wait")
            except ConfigError as exc:
                raise ValueError(str(exc).removeprefix("settle_wait ")) from None
        return value

    @field_validator("cutoff")
    @classmethod
    def _zoned(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            msg = "a time with its zone, such as 2026-11-28T15:00:00Z"
            raise ValueError(msg)
        return value


class _Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    batch: list[_Batch] = Field(min_length=1)


@dataclass(frozen=True, slots=True)
class BatchEntry:
    """One batch of the manifest, checked, with its file's absolute path."""

    name: str
    file: Path
    base_url: str
    key: str
    source_account: str | None
    expect_count: int | None
    expect_total: Decimal | None
    cutoff: datetime | None
    confirm_payees: bool = True
    settle_wait: float | None = None
    input_format: str = "auto"
    plan: str | None = None
    pay_now: bool = False
    key_group: str | None = None


def load_manifest(path: Path) -> list[BatchEntry]:
    """Read and check the manifest at ``path``; ``UsageError`` names its first problem."""
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_MANIFEST_BYTES + 1)
    except OSError as exc:
        msg = f"cannot read the manifest {path}: {exc.strerror}"
        raise UsageError(msg) from None
    _check_extent(path, data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        msg = f"the manifest {path} is not UTF-8 text"
        raise UsageError(msg) from None
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = f"the manifest {path} is not valid TOML: {exc}"
        raise UsageError(msg) from None
    # An inline array of tables (batch = [{...}, ...]) is counted here
    batches = document.get("batch")
    _check_count(path, len(batches) if isinstance(batches, list) else 0)
    try:
        manifest = _Manifest.model_validate(document)
    except ValidationError as exc:
        raise UsageError(_first_problem(path, exc)) from None
    entries = [_entry(path, index, batch) for index, batch in enumerate(manifest.batch, 1)]
    seen: set[str] = set()
    for entry in entries:
        if entry.name in seen:
            msg = f"the manifest {path} names batch {entry.name!r} twice: names are unique"
            raise UsageError(msg)
        seen.add(entry.name)
    return entries


def _check_extent(path: Path, data: bytes) -> None:
    """Refuse a manifest over ``MAX_MANIFEST_BYTES``, or of too many ``[[batch]]`` tables,
    before it is parsed."""
    if len(data) > MAX_MANIFEST_BYTES:
        msg = (
            f"the manifest {path} is over {MAX_MANIFEST_BYTES // 1024:,} KiB: a manifest"
            " names batches (a few hundred bytes each), not their rows; give the manifest,"
            f" or split it into manifests of at most {MAX_MANIFEST_BATCHES:,} batches"
        )
        raise UsageError(msg)
    _check_count(path, len(_BATCH_TABLE.findall(data)))


def _check_count(path: Path, count: int) -> None:
    """Refuse a manifest of more than ``MAX_MANIFEST_BATCHES`` batches."""
    if count > MAX_MANIFEST_BATCHES:
        msg = (
            f"the manifest {path} names {count:,} batches, over the {MAX_MANIFEST_BATCHES:,}"
            " one manifest may submit: split it into several manifests"
        )
        raise UsageError(msg)


def _entry(path: Path, index: int, batch: _Batch) -> BatchEntry:
    base_url = batch.base_url.strip().rstrip("/")
    try:
        check_base_url(base_url, source="base_url")
    except ConfigError as exc:
        msg = f"the manifest {path}, batch {index} ({batch.name}): {exc}"
        raise UsageError(msg) from None
    return BatchEntry(
        name=batch.name,
        file=(path.parent / batch.file).resolve(),
        base_url=base_url,
        key=batch.key,
        source_account=batch.source_account,
        expect_count=batch.expect_count,
        expect_total=None if batch.expect_total is None else Decimal(batch.expect_total.strip()),
        cutoff=batch.cutoff,
        confirm_payees=batch.confirm_payees,
        settle_wait=batch.settle_wait,
        input_format=batch.input_format,
        plan=batch.plan,
        pay_now=batch.pay_now,
        key_group=batch.key_group,
    )


def _first_problem(path: Path, error: ValidationError) -> str:
    """The first problem pydantic found, as one line naming the batch and field."""
    first = error.errors()[0]
    where = list(first["loc"])
    place = "the manifest"
    if where[:1] == ["batch"] and len(where) > 1 and isinstance(where[1], int):
        place = f"batch {where[1] + 1}"
        where = where[2:]
    field = ".".join(str(part) for part in where) or "its top level"
    reason = first["msg"]
    if first["type"] == "missing":
        reason = "missing (required)"
    elif first["type"] == "extra_forbidden":
        reason = "not a manifest field (name, file, base_url, key, source_account,"
        reason += " expect_count, expect_total, cutoff, confirm_payees, settle_wait,"
        reason += " input_format, plan, pay_now, key_group)"
    return f"the manifest {path}: {place}: {field}: {reason}"
