"""`wavewait demo --queue`: a small task graph run by the real runner, one task failing.

Six tasks on a queue named `demo`: two research tasks, a fix that needs both (its agent
gets both handoffs), a fix that fails (so the task after it is skipped), and a survey
whose agent grows the graph with a child task. The orchestrator also enqueues a duplicate
by mistake, so the dedup guard trips and its notification shows. Each task's agent is a
real process (`python -m wavewait.tui.demo_task`).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from ..core.bus import Bus
from ..core.proc import python_module
from ..core.runner import RunSummary, run_queue
from ..core.tasks import GuardTripped, TaskQueue, enqueue_task, parse_task_types

QUEUE = "demo"
TYPES = """
[types.research]
description = "Find out what the code does"
prompt = "Research {topic}."

[types.fix]
description = "Change one file"
prompt = "Fix {file}."
leaf = true

[types.report]
description = "Write up what the others did"
prompt = "Report on {topic}."
"""


async def run(bus: Bus, me: str, say: Callable[[str], None]) -> RunSummary:
    """Seed the graph, trip the dedup guard once, and run the queue to the end."""
    folder = Path(tempfile.mkdtemp(prefix="wavewait-demo-queue-"))
    try:
        return await _run(bus, me, say, folder / "task-types.toml")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


async def _run(bus: Bus, me: str, say: Callable[[str], None], types_file: Path) -> RunSummary:
    types_file.write_text(TYPES)
    q = TaskQueue.open(bus, QUEUE, parse_task_types(TYPES, str(types_file)))

    async def add(kind: str, reason: str, after: list[str] | None = None, **inputs: object) -> str:
        return (await enqueue_task(q, me, type=kind, inputs=inputs, reason=reason, depends_on=after)).id

    auth = await add("research", "where are sessions checked?", topic="auth", delay=2)
    api = await add("research", "what does the API expect?", topic="the API", delay=3)
    await add("research", "is anything else stale?", topic="the session code", delay=2, mode="grow")
    login = await add("fix", "the login check is wrong", [auth, api], file="src/login.py", delay=2)
    cache = await add("fix", "the cache never expires", [auth], file="src/cache.py", delay=2, mode="fail")
    await add("report", "tell the team", [login, cache], topic="the session fixes", delay=1)
    try:  # a duplicate, by mistake: the dedup guard refuses it and a notification says so
        await add("research", "where are sessions checked?", topic="auth", delay=2)
    except GuardTripped as e:
        say(f"demo: guard {e.guard} refused a duplicate")
    say(f"demo: running queue {QUEUE}: each task gets a real agent once its dependencies are done")
    agent = python_module("wavewait.tui.demo_task")
    return await run_queue(q, agent, max_parallel=3, task_types_file=str(types_file), runner_id=me)
