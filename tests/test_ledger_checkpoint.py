"""An SQLite ledger's write-ahead log is checkpointed off the committing thread: a run's
commits never wait for a checkpoint's syncs (below a backstop), and the log stays bounded."""

from __future__ import annotations

import time
from decimal import Decimal
from pathlib import Path

from payrun._models import PaymentInstruction, RowStatus, RowVerdict
from payrun.ledger import BatchInfo, SQLiteLedger
from payrun.ledger._checkpoint import BACKSTOP_PAGES, CHECKPOINT_BYTES, KEPT_LOG_BYTES

_ROWS = 400


def _verdicts() -> list[RowVerdict]:
    return [
        RowVerdict(
            row=row,
            instruction=PaymentInstruction(
                row=row,
                payee_name=f"Payee {row}",
                sort_code="200000",
                account_number=f"{row:08d}",
                amount=Decimal("10.50"),
                reference="REF",
                source_account="040004 30000001",
            ),
            raw={},
        )
        for row in range(2, _ROWS + 2)
    ]


def _info() -> BatchInfo:
    return BatchInfo(
        file_path="/x.csv", file_sha256="ab" * 32, valid_count=_ROWS, valid_total=Decimal(0)
    )


def _log_bytes(path: Path) -> int:
    log = path.with_name(path.name + "-wal")
    return log.stat().st_size if log.exists() else 0


def _fill_log(ledger: SQLiteLedger, path: Path) -> int:
    """Commit small row changes, one commit at a time, until the log holds what SQLite
    would have checkpointed in the committing thread; how many commits that took."""
    commits = 0
    while _log_bytes(path) < CHECKPOINT_BYTES:
        number = 2 + commits % _ROWS
        ledger.update_each([(number, {"error": f"attempt {commits} " + "x" * 900})])
        commits += 1
    return commits


def test_a_full_log_is_checkpointed_by_the_ledger_s_own_thread(tmp_path: Path) -> None:
    """A log grown to SQLite's checkpoint size is checkpointed without another commit, and
    the next commit starts it afresh (cut to its kept size)."""
    path = tmp_path / "batch.ledger.sqlite"
    ledger = SQLiteLedger.open(path)
    try:
        ledger.start(_info(), _verdicts())
        _fill_log(ledger, path)
        deadline = time.monotonic() + 20
        while True:
            # A commit after a whole-log checkpoint starts the log afresh
            ledger.update_each([(2, {"status": RowStatus.PENDING})])
            if _log_bytes(path) <= KEPT_LOG_BYTES + 64 * 1024:
                break
            assert time.monotonic() < deadline, f"log still {_log_bytes(path)} bytes"
            time.sleep(0.05)
        assert [row.status for row in ledger.rows()][:1] == [RowStatus.PENDING]
    finally:
        ledger.close()
    # Closed: the last connection took the log into the file, as always
    assert not path.with_name(path.name + "-wal").exists()
    reopened = SQLiteLedger.open(path, readonly=True)
    try:
        assert len(reopened.rows()) == _ROWS
        assert (reopened.rows()[0].error or "").startswith("attempt ")
    finally:
        reopened.close()


def test_the_committing_connection_checkpoints_only_past_the_backstop(tmp_path: Path) -> None:
    """The writer's own automatic checkpoint waits for twice SQLite's usual log size; a
    reader's connection keeps SQLite's default."""
    path = tmp_path / "batch.ledger.sqlite"
    with SQLiteLedger.open(path) as ledger:
        ledger.start(_info(), _verdicts())
        assert ledger._db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == BACKSTOP_PAGES
        with SQLiteLedger.open(path, readonly=True) as reader:
            assert reader._db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 1000
