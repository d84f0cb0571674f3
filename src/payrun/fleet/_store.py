"""The fleet's own table in the ledger database: which batches were submitted, to which lane,
and where each stands (queued, paying on which worker, done, incomplete, refused).

Input: the ledger database's URL (the same database and connection settings as the
PostgreSQL ledger, ``payrun.ledger.connect_database``). Output: ``FleetBatch`` records,
with each batch's rows counted by status from the ledger's own rows. The batch's rows
live in the ledger's tables (``payrun_batches``/``payrun_rows``, written by the same code
as ``payrun run``); this table holds only what Temporal must not: the bank's address,
the key's name and the cut-off, looked up by the batch's name, and what a route found of
the key's organization (with the bank's address and a digest of the key it was found for,
never the key: ``organization_of``). psycopg's errors become
one-line ``LedgerError`` messages with the URL's password masked, by the ledger's own
translation (``payrun.ledger.database_errors``).
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from payrun._models import utc_now
from payrun._redaction import redact
from payrun.config import DatabaseURL, Secret, redact_url
from payrun.fleet._address import normalized_base_url

if TYPE_CHECKING:
    import psycopg

    from payrun.fleet._manifest import BatchEntry
    from payrun.run import KnownOrganization

__all__ = ["FINAL_STATES", "FleetBatch", "FleetStore", "worker_identity"]

FINAL_STATES = frozenset({"done", "incomplete", "refused"})
"""States a batch ends in (the contract's ``status``); before that: queued, paying."""

_KEPT_FRESH_SECONDS = 5.0
"""A kept connection used this recently is used again as it is; one idle longer is asked
an empty query first (the server may have restarted meanwhile)."""
_LOCK_SPACE = 0x70617972
# Another second key than the ledger's schema lock (0) and its batches' ids (1 and up)
_SCHEMA_LOCK = -1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS payrun_fleet (
    name text PRIMARY KEY,
    file text NOT NULL,
    base_url text NOT NULL,
    key_name text NOT NULL,
    cutoff text,
    options text NOT NULL,
    state text NOT NULL,
    worker text,
    message text,
    submitted_at text NOT NULL,
    ended_at text
);
"""
_LATER_COLUMNS = (
    "task_queue",
    "lane_id",
    "lane_label",
    "key_group",
    "organization",
    "organization_bank",
    "organization_key",
)
"""Columns added to the table since its first version (all text)."""
_READ_LATER_COLUMNS = _LATER_COLUMNS[:5]
"""The later columns a ``FleetBatch`` is read from."""
_INDEXES = (
    # A route's lookup of what an earlier route of its key at its bank found
    "CREATE INDEX IF NOT EXISTS payrun_fleet_organization ON payrun_fleet"
    " (organization_bank, organization_key, submitted_at) WHERE organization IS NOT NULL",
)
"""Indexes added with the later columns (made in the same transaction: a table with every
later column has them)."""
_KEY_DIGEST_CHARS = 32
"""How much of the SHA-256 of an API key the table keeps beside a key's organization."""
_COLUMNS = (
    "SELECT to_regclass('payrun_fleet') IS NOT NULL, ARRAY(SELECT attname::text FROM"
    " pg_attribute WHERE attrelid = to_regclass('payrun_fleet') AND attnum > 0"
    " AND NOT attisdropped)"
)
_COUNTS = """
SELECT b.name, r.status, count(*) FROM payrun_rows r JOIN payrun_batches b ON b.id = r.batch_id
WHERE b.name = ANY(%s) GROUP BY b.name, r.status
"""


def worker_identity() -> str:
    """How status names a worker: its host and process id."""
    import os

    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(slots=True)
class FleetBatch:
    """One submitted batch: what the manifest said, where it stands, its rows by status."""

    name: str
    file: str
    base_url: str
    key: str
    cutoff: datetime | None
    options: dict[str, Any]
    state: str
    worker: str | None
    message: str | None
    submitted_at: datetime | None = None
    task_queue: str | None = None
    # The lane's workflow id and name once a worker found the key's organization
    lane_id: str | None = None
    lane_label: str | None = None
    # The key group whose workers pay it (None: the deployment's task queue's)
    key_group: str | None = None
    # What the bank said of the key's organization when the batch was routed (its fields
    # by name; None before, or not readable): the run reads it again, at once with its
    # accounts (``known``)
    organization: dict[str, str] | None = None
    rows: dict[str, int] = field(default_factory=dict)

    @property
    def lane(self) -> str:
        """The organization lane: the organization at its bank once known (before that,
        the key name at the bank's base URL)."""
        return self.lane_label or f"{self.key}@{redact_url(self.base_url)}"

    @property
    def final(self) -> bool:
        """True once the batch ended (done, incomplete or refused)."""
        return self.state in FINAL_STATES

    @property
    def known(self) -> KnownOrganization | None:
        """What the batch's route found of the key's organization (None: nothing)."""
        return _known_organization(self.organization)


def _key_digest(key: Secret) -> str:
    """A fingerprint of an API key that tells keys apart and does not reveal them: the
    start of its SHA-256, in hex (kept beside what a route found of its organization)."""
    return hashlib.sha256(key.reveal().encode()).hexdigest()[:_KEY_DIGEST_CHARS]


def _stored_organization(known: KnownOrganization) -> dict[str, str] | None:
    """What the fleet's table keeps of ``known`` (``FleetBatch.organization``): the URL the
    index named (``at``) and the organization's fields by name; None (nothing kept) when
    one is not text."""
    import dataclasses

    fields = {"at": known.at, **dataclasses.asdict(known.organization)}
    return fields if all(isinstance(value, str) for value in fields.values()) else None


def _known_organization(stored: Mapping[str, str] | None) -> KnownOrganization | None:
    """What a route found of a key's organization, as the fleet's table keeps it (None:
    nothing, or not readable: the bank is asked as ``payrun run`` asks it)."""
    if not isinstance(stored, Mapping):
        return None
    from payrun.bank import Organization
    from payrun.run import KnownOrganization

    fields = dict(stored)
    at = fields.pop("at", None)
    if not isinstance(at, str) or not all(isinstance(v, str) for v in fields.values()):
        return None
    try:
        return KnownOrganization(at, Organization(**fields))
    except TypeError:
        # A field missing or unknown (a table written by another version)
        return None


def _organization_fields(text: object) -> dict[str, str] | None:
    """The organization's fields in the table's ``organization`` column (JSON text); None
    when there is none or it is not an object of text values (a malformed value)."""
    if not isinstance(text, str):
        return None
    try:
        found = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(found, dict):
        return None
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in found.items()):
        return None
    return found


