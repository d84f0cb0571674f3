"""The approval policy: who may approve a plan, how many must, and when a plan expires.

Input: a TOML file (``--policy FILE`` or ``PAYRUN_POLICY_FILE``), or none. Output: a
``Policy``. Raises ``PolicyError`` for a file others could edit (writable by group or
others, or owned by another user who is not root: whoever can edit the policy can approve
anything), for bad TOML and for wrong values.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tomllib
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from payrun.approval._keys import check_public_key, raw_public_key
from payrun.errors import PolicyError

__all__ = ["DEFAULT_EXPIRY_DAYS", "NO_POLICY", "Approver", "Policy", "load_policy"]

DEFAULT_EXPIRY_DAYS = 7.0
"""How long a plan and its approvals stand without a policy saying otherwise."""
_MAX_EXPIRY_DAYS = 366

_KNOWN = frozenset(
    {
        "required",
        "approvers",
        "second_approver_above",
        "second_approver_for_new_payees",
        "expires_after_days",
        "max_payment",
    }
)


@dataclass(frozen=True, slots=True)
class Approver:
    """A person who may approve plans, and the public half of their key (PEM)."""

    name: str
    public_key: str


@dataclass(frozen=True, slots=True)
class Policy:
    """The approval rules (``NO_POLICY`` when no policy file is given)."""

    required: bool = False
    approvers_needed: int = 1
    second_approver_above: Decimal | None = None
    second_approver_for_new_payees: bool = False
    expires_after: timedelta = timedelta(days=DEFAULT_EXPIRY_DAYS)
    max_payment: Decimal | None = None
    approvers: tuple[Approver, ...] = field(default=())
    digest: str | None = None
    """sha256 (hex) of the policy file's bytes; None without a file."""
    path: Path | None = None

    def approver(self, name: str) -> Approver | None:
        """The approver called ``name``, if the policy lists one."""
        return next((a for a in self.approvers if a.name == name), None)


NO_POLICY = Policy()
"""No policy file: one approval by anyone but the maker, 7-day expiry, runs need no plan."""


def load_policy(path: Path | None) -> Policy:
    """The policy in ``path`` (``NO_POLICY`` when None), refused unless only its owner (or
    root) can change it."""
    if path is None:
        return NO_POLICY
    data = _trusted_bytes(path)
    try:
        document = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        msg = f"the approval policy {path} is not valid TOML ({exc}): correct it"
        raise PolicyError(msg) from None
    return _policy_of(document, path, hashlib.sha256(data).hexdigest())


def _trusted_bytes(path: Path) -> bytes:
    """The file's bytes, read through one open file that was checked first."""
    try:
        with path.open("rb") as handle:
            _refuse_editable(path, os.fstat(handle.fileno()))
            return handle.read()
    except OSError as exc:
        msg = f"cannot read the approval policy {path}: {exc.strerror}"
        raise PolicyError(msg) from None


def _refuse_editable(path: Path, info: os.stat_result) -> None:
    if not stat.S_ISREG(info.st_mode):
        msg = f"the approval policy {path} is not a file"
        raise PolicyError(msg)
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        msg = (
            f"the approval policy {path} can be changed by other users (mode"
            f" {stat.S_IMODE(info.st_mode):o}), and whoever can change it can approve"
            f" anything: run chmod go-w {path}"
        )
        raise PolicyError(msg)
    if info.st_uid not in (0, os.getuid()):
        msg = (
            f"the approval policy {path} belongs to another user (uid {info.st_uid}), who"
            " could change it and so approve anything: use a policy file you or root own"
        )
        raise PolicyError(msg)


def _policy_of(document: dict[str, Any], path: Path, digest: str) -> Policy:
    rules = document.get("approval", {})
    if not isinstance(rules, dict):
        msg = f"the approval policy {path}: [approval] must be a table"
        raise PolicyError(msg)
    unknown = sorted(set(rules) - _KNOWN)
    if unknown:
        msg = f"the approval policy {path}: unknown [approval] setting {unknown[0]!r}"
        raise PolicyError(msg)
    return Policy(
        required=_boolean(rules, "required", path),
        approvers_needed=_count(rules, path),
        second_approver_above=_money(rules, "second_approver_above", path),
        second_approver_for_new_payees=_boolean(rules, "second_approver_for_new_payees", path),
        expires_after=timedelta(days=_days(rules, path)),
        max_payment=_money(rules, "max_payment", path),
        approvers=_approvers(document.get("approver", []), path),
        digest=digest,
        path=path,
    )


def _boolean(rules: dict[str, Any], name: str, path: Path) -> bool:
    value = rules.get(name, False)
    if not isinstance(value, bool):
        msg = f"the approval policy {path}: {name} must be true or false"
        raise PolicyError(msg)
    return value


def _count(rules: dict[str, Any], path: Path) -> int:
    value = rules.get("approvers", 1)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        msg = f"the approval policy {path}: approvers must be a whole number, 1 or more"
        raise PolicyError(msg)
    return value


def _money(rules: dict[str, Any], name: str, path: Path) -> Decimal | None:
    value = rules.get(name)
    if value is None:
        return None
    try:
        amount = Decimal(str(value)) if isinstance(value, str | int) else None
    except InvalidOperation:
        amount = None
    if amount is None or not amount.is_finite() or amount <= 0:
        msg = f'the approval policy {path}: {name} must be an amount such as "25000.00"'
        raise PolicyError(msg)
    return amount


def _days(rules: dict[str, Any], path: Path) -> float:
    value = rules.get("expires_after_days", DEFAULT_EXPIRY_DAYS)
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or not 0 < value <= _MAX_EXPIRY_DAYS:
        msg = (
            f"the approval policy {path}: expires_after_days must be a number of days,"
            f" more than 0 and at most {_MAX_EXPIRY_DAYS}"
        )
        raise PolicyError(msg)
    return float(value)


def _approvers(entries: object, path: Path) -> tuple[Approver, ...]:
    if not isinstance(entries, list):
        msg = f"the approval policy {path}: approvers are [[approver]] tables"
        raise PolicyError(msg)
    found: dict[str, Approver] = {}
    holders: dict[bytes | None, str] = {}
    for entry in entries:
        name = entry.get("name") if isinstance(entry, dict) else None
        key = entry.get("public_key") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name.strip() or not isinstance(key, str):
            msg = f"the approval policy {path}: each [[approver]] needs a name and a public_key"
            raise PolicyError(msg)
        if name in found:
            msg = f"the approval policy {path}: approver {name!r} is listed twice"
            raise PolicyError(msg)
        check_public_key(key, name=name)
        raw = raw_public_key(key)
        if raw in holders:
            msg = (
                f"the approval policy {path}: approvers {holders[raw]!r} and {name!r} have the"
                " same public_key, so one person would count as two: give each their own key"
            )
            raise PolicyError(msg)
        holders[raw] = name
        found[name] = Approver(name, key)
    return tuple(found.values())
