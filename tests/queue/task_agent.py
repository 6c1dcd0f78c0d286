"""A task agent for the runner tests: what a real agent does, through the core.

The runner starts it as `task_agent.py PROMPT` with WAVEWAIT_TASK_ID naming its task. It logs
"start NAME ATTEMPT" to $QTEST_LOG, saves its prompt as $QTEST_DIR/NAME.prompt, then acts on
its task's inputs["mode"]:
  ok     complete the task done, with a handoff naming the step
  fail   complete it failed (final: no retry)
  flaky  exit 3 without completing on the first attempt; later attempts as ok
  crash  exit 3 without completing, every attempt
  gate   on the first attempt, wait for a message (the test opens the gate), then as ok
and logs "done NAME" once the completion is stored.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from wavewait.core import wait
from wavewait.core.agents import caller_id
from wavewait.core.bus import open_bus
from wavewait.core.tasks import Limits, TaskQueue, bound_task_id, complete_task, load_task_types, task_types_path


def log(line: str) -> None:
    fd = os.open(os.environ["QTEST_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{line}\n".encode())  # one write per line: lines of several agents never mix
    finally:
        os.close(fd)


async def main(prompt: str) -> int:
    bus = await open_bus()
    try:
        path, bound = task_types_path(), bound_task_id()
        assert path and bound and os.environ.get("WAVEWAIT_QUEUE"), "run me from the runner"
        q = TaskQueue.open(bus, os.environ["WAVEWAIT_QUEUE"], load_task_types(path), Limits.from_env())
        task = await q.task(bound)
        name, mode = task.inputs["name"], task.inputs["mode"]
        log(f"start {name} {task.attempts}")
        (Path(os.environ["QTEST_DIR"]) / f"{name}.prompt").write_text(prompt)
        if mode == "crash" or (mode == "flaky" and task.attempts == 1):
            return 3
        if mode == "gate" and task.attempts == 1:
            await wait.wait_event(bus, caller_id(), 120, types=["message"])
        handoff = {"goals": f"step {name}", "did": f"did step {name}", "forNextAgent": f"after {name}, go on"}
        await complete_task(q, caller_id(), status="failed" if mode == "fail" else "done", handoff=handoff, bound=bound)
        log(f"done {name}")
        return 0
    finally:
        await bus.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[-1])))
