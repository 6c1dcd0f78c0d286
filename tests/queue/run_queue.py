"""The runner in its own process, so a test can SIGKILL it mid-run (WAVEWAIT_* name the queue).

run_queue.py AGENT_ARGV...   run the queue to the end; print the summary as JSON; exit 0
                             only when every task is done
"""

from __future__ import annotations

import asyncio
import os
import sys

from wavewait.core.bus import open_bus
from wavewait.core.runner import run_queue
from wavewait.core.tasks import Limits, TaskQueue, load_task_types, task_types_path


async def main(agent: list[str]) -> int:
    bus = await open_bus()
    try:
        path = task_types_path()
        assert path
        q = TaskQueue.open(bus, os.environ["WAVEWAIT_QUEUE"], load_task_types(path), Limits.from_env())
        summary = await run_queue(q, agent, task_types_file=path)
        print(summary.model_dump_json(by_alias=True), flush=True)
        return 0 if summary.ok else 1
    finally:
        await bus.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
