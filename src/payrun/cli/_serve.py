"""`payrun serve`: the review-and-approve page; `payrun serve add-user`: its users.

argv -> the ledger dir, users file, policy and bank -> ``payrun.serve.serve`` (first stdout
line ``PAYRUN_SERVE_URL=http://HOST:PORT``; SIGTERM stops it, exit 0). ``add-user NAME
--role maker|approver [--password-file F]`` -> ``payrun.serve.add_user`` (an approver's key
is made once, and its ``[[approver]]`` policy entry printed) -> exit 0; 2 when refused.
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from payrun.cli._confirm import stdin_is_terminal
from payrun.cli._output import file_path, reader_may_leave
from payrun.cli._plan import add_policy_option, policy_of
from payrun.errors import ConfigError, UsageError

__all__ = ["execute", "register"]

DEFAULT_LEDGER_DIR = Path("payrun-serve")
"""Where uploads, their ledgers and reports go unless --ledger-dir says otherwise."""
_PORT_MAX = 65535


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the `serve` subcommand (and its `add-user`)."""
    parser = subparsers.add_parser(
        "serve",
        allow_abbrev=False,
        help="serve the review-and-approve page (upload, check, approve, pay, report)",
        description="Serve the review page until Ctrl-C or SIGTERM. The first stdout line is"
        " PAYRUN_SERVE_URL=http://HOST:PORT, printed once it accepts connections. The bank"
        " is configured as for payrun run (or --sandbox). Users: payrun serve add-user.",
    )
    _add_place_options(parser)
    parser.add_argument("--host", default="127.0.0.1", help="address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port; 0 picks one (default 8000)")
    parser.add_argument("--sandbox", action="store_true", help="pay the embedded sandbox bank")
    parser.add_argument("--base-url", help="bank API base address (default PAYRUN_BASE_URL)")
    parser.add_argument(
        "--api-key-file",
        type=file_path,
        help="file holding the API key (default PAYRUN_API_KEY or PAYRUN_API_KEY_FILE)",
    )
    add_policy_option(parser)
    parser.set_defaults(handler=execute, serve_command=None)
    commands = parser.add_subparsers(dest="serve_command", metavar="add-user")
    adder = commands.add_parser(
        "add-user",
        allow_abbrev=False,
        help="add (or change) a user of the review page",
        description="Add NAME to the users file with a password (its scrypt hash is kept,"
        " never the password). An approver also gets the key the server signs their"
        " approvals with (keys/NAME.pem beside the users file, mode 0600), and its"
        " [[approver]] policy entry is printed.",
    )
    adder.add_argument("name", metavar="NAME", help="the user's name (how they sign in)")
    adder.add_argument("--role", required=True, choices=("maker", "approver"), help="the role")
    adder.add_argument(
        "--password-file",
        type=file_path,
        metavar="F",
        help="read the password from F's first line (default: asked on the terminal)",
    )
    _add_place_options(adder)


def _add_place_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ledger-dir",
        type=file_path,
        metavar="DIR",
        default=argparse.SUPPRESS,
        help=f"where uploads, their ledgers and reports are kept (default {DEFAULT_LEDGER_DIR})",
    )
    parser.add_argument(
        "--users",
        type=file_path,
        metavar="FILE",
        default=argparse.SUPPRESS,
        help="the users file (default DIR/users.json)",
    )


def _places(args: argparse.Namespace) -> tuple[Path, Path]:
    ledger_dir: Path = getattr(args, "ledger_dir", DEFAULT_LEDGER_DIR)
    users: Path = getattr(args, "users", None) or ledger_dir / "users.json"
    return ledger_dir, users


def execute(args: argparse.Namespace) -> int:
    """Serve the page, or add a user."""
    if args.serve_command == "add-user":
        return _add_user(args)
    from payrun.serve import ServeConfig, serve, session_key

    if not 0 <= args.port <= _PORT_MAX:
        msg = f"--port must be 0..{_PORT_MAX}, not {args.port}"
        raise ConfigError(msg)
    if args.sandbox and args.base_url:
        msg = "--sandbox and --base-url cannot be used together: pick one bank"
        raise UsageError(msg)
    ledger_dir, users = _places(args)
    ledger_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    ledger_dir = ledger_dir.resolve()
    policy = policy_of(args)
    with _bank(args, ledger_dir) as bank:
        config = ServeConfig(ledger_dir, users.resolve(), policy, bank, session_key(ledger_dir))
        return serve(config, args.host, args.port)


@contextlib.contextmanager
def _bank(args: argparse.Namespace, ledger_dir: Path) -> Iterator[Any]:
    """The children's bank: as configured, or an embedded sandbox for the server's life."""
    from payrun.serve import Bank, write_private

    policy = args.policy.resolve() if args.policy is not None else None
    key_file = args.api_key_file.resolve() if args.api_key_file is not None else None
    if not args.sandbox:
        yield Bank(args.base_url, key_file, None, policy)
        return
    from payrun.sandbox import serve_in_thread

    with serve_in_thread() as sandbox:
        key = ledger_dir / ".sandbox-api-key"
        key.unlink(missing_ok=True)
        write_private(key, sandbox.api_key.encode("ascii"), replace=False)
        yield Bank(sandbox.base_url, key, sandbox.app.settle_wait_s, policy)


def _add_user(args: argparse.Namespace) -> int:
    from payrun.approval import load_private_key, public_key_pem
    from payrun.serve import add_user

    _, users = _places(args)
    made = add_user(users, args.name, args.role, _password(args.password_file))
    with reader_may_leave():
        print(f"added {args.name} ({args.role}) to {users}")  # noqa: T201 - the command's output
        if made is not None:
            public = public_key_pem(load_private_key(made))
            print(f"approvals are signed with {made}; the policy entry:")  # noqa: T201
            print(f'[[approver]]\nname = "{args.name}"\npublic_key = """{public}"""')  # noqa: T201
    return 0


def _password(path: Path | None) -> str:
    """The password from the file's first line, else asked twice on the terminal."""
    if path is not None:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            msg = f"cannot read --password-file {path}: {getattr(exc, 'strerror', None) or exc}"
            raise ConfigError(msg) from None
        return text.splitlines()[0] if text else ""
    if not stdin_is_terminal():
        msg = "no terminal to ask for the password on: give --password-file F"
        raise UsageError(msg)
    first = getpass.getpass("Password: ")
    if getpass.getpass("Again: ") != first:
        msg = "the two passwords differ; nothing was changed"
        raise UsageError(msg)
    return first
