"""Waves of many flights and many concurrent waits, on both buses, in one table (issue 13).

    python bench/bench_scale.py                      # both buses, 60 s under load (~10 min)
    python bench/bench_scale.py --quick              # 1,000 flights, 20 s under load (unless given)
    python bench/bench_scale.py --duration 600       # the issue's 10-minute RSS run
    python bench/bench_scale.py --code /tmp/old/pkg  # the same bench against other code
    python bench/bench_scale.py --tracemalloc        # also traced Python memory, first vs end
    python bench/bench_scale.py --profile /tmp/prof  # the waiting children under cProfile
    python bench/bench_scale.py --series 30          # the load row's course, every 30 s
    python bench/bench_scale.py --only one-inbox --duration 30   # 200 waits on one inbox
    python bench/bench_scale.py --only saturation --duration 20  # 200 re-issued MCP waits, and the core's
    WAVEWAIT_TEST_PG=postgresql://...                # the server (default postgres@127.0.0.1/test)

Every measured process is a child (`--role ...`), so `--code DIR` (a folder holding a
`wavewait` package with `core/` inside, e.g. an older commit unpacked) runs the same
measurements against that code: before/after figures come from one script, back to back.

Rows (goals from issue 13):
- waiter CPU per report, fan-in over F flights reporting at 500/s (small and large F), and
  their ratio (goal <= 1.5x between 100 and 10,000 flights);
- the same at the large F as a join with a file target, and with a file target and a check
  (`true`, run per report in the flight's folder): goal, the same waiter CPU per report as
  the plain fan-in (issue 41: a verdict or a file event re-read every waiting flight); and
  the plain fan-in again with the same checks run beside it, at the same rate, by another
  process: a check's process (a fork and exec per report) loads a 2-core machine, and the
  waiter's CPU per report grows with that load whoever starts the checks, so the join with a
  check is divided by this run too (what the join itself adds for its checks);
- last report -> fan-in returns, at the large F (goal <= 50 ms files, <= 100 ms PostgreSQL),
  waiting as the MCP and CLI faces do (the result is handed over, then its claims are
  acknowledged: that take is timed on its own row);
- 200 concurrent next-message waits in one process, 1,000 messages/s in all from 4 sending
  processes: send -> return p50/p99 (goal <= 50 ms files, <= 100 ms PostgreSQL), not
  received by the end of the run (still queued: the waiters fell behind) and duplicated
  (goal 0), and that process's RSS after its first minute (or a third of the run, if
  shorter) and at the end (goal: growth <= 20 MB);
- messages/s end to end, 4 senders unpaced, 8 consumer processes each looping a
  next-message wait on one shared inbox (files with and without fsync), and the same with
  each wait taking up to `--batch` (100) queued messages (`max_messages`);
- one inbox, many waits (issue 23): `--waits` (200) fan-in waits in one process, each on its
  own flight, all on the caller's inbox, flights reporting `--load-rate` (1,000) messages/s in
  all; the same with `--baseline-waits` (10) waits; and `--waits` next-message waits sharing
  one inbox: send -> return p50/p99 (goal <= 50 ms files, <= 100 ms PostgreSQL), not received
  by the end / duplicated (goal 0), the waiting process's CPU per message and its ratio to
  the baseline's (goal <= 1.5x); `--only one-inbox` runs these rows alone;
- saturation (issue 43): `--waits` (200) `wait` calls held by one `wavewait mcp` over the MCP
  SDK's client on stdio, each re-issued when it returns, on a backlog of `--backlog` messages
  with 4 writers offering `--load-rate` messages/s for `--duration` s: delivered msg/s, the
  server's CPU per message (its /proc, children included), and the same for the core's `wait`
  (held, then acknowledged) in one process on the same bus, with their ratio (goal <= 2x);
  every message received once; `--only saturation` runs it alone;
- idle CPU of one process holding 100 waits (goal <= 1 % of a core);
- a message sent -> the blocked `wait` returns at a real MCP client over stdio, p50 / p99
  (bench_mcp.py, goal <= 2 / 5 ms files, <= 3 / 8 ms PostgreSQL), and its parts;
- the TUI at 10,000 flights and 100 changes/s: frame and keypress -> screen p99
  (bench_tui.py, goal <= 33 / 50 ms; the TUI runs over the directory bus).
The flights' records are written without fsync (setup, not measured); the senders of the
load rows use the bus's default (fsync on the directory bus) unless the row says otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

PG_URL = os.environ.get("WAVEWAIT_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
HERE = os.path.abspath(__file__)


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))] if values else float("nan")


class Histogram:
    """Latencies in buckets 1 % wide (10 µs to 1,000 s): constant memory for any run length."""

    STEP = math.log(1.01)
    LOW = 1e-5

    def __init__(self) -> None:
        self.counts = [0] * (int(math.log(1e3 / self.LOW) / self.STEP) + 2)
        self.n = 0

    def add(self, seconds: float) -> None:
        b = 0 if seconds <= self.LOW else int(math.log(seconds / self.LOW) / self.STEP) + 1
        self.counts[min(b, len(self.counts) - 1)] += 1
        self.n += 1

    def quantile(self, q: float) -> float:
        """The upper edge of the bucket holding the q-th latency (NaN when empty)."""
        if not self.n:
            return float("nan")
        rank, seen = q * (self.n - 1), 0
        for b, c in enumerate(self.counts):
            seen += c
            if seen > rank:
                return self.LOW * math.exp(b * self.STEP)
        return float("inf")


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def with_schema(url: str, schema: str) -> str:
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "schema"] + [("schema", schema)]
    return urlunsplit(parts._replace(query=urlencode(query)))


# ----------------------------------------------------------------------------- child roles
async def role_fanin(a: argparse.Namespace) -> None:
    """Wait once for a message from each flight; print CPU used and when it returned."""
    from wavewait.core import wait
    from wavewait.core.bus import open_bus

    bus = await open_bus(a.bus)
    flights = [f"flight-{i:05d}" for i in range(a.n)]
    c0 = cpu()
    control = wait.Control(hold=True)  # as the MCP and CLI faces wait: reply first, then take
    # a join: the same flights, a file target (there from the start) and a check each report
    # passes (`true`, in the flight's folder): what a join adds per report
    # (older code, measured with --code, has no joins: the keyword is passed only for one)
    joined = {}
    if a.join_file:
        joined["join"] = wait.Join(files=[wait.FilesTarget(glob=a.join_file)], check=a.join_check or None)
    r = await wait.wait_fan_in(bus, "orchestrator", 600, flights, control=control, **joined)
    t = time.time()
    if control.delivery is not None:
        await control.delivery.ack()
    acked = time.time()
    c1 = cpu()
    got = sum(1 for x in r.results if x.status == "received")
    out = {"cpu": c1 - c0, "returned": t, "acked": acked, "status": r.status, "received": got}
    print(json.dumps(out), flush=True)
    await bus.close()


async def role_server(a: argparse.Namespace) -> None:
    """`a.n` concurrent next-message waits (one per inbox, or all on `a.inbox`) in this process
    until stdin says stop; with `a.fanin`, each a fan-in on its own flight `f<i>`, all on `a.inbox`
    (held and acknowledged after the result, as the MCP face does)."""
    import tracemalloc

    from wavewait.core import wait
    from wavewait.core.bus import open_bus

    try:
        from wavewait.core.proc import settle_heap
    except ImportError:  # older code (--code): its server did not
        settle_heap = None

    if a.tracemalloc:
        tracemalloc.start()
    bus = await open_bus(a.bus)
    if settle_heap is not None:
        settle_heap()  # as `wavewait mcp` does once it is set up
    # fixed-size bookkeeping, made before the first RSS reading, so the bench's own lists do
    # not show as the server's growth: a latency histogram and one byte per message sent
    lat, window = Histogram(), Histogram()
    seen = {f"s{k}": bytearray(a.count) for k in range(a.senders)}
    received = distinct = 0
    stop = asyncio.Event()

    def got(message: str) -> None:
        nonlocal received, distinct
        body = json.loads(message)
        lat.add(time.time() - body["t"])
        window.add(time.time() - body["t"])
        tag, _, i = body["id"].partition("-")
        received += 1
        distinct += seen[tag][int(i)] == 0
        seen[tag][int(i)] = 1

    async def consume(inbox: str) -> None:
        while not stop.is_set():
            r = await wait.wait_next(bus, inbox, a.timeout)
            if r.status == "received" and r.message:
                got(r.message)

    async def fan_in(flight: str) -> None:
        while not stop.is_set():
            control = wait.Control(hold=True)
            r = await wait.wait_fan_in(bus, a.inbox, a.timeout, [flight], control=control)
            if control.delivery is not None:
                await control.delivery.ack()
            for x in r.results:
                if x.status == "received" and x.message:
                    got(x.message)

    if a.fanin:
        tasks = [asyncio.create_task(fan_in(f"f{i:03d}")) for i in range(a.n)]
    else:
        tasks = [asyncio.create_task(consume(a.inbox or f"c{i:03d}")) for i in range(a.n)]
    print("ready", flush=True)
    t0, rss_first, traced_first = time.monotonic(), None, None
    cpu0 = cpu()
    reader = asyncio.create_task(asyncio.to_thread(sys.stdin.readline))
    shown, cpu_shown = t0, cpu0
    while not reader.done():
        await asyncio.sleep(1.0)
        if rss_first is None and time.monotonic() - t0 >= a.first:
            rss_first = rss_mb()
            traced_first = tracemalloc.get_traced_memory()[0] / 1e6 if a.tracemalloc else None
        if a.series and time.monotonic() - shown >= a.series:  # the run's course, to stderr
            t, c = time.monotonic(), cpu()
            print(
                f"  {t - t0:6.0f} s  {window.n:7d} received  p50 {1000 * window.quantile(0.5):9.1f} ms  "
                f"p99 {1000 * window.quantile(0.99):9.1f} ms  CPU {100 * (c - cpu_shown) / (t - shown):3.0f} %  "
                f"RSS {rss_mb():4.0f} MB  load {os.getloadavg()[0]:4.1f}",
                file=sys.stderr,
                flush=True,
            )
            window, shown, cpu_shown = Histogram(), t, c
    stop.set()
    out = {
        "received": received,
        "distinct": distinct,
        "p50": lat.quantile(0.5),
        "p99": lat.quantile(0.99),
        "rss_first": rss_first,
        "rss_end": rss_mb(),
        "traced_first": traced_first,
        "traced_end": tracemalloc.get_traced_memory()[0] / 1e6 if a.tracemalloc else None,
        "cpu": cpu() - cpu0,
    }
    print(json.dumps(out), flush=True)  # before the cancellations: 200 waits give back their claims
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await bus.close()


async def role_send(a: argparse.Namespace) -> None:
    """Send `a.count` messages to the inboxes in `a.to` (round robin), paced at `a.rate`/s
    (0: as fast as it can); the body carries the send time and a unique id."""
    from wavewait.core.bus import open_bus
    from wavewait.core.ids import new_id
    from wavewait.core.model import Item

    bus = await open_bus(a.bus)
    to = a.to.split(",")
    senders = a.senders_from.split(",") if a.senders_from else [a.sender]
    await asyncio.to_thread(sys.stdin.readline)  # go
    t0 = time.time()
    sent = 0
    for i in range(a.count):
        if a.seconds and time.time() - t0 > a.seconds:
            break  # the machine cannot keep the rate: stop on time, say how many went
        if a.rate:
            ahead = t0 + i / a.rate - time.time()
            if ahead > 0:
                await asyncio.sleep(ahead)
        inbox = to[i % len(to)] if a.rr else random.choice(to)
        sender = random.choice(senders)
        body = json.dumps({"t": time.time(), "id": f"{a.tag}-{i}"})
        await bus.deliver(Item(id=new_id(), type="message", to=inbox, sender=sender, body=body))
        sent += 1
    print(json.dumps({"start": t0, "end": time.time(), "sent": sent}), flush=True)
    await bus.close()


async def role_consume(a: argparse.Namespace) -> None:
    """Loop next-message waits on one shared inbox until one times out after the senders are done."""
    from wavewait.core import wait
    from wavewait.core.bus import open_bus

    bus = await open_bus(a.bus)
    print("ready", flush=True)
    if a.go:
        await asyncio.to_thread(sys.stdin.readline)  # start together, on a backlog
    n, last = 0, 0.0
    while True:
        r = await wait.wait_next(bus, "work", a.timeout, max_messages=a.batch)
        if r.status != "received":
            break
        n, last = n + 1 + len(r.more or []), time.time()
    print(json.dumps({"n": n, "last": last}), flush=True)
    await bus.close()


async def role_idle(a: argparse.Namespace) -> None:
    """Hold `a.n` waits, then measure this process's CPU over an idle window."""
    from wavewait.core import wait
    from wavewait.core.bus import open_bus

    bus = await open_bus(a.bus)
    tasks = [asyncio.create_task(wait.wait_next(bus, f"c{i:03d}", 3600)) for i in range(a.n)]
    while len(await bus.list_waits()) < a.n:
        await asyncio.sleep(0.2)
    await asyncio.sleep(min(2.0, a.window))  # let start-up settle
    c0, t0 = cpu(), time.monotonic()
    await asyncio.sleep(a.window)
    share = (cpu() - c0) / (time.monotonic() - t0)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    print(json.dumps({"cpu": share}), flush=True)
    await bus.close()


