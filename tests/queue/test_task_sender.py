"""A task agent (a flight) completes only the task whose agent it is (core/identity.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from qtools import make_queue

from wavewait.core import admission
from wavewait.core.agents import register
from wavewait.core.ids import new_id
from wavewait.core.tasks import enqueue_task, list_tasks

from conftest import until

pytestmark = pytest.mark.anyio

COMPLETE = "wavewait complete --queue q1 {task} --status done --goals g --did forged --for-next-agent n 2>&1"


async def test_a_task_agent_cannot_complete_its_siblings_task(bus, tmp_path):
    q = make_queue(bus, tmp_path)
    await register(bus, "orchestrator")
    mine, other = [
        (await enqueue_task(q, "orchestrator", type="research", inputs={"topic": t}, reason="need it")).id
        for t in ("auth", "db")
    ]
    # as the runner starts a task: the task names its agent, then the agent is spawned
    agent_id = new_id()
    await q.store.update(mine, ("queued",), status="running", attempts=1, agent_id=agent_id)
    script = (
        COMPLETE.format(task='"$1"')
        + '; echo "rc=$?"; '
        + 'WAVEWAIT_TASK_ID="$1" '
        + COMPLETE.format(task="")
        + '; echo "rc=$?"; '
        + COMPLETE.format(task="").replace("forged", "mine")
        + ' >/dev/null; echo "own=$?"'
    )
    flight = await admission.spawn(
        bus,
        "research-agent",
        ["sh", "-c", script, "sh", other],
        env=dict(os.environ, WAVEWAIT_TASK_ID=mine),  # bound to its own task, as the runner does
        agent_id=agent_id,
        parent_id="orchestrator",
    )

    async def ended() -> bool:
        return (await bus.get_agent(flight.id)).finished

    await until(ended, 30, "the task agent to end")
    said = Path((await bus.get_agent(flight.id)).log_path).read_text()
    assert said.count("rc=2") == 2 and "own=0" in said, said
    assert f"task {other} is not the task of flight research-agent ({agent_id})" in said, said
    statuses = {t["id"]: t["status"] for t in (await list_tasks(q))["tasks"]}
    assert statuses == {mine: "done", other: "queued"}
