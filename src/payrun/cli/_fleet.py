"""`payrun fleet submit|worker|status`: many organizations' batches across machines.

A thin shell over ``payrun.fleet``: parses the options, runs the one ``anyio.run``,
prints the batches as a table or the contract's JSON object, and returns the exit code.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import anyio

from payrun.cli._output import file_path, json_text, reader_may_leave
from payrun.config import DatabaseURL, database_url, ledger_url_from_env
from payrun.errors import ConfigError

__all__ = ["execute", "register"]

_HEARTBEAT_ENV = "PAYRUN_FLEET_HEARTBEAT_TIMEOUT"
_HEARTBEAT_MAX = 30.0
_HEARTBEAT_MIN = 3.0


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the `fleet` subcommand and its three commands."""
    parser = subparsers.add_parser(
        "fleet",
        allow_abbrev=False,
        help="pay many organizations' batches across machines (Temporal and PostgreSQL)",
        description="Hand a manifest of batches to fleet workers through Temporal, with the"
        " ledger in a PostgreSQL database every worker reaches.",
    )
    commands = parser.add_subparsers(dest="fleet_command", metavar="FLEET_COMMAND", required=True)
    submit = commands.add_parser(
        "submit",
        allow_abbrev=False,
        help="check a manifest's batches, store their rows and hand them to the workers",
        description="Exit 0 when every valid row of every batch was submitted, 1 when some"
        " rows are invalid, held or failed, 2 for a bad manifest or an unusable batch file"
        " (nothing submitted) or a refused batch, 3 when a batch is incomplete (a cut-off"
        " passed) or the wait was interrupted.",
    )
    submit.add_argument("manifest", type=file_path, metavar="MANIFEST.toml")
    _add_temporal(submit)
    _add_ledger(submit)
    submit.add_argument("--wait", action="store_true", help="follow the batches to their end")
    _add_format(submit)
    worker = commands.add_parser(
        "worker",
        allow_abbrev=False,
        help="pay lanes' batches until SIGTERM or Ctrl-C",
        description="A Temporal worker: pays each batch handed to it with the engine of"
        " payrun run. SIGTERM drains: no new request, in-flight ones finish and are recorded,"
        " its batches are handed back to the other workers.",
    )
    _add_temporal(worker)
    _add_ledger(worker)
    worker.add_argument(
        "--keys",
        type=file_path,
        required=True,
        metavar="DIR",
        help="folder of API key files, one per organization, named as the manifests' key",
    )
    worker.add_argument(
        "--max-batches",
        type=int,
        default=20,
        metavar="N",
        help="batches (of different lanes) this worker pays at once (default 20)",
    )
    status = commands.add_parser(
        "status",
        allow_abbrev=False,
        help="every submitted batch: rows by status, done or not, its lane and worker",
    )
    _add_ledger(status)
    _add_format(status)
    parser.set_defaults(handler=execute)