async def role_listen(a: argparse.Namespace) -> None:
    """One process standing in for one machine: one subscription on the inbox `fan`; print
    the wall-clock time of every wake (the parent compares it with the send time)."""
    from wavewait.core.bus import open_bus

    bus = await open_bus(a.bus)
    sub = await bus.subscribe(inboxes=["fan"])
    print("ready", flush=True)
    stop = asyncio.create_task(asyncio.to_thread(sys.stdin.readline))
    while True:
        step = asyncio.create_task(anext(sub))
        done, _ = await asyncio.wait({step, stop}, return_when=asyncio.FIRST_COMPLETED)
        if stop in done:
            step.cancel()
            break
        print(f"{time.time():.6f}", flush=True)
    sub.close()
    await bus.close()


def proc_cpu(pid: int) -> float:
    """CPU seconds of process `pid` and of its children it waited for (utime, stime, cutime, cstime)."""
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in rest[11:15]) / os.sysconf("SC_CLK_TCK")


def child_pids() -> list[int]:
    """The processes this one started (a `wavewait mcp` under the SDK's stdio client)."""
    me, out = str(os.getpid()), []
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1] == me:
                out.append(int(pid))
        except (OSError, IndexError):
            continue
    return out


async def role_saturate(a: argparse.Namespace) -> None:
    """`a.n` next-message waits on the inbox `orchestrator`, each re-issued when it returns:
    the core's `wait` in this process (`--face core`, held and then acknowledged, as the MCP
    face waits), or `wait` calls to one `wavewait mcp` over the MCP SDK's client on stdio
    (`--face mcp`). Lines on stdin: `mark` prints what was received so far and the measured
    process's CPU (this one, or the server with its children); `stop` ends and prints the ids
    received more than once."""
    from collections import Counter

    ids: Counter[str] = Counter()
    stop = asyncio.Event()

    def got(message: str | None) -> None:
        if message:
            ids[json.loads(message)["id"]] += 1

    async def control(measured: Any) -> None:
        print(json.dumps({"ready": True}), flush=True)
        while line := (await asyncio.to_thread(sys.stdin.readline)).strip():
            out = {"received": sum(ids.values()), "distinct": len(ids), "cpu": measured(), "t": time.time()}
            if line == "stop":
                stop.set()
                out["doubled"] = sorted(k for k, n in ids.items() if n > 1)[:20]
            print(json.dumps(out), flush=True)
            if line == "stop":
                return

    async def loops(one: Any) -> None:
        async def loop() -> None:
            while not stop.is_set():
                await one()

        tasks = [asyncio.create_task(loop()) for _ in range(a.n)]
        await control_task
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    if a.face == "core":
        from wavewait.core import wait
        from wavewait.core.bus import open_bus

        bus = await open_bus(a.bus)

        async def core_one() -> None:
            c = wait.Control(hold=True)
            r = await wait.wait_next(bus, "orchestrator", a.timeout, control=c)
            if c.delivery is not None:
                await c.delivery.ack()
            got(r.message if r.status == "received" else None)

        control_task = asyncio.create_task(control(cpu))
        await loops(core_one)
        await bus.close()
        return
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    env = {k: v for k, v in os.environ.items() if not k.startswith("WAVEWAIT_")}
    # cold (no warm process): the server is this process's child, whose /proc is read
    env |= {"WAVEWAIT_BUS": a.bus, "WAVEWAIT_WARM": "0"}
    # started outside the checkout: `python -m` puts its folder first on sys.path, ahead of
    # --code's PYTHONPATH
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "wavewait", "mcp"], env=env, cwd=tempfile.gettempdir()
    )
    async with Client(params) as c:

        async def unchecked(name: str, result: Any) -> None:
            """The client's jsonschema pass over each result is its own cost, not the server's."""

        c.session.validate_tool_result = unchecked  # type: ignore[method-assign]
        (server,) = child_pids()

        async def mcp_one() -> None:
            r = await c.call_tool("wait", {"timeout": a.timeout})
            sc = r.structured_content or {}
            got(sc.get("message") if sc.get("status") == "received" else None)

        control_task = asyncio.create_task(control(lambda: proc_cpu(server)))
        await loops(mcp_one)


