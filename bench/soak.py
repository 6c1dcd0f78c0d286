"""Soak: minutes of random spawn, send, wait, interrupt, cancel and kill on one bus; then count.

    python bench/soak.py --minutes 10                      # the directory bus
    python bench/soak.py --minutes 10 --bus postgresql://127.0.0.1/test   # PostgreSQL
    python bench/soak.py --quick                           # 3 s, victims killed sooner: that it runs (CI), not a figure

Who does what, all as real processes on a real bus:
- senders: flights started with `admission.spawn`, each sending messages to the orchestrator
  and logging each message id once `send` returned; some are killed at random;
- a stable consumer: `wavewait mcp` through the real MCP client, calling `wait` with short
  timeouts and cancelling a third of its calls at a random moment (some right when the wait
  received); its server's memory and open files are read at the start and the end;
- victim consumers: `wavewait mcp` spoken to over raw JSON-RPC and SIGKILLed at random
  moments, before or after their response was read;
- CLI consumers: `wavewait wait` processes, some SIGKILLed mid-wait;
- interrupts: `Bus.interrupt` on random waits in progress.

At the end the senders are stopped and the inbox drained. A message is received when a
consumer read the reply that carries it. Lost = logged as sent, never received. Duplicated =
received more than once; the documented window (a reply written, its process killed or its session ended before
the acknowledgement) can produce them, with the same message id, and the table shows how
many consumer kills happened. Prints one table.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from wavewait.core import admission, agents, wait
from wavewait.core.bus import Bus, open_bus
from wavewait.mcp.delivery import GRACE

PY = sys.executable
ME = "orchestrator"
SENDER = r"""
import asyncio, os, random, sys
from wavewait.core import messages
from wavewait.core.bus import open_bus
async def main():
    bus = await open_bus(os.environ["WAVEWAIT_BUS"])
    me = os.environ["WAVEWAIT_AGENT_ID"]
    with open(sys.argv[1], "a") as log:
        for i in range(int(sys.argv[2])):
            item = await messages.send(bus, me, "orchestrator", f"{me} #{i}")
            log.write(item.id + "\n"); log.flush()
            await asyncio.sleep(random.random() * 0.05)
    await bus.close()
