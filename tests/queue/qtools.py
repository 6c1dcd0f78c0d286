"""Helpers for the task-queue tests: task types, a queue on the test's bus, guard events."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from wavewait.core import wait
from wavewait.core.bus import Bus
from wavewait.core.tasks import Limits, TaskQueue, load_task_types

TYPES = """
[types.research]
description = "Find out what the code does"
prompt = "Research {topic}."

[types.fix]
description = "Change one file"
prompt = "Fix {file}."
leaf = true

[types.step]
description = "A step of a test graph, run by task_agent.py"
prompt = "Do step {name} ({mode})."
"""


def types_file(tmp_path: Path) -> Path:
    path = tmp_path / "task-types.toml"
    path.write_text(TYPES)
    return path


def make_queue(bus: Bus, tmp_path: Path, name: str = "q1", **limits: int) -> TaskQueue:
    return TaskQueue.open(bus, name, load_task_types(types_file(tmp_path)), Limits(**limits))


HANDOFF = {"goals": "find the bug", "did": "read auth.py", "forNextAgent": "the bug is in line 3"}


def handoff(**changes: Any) -> dict[str, Any]:
    return HANDOFF | changes


async def guard_events(bus: Bus, owner: str = "orchestrator") -> list[dict[str, Any]]:
    """Every guard_tripped event queued for `owner`, taken the way an agent takes them."""
    found = []
    while (e := await wait.wait_event(bus, owner, 0, types=["guard_tripped"])).type == "guard_tripped":
        found.append(e.to_json())
    return found
