"""What a fleet's route keeps of a key's organization: found again only for the same key at
the same bank, through an index; a malformed kept value read as nothing known; and the
table of an older payrun read by ``fleet status``. Real PostgreSQL (and Temporal)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest

from _fleet_helpers import new_database, pay_two_batches_of_one_key
from _postgres import Cluster
from payrun.bank import Organization
from payrun.cli import main
from payrun.config import DatabaseURL, Secret
from payrun.fleet import BatchEntry, FleetStore
from payrun.run import KnownOrganization
from payrun.sandbox import serve_in_thread

BANK = "http://127.0.0.1:9"
KNOWN = KnownOrganization(
    "/v0/organizations/og-1",
    Organization(*(f"/v0/organizations/og-1/{n}" for n in range(10))),
)


@pytest.fixture
def url(postgres: Cluster) -> str:
    """A new database for the test on the session's PostgreSQL server."""
    return new_database(postgres.url)


def _entry(name: str, key: str = "org0") -> BatchEntry:
    """A batch ``name`` of the key named ``key`` at ``BANK``."""
    return BatchEntry(
        name=name,
        file=Path(f"{name}.csv").resolve(),
        base_url=BANK,
        key=key,
        source_account=None,
        expect_count=None,
        expect_total=None,
        cutoff=datetime(2030, 1, 1, tzinfo=UTC),
    )


def _routed(url: str, key: Secret) -> FleetStore:
    """A store whose batch b1 (key name org0) was routed with the API key ``key``."""
    store = FleetStore(DatabaseURL(Secret(url)))
    store.ensure_schema()
    store.register(_entry("b1"), {})
    store.set_lane("b1", "lane-1", f"Org@{BANK}", KNOWN, base_url=BANK, key=key)
    return store


def test_a_kept_organization_is_found_only_for_the_same_key_at_the_same_bank(url: str) -> None:
    """Another key of the same name (another key group's) finds nothing; the same key finds it
    at its bank in any spelling; the key itself is not kept, and the lookup has an index."""
    store = _routed(url, Secret("key-of-north"))
    assert store.organization_of(BANK, Secret("key-of-south")) is None
    assert store.organization_of("HTTP://127.0.0.1:9/", Secret("key-of-north")) == KNOWN
    assert store.organization_of("http://127.0.0.1:8", Secret("key-of-north")) is None
    with psycopg.connect(url, autocommit=True) as db:
        table = db.execute("SELECT row_to_json(f)::text FROM payrun_fleet f").fetchall()
        indexes = db.execute(
            "SELECT indexdef FROM pg_indexes WHERE tablename = 'payrun_fleet'"
        ).fetchall()
    assert "key-of-north" not in str(table)
    assert any("organization_key" in index for (index,) in indexes), indexes


@pytest.mark.parametrize("kept", ["not json", '{"at": 5}', "[1]", '{"at": "/v0/x"}'])
def test_a_malformed_kept_organization_reads_as_nothing_known(url: str, kept: str) -> None:
    """A malformed kept organization: the lookup finds nothing, the batch knows nothing."""
    store = _routed(url, Secret("key"))
    with psycopg.connect(url, autocommit=True) as db:
        db.execute("UPDATE payrun_fleet SET organization = %s", (kept,))
    assert store.organization_of(BANK, Secret("key")) is None
    batch = store.batch("b1")
    assert batch is not None
    assert batch.known is None


def test_status_shows_a_batch_whose_kept_organization_is_malformed(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``fleet status`` shows a batch whose kept organization is not JSON, no traceback."""
    store = FleetStore(DatabaseURL(Secret(url)))
    store.ensure_schema()
    store.register(_entry("b1"), {})
    with psycopg.connect(url, autocommit=True) as db:
        db.execute("UPDATE payrun_fleet SET organization = 'not json'")
    code = main(["fleet", "status", "--ledger-url", url, "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert '"b1"' in out, out


def test_status_reads_the_table_of_an_older_payrun(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``fleet status`` on a table without the later columns (no new worker or submit ran)."""
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(
            "CREATE TABLE payrun_fleet (name text PRIMARY KEY, file text NOT NULL,"
            " base_url text NOT NULL, key_name text NOT NULL, cutoff text, options text NOT NULL,"
            " state text NOT NULL, worker text, message text, submitted_at text NOT NULL,"
            " ended_at text, task_queue text, lane_id text, lane_label text, key_group text)"
        )
        db.execute(
            "INSERT INTO payrun_fleet (name, file, base_url, key_name, options, state,"
            " submitted_at) VALUES ('old', 'old.csv', %s, 'org0', '{}', 'done', %s)",
            (BANK, datetime.now(UTC).isoformat()),
        )
    code = main(["fleet", "status", "--ledger-url", url])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "old" in out, out
    assert "Traceback" not in err, err


@pytest.mark.fleet
def test_a_route_after_a_malformed_kept_organization_asks_the_bank_and_pays(
    tmp_path: Path, url: str, temporal: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key's kept organization made malformed: its next batch is routed as a first one
    (the index, then the organization) and paid."""

    def malformed() -> None:
        with psycopg.connect(url, autocommit=True) as db:
            db.execute("UPDATE payrun_fleet SET organization = 'not json'")

    with serve_in_thread(latency_ms=5) as bank:
        where = (tmp_path, url, temporal)
        seen = pay_two_batches_of_one_key(where, bank, monkeypatch, rows=5, before_second=malformed)
    assert seen[:2] == [("index", 0), ("organization", 1)], seen
