"""A separate process that enqueues tasks into the queue named by WAVEWAIT_QUEUE.

enqueuer.py PREFIX COUNT [AT_ONCE]
                             print "ready", wait for a line on stdin (the start gate), then
                             enqueue COUNT research tasks with topics PREFIX-0.. and print
                             {"enqueued": n, "guards": {guard: n}} as JSON; AT_ONCE (1)
                             enqueues at once in this process (they share statements)
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter

from wavewait.core.bus import open_bus
from wavewait.core.tasks import GuardTripped, Limits, TaskQueue, enqueue_task, load_task_types, task_types_path


async def main(prefix: str, count: int, at_once: int) -> None:
    bus = await open_bus()
    try:
        path = task_types_path()
        assert path, "WAVEWAIT_TASK_TYPES must be set"
        q = TaskQueue.open(bus, "q1", load_task_types(path), Limits.from_env())
        await q.store.tasks()  # the store is ready (tables exist) before the gate opens
        print("ready", flush=True)
        sys.stdin.readline()
        enqueued, guards = 0, Counter[str]()

        async def some(first: int) -> None:
            nonlocal enqueued
            for i in range(first, count, at_once):
                try:
                    topic = f"{prefix}-{i}"
                    await enqueue_task(q, "orchestrator", type="research", inputs={"topic": topic}, reason="r")
                    enqueued += 1
                except GuardTripped as e:
                    guards[e.guard] += 1

        await asyncio.gather(*(some(k) for k in range(at_once)))
        print(json.dumps({"enqueued": enqueued, "guards": guards}), flush=True)
    finally:
        await bus.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 1))