async def role_checks(a: argparse.Namespace) -> None:
    """Run `a.n` checks (`a.join_check`, in `a.folder`) at `a.rate` a second through this
    process's check runner: the machine's load of a join's checks, with no join."""
    from wavewait.core import checks

    t0 = time.monotonic()
    running = []
    for i in range(a.n):
        ahead = t0 + i / a.rate - time.monotonic()
        if ahead > 0:
            await asyncio.sleep(ahead)
        running.append(asyncio.create_task(checks.run_check(a.join_check, a.folder, 600)))
    verdicts = await asyncio.gather(*running)
    print(json.dumps({"passed": sum(v.passed for v in verdicts)}), flush=True)


ROLES = {
    "checks": role_checks,
    "listen": role_listen,
    "fanin": role_fanin,
    "server": role_server,
    "send": role_send,
    "consume": role_consume,
    "idle": role_idle,
    "saturate": role_saturate,
}


# ----------------------------------------------------------------------------- the parent
class Run:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.env = dict(os.environ)
        if args.code:
            self.env["PYTHONPATH"] = os.path.abspath(args.code)

    def child(self, *argv: str, fsync: bool = True) -> subprocess.Popen[str]:
        env = self.env | {"WAVEWAIT_FSYNC": "1" if fsync else "0"}
        profile: list[str] = []
        if self.args.profile and argv[1] in ("server", "fanin", "consume", "idle"):
            os.makedirs(self.args.profile, exist_ok=True)
            kind = "pg" if argv[argv.index("--bus") + 1].startswith("postgres") else "files"
            out = os.path.join(self.args.profile, f"{argv[1]}-{kind}-{time.time_ns()}.prof")
            profile = ["-m", "cProfile", "-o", out]
        return subprocess.Popen(
            [sys.executable, *profile, HERE, *argv],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    async def fresh_bus(self, kind: str) -> tuple[str, Any]:
        from wavewait.core.bus import open_bus

        if kind == "files":
            url = tempfile.mkdtemp(prefix="bench-scale-")
        else:
            url = with_schema(PG_URL, f"bs_{uuid.uuid4().hex[:10]}")
        return url, await open_bus(url)

    async def script(self, name: str, *argv: str) -> dict[str, Any]:
        """Run another bench script of this folder with `--json`; its JSON answer."""
        path = os.path.join(os.path.dirname(HERE), name)
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, path, *argv],
            env=self.env | {"WAVEWAIT_FSYNC": "1"},  # the bus's default: its sends are measured
            capture_output=True,
            text=True,
            timeout=900,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{name} failed: {done.stderr[-2000:]}")
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return result

    async def mcp(self, kind: str) -> dict[str, Any]:
        url, bus = await self.fresh_bus(kind)
        await bus.close()  # made here, measured alone: bench_mcp.py opens its own
        try:
            return await self.script("bench_mcp.py", "-n", "200", "--bus", url, "--json")
        finally:
            await self.drop(kind, url, bus)

    async def drop(self, kind: str, url: str, bus: Any) -> None:
        await bus.close()
        if kind == "files":  # a fan-in's bus holds a file per flight: none is left behind
            await asyncio.to_thread(shutil.rmtree, url)
        if kind == "pg":
            import psycopg
            from psycopg import sql

            from wavewait.core.bus.postgres import split_url

            conninfo, schema = split_url(url)
            async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
                await conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))

    @staticmethod
    async def register(bus: Any, ids: list[str], cwd: str | None = None) -> None:
        from wavewait.core.agents import register

        async def one(x: str) -> None:
            agent = await register(bus, x)
            if cwd is not None:  # a folder of its own, where a join's check runs
                await bus.put_agent(agent.model_copy(update={"cwd": cwd}))

        for i in range(0, len(ids), 200):
            await asyncio.gather(*(one(x) for x in ids[i : i + 200]))

    @staticmethod
    async def until_waits(bus: Any, n: int, deadline: float = 120) -> None:
        end = time.monotonic() + deadline
        while len(await bus.list_waits()) < n:
            if time.monotonic() > end:
                raise RuntimeError(f"only {len(await bus.list_waits())} of {n} waits registered")
            await asyncio.sleep(0.1)

    async def fanin(self, kind: str, n: int, join: bool = False, check: str = "", beside: str = "") -> dict[str, Any]:
        """One fan-in over `n` flights (`join`: and a file target, as a join; `check`: and a
        check each report passes, run in the flight's folder) at the bench's rate; `beside`:
        a plain fan-in with that check run `n` times at the same rate by another process."""
        from wavewait.core.messages import send

        url, bus = await self.fresh_bus(kind)
        flights = [f"flight-{i:05d}" for i in range(n)]
        folder = tempfile.mkdtemp(prefix="bench-join-") if join or beside else None
        await self.register(bus, ["orchestrator"])
        await self.register(bus, flights, cwd=folder)
        extra: list[str] = []
        if folder is not None:
            open(os.path.join(folder, "artifact.whl"), "w").close()
            extra = ["--join-file", os.path.join(folder, "*.whl"), "--join-check", check]
        p = self.child("--role", "fanin", "--bus", url, "--n", str(n), *extra)
        await self.until_waits(bus, 1)
        rate = self.args.rate
        checker = None
        if beside:
            assert folder is not None
            argv = ["--role", "checks", "--n", str(n), "--rate", str(rate), "--join-check", beside, "--folder", folder]
            checker = self.child(*argv)
        t0 = time.time()
        order = flights[:]
        random.shuffle(order)
        for i, f in enumerate(order):
            ahead = t0 + i / rate - time.time()
            if ahead > 0:
                await asyncio.sleep(ahead)
            await send(bus, f, "orchestrator", f"report of {f}")
        last = time.time()
        out, _ = await asyncio.to_thread(p.communicate, timeout=600)
        r = json.loads(out.strip().splitlines()[-1])
        if checker is not None:
            checked, _ = await asyncio.to_thread(checker.communicate, timeout=600)
            assert json.loads(checked.strip().splitlines()[-1])["passed"] == n, checked
        await self.drop(kind, url, bus)
        if folder is not None:
            shutil.rmtree(folder)
        return {
            "cpu_ms": 1000 * r["cpu"] / n,
            "return_ms": 1000 * (r["returned"] - last),
            "ack_ms": 1000 * (r["acked"] - r["returned"]),
            "ok": r["status"] == "complete" and r["received"] == n,
            "send_rate": n / max(1e-9, last - t0),
        }

    async def load(self, kind: str, shape: str = "next", waits: int | None = None) -> dict[str, Any]:
        """`waits` waits in one process under `--load-rate` messages/s from 4 sending processes.

        shape "next": next-message waits, one per inbox; "next-one-inbox": next-message waits
        all on one inbox; "fanin-one-inbox": fan-in waits, each on its own flight, all on one inbox.
        """
        a = self.args
        waits = a.waits if waits is None else waits
        url, bus = await self.fresh_bus(kind)
        flights = [f"f{i:03d}" for i in range(waits)] if shape == "fanin-one-inbox" else []
        inboxes = ["orchestrator"] if shape.endswith("one-inbox") else [f"c{i:03d}" for i in range(waits)]
        await self.register(bus, ["sender", *inboxes, *flights])
        first = min(60.0, a.duration / 3)
        per = int(a.load_rate * a.duration / a.senders)
        argv = ["--role", "server", "--bus", url, "--n", str(waits), "--first", str(first), "--timeout", "30"]
        argv += ["--count", str(per), "--senders", str(a.senders), "--series", str(a.series)]
        if shape.endswith("one-inbox"):
            argv += ["--inbox", "orchestrator", *(["--fanin"] if flights else [])]
        server = self.child(*argv, *(["--tracemalloc"] if a.tracemalloc else []))
        assert server.stdout is not None and server.stdin is not None
        await asyncio.to_thread(server.stdout.readline)
        await self.until_waits(bus, waits)
        senders = [
            self.child(
                "--role",
                "send",
                "--bus",
                url,
                "--to",
                ",".join(inboxes),
                "--count",
                str(per),
                "--rate",
                str(a.load_rate / a.senders),
                "--seconds",
                str(a.duration),
                "--tag",
                f"s{k}",
                "--sender",
                "sender",
                *(["--senders-from", ",".join(flights)] if flights else []),
            )
            for k in range(a.senders)
        ]
        for s in senders:
            assert s.stdin is not None
            s.stdin.write("go\n")
            s.stdin.flush()
        sent = 0
        for s in senders:
            out, _ = await asyncio.to_thread(s.communicate, timeout=a.duration * 3 + 120)
            sent += json.loads(out.strip().splitlines()[-1])["sent"]
        end = time.monotonic() + 30  # drain: until every inbox is empty
        while time.monotonic() < end:
            if not any([await bus.pending(i) for i in inboxes]):
                break
            await asyncio.sleep(0.5)
        await asyncio.sleep(1.0)
        server.stdin.write("stop\n")
        server.stdin.flush()
        r = json.loads(await asyncio.to_thread(server.stdout.readline))
        await asyncio.to_thread(server.wait, 600)
        await self.drop(kind, url, bus)
        r["sent"] = sent
        return r

    async def saturation(self, kind: str, face: str) -> dict[str, Any]:
        """`--waits` re-issued waits (`face` core or mcp) on one inbox, given a backlog of
        `--backlog` messages and then 4 writers offering `--load-rate` messages/s for
        `--duration` s; then drained. Delivered msg/s over the writers' window, the measured
        process's CPU per message over the whole run, and every id checked received once."""
        from wavewait.core.ids import new_id
        from wavewait.core.model import Item

        a = self.args
        url, bus = await self.fresh_bus(kind)
        await self.register(bus, ["orchestrator", "sender"])
        argv = ["--role", "saturate", "--face", face, "--bus", url, "--n", str(a.waits), "--timeout", "30"]
        p = self.child(*argv)
        assert p.stdout is not None and p.stdin is not None

        async def ask(word: str) -> dict[str, Any]:
            assert p.stdout is not None and p.stdin is not None
            p.stdin.write(word + "\n")
            p.stdin.flush()
            answer: dict[str, Any] = json.loads(await asyncio.to_thread(p.stdout.readline))
            return answer

        await asyncio.to_thread(p.stdout.readline)  # ready
        await self.until_waits(bus, a.waits)
        first = await ask("mark")
        for i in range(a.backlog):  # written without fsync: set-up, not measured
            body = json.dumps({"t": time.time(), "id": f"b-{i}"})
            await bus.deliver(Item(id=new_id(), type="message", to="orchestrator", sender="sender", body=body))
        per = int(a.load_rate * a.duration / a.senders)
        argv = ["--role", "send", "--bus", url, "--to", "orchestrator", "--count", str(per)]
        argv += ["--rate", str(a.load_rate / a.senders), "--seconds", str(a.duration), "--sender", "sender"]
        senders = [self.child(*argv, "--tag", f"s{k}") for k in range(a.senders)]
        for s in senders:
            assert s.stdin is not None
            s.stdin.write("go\n")
            s.stdin.flush()
        sent = a.backlog
        for s in senders:
            out, _ = await asyncio.to_thread(s.communicate, timeout=a.duration * 3 + 120)
            sent += json.loads(out.strip().splitlines()[-1])["sent"]
        window = await ask("mark")
        queued = len(await bus.pending("orchestrator"))
        end = time.monotonic() + max(120.0, 10 * a.duration)  # drain: until every message came
        while (last := await ask("mark"))["distinct"] < sent and time.monotonic() < end:
            await asyncio.sleep(0.5)
        # the acknowledgements (the MCP face's come 2 s after each reply) are the message's cost
        # too: measured until the process is quiet, then the ids are checked
        if face == "mcp" or not a.quick:  # the core's acknowledgements are at once
            await asyncio.sleep(2.5)
        while (now := await ask("mark"))["cpu"] - last["cpu"] > 0.02 and time.monotonic() < end:
            last = now
            await asyncio.sleep(0.5)
        last = now
        final = await ask("stop")
        await asyncio.to_thread(p.wait, 120)
        await self.drop(kind, url, bus)
        got = last["received"] - first["received"]
        return {
            "rate": (window["received"] - first["received"]) / (window["t"] - first["t"]),
            "cpu_ms": 1000 * (last["cpu"] - first["cpu"]) / max(1, got),
            "queued": queued,
            "sent": sent,
            "lost": sent - final["distinct"],
            "doubled": final["received"] - final["distinct"],
            "examples": final["doubled"],
        }

    async def throughput(self, kind: str, fsync: bool, batch: int = 1) -> tuple[float, float]:
        a = self.args
        url, bus = await self.fresh_bus(kind)
        await self.register(bus, ["work", "sender"])
        argv = ["--role", "consume", "--bus", url, "--timeout", "3", "--batch", str(batch)]
        consumers = [self.child(*argv) for _ in range(a.consumers)]
        for c in consumers:
            assert c.stdout is not None
            await asyncio.to_thread(c.stdout.readline)
        per = a.messages // a.senders
        senders = [
            self.child(
                "--role",
                "send",
                "--bus",
                url,
                "--to",
                "work",
                "--count",
                str(per),
                "--rate",
                "0",
                "--tag",
                f"s{k}",
                "--sender",
                "sender",
                fsync=fsync,
            )
            for k in range(a.senders)
        ]
        await self.until_waits(bus, a.consumers)
        for s in senders:
            assert s.stdin is not None
            s.stdin.write("go\n")
            s.stdin.flush()
        starts, ends = [], []
        for s in senders:
            out, _ = await asyncio.to_thread(s.communicate, timeout=600)
            sent = json.loads(out.strip().splitlines()[-1])
            starts.append(sent["start"])
            ends.append(sent["end"])
        got, last = 0, 0.0
        for c in consumers:
            out, _ = await asyncio.to_thread(c.communicate, timeout=600)
            r = json.loads(out.strip().splitlines()[-1])
            got, last = got + r["n"], max(last, r["last"])
        await self.drop(kind, url, bus)
        if got != per * a.senders:
            print(f"  ({kind}: {got} of {per * a.senders} messages taken)", file=sys.stderr)
        return got / max(1e-9, last - min(starts)), per * a.senders / max(1e-9, max(ends) - min(starts))

    async def drain(self, kind: str, batch: int) -> float:
        """`--consumers` (8) started together on a backlog of `--messages`: what they take per second."""
        from wavewait.core.ids import new_id
        from wavewait.core.model import Item

        url, bus = await self.fresh_bus(kind)
        await self.register(bus, ["work", "sender"])
        for i in range(self.args.messages):
            body = json.dumps({"t": time.time(), "id": f"b-{i}"})
            await bus.deliver(Item(id=new_id(), type="message", to="work", sender="sender", body=body))
        # each ends once a wait times out on the drained inbox (quick: sooner; they start on the backlog)
        timeout = "1" if self.args.quick else "3"
        argv = ["--role", "consume", "--bus", url, "--timeout", timeout, "--batch", str(batch), "--go"]
        consumers = [self.child(*argv) for _ in range(self.args.consumers)]
        for c in consumers:
            assert c.stdout is not None
            await asyncio.to_thread(c.stdout.readline)
        t0 = time.time()
        for c in consumers:
            assert c.stdin is not None
            c.stdin.write("go\n")
            c.stdin.flush()
        got, last = 0, 0.0
        for c in consumers:
            out, _ = await asyncio.to_thread(c.communicate, timeout=600)
            r = json.loads(out.strip().splitlines()[-1])
            got, last = got + r["n"], max(last, r["last"])
        await self.drop(kind, url, bus)
        if got != self.args.messages:
            print(f"  ({kind}: {got} of {self.args.messages} messages taken)", file=sys.stderr)
        return got / max(1e-9, last - t0)

    async def idle(self, kind: str) -> float:
        url, bus = await self.fresh_bus(kind)
        await self.register(bus, [f"c{i:03d}" for i in range(100)])
        p = self.child("--role", "idle", "--bus", url, "--n", "100", "--window", str(self.args.idle_window))
        out, _ = await asyncio.to_thread(p.communicate, timeout=600)
        await self.drop(kind, url, bus)
        return float(json.loads(out.strip().splitlines()[-1])["cpu"])


