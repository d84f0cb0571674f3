"""Approvers' keys: Ed25519 private keys (PEM, PKCS#8) and their public halves.

Input: a key file, a plan id. Output: a new private key's PEM, its public PEM, a signature
over a plan id, and whether a signature verifies. ``cryptography``'s exceptions are
translated here only (``ConfigError``, ``PolicyError``); key bytes never reach a message.
"""

from __future__ import annotations

import base64
from pathlib import Path

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from payrun.config import refuse_key_open_to_others
from payrun.errors import ConfigError, PolicyError

__all__ = [
    "check_public_key",
    "load_private_key",
    "new_private_key_pem",
    "parse_public_key",
    "public_key_pem",
    "raw_public_key",
    "rejection_verifies",
    "sign_plan",
    "sign_rejection",
    "signature_verifies",
]

_REJECTION = "reject {plan_id}"
"""What a rejection signs: never the bare plan id an approval signs, so that no rejection's
signature can be copied into an approval."""


def new_private_key_pem() -> bytes:
    """A new Ed25519 private key, PEM PKCS#8, unencrypted."""
    return Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def load_private_key(path: Path) -> Ed25519PrivateKey:
    """The Ed25519 private key in ``path``; ``ConfigError`` when it is not one, or when
    users other than its owner may read it (as the bank signing key is refused)."""
    refuse_key_open_to_others(path, f"the approver key {path}")
    try:
        data = path.read_bytes()
    except OSError as exc:
        msg = f"cannot read the approver key {path}: {exc.strerror}"
        raise ConfigError(msg) from None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        key = None
    if not isinstance(key, Ed25519PrivateKey):
        msg = (
            f"{path} is not an Ed25519 private key (PEM): use the file"
            " `payrun approver-key NAME -o FILE` wrote"
        )
        raise ConfigError(msg)
    return key


def public_key_pem(key: Ed25519PrivateKey) -> str:
    """The public half of ``key``, PEM text."""
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode("ascii")
    )


def parse_public_key(pem: str) -> Ed25519PublicKey | None:
    """The Ed25519 public key in ``pem``, or None when it is not one."""
    try:
        key = serialization.load_pem_public_key(pem.encode("utf-8"))
    except (ValueError, TypeError, UnsupportedAlgorithm):
        return None
    return key if isinstance(key, Ed25519PublicKey) else None


def raw_public_key(pem: str) -> bytes | None:
    """The 32 raw bytes of the Ed25519 public key in ``pem`` (one key however its PEM is
    laid out), or None when it is not one."""
    key = parse_public_key(pem)
    if key is None:
        return None
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def sign_plan(key: Ed25519PrivateKey, plan_id: str) -> str:
    """The key's signature over the plan id (its ASCII hex), base64: an approval."""
    return _sign(key, plan_id)


def sign_rejection(key: Ed25519PrivateKey, plan_id: str) -> str:
    """The key's signature over ``reject <plan id>``, base64: a rejection."""
    return _sign(key, _REJECTION.format(plan_id=plan_id))


def signature_verifies(public_pem: str, plan_id: str, signature: str) -> bool:
    """True when ``signature`` (base64) is ``public_pem``'s approval of ``plan_id``."""
    return _verifies(public_pem, plan_id, signature)


def rejection_verifies(public_pem: str, plan_id: str, signature: str) -> bool:
    """True when ``signature`` (base64) is ``public_pem``'s rejection of ``plan_id``."""
    return _verifies(public_pem, _REJECTION.format(plan_id=plan_id), signature)


def _sign(key: Ed25519PrivateKey, text: str) -> str:
    return base64.b64encode(key.sign(text.encode("ascii"))).decode("ascii")


def _verifies(public_pem: str, text: str, signature: str) -> bool:
    key = parse_public_key(public_pem)
    if key is None:
        return False
    try:
        key.verify(base64.b64decode(signature, validate=True), text.encode("ascii"))
    except (InvalidSignature, ValueError):
        return False
    return True


def check_public_key(pem: str, *, name: str) -> None:
    """``PolicyError`` when ``pem`` is not an Ed25519 public key (approver ``name``'s)."""
    if parse_public_key(pem) is None:
        msg = f"the policy's public_key of approver {name!r} is not an Ed25519 public key (PEM)"
        raise PolicyError(msg)
