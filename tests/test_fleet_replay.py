"""The fleet's workflows replay every recorded history (tests/histories): a deploy that
changes a workflow must not break the lanes that run while it rolls out (docs/fleet.md,
"Changing the workflows"). No server: the SDK's Replayer runs the code against each file.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from payrun.fleet._workflow import LaneWorkflow, RouteWorkflow

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


def test_there_are_histories_of_each_workflow() -> None:
    """Histories of the first lane workflow and of the route workflow are kept."""
    names = {path.name for path in HISTORIES}
    assert "v1-payrun-lane.json" in names
    assert any(name.endswith("-payrun-route.json") for name in names)


@pytest.mark.parametrize("path", HISTORIES, ids=lambda path: path.stem)
async def test_a_recorded_history_replays(path: Path) -> None:
    """Today's workflow code replays the recorded history without a nondeterminism error."""
    text = path.read_text()  # noqa: ASYNC240 - a small file, read once before the replay
    replayer = Replayer(
        workflows=[LaneWorkflow, RouteWorkflow],
        workflow_runner=SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules("payrun")
        ),
    )
    history = WorkflowHistory.from_json(path.stem, text)
    await replayer.replay_workflow(history)
