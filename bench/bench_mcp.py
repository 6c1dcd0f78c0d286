"""MCP round trips over stdio, measured from a real client talking to `wavewait mcp`.

    python bench/bench_mcp.py [--bus PATH|postgresql://...] [-n 200] [--json]
    python bench/bench_mcp.py --quick          # 20 samples: that it runs (CI), not a figure

1. round trip of an already-satisfied `wait` (a message is queued; the call returns it);
2. a flight's completion (`notify_completion` through the core) → the blocked `wait` call's
   result reaching the client;
3. a message sent → the blocked next-message `wait` call's result reaching the client, and
   the two parts of that: the send's own write (fsync on the directory bus) and from the
   send's return to the result.
Targets: round trip p50 ≤ 5 ms, completion → result p99 ≤ 30 ms (issue 3); message → result
p50/p99 ≤ 2/5 ms on the directory bus, ≤ 3/8 ms on PostgreSQL (issue 13).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from wavewait.core import messages
from wavewait.core.agents import register
from wavewait.core.bus import open_bus


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q / 100 * (len(xs) - 1)))]


async def main(bus_url: str, n: int, as_json: bool = False) -> None:
    bus = await open_bus(bus_url)
    await register(bus, "orchestrator")
    await register(bus, "flight", parent_id="orchestrator")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAVEWAIT_")} | {"WAVEWAIT_BUS": bus.url}
    params = StdioServerParameters(command=sys.executable, args=["-m", "wavewait", "mcp"], env=env)
    rows = []
    async with Client(params) as c:
        # 1. already satisfied
        for i in range(n + 20):
            await messages.send(bus, "flight", "orchestrator", f"m{i}")
        rt = []
        for i in range(n + 20):
            t0 = time.perf_counter()
            r = await c.call_tool("wait", {"timeout": 5})
            dt = time.perf_counter() - t0
            assert r.structured_content["message"] == f"m{i}", r
            if i >= 20:  # warm-up
                rt.append(dt * 1000)
        rows.append(("round trip, satisfied `wait` (stdio)", rt, 5.0, "p50"))

        # 2. completion -> result
        lat = []
        for i in range(n // 2 + 5):
            box: dict[str, float] = {}
            await bus.transition("flight", "running", ("idle",))  # back at work for the next round

            async def call(box: dict[str, float] = box) -> None:
                r = await c.call_tool("wait", {"timeout": 30, "from_agents": ["flight"]})
                box["t1"] = time.perf_counter()
                assert r.structured_content["results"][0]["status"] == "received", r

            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                while not await bus.list_waits():
                    await anyio.sleep(0.002)
                await anyio.sleep(0.01)  # let the wait settle into its sleep
                box["t0"] = time.perf_counter()
                await messages.notify_completion(bus, "flight", status="success", message=f"done {i}")
            if i >= 5:
                lat.append((box["t1"] - box["t0"]) * 1000)
        rows.append(("flight completion -> result at client", lat, 30.0, "p99"))

        # 3. a message sent -> the blocked next-message `wait` returns (issue 13's wake via MCP)
        wake, sending, after = [], [], []
        for i in range(n // 2 + 5):
            at: dict[str, float] = {}

            async def call_next(at: dict[str, float] = at, want: str = f"wake {i}") -> None:
                r = await c.call_tool("wait", {"timeout": 30})
                at["t1"] = time.perf_counter()
                assert r.structured_content["message"] == want, r

            async with anyio.create_task_group() as tg:
                tg.start_soon(call_next)
                while not await bus.list_waits():
                    await anyio.sleep(0.002)
                await anyio.sleep(0.01)  # let the wait settle into its sleep
                at["t0"] = time.perf_counter()  # the send's own write (fsync on a directory bus) counts
                await messages.send(bus, "flight", "orchestrator", f"wake {i}")
                at["sent"] = time.perf_counter()
            if i >= 5:
                wake.append((at["t1"] - at["t0"]) * 1000)
                sending.append((at["sent"] - at["t0"]) * 1000)
                after.append((at["t1"] - at["sent"]) * 1000)
        goal = 8.0 if bus.url.startswith("postgres") else 5.0
        rows.append(("message sent -> blocked `wait` returns", wake, goal, "p99"))
        rows.append(("  of which the send itself", sending, goal, "p99"))
        rows.append(("  of which send returned -> result", after, goal, "p99"))
    await bus.close()

    if as_json:  # for bench_scale.py's table: {measure: [p50, p99]}
        print(json.dumps({name: [statistics.median(xs), pct(xs, 99)] for name, xs, _, _ in rows}))
        return
    print(f"bus: {bus.url}")
    print(f"{'measure':40} {'n':>5} {'p50 ms':>8} {'p99 ms':>8} {'target':>14} {'met':>4}")
    for name, xs, target, which in rows:
        p50, p99 = statistics.median(xs), pct(xs, 99)
        got = p50 if which == "p50" else p99
        print(
            f"{name:40} {len(xs):5d} {p50:8.2f} {p99:8.2f} {which + ' ≤ ' + format(target, 'g') + ' ms':>14} "
            f"{'yes' if got <= target else 'NO':>4}"
        )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bus", default=None, help="bus directory or postgresql:// URL (default: a temp directory)")
    ap.add_argument("-n", type=int, default=200, help="samples for the round trip (half for completions)")
    ap.add_argument("--json", action="store_true", help="print the rows as one JSON object instead")
    ap.add_argument("--quick", action="store_true", help="-n 20")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        anyio.run(main, a.bus or os.path.join(d, "bus"), 20 if a.quick else a.n, a.json)
