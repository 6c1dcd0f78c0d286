"""Task types that name an agent preset: the runner starts the preset's agent (a coding
flight, in its own worktree) on the task's prompt, with no --agent-command. The agent here
is a real process standing in for an agent CLI (preset_agent.py); the real CLIs are in
tests/hosts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest

from wavewait.core.errors import BadInput
from wavewait.core.runner import Runner
from wavewait.core.tasks import Limits, TaskQueue, enqueue_task, parse_task_types

from conftest import env_for, until
from gittools import git, make_repo, status

pytestmark = [pytest.mark.anyio, pytest.mark.one_bus]
HERE = Path(__file__).parent

TYPES = """
[types.step]
description = "A step, done by a preset's agent"
prompt = "Do step {name} ({mode})."
preset = "stand-in"
"""


def presets_file(tmp_path: Path) -> Path:
    path = tmp_path / "presets.toml"
    args = [str(HERE / "preset_agent.py"), "{mcp}", "--", "{prompt}"]
    path.write_text(
        f"[presets.stand-in]\nprogram = {json.dumps(sys.executable)}\nargs = {json.dumps(args)}\n"
        'events = "none"\nmcp = "claude"\nworktree = true\n'
    )
    return path


async def test_a_task_type_that_names_a_preset_runs_its_agent_in_a_worktree_of_its_own(bus, tmp_path, monkeypatch):
    repo = make_repo(tmp_path / "project", monkeypatch)
    monkeypatch.chdir(repo)
    types = tmp_path / "task-types.toml"
    types.write_text(TYPES)
    q = TaskQueue.open(bus, "q1", parse_task_types(TYPES), Limits())
    ids = {}
    for name in ("a", "b"):
        r = await enqueue_task(q, "orchestrator", type="step", inputs={"name": name, "mode": "ok"}, reason=name)
        ids[name] = r.id
    (tmp_path / "prompts").mkdir()
    env = env_for(bus, QTEST_LOG=str(tmp_path / "agents.log"), QTEST_DIR=str(tmp_path / "prompts"))
    runner = Runner(q, None, task_types_file=str(types), presets_file=str(presets_file(tmp_path)), env=env)
    with anyio.fail_after(120):
        summary = await runner.run()
    assert summary.ok, summary
    assert {t.id: (t.status, t.attempts) for t in summary.tasks} == {i: ("done", 1) for i in ids.values()}
    for name, task_id in ids.items():
        task = await q.task(task_id)
        assert task.agent_id is not None

        async def wrapped_up(agent_id: str = task.agent_id) -> bool:  # its leftovers committed, counted
            a = await bus.get_agent(agent_id)
            return a.finished and a.changes is not None and a.changes.final

        await until(wrapped_up, 60, "the flight's end")
        flight = await bus.get_agent(task.agent_id)  # the flight the task named is the one that completed it
        assert flight.preset == "stand-in" and flight.worktree is not None
        branch = flight.worktree.branch
        assert branch == f"wavewait/queue-q1/step-{task_id[:8]}"
        assert git(repo, "show", f"{branch}:{name}.txt") == f"step {name} in {flight.worktree.path}\n"
        assert (tmp_path / "prompts" / f"{name}.prompt").read_text() == f"Do step {name} (ok)."
    assert status(repo) == ""  # nothing in the main tree


async def test_a_preset_that_does_not_exist_or_a_type_with_no_preset_and_no_command_is_refused(bus, tmp_path):
    unknown = TaskQueue.open(bus, "q1", parse_task_types(TYPES.replace("stand-in", "gemini")), Limits())
    with pytest.raises(BadInput, match="no preset 'gemini'"):
        Runner(unknown, None)
    bare = TaskQueue.open(bus, "q2", parse_task_types(TYPES + '[types.plain]\nprompt = "Go {x}."\n'), Limits())
    with pytest.raises(BadInput, match="task type\\(s\\) plain name no preset"):
        Runner(bare, None, presets_file=str(presets_file(tmp_path)))
    Runner(bare, ["true"], presets_file=str(presets_file(tmp_path)))  # plain types take the command
    with pytest.raises(BadInput, match="preset must be the name"):
        parse_task_types(TYPES.replace('"stand-in"', "3"))
