"""`payrun approver-key NAME -o FILE`: a new approver key, and the policy entry for it.

Writes a new Ed25519 private key (PEM, mode 0600, never over an existing file) and prints
the ``[[approver]]`` entry (name and public key) to paste into the approval policy.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from payrun.cli._output import file_path, reader_may_leave
from payrun.errors import ConfigError

__all__ = ["execute", "register"]


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the `approver-key` subcommand."""
    parser = subparsers.add_parser(
        "approver-key",
        allow_abbrev=False,
        help="write a new approver key and print its [[approver]] policy entry",
        description="Write a new Ed25519 private key to FILE (mode 0600; keep it to"
        " yourself) and print the [[approver]] entry to paste into the approval policy.",
    )
    parser.add_argument("name", metavar="NAME", help="the approver's name, as --as gives it")
    parser.add_argument(
        "-o", "--output", required=True, type=file_path, metavar="FILE", help="the key file"
    )
    parser.set_defaults(handler=execute)


def execute(args: argparse.Namespace) -> int:
    """Write the key and print the entry."""
    from payrun.approval import load_private_key, new_private_key_pem, public_key_pem

    if '"' in args.name or "\\" in args.name or not args.name.strip():
        msg = "NAME must be a plain name (no quotes or backslashes)"
        raise ConfigError(msg)
    try:
        fd = os.open(args.output, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        msg = f"{args.output} already exists: choose another -o FILE (a key is never overwritten)"
        raise ConfigError(msg) from None
    except OSError as exc:
        msg = f"cannot write {args.output}: {exc.strerror}"
        raise ConfigError(msg) from None
    with os.fdopen(fd, "wb") as handle:
        handle.write(new_private_key_pem())
    public = public_key_pem(load_private_key(args.output))
    with reader_may_leave():
        print(f'[[approver]]\nname = "{args.name}"\npublic_key = """{public}"""')  # noqa: T201
    return 0