async def listeners(run: Run, ks: list[int], rounds: int) -> list[tuple[int, float, float, int, float]]:
    """k listening processes on one database: wake latency (deliver -> each process woken),
    the server's connections (pg_stat_activity) and the CPU its processes used per round."""
    from wavewait.core.ids import new_id
    from wavewait.core.model import Item

    out = []
    for k in ks:
        url, bus = await run.fresh_bus("pg")
        before = await connections()
        kids = [run.child("--role", "listen", "--bus", url) for _ in range(k)]
        for c in kids:
            assert c.stdout is not None
            await asyncio.to_thread(c.stdout.readline)
        conns = await connections() - before
        # the server is shared: its CPU over an equal quiet window is taken off
        t0, cpu0 = time.monotonic(), server_cpu()
        await asyncio.sleep(rounds * 0.06)
        quiet = (server_cpu() - cpu0) / (time.monotonic() - t0)
        t0, cpu0 = time.monotonic(), server_cpu()
        lat: list[float] = []
        for _ in range(rounds):
            t = time.time()
            await bus.deliver(Item(id=new_id(), type="message", to="fan", sender="bench", body="x"))
            for c in kids:
                assert c.stdout is not None
                woke = float(await asyncio.to_thread(c.stdout.readline))
                lat.append(woke - t)
            await asyncio.sleep(0.05)
        cpu_ms = 1000 * max(0.0, server_cpu() - cpu0 - quiet * (time.monotonic() - t0)) / rounds
        for c in kids:
            await asyncio.to_thread(c.communicate, "stop\n", 60)
        await run.drop("pg", url, bus)
        out.append((k, 1000 * pct(lat, 0.5), 1000 * pct(lat, 0.99), conns, cpu_ms))
        print(f"  listeners {k}: {out[-1]}", file=sys.stderr, flush=True)
    return out


