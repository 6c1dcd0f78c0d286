"""A separate process that enqueues tasks into the queue named by WAVEWAIT_QUEUE.

enqueuer.py PREFIX COUNT     print "ready", wait for a line on stdin (the start gate), then
                             enqueue COUNT research tasks with topics PREFIX-0.. and print
                             {"enqueued": n, "guards": {guard: n}} as JSON
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter

from wavewait.core.bus import open_bus
from wavewait.core.tasks import GuardTripped, Limits, TaskQueue, enqueue_task, load_task_types, task_types_path


async def main(prefix: str, count: int) -> None:
    bus = await open_bus()
    try:
        path = task_types_path()
        assert path, "WAVEWAIT_TASK_TYPES must be set"
        q = TaskQueue.open(bus, "q1", load_task_types(path), Limits.from_env())
        await q.store.tasks()  # the store is ready (tables exist) before the gate opens
        print("ready", flush=True)
        sys.stdin.readline()
        enqueued, guards = 0, Counter[str]()
        for i in range(count):
            try:
                await enqueue_task(q, "orchestrator", type="research", inputs={"topic": f"{prefix}-{i}"}, reason="r")
                enqueued += 1
            except GuardTripped as e:
                guards[e.guard] += 1
        print(json.dumps({"enqueued": enqueued, "guards": guards}), flush=True)
    finally:
        await bus.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