asyncio.run(main())
"""


class Tally:
    def __init__(self) -> None:
        self.received: list[str] = []
        self.counts: Counter[str] = Counter()
        #: replies read from a server killed within the acknowledgement grace after: the
        #: documented window, where a duplicate (same message id) may follow
        self.in_window: set[str] = set()

    def got(self, message_id: str | None, how: str) -> None:
        if message_id:
            self.received.append(message_id)
            self.counts[how] += 1


def env_for(bus_url: str) -> dict[str, str]:
    return {**os.environ, "WAVEWAIT_BUS": bus_url, "WAVEWAIT_AGENT_ID": ME}


async def senders(bus: Bus, logs: Path, stop: anyio.Event, t: Tally) -> None:
    n = 0
    while not stop.is_set():
        n += 1
        a = await admission.spawn(bus, f"sender-{n}", [PY, "-c", SENDER, str(logs / f"{n}.log"), "40"], parent_id=ME)
        t.counts["spawned"] += 1
        if random.random() < 0.3:
            await anyio.sleep(random.random() * 1.5)
            await admission.kill(bus, (await bus.get_agent(a.id)) or a, by="soak")
            t.counts["sender killed"] += 1
        await anyio.sleep(random.random() * 0.5)


async def stable(
    bus_url: str, marker: str, stop: anyio.Event, t: Tally, mem: dict[str, tuple[int, int]], seconds: float
) -> None:
    params = StdioServerParameters(
        command=PY, args=["-m", "wavewait", "mcp", "--allow-path", marker], env=env_for(bus_url)
    )
    read: list[tuple[float, str]] = []  # (when, message id) of each reply read
    async with Client(params) as c:  # type: ignore[arg-type]
        began, marks = time.monotonic(), ["10%", "50%"]
        while not stop.is_set():
            if marks and time.monotonic() - began >= seconds * int(marks[0][:-1]) / 100:
                mem[marks.pop(0)] = server_usage(marker)
            cancel_at = random.choice([None, None, "received", random.random() * 0.5])
            with anyio.CancelScope() as scope:

                async def on_progress(
                    p: float, total: float | None, msg: str | None, scope=scope, cancel_at=cancel_at
                ) -> None:
                    if cancel_at == "received" and msg and "received" in msg:
                        scope.cancel()

                if isinstance(cancel_at, float):
                    scope.deadline = anyio.current_time() + cancel_at
                r = await c.call_tool("wait", {"timeout": random.choice([0, 0.5, 2])}, progress_callback=on_progress)
                data = r.structured_content or {}
                t.got(data.get("message_id"), "stable reply")
                if data.get("message_id"):
                    read.append((time.monotonic(), data["message_id"]))
            if scope.cancelled_caught:
                t.counts["stable cancelled"] += 1
        mem["end"] = server_usage(marker)
    # the session's end gives back what replies of its last grace carried: the documented window
    ended = time.monotonic()
    t.in_window.update(m for at, m in read if ended - at < GRACE + 1)


async def victim(bus_url: str, stop: anyio.Event, t: Tally, most_calls: int = 15) -> None:
    """A server spoken to over raw JSON-RPC, SIGKILLed at random points (after 1 to
    `most_calls` calls: the one under way when the soak ends is run to its kill)."""
    while not stop.is_set():
        p = await asyncio.create_subprocess_exec(
            PY, "-m", "wavewait", "mcp", env=env_for(bus_url),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        assert p.stdin and p.stdout
        init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "soak", "version": "1"}}
        p.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init}).encode() + b"\n")
        p.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        await p.stdin.drain()
        kill_after = random.randint(1, most_calls)
        read: list[tuple[float, str]] = []
        for i in range(1, kill_after + 1):
            call = {"name": "wait", "arguments": {"timeout": random.choice([0, 1])}}
            p.stdin.write(
                json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": call}).encode() + b"\n"
            )
            await p.stdin.drain()
            if i == kill_after and random.random() < 0.5:
                await anyio.sleep(random.random() * 0.3)
                break  # killed before its response was read
            while True:
                line = await p.stdout.readline()
                if not line:
                    break
                msg = json.loads(line)
                if msg.get("id") == i:
                    data = (msg.get("result") or {}).get("structuredContent") or {}
                    t.got(data.get("message_id"), "victim reply")
                    if data.get("message_id"):
                        read.append((time.monotonic(), data["message_id"]))
                    break
        p.kill()
        killed = time.monotonic()
        await p.wait()
        t.in_window.update(m for at, m in read if killed - at < GRACE + 1)
        t.counts["victim killed"] += 1


async def cli(bus_url: str, stop: anyio.Event, t: Tally) -> None:
    while not stop.is_set():
        p = await asyncio.create_subprocess_exec(
            PY, "-m", "wavewait", "wait", "1", env=env_for(bus_url),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        if random.random() < 0.3:
            await anyio.sleep(random.random() * 1.0)
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGKILL)
            t.counts["cli killed"] += 1
        out, _ = await p.communicate()
        with contextlib.suppress(ValueError):  # killed after it printed: the answer still counts
            t.got(json.loads(out).get("message_id"), "cli reply")


async def interrupter(bus: Bus, stop: anyio.Event, t: Tally) -> None:
    while not stop.is_set():
        await anyio.sleep(random.random() * 2)
        waits = await bus.list_waits()
        if waits:
            await bus.interrupt(random.choice(waits).id)
            t.counts["interrupts"] += 1


def server_usage(marker: str) -> tuple[int, int]:
    """(RSS in KiB, open files) of the `wavewait mcp` whose command line holds `marker`."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            if marker.encode() in cmd and b"mcp" in cmd:
                status = Path(f"/proc/{pid}/status").read_text()
                rss = int(next(ln.split()[1] for ln in status.splitlines() if ln.startswith("VmRSS")))
                return rss, len(os.listdir(f"/proc/{pid}/fd"))
        except (OSError, StopIteration):
            continue
    return 0, 0


