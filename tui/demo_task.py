"""One task agent of `wavewait demo --queue`: `python -m wavewait.tui.demo_task PROMPT`.

The runner starts it with WAVEWAIT_TASK_ID naming its task (and the queue, the task types
and the bus in the environment). It prints its prompt (the output log), "works" for the
task's `delay`, grows the graph when its mode is `grow`, and completes its task through
the core: `done`, or `failed` when its mode is `fail`.
"""

from __future__ import annotations

import asyncio
import os
import sys

from ..core.agents import caller_id
from ..core.bus import open_bus
from ..core.tasks import TaskQueue, bound_task_id, complete_task, enqueue_task, load_task_types, task_types_path
from .demo_flight import work


async def main(prompt: str) -> None:
    print(prompt, flush=True)
    bus = await open_bus()
    try:
        path, bound = task_types_path(), bound_task_id()
        assert path and bound, "run by `wavewait run-queue` (WAVEWAIT_TASK_ID, WAVEWAIT_TASK_TYPES)"
        q = TaskQueue.open(bus, os.environ["WAVEWAIT_QUEUE"], load_task_types(path))
        task = await q.task(bound)
        mode = task.inputs.get("mode", "ok")
        await asyncio.to_thread(work, float(task.inputs.get("delay", 2)))
        if mode == "grow":  # what it found needs one more change: a child task
            child = await enqueue_task(
                q,
                caller_id(),
                type="fix",
                inputs={"file": "src/session.py", "delay": 2},
                reason="the survey found a stale session check",
                bound=bound,
            )
            print(f"enqueued {child.type} {child.id[:8]}", flush=True)
        failed = mode == "fail"
        handoff = {
            "goals": prompt.splitlines()[0],
            "did": "gave up: the tests of this file do not run here" if failed else "made the change; tests pass",
            "forNextAgent": "do not build on this change" if failed else "nothing left to do here",
            "filesTouched": [str(task.inputs[k]) for k in ("file",) if k in task.inputs],
        }
        await complete_task(q, caller_id(), status="failed" if failed else "done", handoff=handoff, bound=bound)
        print("completed", "failed" if failed else "done", flush=True)
    finally:
        await bus.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[-1]))