async def connections() -> int:
    """Connections to the bench's database (pg_stat_activity)."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as conn:
        cur = await conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
        row = await cur.fetchone()
        return int(row[0]) if row else 0


def server_cpu() -> float:
    """CPU seconds used so far by the processes named postgres on this machine (loopback)."""
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)
            if not fields[0].endswith("(postgres"):
                continue
            rest = fields[1].split()
            total += int(rest[11]) + int(rest[12])  # utime, stime
        except (OSError, IndexError, ValueError):
            continue
    return total / os.sysconf("SC_CLK_TCK")


def one_inbox(put: Any, kind: str, fan: dict[str, Any], base: dict[str, Any], nxt: dict[str, Any], args: Any) -> None:
    """The rows of many waits on one inbox: fan-in waits (and the baseline), next-message waits."""
    rate = f"{args.load_rate:,.0f} msg/s, {args.duration:g} s"
    for what, r, n in (
        (f"{args.waits} fan-in waits, one inbox", fan, args.waits),
        (f"{args.baseline_waits} fan-in waits, one inbox", base, args.baseline_waits),
        (f"{args.waits} next-message waits, one inbox", nxt, args.waits),
    ):
        head = f"{what}, {rate}"
        put(f"{head}: send -> return p50 / p99 ms", kind, f"{1000 * r['p50']:.1f} / {1000 * r['p99']:.1f}")
        late, dup = r["sent"] - r["distinct"], r["received"] - r["distinct"]
        put(f"{head}: not received by the end / duplicated", kind, f"{late} / {dup} (of {r['sent']:,})")
        put(f"{head}: rate the senders reached, msg/s", kind, f"{r['sent'] / args.duration:.0f}")
        put(f"{head}: waiting process CPU % of a core", kind, f"{100 * r['cpu'] / args.duration:.0f}")
        put(f"{head}: CPU ms per message", kind, f"{1000 * r['cpu'] / max(1, r['received']):.3f}")
    ratio = (fan["cpu"] / max(1, fan["received"])) / max(1e-9, base["cpu"] / max(1, base["received"]))
    put(f"CPU per message, {args.waits} / {args.baseline_waits} fan-in waits (goal <= 1.5x)", kind, f"{ratio:.2f}x")


def fmt(x: float | None, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


BUS_ROWS = ("fanin", "load", "one-inbox", "saturation", "throughput", "idle", "mcp")  # run on each bus


def rows_per_bus(only: str, buses: list[str], once: bool) -> dict[str, set[str]]:
    """The rows of `only` each bus runs: all of them, or (`once`) each on one bus, dealt to the
    buses in turn: every row's code runs once and every bus is used (a check that they run)."""
    wanted = [r for r in BUS_ROWS if r in only.split(",")]
    if not once:
        return {kind: set(wanted) for kind in buses}
    return {kind: set(wanted[i :: len(buses)]) for i, kind in enumerate(buses)}