async def drain(bus: Bus, t: Tally) -> None:
    """Stop every sender, return what dead waiters held, take everything left."""
    for a in await bus.list_agents():
        if a.status == "running" and a.id != ME:
            await admission.kill(bus, a, by="soak: the end")
    while True:
        r = await wait.wait_next(bus, ME, 3)
        if r.status != "received":
            return
        t.got(r.message_id, "drain")


async def soak(bus_url: str, seconds: float, most_calls: int = 15) -> None:
    bus = await open_bus(bus_url)
    await agents.register(bus, ME)
    logs = Path(tempfile.mkdtemp(prefix="wavewait-soak-logs-"))
    marker = tempfile.mkdtemp(prefix="wavewait-soak-stable-")
    t, mem = Tally(), {}
    stop = anyio.Event()
    began = time.monotonic()
    async with anyio.create_task_group() as tg:
        tg.start_soon(senders, bus, logs, stop, t)
        tg.start_soon(stable, bus.url, marker, stop, t, mem, seconds)
        tg.start_soon(victim, bus.url, stop, t, most_calls)
        tg.start_soon(victim, bus.url, stop, t, most_calls)
        tg.start_soon(cli, bus.url, stop, t)
        tg.start_soon(interrupter, bus, stop, t)
        await anyio.sleep(seconds)
        stop.set()
    await drain(bus, t)
    sent = [ln for f in logs.glob("*.log") for ln in f.read_text().split()]
    got = Counter(t.received)
    lost = [m for m in sent if m not in got]
    dups = sum(n - 1 for n in got.values() if n > 1)
    outside = sum(n - 1 for m, n in got.items() if n > 1 and m not in t.in_window)
    kills = t.counts["victim killed"] + t.counts["cli killed"]
    usage = [mem.get(k, (0, 0)) for k in ("10%", "50%", "end")]
    rows = [
        ("bus", bus.url if "://" in bus.url else "directory"),
        ("minutes", f"{(time.monotonic() - began) / 60:.1f}"),
        ("flights spawned / killed", f"{t.counts['spawned']} / {t.counts['sender killed']}"),
        ("messages sent (logged by senders)", len(sent)),
        ("messages received (distinct)", len(got)),
        ("lost", len(lost)),
        ("duplicated (all with the same message id)", dups),
        ("  of which outside the documented window", outside),
        ("consumer kills (victim servers + CLI waits)", kills),
        ("stable calls cancelled", t.counts["stable cancelled"]),
        ("interrupts", t.counts["interrupts"]),
        ("received by: stable / victim / CLI / drain", " / ".join(
            str(t.counts[k]) for k in ("stable reply", "victim reply", "cli reply", "drain"))),
        ("stable server RSS MiB at 10% / 50% / end", " / ".join(f"{rss / 1024:.1f}" for rss, _ in usage)),
        ("stable server open files at 10% / 50% / end", " / ".join(str(fds) for _, fds in usage)),
    ]  # fmt: skip
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    await bus.close()
    if lost:
        print("lost ids:", lost[:10], file=sys.stderr)
        sys.exit(1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--bus", help="a directory or postgresql:// URL (default: a new temporary directory)")
    ap.add_argument("--quick", action="store_true", help="3 seconds, a victim killed within 3 calls")
    args = ap.parse_args()
    url = args.bus or tempfile.mkdtemp(prefix="wavewait-soak-bus-")
    asyncio.run(soak(url, 3.0, 3) if args.quick else soak(url, args.minutes * 60))


if __name__ == "__main__":
    main()
