"""The review page's users file: who may sign in, with which role, and approvers' keys.

``add_user`` writes ``NAME -> {role, password hash}`` into a JSON file (mode 0600) and, for an
approver, an Ed25519 key the server signs that approver's approvals with, in ``keys/`` beside
the file (0600, never overwritten). Passwords are hashed with the standard library's
``hashlib.scrypt`` (a maintained, memory-hard KDF; no new dependency); the password itself is
never stored. ``check_password`` answers a sign-in. Raises ``ConfigError`` (exit 2).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from payrun.errors import ConfigError

__all__ = [
    "ROLES",
    "SCRYPT_N",
    "User",
    "add_user",
    "check_password",
    "key_path",
    "load_users",
    "write_private",
]

ROLES = ("maker", "approver")
"""A maker uploads and requests approval; an approver also approves others' plans."""
SCRYPT_N = 2**14
"""scrypt's cost (with r=8 it uses 16 MiB and ~50 ms a sign-in: OWASP's minimum)."""
_SCRYPT_R = 8
_SCRYPT_P = 1
_SALT_BYTES = 16
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_MIN_PASSWORD = 8


@dataclass(frozen=True, slots=True)
class User:
    """A user as the users file holds them."""

    name: str
    role: str
    password_hash: str


def _hash(password: str, salt: bytes, n: int) -> str:
    digest = hashlib.scrypt(
        password.encode("utf-8"), salt=salt, n=n, r=_SCRYPT_R, p=_SCRYPT_P, dklen=32
    )
    return f"scrypt${n}${_SCRYPT_R}${_SCRYPT_P}${salt.hex()}${digest.hex()}"


def check_password(user: User | None, password: str) -> bool:
    """True when ``password`` is ``user``'s (a missing user costs the same time)."""
    stored = user.password_hash if user is not None else _DUMMY
    _, n, _, _, salt, _ = stored.split("$")
    return hmac.compare_digest(_hash(password, bytes.fromhex(salt), int(n)), stored) and (
        user is not None
    )


_DUMMY = _hash("not a password", b"\0" * _SALT_BYTES, SCRYPT_N)


def load_users(path: Path) -> dict[str, User]:
    """The users in ``path`` (none when it does not exist)."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return {
            name: User(name, entry["role"], entry["password"])
            for name, entry in data["users"].items()
        }
    except (OSError, ValueError, KeyError, TypeError) as exc:
        msg = f"the users file {path} cannot be read ({exc}); payrun serve add-user writes it"
        raise ConfigError(msg) from exc


def key_path(users_file: Path, name: str) -> Path:
    """Where the server keeps approver ``name``'s private key."""
    return users_file.parent / "keys" / f"{name}.pem"


def add_user(users_file: Path, name: str, role: str, password: str) -> Path | None:
    """Add or replace ``name`` in the users file; an approver's key is made once. The
    key's path when one was made now."""
    if not _NAME.fullmatch(name):
        msg = f"user name {name!r}: letters, digits, '.', '_' and '-' only (up to 64)"
        raise ConfigError(msg)
    if role not in ROLES:
        msg = f"--role must be maker or approver, not {role!r}"
        raise ConfigError(msg)
    if len(password) < _MIN_PASSWORD:
        msg = f"the password must have at least {_MIN_PASSWORD} characters"
        raise ConfigError(msg)
    users = load_users(users_file)
    users[name] = User(name, role, _hash(password, secrets.token_bytes(_SALT_BYTES), SCRYPT_N))
    document = {
        "users": {u.name: {"role": u.role, "password": u.password_hash} for u in users.values()}
    }
    write_private(users_file, json.dumps(document, indent=2).encode("utf-8"), replace=True)
    if role != "approver":
        return None
    key = key_path(users_file, name)
    if key.exists():
        return None
    from payrun.approval import new_private_key_pem

    write_private(key, new_private_key_pem(), replace=False)
    return key


def write_private(path: Path, data: bytes, *, replace: bool) -> None:
    """Write ``data`` to ``path`` readable by its owner only (atomically when replacing)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    target = path.with_name(path.name + ".new") if replace else path
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if replace else os.O_EXCL)
    try:
        fd = os.open(target, flags, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        if replace:
            target.replace(path)
    except OSError as exc:
        msg = f"cannot write {path}: {exc.strerror}"
        raise ConfigError(msg) from exc
