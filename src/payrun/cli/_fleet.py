"""`payrun fleet submit|worker|status`: many organizations' batches across machines.

A thin shell over ``payrun.fleet``: parses the options, runs the one ``anyio.run``,
prints the batches as a table or the contract's JSON object, and returns the exit code.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

from payrun._redaction import redact
from payrun._signals import ignore_stop_signals
from payrun.cli._output import file_path, json_text, reader_may_leave
from payrun.config import (
    DEFAULT_HEARTBEAT_TIMEOUT,
    DEFAULT_SETTLE_WAIT,
    MAX_HEARTBEAT_TIMEOUT,
    MIN_HEARTBEAT_TIMEOUT,
    DatabaseURL,
    check_heartbeat_timeout,
    database_url,
    environ_with_ledger_url,
    heartbeat_timeout_from_env,
    ledger_url_from_env,
    parse_settle_wait,
    policy_path_from_env,
    settle_wait_from_env,
)
from payrun.errors import ConfigError
from payrun.fleet import (
    CHILD_OPTION,
    child_command,
    default_processes,
    listen_to_parent,
    split_batches,
    supervise,
)

__all__ = ["execute", "register"]

_NO_BATCHES = "no batches submitted to this ledger database"
# A terminal following --wait hears at least this often
_PROGRESS_SECONDS = 10.0


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
    _register_submit(commands)
    _register_worker(commands)
    _register_status(commands)
    parser.set_defaults(handler=execute)


def _register_submit(commands: argparse._SubParsersAction[Any]) -> None:
    """`payrun fleet submit` and its options."""
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
    submit.add_argument(
        "--wait-timeout",
        type=_seconds,
        metavar="SECONDS",
        help="with --wait: stop following after SECONDS (exit 3 while batches go on)",
    )
    submit.add_argument(
        "--heartbeat-timeout",
        type=_seconds,
        metavar="SECONDS",
        help="seconds without a heartbeat before another worker takes a batch (default"
        f" {DEFAULT_HEARTBEAT_TIMEOUT:g}, or PAYRUN_FLEET_HEARTBEAT_TIMEOUT;"
        f" {MIN_HEARTBEAT_TIMEOUT:g} to {MAX_HEARTBEAT_TIMEOUT:g})",
    )
    _add_format(submit)


def _register_worker(commands: argparse._SubParsersAction[Any]) -> None:
    """`payrun fleet worker` and its options."""
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
        "--settle-wait",
        type=_settle_wait,
        metavar="SECONDS",
        help="how long after a lost answer the bank may still carry a request out (default"
        " PAYRUN_SETTLE_WAIT, else 60); a batch's own settle_wait in the manifest wins",
    )
    worker.add_argument(
        "--max-batches",
        type=int,
        default=20,
        metavar="N",
        help="batches (of different lanes) this worker command pays at once, shared by its"
        " processes (default 20)",
    )
    worker.add_argument(
        "--key-group",
        type=_key_group,
        metavar="NAME",
        help="pay only the batches whose manifest says key_group = NAME (--keys then holds"
        " only that group's keys); default: the batches of no group",
    )
    worker.add_argument(
        "--processes",
        type=int,
        metavar="N",
        help="worker processes this command runs, sharing its --max-batches, so one command"
        " uses the machine's cores (default: the cores it may use, at most --max-batches)",
    )
    # A supervised child of --processes N: its parent checked the start for all
    worker.add_argument(CHILD_OPTION, action="store_true", help=argparse.SUPPRESS)


def _register_status(commands: argparse._SubParsersAction[Any]) -> None:
    """`payrun fleet status` and its options."""
    status = commands.add_parser(
        "status",
        allow_abbrev=False,
        help="submitted batches: rows by status, where each stands, its lane and worker",
        description="The batches the ledger database holds (all, or those the filters keep),"
        " then one line: organizations done, paying and queued, rows paid of all, the time"
        " left at the pace so far.",
    )
    _add_ledger(status)
    status.add_argument(
        "--temporal",
        metavar="HOST:PORT",
        help="also queue again the open batches Temporal lost (a restarted server)",
    )
    status.add_argument("--namespace", default="default", help="Temporal namespace (default)")
    status.add_argument("--task-queue", default="payrun", help="task queue (default payrun)")
    status.add_argument(
        "--manifest", type=file_path, metavar="MANIFEST.toml", help="only this manifest's batches"
    )
    status.add_argument(
        "--since",
        type=_since,
        metavar="WHEN",
        help="only batches submitted at or after WHEN (YYYY-MM-DD, or a time with its zone)",
    )
    status.add_argument(
        "--state",
        type=_states,
        metavar="STATE[,STATE]",
        help="only batches in these states: queued, paying, done, incomplete, refused",
    )
    _add_format(status)


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
        return _status(args, url)
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


def _seconds(text: str) -> float:
    """A number of seconds, more than 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        msg = f"{text!r} is not a number of seconds, more than 0"
        raise argparse.ArgumentTypeError(msg)
    return value


