"""A reader of a queue, as the TUI's tasks view or `list_tasks` read it, in its own process.

    task_reader.py QUEUE N      (WAVEWAIT_BUS names the bus)

It reads the queue's tasks and the agents the running ones name, again and again, as fast as
it can, until the queue has N tasks and all are finished. It prints "ready" after its first
read, then one line at the end: "ok READS RUNNING" (RUNNING: the running tasks it read whose
agent it read) and exit 0, or "missing TASK AGENT STATUS" and exit 1 the first time a task
names an agent whose record it cannot read.
"""

from __future__ import annotations

import asyncio
import sys
import time

from wavewait.core.bus import open_bus
from wavewait.core.tasks import FINISHED, TaskQueue

DEADLINE = 120.0


async def main(queue: str, n: int) -> int:
    bus = await open_bus()
    try:
        q = TaskQueue.open(bus, queue, {})
        reads, seen = 0, set()
        give_up = time.monotonic() + DEADLINE
        while time.monotonic() < give_up:
            tasks = await q.store.tasks()
            named = [t for t in tasks if t.status == "running" and t.agent_id]
            found = await bus.get_agents([t.agent_id for t in named if t.agent_id]) if named else {}
            for t in named:
                if t.agent_id not in found:
                    print(f"missing {t.id} {t.agent_id} {t.status}", flush=True)
                    return 1
                seen.add((t.id, t.agent_id))
            reads += 1
            if reads == 1:
                print("ready", flush=True)
            if len(tasks) == n and all(t.status in FINISHED for t in tasks):
                print(f"ok {reads} {len(seen)}", flush=True)
                return 0
        print(f"timeout after {DEADLINE}s: {[(t.id, t.status) for t in tasks]}", flush=True)
        return 2
    finally:
        await bus.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1], int(sys.argv[2]))))
