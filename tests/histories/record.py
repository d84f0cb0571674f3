"""Record the fleet's workflow histories for the replay test (tests/test_fleet_replay.py).

Run from the project root with the code whose histories to keep on the path:

    python tests/histories/record.py tests/histories/NAME [KEY_GROUP]

It pays one small batch through a Temporal dev server, PostgreSQL, a sandbox bank and a
real worker (with ``KEY_GROUP``: the batch of that key group, on a worker of that group),
then writes each workflow's history as ``NAME-<type>.json``. Keep the files
of every release: a change to a workflow must still replay them (docs/fleet.md).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))

from _fleet_helpers import (  # noqa: E402
    new_database,
    start_worker,
    submit,
    temporal_dev_server,
    write_keys,
    write_manifest,
)
from _postgres import throwaway_cluster  # noqa: E402
from _run_helpers import make_rows, write_batch  # noqa: E402
from payrun.sandbox import serve_in_thread  # noqa: E402


async def _save(temporal: str, stem: Path) -> None:
    from temporalio.client import Client

    client = await Client.connect(temporal)
    async for execution in client.list_workflows():
        history = await client.get_workflow_handle(execution.id).fetch_history()
        out = stem.parent / f"{stem.name}-{execution.workflow_type}.json"
        out.write_text(history.to_json())
        print(f"wrote {out}")  # noqa: T201


def main() -> None:
    """Pay a batch of 5 rows with a cut-off, then write the histories."""
    stem = Path(sys.argv[1])
    group = sys.argv[2] if len(sys.argv) > 2 else None  # noqa: PLR2004 - the optional argument
    with (
        tempfile.TemporaryDirectory() as folder,
        throwaway_cluster() as cluster,
        temporal_dev_server() as temporal,
        serve_in_thread() as bank,
    ):
        work = Path(folder)
        url = new_database(cluster.url)
        keys = write_keys(work / "keys", [bank])
        write_batch(work / "b.csv", make_rows(0, 5, tag="H"))
        entry: dict[str, object] = {"name": "history-2026-11", "file": "b.csv"}
        entry |= {"base_url": bank.base_url}
        entry |= {"key": "org0", "confirm_payees": False, "cutoff": "2099-01-01T00:00:00Z"}
        extra: tuple[str, ...] = ()
        if group is not None:
            entry["key_group"] = group
            extra = ("--key-group", group)
        manifest = write_manifest(work / "m.toml", [entry])
        worker = start_worker(temporal, url, keys, "payrun", work / "w.log", extra=extra)
        try:
            done = submit(temporal, url, manifest, "payrun", "--wait")
            if done.returncode != 0:
                msg = f"{done.stdout}\n{done.stderr}\n{worker.output()}"
                raise SystemExit(msg)
            asyncio.run(_save(temporal, stem))
        finally:
            worker.kill()
            worker.process.wait(30)


if __name__ == "__main__":
    main()
