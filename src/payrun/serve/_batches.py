"""Uploaded batches: stored under the ledger dir with a server-chosen name, and checked.

An upload becomes ``DIR/batches/<token>/batch.csv`` (or ``.xlsx``): the token is random
and the suffix one of two fixed words, so nothing a user sends becomes a path. ``check``
reads and validates it exactly as ``payrun validate`` does (the same caps) and keeps the
verdict (``verdict.json``) beside it; its ledger is ``batch.csv.ledger.sqlite`` beside it,
as a run's default. ``index_plan``/``plan_batch`` map a plan id to its batch. Raises
``BatchFileError``/``ConfigError`` (exit 2 words shown on the page).
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from payrun.config import DEFAULT_MAX_ROWS, ValidationOptions
from payrun.errors import BatchFileError

__all__ = [
    "MAX_UPLOAD_BYTES",
    "StoredBatch",
    "all_plans",
    "find_batch",
    "index_plan",
    "plan_batch",
    "store_upload",
]

MAX_UPLOAD_BYTES = 64 * 1_048_576
"""Largest upload taken: a million-row CSV (the CLI's row cap) is about this size."""
_SUFFIXES = (".csv", ".xlsx")
_TOKEN = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True, slots=True)
class StoredBatch:
    """An uploaded batch: its folder, file, original name (shown, never used) and ledger."""

    folder: Path
    path: Path
    shown_name: str

    @property
    def token(self) -> str:
        """The batch's server-chosen name (in its URL)."""
        return self.folder.name

    @property
    def ledger(self) -> Path:
        """The batch's ledger (a run's default, beside the file)."""
        from payrun.ledger import default_ledger_path

        return default_ledger_path(self.path)

    @property
    def runs(self) -> Path:
        """Where the runs' output, pid files and reports go."""
        return self.folder / "runs"

    def verdict(self) -> dict[str, Any]:
        """The verdict ``check`` kept (``payrun validate --format json``'s object)."""
        data: dict[str, Any] = json.loads((self.folder / "verdict.json").read_text("utf-8"))
        return data


def _batches(root: Path) -> Path:
    return root / "batches"


def store_upload(root: Path, filename: str, data: bytes) -> StoredBatch:
    """Keep ``data`` under a new random name and check it; ``BatchFileError`` for a
    file that is neither .csv nor .xlsx (nothing kept)."""
    suffix = Path(filename).suffix.lower()
    if suffix not in _SUFFIXES:
        msg = f"{filename or 'the file'} is neither a .csv nor an .xlsx file: save it as one"
        raise BatchFileError(msg, path=Path(filename or "batch"))
    folder = _batches(root) / secrets.token_hex(16)
    folder.mkdir(parents=True, mode=0o700)
    path = folder / f"batch{_SUFFIXES[_SUFFIXES.index(suffix)]}"
    path.write_bytes(data)
    (folder / "name.txt").write_text(filename, encoding="utf-8")
    stored = StoredBatch(folder, path, filename)
    _check(stored)
    return stored


def _check(stored: StoredBatch) -> None:
    """Validate as ``payrun validate`` does; keep the verdict (a file error as its one line)."""
    from payrun.intake import read_batch
    from payrun.report import file_error_document, validation_document
    from payrun.validation import validate_batch

    options = ValidationOptions()
    try:
        with read_batch(stored.path, max_rows=DEFAULT_MAX_ROWS) as batch:
            document = validation_document(validate_batch(batch, options))
    except BatchFileError as error:
        document = file_error_document(str(error))
        document["file_error"] = True
    (stored.folder / "verdict.json").write_text(json.dumps(document), encoding="utf-8")


def find_batch(root: Path, token: str) -> StoredBatch | None:
    """The batch named ``token`` (None when there is none: the token is looked up among the
    folders, never joined to a path)."""
    if not _TOKEN.fullmatch(token):
        return None
    folders = {p.name: p for p in _list(_batches(root))}
    folder = folders.get(token)
    if folder is None:
        return None
    path = next(folder / f"batch{s}" for s in _SUFFIXES if (folder / f"batch{s}").exists())
    shown = (folder / "name.txt").read_text(encoding="utf-8")
    return StoredBatch(folder, path, shown)


def _list(folder: Path) -> Iterator[Path]:
    return folder.iterdir() if folder.is_dir() else iter(())


def index_plan(root: Path, plan_id: str, stored: StoredBatch) -> None:
    """Remember which batch ``plan_id`` (made by the server) belongs to."""
    index = root / "plans"
    index.mkdir(exist_ok=True, mode=0o700)
    (index / plan_id).write_text(stored.token, encoding="ascii")


def plan_batch(root: Path, plan_id: str) -> StoredBatch | None:
    """The batch of plan ``plan_id`` (None: not a plan this server made)."""
    known = {p.name: p for p in _list(root / "plans")}
    entry = known.get(plan_id)
    return None if entry is None else find_batch(root, entry.read_text(encoding="ascii"))


def all_plans(root: Path) -> list[tuple[str, StoredBatch]]:
    """Every plan this server made and its batch, newest first."""
    entries = sorted(_list(root / "plans"), key=lambda p: p.stat().st_mtime, reverse=True)
    found = [(p.name, find_batch(root, p.read_text(encoding="ascii"))) for p in entries]
    return [(plan_id, stored) for plan_id, stored in found if stored is not None]
