"""`payrun sandbox`: serve the sandbox bank on this machine until Ctrl-C or SIGTERM.

Once the socket accepts connections, the first two lines on stdout are exactly
``export PAYRUN_BASE_URL=http://127.0.0.1:PORT`` and ``export PAYRUN_API_KEY=<secret>``
(the contract's lines with its optional ``export `` prefix, so they paste into a shell;
flushed at once, so scripts can read them); the third is
``export PAYRUN_SETTLE_WAIT=<seconds>``, the longest this bank may take to carry out a
request after it arrived (a run given it need not wait the default 60 s for rows in doubt);
everything else goes to stderr. A host that is not loopback is refused unless ``--public``
is given. ``--require-signatures PUBLIC.pem --signing-key-id ID`` serves a live-mode
organization that refuses unsigned requests.
"""

from __future__ import annotations

import argparse
import ipaddress
import sys
from typing import Any

from payrun.cli._output import reader_may_leave
from payrun.errors import ConfigError

__all__ = ["execute", "register"]


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the `sandbox` subcommand."""
    parser = subparsers.add_parser(
        "sandbox",
        allow_abbrev=False,
        help="serve the sandbox bank locally (for rehearsals, tests and benchmarks)",
        description="Serve the sandbox bank API until Ctrl-C or SIGTERM. The first two stdout "
        "lines are export PAYRUN_BASE_URL=... and export PAYRUN_API_KEY=..., printed once it"
        " accepts connections: paste them into a shell (or read them in a script).",
    )
    add = parser.add_argument
    add("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    add(
        "--port",
        type=int,
        default=8080,
        help="port to listen on; 0 picks a free one (default 8080)",
    )
    add("--latency-ms", type=float, default=0.0, help="added to every request (default 0)")
    add("--jitter-ms", type=float, default=0.0, help="latency varies by up to this much either way")
    add(
        "--fault-rate",
        type=float,
        default=0.0,
        help="share of create-payment and submit requests "
        "carried out and then answered 500 or dropped (default 0)",
    )
    add(
        "--extra-429-rate",
        type=float,
        default=0.0,
        help="share of requests refused with 429 as if other clients were busy (default 0)",
    )
    add(
        "--deliver-after-ms",
        type=float,
        default=200.0,
        help="delay before a submission is delivered (default 200)",
    )
    add(
        "--clock-offset",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="set the bank's clock this far ahead of this machine's, behind when negative:"
        " its timestamps and Date headers (default 0)",
    )
    add("--seed", metavar="FILE", help="JSON seed file (accounts, payees, CoP directory)")
    add(
        "--require-signatures",
        metavar="PUBLIC.pem",
        help="live mode: every request needing the API key must be signed (RFC 9421) by the"
        " Ed25519 key whose public half is in this PEM file (needs --signing-key-id)",
    )
    add("--signing-key-id", metavar="ID", help="the key id of --require-signatures' key")
    add("--public", action="store_true", help="allow listening on a non-loopback address")
    parser.set_defaults(handler=execute)


def _check(args: argparse.Namespace) -> None:
    if not _is_loopback(args.host) and not args.public:
        message = (
            f"refusing to listen on {args.host}, which is not loopback (add --public to allow it)"
        )
        raise ConfigError(message)
    if not 0 <= args.port <= 65535:  # noqa: PLR2004 - the TCP port range
        message = f"--port must be 0..65535, not {args.port}"
        raise ConfigError(message)
    rates = (args.fault_rate, args.extra_429_rate)
    if any(not 0.0 <= rate <= 1.0 for rate in rates):
        message = "--fault-rate and --extra-429-rate must be between 0 and 1"
        raise ConfigError(message)
    if min(args.latency_ms, args.jitter_ms, args.deliver_after_ms) < 0:
        message = "--latency-ms, --jitter-ms and --deliver-after-ms must not be negative"
        raise ConfigError(message)
    if (args.require_signatures is None) != (not args.signing_key_id):
        message = (
            "--require-signatures PUBLIC.pem and --signing-key-id ID go together: the public"
            " key and the key id a client signs with"
        )
        raise ConfigError(message)


def _signature_keys(args: argparse.Namespace) -> dict[str, str] | None:
    """The key id and public key PEM of --require-signatures, if given."""
    if args.require_signatures is None:
        return None
    from payrun.sandbox import MAX_PUBLIC_KEY_FILE_BYTES

    try:
        with open(args.require_signatures, encoding="utf-8") as handle:
            pem = handle.read(MAX_PUBLIC_KEY_FILE_BYTES + 1)
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or type(exc).__name__
        message = f"cannot read --require-signatures {args.require_signatures}: {reason}"
        raise ConfigError(message) from None
    if len(pem) > MAX_PUBLIC_KEY_FILE_BYTES:
        message = (
            f"--require-signatures {args.require_signatures} is over"
            f" {MAX_PUBLIC_KEY_FILE_BYTES // 1024} KiB: give the PEM public key file"
        )
        raise ConfigError(message)
    return {args.signing_key_id.strip(): pem}


def execute(args: argparse.Namespace) -> int:
    """Serve the sandbox bank until interrupted; exit 0 when stopped cleanly."""
    # Uvicorn loads only for this command
    from payrun.sandbox import SeedError, create_app, serve

    _check(args)
    try:
        app = create_app(
            latency_ms=args.latency_ms,
            jitter_ms=args.jitter_ms,
            fault_rate=args.fault_rate,
            extra_429_rate=args.extra_429_rate,
            deliver_after_ms=args.deliver_after_ms,
            seed=args.seed,
            clock_offset_s=args.clock_offset,
            signature_keys=_signature_keys(args),
        )
    except SeedError as exc:
        raise ConfigError(str(exc)) from exc

    # A reader that leaves (| head -2) stops no server
    def announce(base_url: str) -> None:
        with reader_may_leave():
            # `export `: pasted into a shell, the runs started from it see them
            print(f"export PAYRUN_BASE_URL={base_url}", flush=True)  # noqa: T201 - the contract's
            print(f"export PAYRUN_API_KEY={app.api_key}", flush=True)  # noqa: T201
            # Its own bound, for the settle wait of runs against it (after the contract's two)
            print(f"export PAYRUN_SETTLE_WAIT={app.settle_wait_s:g}", flush=True)  # noqa: T201
        with reader_may_leave(sys.stderr):
            message = f"payrun sandbox: serving {base_url}; Ctrl-C to stop"
            print(message, file=sys.stderr, flush=True)  # noqa: T201

    try:
        serve(app, host=args.host, port=args.port, on_ready=announce)
    except SystemExit as exc:
        # Uvicorn exits when it cannot bind
        message = f"cannot listen on {args.host}:{args.port}"
        raise ConfigError(message) from exc
    return 0