def _key_group(text: str) -> str:
    """--key-group: a name as the manifest's key_group."""
    import re

    from payrun.fleet import KEY_GROUP

    if not re.fullmatch(KEY_GROUP, text):
        msg = f"{text!r} is not a key group name (letters, digits, '_', '-'; at most 64)"
        raise argparse.ArgumentTypeError(msg)
    return text


def _settle_wait(text: str) -> float:
    """--settle-wait: seconds from 0 to a day."""
    try:
        return parse_settle_wait(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--settle-wait ")) from None


def _heartbeat_seconds(given: float | None) -> float:
    """--heartbeat-timeout, else PAYRUN_FLEET_HEARTBEAT_TIMEOUT, else the default."""
    if given is not None:
        return check_heartbeat_timeout(given, source="--heartbeat-timeout")
    from_env = heartbeat_timeout_from_env()
    return DEFAULT_HEARTBEAT_TIMEOUT if from_env is None else from_env


def _submit(args: argparse.Namespace, url: DatabaseURL) -> int:
    from payrun.fleet import SubmitOptions, fleet_exit_code, follow, requeuer, submit

    options = SubmitOptions(
        temporal=args.temporal,
        ledger_url=url,
        namespace=args.namespace,
        task_queue=args.task_queue,
        heartbeat_seconds=_heartbeat_seconds(args.heartbeat_timeout),
        policy=policy_path_from_env(),
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
        batches = await follow(
            url,
            names,
            args.stop,
            give_up_after=args.wait_timeout,
            seen=_progress_printer(),
            requeue=await requeuer(options, names),
        )
        _print_batches(batches, as_json=as_json)
        return fleet_exit_code(batches, interrupted=args.stop.is_set())

    return anyio.run(body)


def _status(args: argparse.Namespace, url: DatabaseURL) -> int:
    from payrun.fleet import FleetStore, load_manifest, overview, select_batches

    names = None
    if args.manifest is not None:
        names = {entry.name for entry in load_manifest(args.manifest)}
    if args.temporal is not None:
        _requeue_lost(args, url, names)
    batches = select_batches(
        FleetStore(url).batches(names=None if names is None else sorted(names)),
        names=names,
        since=args.since,
        states=args.state,
    )
    as_json = args.format == "json"
    filtered = args.manifest is not None or args.since is not None or args.state is not None
    empty = "no batch of this ledger database matches" if filtered else _NO_BATCHES
    _print_batches(batches, as_json=as_json, extra=True, empty=empty)
    if not as_json and batches:
        with reader_may_leave(run=True):
            print(overview(batches, datetime.now(UTC)).line())  # noqa: T201
    return 0


def _requeue_lost(args: argparse.Namespace, url: DatabaseURL, names: set[str] | None) -> None:
    """Queue again the open batches Temporal lost; a line on stderr for each."""
    from payrun.fleet import FleetStore, SubmitOptions, requeuer

    options = SubmitOptions(
        temporal=args.temporal,
        ledger_url=url,
        namespace=args.namespace,
        task_queue=args.task_queue,
        heartbeat_seconds=_heartbeat_seconds(None),
    )
    if names is None:
        names = {b.name for b in FleetStore(url).open_batches(args.task_queue)}

    async def body() -> list[str]:
        return await (await requeuer(options, names))()

    for name in anyio.run(body):
        with reader_may_leave(sys.stderr, run=True):
            print(f"batch {name}: Temporal had lost it; queued again", file=sys.stderr)  # noqa: T201


def _since(text: str) -> datetime:
    """--since: a date (midnight UTC) or a time with its zone."""
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        msg = f"{text!r} is not a date (YYYY-MM-DD) or a time with its zone"
        raise argparse.ArgumentTypeError(msg) from None
    if when.tzinfo is None:
        if len(text.strip()) > len("YYYY-MM-DD"):
            msg = f"{text!r} has no time zone: add one, such as Z or +01:00"
            raise argparse.ArgumentTypeError(msg)
        when = when.replace(tzinfo=UTC)
    return when


def _states(text: str) -> frozenset[str]:
    """--state: one or more of the batch states, comma-separated."""
    given = [part.strip() for part in text.split(",") if part.strip()]
    known = ("queued", "paying", "done", "incomplete", "refused")
    for state in given:
        if state not in known:
            msg = f"{state!r} is not a batch state: {', '.join(known)}"
            raise argparse.ArgumentTypeError(msg)
    if not given:
        msg = f"name one or more states: {', '.join(known)}"
        raise argparse.ArgumentTypeError(msg)
    return frozenset(given)


def _progress_printer() -> Callable[[list[Any]], None] | None:
    """On a terminal, the overview line on stderr every ``_PROGRESS_SECONDS``; else None."""
    if not sys.stderr.isatty():
        return None
    from payrun.fleet import overview

    last = [-math.inf]

    def show(batches: list[Any]) -> None:
        now = time.monotonic()
        if now - last[0] >= _PROGRESS_SECONDS:
            last[0] = now
            with reader_may_leave(sys.stderr, run=True):
                print(overview(batches, datetime.now(UTC)).line(), file=sys.stderr)  # noqa: T201

    return show


def _batches(url: DatabaseURL, names: list[str]) -> list[Any]:
    from payrun.fleet import FleetStore

    return FleetStore(url).batches(names)


def _worker(args: argparse.Namespace, url: DatabaseURL) -> int:
    from payrun.fleet import WorkerOptions, run_worker

    if not 1 <= args.max_batches <= 500:  # noqa: PLR2004 - a sanity bound
        msg = "--max-batches is a number from 1 to 500"
        raise ConfigError(msg)
    processes = _processes(args.processes, args.max_batches)
    settle_wait = args.settle_wait
    if settle_wait is None:
        settle_wait = settle_wait_from_env()
    options = WorkerOptions(
        temporal=args.temporal,
        namespace=args.namespace,
        task_queue=args.task_queue,
        ledger_url=url,
        keys=Path(args.keys),
        max_batches=args.max_batches,
        settle_wait=DEFAULT_SETTLE_WAIT if settle_wait is None else settle_wait,
        heartbeat_seconds=_heartbeat_seconds(None),
        say=_say,
        key_group=args.key_group,
        processes=processes,
        supervised=args.child_process,
    )
    if processes > 1:
        return _supervise(args, options)
    if args.child_process:
        # Its parent's words are its only stops (also set before the imports, __main__)
        ignore_stop_signals()
        listen_to_parent(args.stop)

    def ready(identity: str) -> None:
        with reader_may_leave(sys.stderr, run=True):
            print(  # noqa: T201 - the worker's one line of life
                f"worker {identity} polls task queue {options.polled_queue} at {options.temporal}",
                file=sys.stderr,
            )

    anyio.run(lambda: run_worker(options, args.stop, ready))
    with reader_may_leave(sys.stderr, run=True):
        print("worker stopped: its batches were recorded and handed back", file=sys.stderr)  # noqa: T201
    return 0


def _processes(given: int | None, max_batches: int) -> int:
    """The worker's processes: ``--processes``, else the cores it may use; never more than
    ``--max-batches``, which they share."""
    if given is None:
        return min(default_processes(), max_batches)
    if not 1 <= given <= 64:  # noqa: PLR2004 - a sanity bound
        msg = "--processes is a number from 1 to 64"
        raise ConfigError(msg)
    if given > max_batches:
        msg = (
            f"--processes {given} is more than --max-batches {max_batches}: the processes"
            " share the batches paid at once, each at least one; lower --processes or"
            " raise --max-batches"
        )
        raise ConfigError(msg)
    return given


def _supervise(args: argparse.Namespace, options: Any) -> int:
    """``--processes N``: the start checked once for all N, then N workers supervised."""
    from payrun.fleet import check_worker_start

    check_worker_start(options)
    commands = [
        child_command(args.argv, share)
        for share in split_batches(options.max_batches, options.processes)
    ]
    # The ledger's URL (its password) in the children's environment, not in their words
    env = environ_with_ledger_url(options.ledger_url)
    code = supervise(commands, args.stop, _say, env)
    if code == 0:
        _say(
            f"worker stopped: its {options.processes} processes recorded and handed back"
            " their batches"
        )
    return code


def _say(line: str) -> None:
    """The worker's log: one line on stderr, redacted."""
    with reader_may_leave(sys.stderr, run=True):
        print(redact(line), file=sys.stderr, flush=True)  # noqa: T201


def _print_batches(
    batches: list[Any],
    *,
    as_json: bool,
    extra: bool = False,
    empty: str = _NO_BATCHES,
) -> None:
    """The batches as the contract's JSON object, or a table (one line per batch)."""
    with reader_may_leave(run=True):
        if as_json:
            print(json_text({"batches": [_document(b, extra=extra) for b in batches]}))  # noqa: T201
            return
        if not batches:
            print(empty)  # noqa: T201
            return
        for batch in batches:
            rows = ", ".join(f"{count} {status}" for status, count in sorted(batch.rows.items()))
            worker = f" on {batch.worker}" if batch.worker and batch.state == "paying" else ""
            print(f"{batch.name}: {batch.state}{worker} ({batch.lane}): {rows or 'no rows'}")  # noqa: T201
            if batch.message and batch.state != "done":
                print(f"  {redact(batch.message)}")  # noqa: T201


def _document(batch: Any, *, extra: bool) -> dict[str, Any]:
    """One batch as the contract's object (its status: queued, paying, done, incomplete,
    refused)."""
    document: dict[str, Any] = {
        "name": batch.name,
        "file": batch.file,
        "status": batch.state,
        "rows": dict(sorted(batch.rows.items())),
    }
    if extra:
        document["lane"] = batch.lane
        document["state"] = batch.state
        document["worker"] = batch.worker if batch.state == "paying" else None
    return document
