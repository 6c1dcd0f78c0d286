"""MCP round trips over stdio, measured from a real client talking to `wavewait mcp`.

    python bench/bench_mcp.py [--bus PATH|postgresql://...] [-n 200] [--json]
    python bench/bench_mcp.py --quick          # 4 samples, a short warm-up: that it runs (CI), not a figure

1. round trip of an already-satisfied `wait` (a message is queued; the call returns it);
2. a flight's completion (`notify_completion` through the core) → the blocked `wait` call's
   result reaching the client;
3. a message sent → the blocked next-message `wait` call's result reaching the client, and
   the two parts of that: the send's own write (fsync on the directory bus) and from the
   send's return to the result.
Targets: round trip p50 ≤ 5 ms, completion → result p99 ≤ 30 ms (issue 3); message → result
p50/p99 ≤ 2/5 ms on the directory bus, ≤ 3/8 ms on PostgreSQL (issue 13).

    python bench/bench_mcp.py --fanin 2000 [--rate 200] [--runs 3] [--bus ...]

4. a fan-in at the client (issue 31): one `wait` over N flights (`from_agents`), called with a
   progress token as hosts call it, while a writer process reports for the flights at
   `--rate`/s in random order: the last report's send (its start; its own write counts) → the
   answer read at the client, one figure per run (p50 / p99 over `--runs`). Targets: ≤ 40 ms
   at 2,000 flights, p99 ≤ 100 ms at 100,000. The server keeps its default output budget
   (`--output-budget` sets another): the answer carries the reports that fit and says how
   many stay queued; the client then drains them (`wait` with max_messages 100, until none
   is left), and every report must have come exactly once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from wavewait.core import messages
from wavewait.core.agents import register
from wavewait.core.bus import open_bus


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q / 100 * (len(xs) - 1)))]


def server(bus_url: str, *flags: str) -> StdioServerParameters:
    """`wavewait mcp` over stdio on `bus_url`, as a host starts it (no other WAVEWAIT_ setting)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAVEWAIT_")} | {"WAVEWAIT_BUS": bus_url}
    return StdioServerParameters(command=sys.executable, args=["-m", "wavewait", "mcp", *flags], env=env)


async def until_waiting(bus: Any, answered: dict[str, Any] | None = None) -> None:
    """Until a wait is registered on the bus (the call reached its sleep); a call that was
    `answered` first (a refusal) ends the bench with its answer rather than waiting forever."""
    while not await bus.list_waits():
        if answered:
            raise RuntimeError(f"the wait was answered before it blocked: {str(answered)[:500]}")
        await anyio.sleep(0.002)
    await anyio.sleep(0.01)  # let the wait settle into its sleep


async def message_wake(c: Client, bus: Any, rounds: int, warm: int = 5) -> tuple[list[float], list[float], list[float]]:
    """A message sent → the blocked next-message `wait` returns at the client, ms per round (the
    first `warm` are a warm-up), with its two parts: the send's own write, and from its return."""
    wake, sending, after = [], [], []
    for i in range(rounds + warm):
        at: dict[str, float] = {}

        async def call_next(at: dict[str, float] = at, want: str = f"wake {i}") -> None:
            r = await c.call_tool("wait", {"timeout": 30})
            at["t1"] = time.perf_counter()
            assert r.structured_content["message"] == want, r

        async with anyio.create_task_group() as tg:
            tg.start_soon(call_next)
            await until_waiting(bus)
            at["t0"] = time.perf_counter()  # the send's own write (fsync on a directory bus) counts
            await messages.send(bus, "flight", "orchestrator", f"wake {i}")
            at["sent"] = time.perf_counter()
        if i >= warm:
            wake.append((at["t1"] - at["t0"]) * 1000)
            sending.append((at["sent"] - at["t0"]) * 1000)
            after.append((at["t1"] - at["sent"]) * 1000)
    return wake, sending, after


async def message_wake_ms(bus_url: str, rounds: int) -> list[float]:
    """`message_wake` on a bus of its own making: message sent → blocked `wait` returns, ms."""
    bus = await open_bus(bus_url)
    await register(bus, "orchestrator")
    await register(bus, "flight", parent_id="orchestrator")
    async with Client(server(bus.url)) as c:
        wake, _, _ = await message_wake(c, bus, rounds)
    await bus.close()
    return wake


#: the reports per second one writer process is asked for (PostgreSQL reaches about 340)
PART_RATE = 300


def flight_ids(n: int) -> list[str]:
    return [f"flight-{i:06d}" for i in range(n)]