class FleetStore:
    """The ``payrun_fleet`` table of one ledger database, one short connection per call;
    with ``keep`` (a worker's: several calls per batch), one connection kept for every
    call, from any thread, one call at a time (``close`` it when done)."""

    def __init__(self, url: DatabaseURL, *, keep: bool = False) -> None:
        self.url = url
        self._keep = keep
        self._kept: psycopg.Connection[Any] | None = None
        self._used_at = 0.0
        self._lock = threading.RLock()

    @contextmanager
    def _connection(self, *, readonly: bool = False) -> Iterator[psycopg.Connection[Any]]:
        from payrun.ledger import connect_database, database_errors

        if self._keep:
            with self._lock, database_errors(self.url):
                yield self._kept_connection()
            return
        connection = connect_database(self.url, readonly=readonly)
        try:
            with database_errors(self.url):
                yield connection
        finally:
            connection.close()

    def _kept_connection(self) -> psycopg.Connection[Any]:
        """The kept connection (under the lock), made again when there is none, it failed,
        or it was idle a while and the server no longer answers it (a restart): a call
        fails only when a new connection would have failed too."""
        from payrun.ledger import connect_database

        kept = self._kept
        if kept is not None and (kept.closed or kept.broken or not self._answers(kept)):
            self.close()
            kept = None
        if kept is None:
            kept = self._kept = connect_database(self.url, readonly=False)
        self._used_at = time.monotonic()
        return kept

    def _answers(self, kept: psycopg.Connection[Any]) -> bool:
        """True when the kept connection was used just now, or answers an empty query."""
        import psycopg

        if time.monotonic() - self._used_at < _KEPT_FRESH_SECONDS:
            return True
        try:
            kept.execute("")
        except psycopg.Error:
            return False
        return True

    def close(self) -> None:
        """Close the kept connection, if any, once no call uses it (the next call makes a
        new one)."""
        with self._lock:
            kept, self._kept = self._kept, None
            if kept is not None:
                kept.close()

    def ensure_schema(self) -> None:
        """Create the fleet's table, or add its later columns, when missing (one process at
        a time); a table that has them all is only read (no lock: an ``ALTER TABLE`` would
        wait for, and hold up, every worker reading the table)."""
        with self._connection() as db:
            found = db.execute(_COLUMNS).fetchone()
            if found and found[0] and set(_LATER_COLUMNS) <= set(found[1]):
                return
            with db.transaction():
                db.execute("SELECT pg_advisory_xact_lock(%s, %s)", (_LOCK_SPACE, _SCHEMA_LOCK))
                db.execute(_SCHEMA)
                for column in _LATER_COLUMNS:
                    db.execute(f"ALTER TABLE payrun_fleet ADD COLUMN IF NOT EXISTS {column} text")
                for index in _INDEXES:
                    db.execute(index)

    def free_connections(self) -> tuple[int, int]:
        """The server's connections: how many it allows to ordinary users (those reserved
        for superusers left out) and how many are in use now."""
        with self._connection(readonly=True) as db:
            row = db.execute(
                "SELECT current_setting('max_connections')::int"
                " - current_setting('superuser_reserved_connections')::int,"
                " (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')"
            ).fetchone()
        allowed, used = row if row else (0, 0)
        return int(allowed), int(used)

    def recorded_sha256(self, names: Sequence[str]) -> dict[str, str | None]:
        """The file digest the ledger holds for each of ``names`` it knows (None: no rows)."""
        with self._connection(readonly=True) as db:
            found = db.execute("SELECT to_regclass('payrun_batches') IS NOT NULL").fetchone()
            if not (found and found[0]):
                return {}
            rows = db.execute(
                "SELECT name, file_sha256 FROM payrun_batches WHERE name = ANY(%s)",
                (list(names),),
            ).fetchall()
        return {str(name): sha for name, sha in rows}

    def register(
        self, entry: BatchEntry, options: dict[str, Any], *, task_queue: str = "payrun"
    ) -> None:
        """Record (or record again) a submitted batch as queued, for ``task_queue``."""
        cutoff = None if entry.cutoff is None else entry.cutoff.isoformat()
        with self._connection() as db:
            db.execute(
                "INSERT INTO payrun_fleet (name, file, base_url, key_name, cutoff, options,"
                " state, submitted_at, task_queue, key_group)"
                " VALUES (%s, %s, %s, %s, %s, %s, 'queued', %s, %s, %s)"
                " ON CONFLICT (name) DO UPDATE SET file = EXCLUDED.file,"
                " base_url = EXCLUDED.base_url, key_name = EXCLUDED.key_name,"
                " cutoff = EXCLUDED.cutoff, options = EXCLUDED.options, state = 'queued',"
                " worker = NULL, message = NULL, submitted_at = EXCLUDED.submitted_at,"
                " ended_at = NULL, task_queue = EXCLUDED.task_queue, lane_id = NULL,"
                " lane_label = NULL, key_group = EXCLUDED.key_group, organization = NULL,"
                " organization_bank = NULL, organization_key = NULL",
                (
                    entry.name,
                    str(entry.file),
                    entry.base_url,
                    entry.key,
                    cutoff,
                    json.dumps(options, sort_keys=True),
                    utc_now().isoformat(),
                    task_queue,
                    entry.key_group,
                ),
            )

    def set_lane(
        self,
        name: str,
        lane_id: str,
        label: str,
        known: KnownOrganization | None = None,
        *,
        base_url: str | None = None,
        key: Secret | None = None,
    ) -> None:
        """Record the lane a worker found for the batch (its organization at its bank), and
        what the bank said of that organization to the API key ``key`` (its links: the
        batch's run reads them again, at once with its accounts; a later route of the
        same key at the bank of ``base_url`` too: ``organization_of``). Only a digest of
        the key is kept (``_key_digest``)."""
        fields = None if known is None else _stored_organization(known)
        found = None if fields is None else json.dumps(fields, sort_keys=True)
        bank = None if base_url is None else normalized_base_url(base_url)
        digest = None if key is None else _key_digest(key)
        with self._connection() as db:
            db.execute(
                "UPDATE payrun_fleet SET lane_id = %s, lane_label = %s, organization = %s,"
                " organization_bank = %s, organization_key = %s WHERE name = %s",
                (lane_id, label, found, bank, digest, name),
            )

    def organization_of(self, base_url: str, key: Secret) -> KnownOrganization | None:
        """What the last route of a batch with this API key at this bank (its address in
        any spelling) found of its organization, or None (nothing, or not readable)."""
        with self._connection(readonly=True) as db:
            found = db.execute(
                "SELECT organization FROM payrun_fleet WHERE organization_bank = %s"
                " AND organization_key = %s AND organization IS NOT NULL"
                " ORDER BY submitted_at DESC LIMIT 1",
                (normalized_base_url(base_url), _key_digest(key)),
            ).fetchone()
        return None if found is None else _known_organization(_organization_fields(found[0]))

    def open_batches(self, task_queue: str) -> list[FleetBatch]:
        """The batches of ``task_queue`` that have not ended (rows not counted)."""
        return [
            batch
            for batch in self.batches(count_rows=False)
            if not batch.final and batch.task_queue == task_queue
        ]

    def batch(self, name: str) -> FleetBatch | None:
        """The submitted batch ``name`` (rows not counted), or None."""
        found = self.batches([name], count_rows=False)
        return found[0] if found else None

    def batches(
        self, names: Sequence[str] | None = None, *, count_rows: bool = True
    ) -> list[FleetBatch]:
        """The submitted batches (``names``, or all), by name, with rows by status. A table
        an older payrun made (no new worker or submit since) reads its later columns as
        empty."""
        with self._connection(readonly=True) as db:
            found = db.execute(_COLUMNS).fetchone()
            if not (found and found[0]):
                return []
            later = ", ".join(
                column if column in found[1] else f"NULL AS {column}"
                for column in _READ_LATER_COLUMNS
            )
            select = (
                "SELECT name, file, base_url, key_name, cutoff, options, state, worker,"
                f" message, submitted_at, {later} FROM payrun_fleet"
            )
            if names is None:
                records = db.execute(select + " ORDER BY name").fetchall()
            else:
                records = db.execute(
                    select + " WHERE name = ANY(%s) ORDER BY name", (list(names),)
                ).fetchall()
            batches = [_batch_of(record) for record in records]
            counted = db.execute("SELECT to_regclass('payrun_rows') IS NOT NULL").fetchone()
            if count_rows and batches and counted and counted[0]:
                by_name = {b.name: b for b in batches}
                for name, status, count in db.execute(_COUNTS, ([b.name for b in batches],)):
                    by_name[name].rows[status] = int(count)
        return batches

    def set_state(
        self,
        name: str,
        state: str,
        *,
        worker: str | None = None,
        message: str | None = None,
        unless_final: bool = False,
    ) -> None:
        """Move the batch to ``state`` (a final one records when); ``unless_final`` leaves
        a batch that already ended as it is. The message is stored redacted (no
        configured secret enters the table ``fleet status`` prints)."""
        message = None if message is None else redact(message)
        ended = utc_now().isoformat() if state in FINAL_STATES else None
        guard = " AND state NOT IN ('done', 'incomplete', 'refused')" if unless_final else ""
        with self._connection() as db:
            db.execute(
                "UPDATE payrun_fleet SET state = %s, worker = %s, message = %s, ended_at = %s"
                " WHERE name = %s" + guard,
                (state, worker, message, ended, name),
            )


def _batch_of(record: tuple[Any, ...]) -> FleetBatch:
    name, file, base_url, key, cutoff, options, state, worker, message, submitted = record[:10]
    task_queue, lane_id, lane_label, key_group, organization = record[10:]
    return FleetBatch(
        name=name,
        file=file,
        base_url=base_url,
        key=key,
        cutoff=None if cutoff is None else datetime.fromisoformat(cutoff),
        options=json.loads(options),
        state=state,
        worker=worker,
        message=message,
        submitted_at=datetime.fromisoformat(submitted),
        task_queue=task_queue,
        lane_id=lane_id,
        lane_label=lane_label,
        key_group=key_group,
        organization=_organization_fields(organization),
    )