async def fanin_rows(run: Run, kind: str, put: Callable[[str, str, str], None]) -> None:
    """The fan-in rows: small and large, then the large as a join (a file), as a join with a
    check, and as a plain fan-in with the same checks run beside it by another process (the
    machine's load of the checks, without the join). With `--fanin-rounds N` the four large
    runs go round N times, interleaved, and each cell is the median (the range beside it):
    one run's CPU per report moves by a third with what else the machine does, so a ratio of
    two single runs says little."""
    args = run.args
    small, large = args.small, args.flights
    s = await run.fanin(kind, small)
    # code from before joins (--code) has no Join: its rows are left out
    joins = not args.code or "class Join" in open(os.path.join(args.code, "wavewait/core/wait/fan_in.py")).read()
    fanins: list[dict[str, Any]] = []
    beside: list[dict[str, Any]] = []  # the fan-in with the same checks run by another process
    joined: dict[str, list[dict[str, Any]]] = {"join": [], "join + check": []}
    for _ in range(max(1, args.fanin_rounds)):
        fanins.append(await run.fanin(kind, large))
        if joins:
            joined["join"].append(await run.fanin(kind, large, join=True))
            joined["join + check"].append(await run.fanin(kind, large, join=True, check="true"))
            beside.append(await run.fanin(kind, large, beside="true"))

    def cell(values: list[float], spec: str, unit: str = "") -> str:
        mid = statistics.median(values)
        if len(values) == 1:
            return f"{mid:{spec}}{unit}"
        return f"{mid:{spec}}{unit} ({min(values):{spec}}-{max(values):{spec}})"

    cpu = [b["cpu_ms"] for b in fanins]
    put(f"waiter CPU ms/report, {small:,} flights", kind, fmt(s["cpu_ms"], ".3f"))
    put(f"waiter CPU ms/report, {large:,} flights", kind, cell(cpu, ".3f"))
    put(f"ratio {large:,} / {small:,} (goal <= 1.5x)", kind, cell([x / s["cpu_ms"] for x in cpu], ".2f", "x"))
    put(f"last report -> return, {large:,} flights, ms", kind, cell([b["return_ms"] for b in fanins], ".1f"))
    put(
        f"  then acknowledged (claims -> history), {large:,} flights, ms",
        kind,
        cell([b["ack_ms"] for b in fanins], ".1f"),
    )
    put(
        "  (reports sent/s; all received)",
        kind,
        f"{fanins[0]['send_rate']:.0f}; {s['ok'] and all(b['ok'] for b in fanins)}",
    )
    if not joins:
        return
    # the same join with a check over the small wave: its cost per report must not grow with
    # the flights (keyed wakes: a verdict or a file wakes only its own flight's key)
    small_checked = await run.fanin(kind, small, join=True, check="true")
    for label, runs in joined.items():
        what = f"{large:,} flights + a file" + (", `true`" if label == "join + check" else "")
        put(f"{label} ({what}): waiter CPU ms/report", kind, cell([x["cpu_ms"] for x in runs], ".3f"))
        put(
            f"  {label} / fan-in CPU per report, {large:,} flights",
            kind,
            cell([x["cpu_ms"] / b["cpu_ms"] for b, x in zip(fanins, runs, strict=True)], ".2f", "x"),
        )
        put(
            f"  {label}: last report -> return, {large:,} flights, ms",
            kind,
            cell([x["return_ms"] for x in runs], ".1f"),
        )
        put(f"  ({label}: all received)", kind, str(all(x["ok"] for x in runs)))
    put(
        f"fan-in, {large:,} flights, `true` run beside it per report by another process: waiter CPU ms/report",
        kind,
        cell([x["cpu_ms"] for x in beside], ".3f"),
    )
    put(
        "  join + check / that fan-in CPU per report (what the join adds for its checks)",
        kind,
        cell([x["cpu_ms"] / b["cpu_ms"] for b, x in zip(beside, joined["join + check"], strict=True)], ".2f", "x"),
    )
    put(
        f"join + check ({small:,} flights + a file, `true`): waiter CPU ms/report",
        kind,
        fmt(small_checked["cpu_ms"], ".3f"),
    )
    put(
        f"  join + check: ratio {large:,} / {small:,} (as the fan-in's)",
        kind,
        cell([x["cpu_ms"] / small_checked["cpu_ms"] for x in joined["join + check"]], ".2f", "x"),
    )
    put("  (join + check, small: all received)", kind, str(small_checked["ok"]))