async def fanin(bus_url: str, n: int, rate: float, runs: int, budget: int | None = None) -> list[dict[str, float]]:
    """One `wait` over `n` flights at a real MCP client over stdio, with a progress token, while
    a writer process reports for them at `rate`/s; per run: `ms` from the last report's send
    (its start) to the answer read at the client, `checked_ms` to `call_tool` returning it (after
    the SDK's output-schema check), the notifications the call got, the answer's size, and the
    calls and time that drained what stayed queued."""
    bus = await open_bus(bus_url)
    await register(bus, "orchestrator")
    flights = flight_ids(n)
    for i in range(0, n, 200):
        await asyncio.gather(*(register(bus, f, parent_id="orchestrator") for f in flights[i : i + 200]))
    argv = ["--role", "writer", "--bus", bus.url, "--fanin", str(n), "--rate", str(rate)]
    # one writer process per PART_RATE reports/s: a PostgreSQL send is a few statements (about
    # 3 ms) on its process's one connection, so one process would not reach 5,000/s
    parts = max(1, min(8, round(rate / PART_RATE)))
    # the call lasts as long as the writer takes (PostgreSQL here: about 300 reports/s), past
    # the server's default max-block (240 s) for 100,000 flights
    flags = ["--max-block", str(n / rate * 3 + 240), *(["--output-budget", str(budget)] if budget else [])]
    params = server(bus.url, *flags)
    out = []
    async with Client(params) as c:
        # when the response was read and parsed, before this SDK checks it against the tool's
        # output schema (its jsonschema pass over 2,000 entries is this client's own cost, over
        # 100 ms; hosts' validators take a few)
        read: list[float] = []
        check = c.session.validate_tool_result

        async def stamped(name: str, result: Any) -> None:
            read.append(time.time())
            await check(name, result)

        c.session.validate_tool_result = stamped  # type: ignore[method-assign]
        for i in range(runs):
            seed = str(random.randrange(1 << 30))
            writers = [
                subprocess.Popen(
                    [sys.executable, os.path.abspath(__file__), *argv, "--part", f"{k}/{parts}", "--seed", seed],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                    env=os.environ | {"WAVEWAIT_FSYNC": "1"},  # the bus's default: the reports are measured
                )
                for k in range(parts)
            ]
            notified = 0

            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                nonlocal notified
                notified += 1

            got: dict[str, Any] = {}

            async def call(got: dict[str, Any] = got, on_progress: Any = on_progress) -> None:
                args = {"timeout": n / rate * 3 + 180, "from_agents": flights}
                got["r"] = await c.call_tool("wait", args, progress_callback=on_progress)
                got["t"] = time.time()

            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(call)
                    await until_waiting(bus, got)
                    for writer in writers:
                        assert writer.stdin is not None
                        writer.stdin.write("go\n")
                        writer.stdin.flush()
                    lines = [(await asyncio.to_thread(w.communicate, timeout=n / rate * 3 + 120))[0] for w in writers]
            finally:
                for writer in writers:
                    writer.kill()
            wrote = [json.loads(line.strip().splitlines()[-1]) for line in lines]
            last = max(x["last"] for x in wrote)
            r = got["r"].structured_content
            ok = {"received", "reported"}
            assert r["status"] in ("complete", "partial") and {x["status"] for x in r["results"]} <= ok, str(r)[:300]
            run = {"ms": (read[-1] - last) * 1000, "checked_ms": (got["t"] - last) * 1000, "notified": notified}
            run["rate"] = n / (max(x["end"] for x in wrote) - min(x["t0"] for x in wrote))
            run["kb"] = len(got["r"].content[0].text) / 1000  # type: ignore[union-attr]
            bodies = [x["message"] for x in r["results"] if x["status"] == "received"]
            t0, calls = time.perf_counter(), 0
            while len(bodies) < n:  # what stayed queued: every report once
                calls += 1
                d = (await c.call_tool("wait", {"timeout": 5, "max_messages": 100})).structured_content
                assert d is not None and d["status"] == "received", d
                bodies += [d["message"], *(m["message"] for m in d.get("more") or [])]
            assert sorted(bodies) == sorted(f"r{i}" for i in range(n)), "a report lost or seen twice"
            run |= {"drain_calls": calls, "drain_s": time.perf_counter() - t0}
            out.append(run)
            while i < runs - 1 and await bus.list_waits():  # the answered wait's record goes with its acknowledgement
                await anyio.sleep(0.01)
    await bus.close()
    return out


async def role_writer(bus_url: str, n: int, rate: float, part: str, seed: int) -> None:
    """Report once for each of its part (`k/K`) of the `n` flights, in random order (the same
    for every part: one `seed`), paced at `rate`/K per second, from a line on stdin; print when
    its last report's send started (wall clock: its own write counts, as in `message_wake`;
    the answer may come before the send returns)."""
    bus = await open_bus(bus_url)
    k, parts = (int(x) for x in part.split("/"))
    order = flight_ids(n)
    random.Random(seed).shuffle(order)
    mine = range(k, n, parts)
    await asyncio.to_thread(sys.stdin.readline)
    t0 = time.time()
    last = t0
    for i in mine:
        ahead = t0 + i / rate - time.time()
        if ahead > 0:
            await anyio.sleep(ahead)
        last = time.time()
        await messages.send(bus, order[i], "orchestrator", f"r{i}")
    print(json.dumps({"last": last, "t0": t0, "end": time.time()}), flush=True)
    await bus.close()


