"""The options that say how to reach the bank, shared by every command that talks to it.

``add_bank_key_options`` adds ``--api-key-file``, ``--signing-key-file`` and
``--signing-key-id`` (the secrets themselves are never taken on the command line);
``bank_settings`` builds ``Settings`` from ``--base-url`` and those, falling back to the
``PAYRUN_*`` environment variables.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from payrun.cli._output import file_path, warning_line
from payrun.config import Settings, load_settings

__all__ = ["add_bank_key_options", "bank_settings"]


def add_bank_key_options(parser: argparse.ArgumentParser) -> None:
    """Add the API key file and the signing key options."""
    parser.add_argument(
        "--api-key-file",
        type=file_path,
        metavar="FILE",
        help="file holding the API key (default PAYRUN_API_KEY or PAYRUN_API_KEY_FILE)",
    )
    parser.add_argument(
        "--signing-key-file",
        type=file_path,
        metavar="FILE",
        help="Ed25519 private key (PEM) every request is signed with, as live mode requires"
        " (default PAYRUN_SIGNING_KEY_FILE; needs --signing-key-id)",
    )
    parser.add_argument(
        "--signing-key-id",
        metavar="ID",
        help="the key id the bank issued for the signing key's public half"
        " (default PAYRUN_SIGNING_KEY_ID)",
    )


def bank_settings(
    args: argparse.Namespace, *, stopped: Callable[[], bool] = lambda: False
) -> Settings:
    """``Settings`` from the command's bank options and the environment; what they warn
    of (an API key file others can read) is said on stderr."""
    settings = load_settings(
        base_url=args.base_url,
        api_key_file=args.api_key_file,
        signing_key_file=args.signing_key_file,
        signing_key_id=args.signing_key_id,
        stopped=stopped,
    )
    for warning in settings.warnings:
        warning_line(warning, as_json=getattr(args, "log_format", "text") == "json")
    return settings