def _add_temporal(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--temporal", required=True, metavar="HOST:PORT", help="Temporal's address")
    parser.add_argument("--namespace", default="default", help="Temporal namespace (default)")
    parser.add_argument("--task-queue", default="payrun", help="task queue (default payrun)")


def _add_ledger(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ledger-url",
        metavar="URL",
        help="the ledger database, postgresql://... (default PAYRUN_LEDGER_URL)",
    )


def _add_format(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=("text", "json"), default="text")


def execute(args: argparse.Namespace) -> int:
    """Run the fleet command and return its exit code."""
    url = _ledger_url(args.ledger_url)
    if args.fleet_command == "worker":
        return _worker(args, url)
    if args.fleet_command == "status":
        from payrun.fleet import FleetStore

        batches = FleetStore(url).batches()
        _print_batches(batches, as_json=args.format == "json", extra=True)
        return 0
    return _submit(args, url)


def _ledger_url(given: str | None) -> DatabaseURL:
    url = database_url(given) if given else ledger_url_from_env()
    if url is None:
        msg = (
            "the fleet's ledger is a PostgreSQL database: pass --ledger-url"
            " postgresql://USER@HOST/DATABASE (or set PAYRUN_LEDGER_URL)"
        )
        raise ConfigError(msg)
    return url


def _heartbeat_seconds() -> float:
    import os

    text = os.environ.get(_HEARTBEAT_ENV, "").strip()
    if not text:
        return _HEARTBEAT_MAX
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not _HEARTBEAT_MIN <= value <= _HEARTBEAT_MAX:
        msg = f"{_HEARTBEAT_ENV} is seconds from {_HEARTBEAT_MIN:g} to {_HEARTBEAT_MAX:g}"
        raise ConfigError(msg)
    return value


def _submit(args: argparse.Namespace, url: DatabaseURL) -> int:
    from payrun.fleet import SubmitOptions, fleet_exit_code, follow, submit

    options = SubmitOptions(
        temporal=args.temporal,
        ledger_url=url,
        namespace=args.namespace,
        task_queue=args.task_queue,
        heartbeat_seconds=_heartbeat_seconds(),
    )
    as_json = args.format == "json"

    async def body() -> int:
        names = await submit(args.manifest, options)
        if not args.wait:
            if not as_json:
                with reader_may_leave(run=True):
                    print(f"submitted {len(names)} batches: {', '.join(names)}")  # noqa: T201
            batches = await anyio.to_thread.run_sync(lambda: _batches(url, names))
            if as_json:
                _print_batches(batches, as_json=True)
            return 0
        batches = await follow(url, names, args.stop)
        _print_batches(batches, as_json=as_json)
        return fleet_exit_code(batches, interrupted=args.stop.is_set())

    return anyio.run(body)


def _batches(url: DatabaseURL, names: list[str]) -> list[Any]:
    from payrun.fleet import FleetStore

    return FleetStore(url).batches(names)


def _worker(args: argparse.Namespace, url: DatabaseURL) -> int:
    from payrun.fleet import WorkerOptions, run_worker

    if not 1 <= args.max_batches <= 500:  # noqa: PLR2004 - a sanity bound
        msg = "--max-batches is a number from 1 to 500"
        raise ConfigError(msg)
    options = WorkerOptions(
        temporal=args.temporal,
        namespace=args.namespace,
        task_queue=args.task_queue,
        ledger_url=url,
        keys=Path(args.keys),
        max_batches=args.max_batches,
    )

    def ready(identity: str) -> None:
        with reader_may_leave(sys.stderr, run=True):
            print(  # noqa: T201 - the worker's one line of life
                f"worker {identity} polls task queue {options.task_queue} at {options.temporal}",
                file=sys.stderr,
            )

    anyio.run(lambda: run_worker(options, args.stop, ready))
    with reader_may_leave(sys.stderr, run=True):
        print("worker stopped: its batches were recorded and handed back", file=sys.stderr)  # noqa: T201
    return 0


def _print_batches(batches: list[Any], *, as_json: bool, extra: bool = False) -> None:
    """The batches as the contract's JSON object, or a table (one line per batch)."""
    with reader_may_leave(run=True):
        if as_json:
            print(json_text({"batches": [_document(b, extra=extra) for b in batches]}))  # noqa: T201
            return
        if not batches:
            print("no batches submitted to this ledger database")  # noqa: T201
            return
        for batch in batches:
            rows = ", ".join(f"{count} {status}" for status, count in sorted(batch.rows.items()))
            worker = f" on {batch.worker}" if batch.worker and batch.state == "paying" else ""
            print(f"{batch.name}: {batch.state}{worker} ({batch.lane}): {rows or 'no rows'}")  # noqa: T201
            if batch.message and batch.state != "done":
                print(f"  {batch.message}")  # noqa: T201


def _document(batch: Any, *, extra: bool) -> dict[str, Any]:
    """One batch as the contract's object; status shows an unended batch as incomplete."""
    document: dict[str, Any] = {
        "name": batch.name,
        "file": batch.file,
        "status": batch.state if batch.final else "incomplete",
        "rows": dict(sorted(batch.rows.items())),
    }
    if extra:
        document["lane"] = batch.lane
        document["state"] = batch.state
        document["worker"] = batch.worker if batch.state == "paying" else None
    return document
