"""What a host's polling of backgrounded waits costs the server, and what it costs the wake.

Interactive Claude Code runs each `wait` as a task (MCP Tasks extension) and polls it with
`tasks/get` every `pollIntervalMs`: N backgrounded waits are N/interval polls a second on one
server. This starts `wavewait mcp` on a directory bus, opens N task waits (each on a flight of
its own), polls every one at the interval the way Claude Code does (one `tasks/get` per task
per interval, spread over the interval), and measures:

- the server's CPU (utime + stime from /proc, % of one core) while it only answers polls;
- the `tasks/get` round trip (p50, p99);
- the wake delay: from a flight's report to the poll that sees its task completed (what the
  host then turns into the model's wake; Claude Code starts that request 0.05–0.13 s later).

Rows: the process that runs the waits answering (from memory), and a second server process
on the same bus answering (from the task's record on the bus). Then the server's CPU per
bare request asked one at a time (`--pings`), in each protocol era: what any request costs
before its tool's work.

    python bench/bench_tasks_poll.py [--n 1,50,200] [--interval 250,500,1000] [--seconds 6]
    python bench/bench_tasks_poll.py --quick   # 2 waits, 250 ms, 0.5 s, both rows: that it runs (CI)
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TASKS = "io.modelcontextprotocol/tasks"
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}},
}
TICK = os.sysconf("SC_CLK_TCK")


class Server:
    """`wavewait mcp` on stdio, spoken to with raw JSON-RPC; responses matched by id."""

    def __init__(self, bus: Path) -> None:
        self.bus = bus
        self.ids = itertools.count(1)
        self.waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}

    async def start(self) -> None:
        # cold (no warm process): the process started here is the server whose /proc is read
        env = {**os.environ, "WAVEWAIT_BUS": str(self.bus), "WAVEWAIT_WARM": "0"}
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "wavewait",
            "mcp",
            "--bus",
            str(self.bus),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            limit=1 << 24,
        )
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            msg = json.loads(line)
            fut = self.waiting.pop(msg.get("id"), None) if "id" in msg else None
            if fut is not None and not fut.done():
                fut.set_result(msg)

    async def request(self, method: str, params: dict[str, Any], *, era: str = "2026") -> dict[str, Any]:
        """`era` "handshake": without the 2026-era envelope (on a session opened by `initialize`)."""
        assert self.proc.stdin is not None
        rid = next(self.ids)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.waiting[rid] = fut
        body = {"jsonrpc": "2.0", "id": rid, "method": method, "params": {**params, "_meta": META}}
        if era == "handshake":
            body["params"] = params
        self.proc.stdin.write((json.dumps(body) + "\n").encode())
        await self.proc.stdin.drain()
        msg = await asyncio.wait_for(fut, 60)
        if "error" in msg:
            raise RuntimeError(f"{method}: {msg['error']}")
        result: dict[str, Any] = msg["result"]
        return result

    def cpu(self) -> float:
        """Seconds of CPU the server used so far."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK

    async def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), 20)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
        self.reader.cancel()


async def setup_bus(bus: Path, n: int) -> list[str]:
    from wavewait.core.agents import register
    from wavewait.core.bus.file import FileBus

    b = FileBus(bus)
    try:
        await register(b, "orchestrator")
        names = [f"f{i:03d}" for i in range(n)]
        for name in names:
            await register(b, name, parent_id="orchestrator")
    finally:
        await b.close()
    return names


async def send(bus: Path, sender: str) -> None:
    from wavewait.core import messages
    from wavewait.core.bus.file import FileBus

    b = FileBus(bus)
    try:
        await messages.send(b, sender, "orchestrator", f"report of {sender}")
    finally:
        await b.close()


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else float("nan")