async def main_fanin(bus_url: str, n: int, rate: float, runs: int, as_json: bool, budget: int | None) -> None:
    out = await fanin(bus_url, n, rate, runs, budget)
    if as_json:
        print(json.dumps(out))
        return
    goal = "≤ 40" if n <= 2000 else "p99 ≤ 100"
    print(f"bus: {bus_url}; {n:,} flights reporting at {rate:g}/s; {runs} run(s); load {os.getloadavg()[0]:.1f}")
    for key, what in (("ms", "answer read"), ("checked_ms", "call_tool returned (after the SDK's schema check)")):
        ms = [o[key] for o in out]
        print(f"last report -> {what}, ms: " + ", ".join(f"{x:.1f}" for x in ms))
        print(f"  p50 {statistics.median(ms):.1f}, p99 {pct(ms, 99):.1f} (goal for the answer read: {goal} ms)")
    print("notifications per call: " + ", ".join(str(o["notified"]) for o in out))
    print("reports/s the writer reached: " + ", ".join(f"{o['rate']:,.0f}" for o in out))
    print("answer, KB of text: " + ", ".join(f"{o['kb']:.1f}" for o in out))
    print(
        "the rest drained (wait, max_messages 100): "
        + ", ".join(f"{o['drain_calls']} calls in {o['drain_s']:.2f} s" for o in out)
    )


async def main(bus_url: str, n: int, as_json: bool = False, warm: int = 20) -> None:
    """The rows, `n` samples each (half for completions and message wakes), after `warm` calls
    of warm-up (a quarter of that for completions and message wakes)."""
    bus = await open_bus(bus_url)
    await register(bus, "orchestrator")
    await register(bus, "flight", parent_id="orchestrator")
    rows = []
    async with Client(server(bus.url)) as c:
        # 1. already satisfied
        for i in range(n + warm):
            await messages.send(bus, "flight", "orchestrator", f"m{i}")
        rt = []
        for i in range(n + warm):
            t0 = time.perf_counter()
            r = await c.call_tool("wait", {"timeout": 5})
            dt = time.perf_counter() - t0
            assert r.structured_content["message"] == f"m{i}", r
            if i >= warm:  # warm-up
                rt.append(dt * 1000)
        rows.append(("round trip, satisfied `wait` (stdio)", rt, 5.0, "p50"))

        # 2. completion -> result
        lat = []
        for i in range(n // 2 + warm // 4):
            box: dict[str, float] = {}
            await bus.transition("flight", "running", ("idle",))  # back at work for the next round

            async def call(box: dict[str, float] = box) -> None:
                r = await c.call_tool("wait", {"timeout": 30, "from_agents": ["flight"]})
                box["t1"] = time.perf_counter()
                assert r.structured_content["results"][0]["status"] == "received", r

            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                await until_waiting(bus)
                box["t0"] = time.perf_counter()
                await messages.notify_completion(bus, "flight", status="success", message=f"done {i}")
            if i >= warm // 4:
                lat.append((box["t1"] - box["t0"]) * 1000)
        rows.append(("flight completion -> result at client", lat, 30.0, "p99"))

        # 3. a message sent -> the blocked next-message `wait` returns (issue 13's wake via MCP)
        wake, sending, after = await message_wake(c, bus, n // 2, warm // 4)
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
    ap.add_argument("--quick", action="store_true", help="-n 4 after 4 calls of warm-up; with --fanin: 1 run")
    ap.add_argument("--fanin", type=int, metavar="N", help="measure a fan-in over N flights at the client instead")
    ap.add_argument("--rate", type=float, default=200.0, help="with --fanin: reports per second")
    ap.add_argument("--runs", type=int, default=3, help="with --fanin: fan-ins measured, one after another")
    ap.add_argument("--output-budget", type=int, help="with --fanin: the server's output budget (default: its own)")
    ap.add_argument("--role", choices=["writer"], help=argparse.SUPPRESS)
    ap.add_argument("--part", default="0/1", help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.quick:
        a.n, a.runs = 4, 1
    if a.role != "writer" and a.bus and a.bus.startswith("postgresql") and "schema=" not in a.bus:
        # a schema of its own: what an earlier run left queued must not answer this one's waits
        a.bus += ("&" if "?" in a.bus else "?") + f"schema=bench_mcp_{os.getpid()}"
    if a.role == "writer":
        anyio.run(role_writer, a.bus, a.fanin, a.rate, a.part, a.seed)
    elif a.fanin:
        with tempfile.TemporaryDirectory() as d:
            anyio.run(main_fanin, a.bus or os.path.join(d, "bus"), a.fanin, a.rate, a.runs, a.json, a.output_budget)
    else:
        with tempfile.TemporaryDirectory() as d:
            anyio.run(main, a.bus or os.path.join(d, "bus"), a.n, a.json, 4 if a.quick else 20)