async def main(args: argparse.Namespace) -> None:
    run = Run(args)
    buses = args.buses.split(",")
    rows: dict[str, dict[str, str]] = {}

    def put(name: str, kind: str, value: str) -> None:
        rows.setdefault(name, {})[kind] = value
        print(f"  {kind:5} {name}: {value}", file=sys.stderr, flush=True)

    only = rows_per_bus(args.only, buses, args.each_row_once)
    for kind in buses:
        if "fanin" in only[kind]:
            await fanin_rows(run, kind, put)
        if "load" in only[kind]:
            r = await run.load(kind)
            head = f"{args.waits} waits, {args.load_rate:,} msg/s, {args.duration:g} s"
            put(f"{head}: send -> return p50 / p99 ms", kind, f"{1000 * r['p50']:.1f} / {1000 * r['p99']:.1f}")
            # not received by the end of the run: still queued in their inboxes (the waiters fell
            # behind), not gone; a message missing from the bus too would be lost
            late, dup = r["sent"] - r["distinct"], r["received"] - r["distinct"]
            put(f"{head}: not received by the end / duplicated", kind, f"{late} / {dup} (of {r['sent']:,})")
            put(f"{head}: rate the senders reached, msg/s", kind, f"{r['sent'] / args.duration:.0f}")
            put(f"{head}: RSS first / end MB", kind, f"{fmt(r['rss_first'], '.0f')} / {r['rss_end']:.0f}")
            if args.tracemalloc:
                put(f"{head}: traced MB first / end", kind, f"{fmt(r['traced_first'], '.1f')} / {r['traced_end']:.1f}")
            put(f"{head}: server CPU % of a core", kind, f"{100 * r['cpu'] / args.duration:.0f}")
        if "one-inbox" in only[kind]:
            one_inbox(
                put,
                kind,
                await run.load(kind, "fanin-one-inbox"),
                await run.load(kind, "fanin-one-inbox", args.baseline_waits),
                await run.load(kind, "next-one-inbox"),
                args,
            )
        if "saturation" in only[kind]:
            m, c = await run.saturation(kind, "mcp"), await run.saturation(kind, "core")
            head = f"saturation, {args.waits} re-issued waits, {args.load_rate:,.0f} msg/s offered, {args.duration:g} s"
            put(f"{head}: MCP delivered msg/s (queued at the end)", kind, f"{m['rate']:.0f} ({m['queued']:,})")
            put(f"{head}: MCP server CPU ms/message", kind, f"{m['cpu_ms']:.3f}")
            put(f"{head}: core delivered msg/s (queued at the end)", kind, f"{c['rate']:.0f} ({c['queued']:,})")
            put(f"{head}: core CPU ms/message", kind, f"{c['cpu_ms']:.3f}")
            put(f"{head}: MCP / core CPU per message (goal <= 2x)", kind, f"{m['cpu_ms'] / c['cpu_ms']:.2f}x")
            for face, r in (("MCP", m), ("core", c)):
                bad = f"; e.g. {', '.join(r['examples'][:3])}" if r["examples"] else ""
                put(f"{head}: {face} lost / doubled", kind, f"{r['lost']} / {r['doubled']} (of {r['sent']:,}){bad}")
        if "throughput" in only[kind]:
            # each row: taken end to end / what the senders (4) managed to send, messages/s
            # (quick: the last two rows only; the others run the same code with another batch or fsync)
            nc = args.consumers
            if not args.quick:
                got, sent = await run.throughput(kind, True)
                put(f"messages/s, {nc} consumers (senders' own rate)", kind, f"{got:.0f} ({sent:.0f})")
                if kind == "files":
                    got, sent = await run.throughput(kind, False)
                    put(f"messages/s, {nc} consumers, WAVEWAIT_FSYNC=0 (senders)", kind, f"{got:.0f} ({sent:.0f})")
            for batch in (args.batch,) if args.quick else (1, args.batch):
                rate = await run.drain(kind, batch)
                put(f"messages/s, {nc} consumers taking up to {batch} per wait from a backlog", kind, f"{rate:.0f}")
            got, sent = await run.throughput(kind, kind == "pg", args.batch)
            fs = "" if kind == "pg" else ", WAVEWAIT_FSYNC=0"
            put(
                f"messages/s, {nc} consumers taking up to {args.batch} per wait{fs} (senders)",
                kind,
                f"{got:.0f} ({sent:.0f})",
            )
        if "idle" in only[kind]:
            put("idle CPU, 100 waits, % of a core", kind, f"{100 * await run.idle(kind):.2f}")
        if "mcp" in only[kind]:
            for name, (p50, p99) in (await run.mcp(kind)).items():
                put(f"MCP: {name}, p50 / p99 ms", kind, f"{p50:.2f} / {p99:.2f}")
    if "tui" in args.only:
        r = await run.script("bench_tui.py", "--flights", str(args.flights), "--rate", "100", "--json")
        for key, name in (("frames", "frame"), ("keys", "keypress -> screen")):
            rows.setdefault(f"TUI, {args.flights:,} flights, 100 changes/s: {name} p50 / p99 ms", {})["files"] = (
                f"{r[key][0]:.1f} / {r[key][1]:.1f}"
            )
    if "listeners" in args.only:
        ks = [int(k) for k in args.listeners.split(",")]
        for k, p50, p99, conns, cpu_ms in await listeners(run, ks, args.rounds):
            rows.setdefault(f"{k} listening processes: wake p50 / p99 ms", {})["pg"] = f"{p50:.1f} / {p99:.1f}"
            rows.setdefault(f"{k} listening processes: server connections added", {})["pg"] = str(conns)
            rows.setdefault(f"{k} listening processes: server CPU ms per change", {})["pg"] = f"{cpu_ms:.2f}"
    code = args.code or "this checkout"
    print(f"\nbench_scale ({code}; {args.duration:g} s load; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f})")
    print(f"| measure | {' | '.join(buses)} |")
    print(f"|---|{'---|' * len(buses)}")
    for name, values in rows.items():
        print(f"| {name} | {' | '.join(values.get(b, '-') for b in buses)} |")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The bench's options (from `argv`, or the command line); bench/guard.py passes its own."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--role", choices=sorted(ROLES))
    p.add_argument("--bus")
    p.add_argument("--n", type=int, default=0)
    p.add_argument("--join-file", default="", help="role fanin: a join, with a file target matching this glob")
    p.add_argument(
        "--join-check", default="", help="role fanin: the join's check (with --join-file); role checks: the check"
    )
    p.add_argument("--folder", default="", help="role checks: where the checks run")
    p.add_argument("--to", default="")
    p.add_argument("--count", type=int, default=0)
    p.add_argument("--rate", type=float, default=500.0, help="reports/s into the fan-in")
    p.add_argument("--rr", action="store_true")
    p.add_argument("--tag", default="s")
    p.add_argument("--sender", default="sender")
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("--first", type=float, default=60.0)
    p.add_argument("--window", type=float, default=10.0)
    p.add_argument("--seconds", type=float, default=0.0, help="a sender stops after this many seconds")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--buses", default="files,pg")
    p.add_argument("--only", default="fanin,load,one-inbox,saturation,throughput,idle,mcp,tui")
    p.add_argument(
        "--each-row-once",
        action="store_true",
        help="each row on one bus only, the rows dealt to the buses in turn (that every row runs; tests/bench)",
    )
    p.add_argument("--small", type=int, default=100)
    p.add_argument(
        "--fanin-rounds",
        type=int,
        default=1,
        help="the large fan-in, join and join + check, interleaved this many times",
    )
    p.add_argument("--flights", type=int, default=10_000)
    p.add_argument("--waits", type=int, default=200)
    p.add_argument("--baseline-waits", type=int, default=10, help="the one-inbox fan-in row's baseline")
    p.add_argument("--inbox", default="", help="a server's waits all wait on this inbox")
    p.add_argument("--fanin", action="store_true", help="a server's waits are fan-ins on flights f000...")
    p.add_argument("--senders-from", default="", help="a sender sends as one of these (random)")
    p.add_argument("--load-rate", type=float, default=1000.0)
    p.add_argument(
        "--senders", type=int, default=4, help="sending processes of the load, saturation and throughput rows"
    )
    p.add_argument("--consumers", type=int, default=8, help="consumer processes of the throughput rows")
    p.add_argument("--backlog", type=int, default=2000, help="saturation: messages queued before the writers start")
    p.add_argument("--face", choices=("core", "mcp"), default="core", help="role saturate: whose wait")
    p.add_argument("--duration", type=float, default=60.0, help="seconds under load (the issue: 600)")
    p.add_argument("--messages", type=int, default=20_000, help="messages in the throughput row")
    p.add_argument("--idle-window", type=float, default=10.0)
    p.add_argument("--code", help="a folder with the wavewait package to measure instead")
    p.add_argument("--batch", type=int, default=100, help="max_messages of the batched consumers' waits")
    p.add_argument("--go", action="store_true", help="a consumer starts on a line from stdin")
    p.add_argument("--tracemalloc", action="store_true")
    p.add_argument("--series", type=float, default=0.0, help="the load row's server prints p50/p99 every SECONDS")
    p.add_argument("--profile", metavar="DIR", help="run the measured children under cProfile, writing DIR/*.prof")
    p.add_argument("--listeners", default="1,4,16,64", help="with --only listeners: k processes on one database")
    p.add_argument("--rounds", type=int, default=30)
    args = p.parse_args(argv)
    if args.quick:  # its sizes, where none was given
        quick = {"flights": 1000, "duration": 20.0, "messages": 5000, "idle_window": 5.0, "backlog": 200}
        for name, value in quick.items():
            if getattr(args, name) == p.get_default(name):
                setattr(args, name, value)
    return args


if __name__ == "__main__":
    a = parse()
    if a.role:
        asyncio.run(ROLES[a.role](a))
    else:
        if a.code:  # the parent sets up buses with the measured code too
            sys.path.insert(0, os.path.abspath(a.code))
        os.environ["WAVEWAIT_FSYNC"] = "0"  # setup writes (10,000 flight records) are not measured
        asyncio.run(main(a))