async def one_row(n: int, interval: float, seconds: float, other_process: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as d:
        bus = Path(d) / "bus"
        names = await setup_bus(bus, n)
        runner = Server(bus)
        await runner.start()
        poller = runner
        if other_process:
            poller = Server(bus)
            await poller.start()
        try:
            tasks = {}
            for name in names:
                r = await runner.request(
                    "tools/call", {"name": "wait", "arguments": {"timeout": 600, "from_agents": [name]}}
                )
                assert r.get("resultType") == "task", r
                tasks[name] = r["taskId"]
            rtts: list[float] = []
            seen_done: dict[str, float] = {}

            async def poll_one(name: str, offset: float, stop_at: float) -> None:
                await asyncio.sleep(offset)
                while time.monotonic() < stop_at and name not in seen_done:
                    t = time.monotonic()
                    r = await poller.request("tasks/get", {"taskId": tasks[name]})
                    rtts.append(time.monotonic() - t)
                    if r["status"] != "working":
                        seen_done[name] = time.time()
                        return
                    await asyncio.sleep(max(0.0, interval - (time.monotonic() - t)))

            # 1. the cost: every task polled, none completes
            await asyncio.sleep(0.5)
            cpu0, t0 = poller.cpu() + (runner.cpu() if other_process else 0.0), time.monotonic()
            stop_at = t0 + seconds
            await asyncio.gather(*(poll_one(name, random.random() * interval, stop_at) for name in names))
            cpu = poller.cpu() + (runner.cpu() if other_process else 0.0) - cpu0
            elapsed = time.monotonic() - t0
            polls = len(rtts)
            # 2. the wake: a sample of flights report at random moments; the next poll sees it
            sample = names[: min(n, 20)]
            sent: dict[str, float] = {}
            stop_at = time.monotonic() + 30

            async def report_later(name: str) -> None:
                await asyncio.sleep(random.random() * interval * 2)
                await send(bus, name)
                sent[name] = time.time()

            await asyncio.gather(
                *(poll_one(name, random.random() * interval, stop_at) for name in sample),
                *(report_later(name) for name in sample),
            )
            delays = [seen_done[x] - sent[x] for x in sample if x in seen_done and x in sent]
        finally:
            if poller is not runner:
                await poller.stop()
            await runner.stop()
    return {
        "n": n,
        "interval_ms": int(interval * 1000),
        "answered_by": "another process (bus)" if other_process else "the running process (memory)",
        "polls_per_s": polls / elapsed,
        "cpu_pct": 100 * cpu / elapsed,
        "get_p50_ms": 1000 * statistics.median(rtts) if rtts else float("nan"),
        "get_p99_ms": 1000 * pct(rtts, 0.99),
        "wake_p50_ms": 1000 * statistics.median(delays) if delays else float("nan"),
        "wake_max_ms": 1000 * max(delays) if delays else float("nan"),
    }


#: a request with nothing in it, per era: the transport and the SDK's path alone, which every call pays
BARE = {"2026": "resources/list", "handshake": "ping"}
HANDSHAKE = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}


async def bare_cost(era: str, count: int) -> float:
    """The server's CPU (µs) per bare request (`BARE`) asked one after another."""
    with tempfile.TemporaryDirectory() as d:
        bus = Path(d) / "bus"
        await setup_bus(bus, 0)
        server = Server(bus)
        await server.start()
        try:
            if era == "handshake":
                await server.request("initialize", HANDSHAKE, era=era)
            for _ in range(50):  # the session opened, the front's hand-over done, the code warm
                await server.request(BARE[era], {}, era=era)
            cpu0 = server.cpu()
            for _ in range(count):
                await server.request(BARE[era], {}, era=era)
            return (server.cpu() - cpu0) / count * 1e6
        finally:
            await server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", default="1,50,200", help="backgrounded waits (comma-separated)")
    ap.add_argument("--interval", default="250,500,1000", help="poll interval in ms (comma-separated)")
    ap.add_argument("--seconds", type=float, default=6.0, help="how long to measure the polling cost")
    ap.add_argument("--other-process", action="store_true", help="also poll through a second server on the bus")
    ap.add_argument("--pings", type=int, default=3000, help="bare requests one at a time, per era (0: none)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--quick", action="store_true", help="--n 2 --interval 250 --seconds 0.5 --other-process --pings 50"
    )
    a = ap.parse_args()
    if a.quick:
        a.n, a.interval, a.seconds, a.other_process, a.pings = "2", "250", 0.5, True, 50
    rows = []
    for n in [int(x) for x in a.n.split(",")]:
        for ms in [int(x) for x in a.interval.split(",")]:
            for other in [False, True] if a.other_process else [False]:
                rows.append(asyncio.run(one_row(n, ms / 1000, a.seconds, other)))
    bare = {era: asyncio.run(bare_cost(era, a.pings)) for era in BARE} if a.pings else {}
    if a.json:
        print(json.dumps({"rows": rows, "bare_request_cpu_us": bare}))
        return
    print("| waits | poll interval | answered by | tasks/get per s | server CPU | get p50 / p99 | wake p50 / max |")
    print("|---:|---:|---|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['n']} | {r['interval_ms']} ms | {r['answered_by']} | {r['polls_per_s']:.0f} | "
            f"{r['cpu_pct']:.1f} % | {r['get_p50_ms']:.2f} / {r['get_p99_ms']:.2f} ms | "
            f"{r['wake_p50_ms']:.0f} / {r['wake_max_ms']:.0f} ms |"
        )
    for era, us in bare.items():
        print(f"a bare request one at a time ({era} era, `{BARE[era]}`, {a.pings:,}): {us:.0f} µs of server CPU each")


if __name__ == "__main__":
    main()
