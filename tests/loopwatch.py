"""Run `python -m wavewait ARGS...` with every event-loop step timed: `python loopwatch.py LOG ARGS...`.

A step is one callback the asyncio loop runs (a task's step from one `await` to the next); while
it runs, nothing else in the process is served. Each step that used more than LOOPWATCH_MS
(default 50) of this thread's CPU time is written to LOG as one line: its CPU and wall time and
what it was. CPU time, not wall time, so that a test on a busy machine (the process waiting for
a core) measures the code, not the machine. The server is the real one, started as
`python -m wavewait` starts it; only `asyncio.events.Handle._run`, through which the loop runs
every callback, is wrapped.
"""

from __future__ import annotations

import asyncio.base_events
import asyncio.events
import os
import runpy
import sys
import time

LIMIT = float(os.environ.get("LOOPWATCH_MS", "50")) / 1000


def main() -> None:
    log = open(sys.argv[1], "a", buffering=1)  # line-buffered: each line is there when written
    run = asyncio.events.Handle._run

    def timed(handle: asyncio.events.Handle) -> None:
        cpu, wall = time.thread_time(), time.monotonic()
        try:
            run(handle)
        finally:
            cpu = time.thread_time() - cpu
            if cpu > LIMIT:
                what = asyncio.base_events._format_handle(handle)[:400]  # type: ignore[attr-defined]
                log.write(f"{cpu * 1000:.0f} ms CPU ({(time.monotonic() - wall) * 1000:.0f} ms wall): {what}\n")

    asyncio.events.Handle._run = timed  # type: ignore[method-assign]
    sys.argv = ["wavewait", *sys.argv[2:]]
    runpy.run_module("wavewait", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
