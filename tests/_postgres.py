"""A throwaway PostgreSQL server for the tests (and the benchmark): initdb, pg_ctl, removed.

The cluster lives in a new folder under the system's temporary folder, listens on a free
loopback port (and a Unix socket in that folder), and its one user ``payrun`` signs in with
a password over TCP, so a URL with a password is what the tests use. initdb refuses to run
as root: as root the server's programs run as the ``postgres`` user (Debian's package makes
it). ``find_binaries`` says why there is no server when none can be had.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Cluster", "find_binaries", "start_cluster", "stop_cluster", "throwaway_cluster"]

_DEBIAN = Path("/usr/lib/postgresql")
_USER = "payrun"


@dataclass(frozen=True, slots=True)
class Cluster:
    """A running throwaway server: its URL (with the password) and its folder."""

    url: str
    password: str
    port: int
    folder: Path

    def url_for(self, database: str) -> str:
        """The URL of another database on the same server."""
        return self.url.rsplit("/", 1)[0] + f"/{database}"


def find_binaries() -> tuple[Path | None, str]:
    """The folder holding initdb and pg_ctl, or None and why not."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent, ""
    versions = sorted(
        (p for p in _DEBIAN.glob("*/bin") if (p / "initdb").exists()),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    if versions:
        return versions[-1], ""
    return None, (
        "no PostgreSQL server programs here (initdb, pg_ctl): apt-get install postgresql"
        " (.ci/run does)"
    )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass(frozen=True, slots=True)
class _Account:
    """Who runs the server's programs: ourselves (all None), or ``postgres`` when root."""

    user: int | None = None
    group: int | None = None

    def run(self, args: list[str]) -> None:
        """Run one of the server's programs as this account; fail with what it printed."""
        done = subprocess.run(
            args,
            capture_output=True,
            text=True,
            env={**os.environ, "LC_ALL": "C", "LANG": "C"},
            timeout=120,
            user=self.user,
            group=self.group,
            extra_groups=None if self.user is None else [],
            check=False,
        )
        if done.returncode:
            msg = f"{args[0]} failed ({done.returncode}): {done.stdout}{done.stderr}"
            raise RuntimeError(msg)

    def own(self, path: Path) -> None:
        """Give ``path`` to this account."""
        if self.user is not None and self.group is not None:
            os.chown(path, self.user, self.group)


def _account() -> _Account:
    if os.geteuid() != 0:
        return _Account()
    try:
        account = pwd.getpwnam("postgres")
    except KeyError:
        msg = "running as root and there is no postgres user to run the server as"
        raise RuntimeError(msg) from None
    return _Account(account.pw_uid, account.pw_gid)


@contextlib.contextmanager
def throwaway_cluster(*, durable: bool = False) -> Iterator[Cluster]:
    """Start a new PostgreSQL server for the block; stop it and remove its folder after.

    ``durable`` keeps PostgreSQL's own fsync (the benchmark); the tests turn it off, since
    they kill payrun, never the server.
    """
    folder = Path(tempfile.mkdtemp(prefix="payrun-pg-"))
    try:
        yield start_cluster(folder, durable=durable)
    finally:
        stop_cluster(folder)


def start_cluster(folder: Path, *, durable: bool = False, connections: int = 200) -> Cluster:
    """Make and start a new server in the empty ``folder`` (``stop_cluster`` ends it);
    ``connections``: the most sessions it takes at once."""
    binaries, why = find_binaries()
    if binaries is None:
        raise RuntimeError(why)
    account = _account()
    password = secrets.token_urlsafe(12)
    data = folder / "data"
    account.own(folder)
    (folder / "pw").write_text(password)
    account.own(folder / "pw")
    account.run(
        [
            str(binaries / "initdb"),
            f"--pgdata={data}",
            f"--username={_USER}",
            f"--pwfile={folder / 'pw'}",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        ]
    )
    port = _free_port()
    settings = [
        "-c listen_addresses=127.0.0.1",
        f"-c port={port}",
        f"-c unix_socket_directories={folder}",
        f"-c max_connections={connections}",
    ]
    if not durable:
        settings += ["-c fsync=off", "-c full_page_writes=off"]
    account.run(
        [str(binaries / "pg_ctl"), f"--pgdata={data}", f"--log={folder / 'server.log'}"]
        + ["--wait", "--timeout=60", f"--options={' '.join(settings)}", "start"]
    )
    url = f"postgresql://{_USER}:{password}@127.0.0.1:{port}/postgres"
    return Cluster(url=url, password=password, port=port, folder=folder)


def stop_cluster(folder: Path) -> None:
    """Stop the server made in ``folder`` (if it runs: a start may have been interrupted)
    and remove the folder."""
    binaries, _ = find_binaries()
    try:
        if binaries is not None and (folder / "data" / "postmaster.pid").exists():
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                _account().run(
                    [str(binaries / "pg_ctl"), f"--pgdata={folder / 'data'}"]
                    + ["--mode=immediate", "--wait", "stop"]
                )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def server_down(cluster: Cluster) -> Iterator[None]:
    """Stop ``cluster``'s server (fast: sessions are ended) for the block, then start it
    again on the same port: a database blip."""
    binaries, why = find_binaries()
    if binaries is None:
        raise RuntimeError(why)
    account = _account()
    data, pg_ctl = cluster.folder / "data", str(binaries / "pg_ctl")
    account.run([pg_ctl, f"--pgdata={data}", "--mode=fast", "--wait", "stop"])
    try:
        yield
    finally:
        settings = [
            "-c listen_addresses=127.0.0.1",
            f"-c port={cluster.port}",
            f"-c unix_socket_directories={cluster.folder}",
            "-c max_connections=200",
            "-c fsync=off",
        ]
        account.run(
            [pg_ctl, f"--pgdata={data}", f"--log={cluster.folder / 'server.log'}", "--wait"]
            + ["--timeout=60", f"--options={' '.join(settings)}", "start"]
        )
