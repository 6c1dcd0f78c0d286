"""The task queue on both buses, in one run.

    python bench/bench_queue.py            # full run (about a minute)
    python bench/bench_queue.py --quick    # every row once, tiny: that it runs (CI), not a figure
    WAVEWAIT_TEST_PG=postgresql://...      # the server (default postgres@127.0.0.1:5432/test)

Rows, for each bus:
- a done dependency -> its dependent's agent started, p50/p99: a chain of tasks run by the
  runner in this process, each agent a `sleep` that never completes; the bench completes
  each running task (an unbound orchestrator) and measures from the completion (the
  handoff's `completedAt`, taken just before it is written) to the dependent's agent record
  on the bus (the runner woke, read the queue, rendered the prompt with the handoffs and
  registered the agent). "process up" adds marking the task running (naming the agent),
  and the supervisor starting and recording the agent's pid (a Python process start:
  spawn's own cost, as for `spawn_agent`). Again (half the samples) in a queue that holds
  5,000 finished tasks before the chain: a runner's round must not read them all.
- enqueue+complete throughput: N tasks enqueued, then each completed with a handoff, in one
  process, one call after another; the same split over 4 processes at once (fsyncs of
  concurrent writers share journal commits on ext4); and over 4 processes that each make
  16 calls at once (a server answering many agents, an orchestrator enqueuing a fan-out):
  on PostgreSQL those share statements (group commit), on the directory bus they run in
  worker threads whose fsyncs overlap. Each call waits for its own write: on the directory
  bus one fsync'd file per enqueue and one per completion, on PostgreSQL one statement
  (shared or not) each.
Targets: done -> dependent's agent registered p99 <= 50 ms on both buses; enqueue+complete
with 4 processes >= 2,000 tasks/s on the directory bus, >= 5,000 on PostgreSQL.
The PostgreSQL schema is fresh for the run and dropped after.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
import uuid
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import sql

from wavewait.core import admission
from wavewait.core.bus import Bus, open_bus
from wavewait.core.bus.fs import DURABLE
from wavewait.core.model import Agent
from wavewait.core.runner import Runner
from wavewait.core.tasks import Limits, TaskQueue, complete_task, enqueue_task, parse_task_types

PG_URL = os.environ.get("WAVEWAIT_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
TYPES = parse_task_types('[types.step]\nprompt = "Do step {n}."\n')
HANDOFF = {"goals": "the step", "did": "did the step", "forNextAgent": "go on"}
WORKERS = 4
AT_ONCE = 16  # calls at once in each process, in the last row
FINISHED = 5000  # finished tasks in the queue, in the second latency row


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def with_schema(url: str, schema: str) -> str:
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "schema"] + [("schema", schema)]
    return urlunsplit(parts._replace(query=urlencode(query)))


async def until_running(q: TaskQueue, task_id: str, changes) -> str:
    """The agent id of `task_id` once the runner has started it (woken by the queue's changes)."""
    while True:
        t = await q.store.get(task_id)
        if t is not None and t.status == "running" and t.agent_id:
            return t.agent_id
        if t is None or t.status not in ("queued", "running"):
            raise RuntimeError(f"task {task_id} is {t and t.status}: {t and t.note}")
        await changes.wait()


async def until_up(bus: Bus, agent_id: str, changes) -> Agent:
    """The agent's record once its supervisor has recorded its pid (woken by the agents' changes):
    the task names its agent once the record is kept, before its process starts."""
    while True:
        agent = await bus.get_agent(agent_id)
        if agent is not None and agent.pid is not None:
            return agent
        if agent is not None and agent.finished:
            raise RuntimeError(f"agent {agent_id} is {agent.status}: {agent.reason}")
        await changes.wait()


async def latency(bus: Bus, n: int, finished: int = 0) -> tuple[list[float], list[float]]:
    """Dependency done -> dependent's agent registered / its process up, in ms, n samples, in a
    queue that already holds `finished` finished tasks."""
    q = TaskQueue.open(bus, f"lat{uuid.uuid4().hex[:8]}", TYPES, Limits(max_tasks=n + 1 + finished))
    if finished:
        await fill(q, finished)
    ids: list[str] = []
    for i in range(n + 1):
        r = await enqueue_task(q, "bench", type="step", inputs={"n": i}, reason="chain", depends_on=ids[-1:] or None)
        ids.append(r.id)
    runner = Runner(q, ["sh", "-c", "exec sleep 600", "agent"], max_parallel=1)  # the prompt is $1: unused
    run = asyncio.ensure_future(runner.run())
    changes = await q.store.subscribe()
    agent_changes = await bus.subscribe(agents=True)
    registered, up = [], []
    previous = None
    try:
        for i, tid in enumerate(ids):
            agent = await until_up(bus, await until_running(q, tid, changes), agent_changes)
            if i > 0:
                h = await q.store.handoff(ids[i - 1])
                assert h is not None
                registered.append((agent.created_at - h.completed_at) * 1000)
                up.append((agent.updated_at - h.completed_at) * 1000)
            if previous is not None:
                await admission.kill(bus, previous, by="bench")
            previous = agent
            await complete_task(q, "bench", task_id=tid, status="done", handoff=HANDOFF)
        await asyncio.wait_for(run, 30)
    finally:
        changes.close()
        agent_changes.close()
        if previous is not None:
            await admission.kill(bus, previous, by="bench")
        run.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await run
    return registered, up


async def fill(q: TaskQueue, n: int) -> None:
    """n tasks enqueued and completed, 16 calls at a time."""
    for start in range(0, n, 16):
        tasks = await asyncio.gather(
            *(
                enqueue_task(q, "bench", type="step", inputs={"n": f"old-{i}"}, reason="r")
                for i in range(start, min(n, start + 16))
            )
        )
        await asyncio.gather(*(complete_task(q, "bench", task_id=t.id, status="done", handoff=HANDOFF) for t in tasks))


async def throughput(bus: Bus, queue: str, n: int, at_once: int = 1) -> tuple[float, float, float]:
    """Tasks per second, each enqueued and then completed with a handoff; `at_once` callers
    share the n tasks, each making its calls one after another. With the wall-clock start
    and end, for the processes' span."""
    q = TaskQueue.open(bus, queue, TYPES, Limits(max_tasks=1_000_000))
    tag = uuid.uuid4().hex[:8]  # inputs unique to this call, so processes sharing the queue never dedup

    made: list[str] = []

    async def caller(k: int) -> None:
        ids = [
            (await enqueue_task(q, "bench", type="step", inputs={"n": f"{tag}-{i}"}, reason="r")).id
            for i in range(k, n, at_once)
        ]
        for tid in ids:
            await complete_task(q, "bench", task_id=tid, status="done", handoff=HANDOFF)
        made.extend(ids)

    t0, w0 = time.perf_counter(), time.time()
    await asyncio.gather(*(caller(k) for k in range(at_once)))
    t1, w1 = time.perf_counter(), time.time()
    await check_once(q, made, n, tag)  # after the clock stopped
    return n / (t1 - t0), w0, w1


async def check_once(q: TaskQueue, ids: list[str], n: int, tag: str) -> None:
    """Nothing lost or doubled: n tasks with their own inputs, each done with one handoff."""
    wanted = set(ids)
    tasks = {t.id: t for t in await q.store.tasks() if t.id in wanted}  # other processes share the queue
    handoffs = await q.store.handoffs_of(ids)
    inputs = sorted(t.inputs["n"] for t in tasks.values())
    if len(set(ids)) != n or inputs != sorted(f"{tag}-{i}" for i in range(n)):
        raise RuntimeError(f"{q.name}: {n} tasks enqueued, {len(tasks)} found, inputs {len(set(inputs))} distinct")
    if any(t.status != "done" for t in tasks.values()) or set(handoffs) != set(ids):
        raise RuntimeError(f"{q.name}: {len(handoffs)} handoffs for {n} completed tasks")


WORKER = """
import asyncio, sys, time
sys.path.insert(0, {here!r})
from bench_queue import throughput, open_bus
async def main():
    bus = await open_bus({url!r})
    try:
        await throughput(bus, {queue!r}, {warm}, {at_once})  # warm: tables, imports
        print("ready", flush=True)
        sys.stdin.readline()
        _, t0, t1 = await throughput(bus, {queue!r}, {n}, {at_once})
        print(t0, t1, flush=True)
    finally:
        await bus.close()
asyncio.run(main())
"""


def parallel_throughput(url: str, n: int, at_once: int = 1, workers: int = WORKERS, warm: int = 20) -> float:
    """n tasks split over `workers` processes that start together: all tasks / (first start -> last end)."""
    here = os.path.dirname(os.path.abspath(__file__))
    queue = f"par{uuid.uuid4().hex[:8]}"
    code = WORKER.format(here=here, url=url, queue=queue, n=n // workers, at_once=at_once, warm=warm)
    procs = [
        subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(workers)
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline() == "ready\n"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    spans = []
    for p in procs:
        assert p.stdout is not None
        spans.append(tuple(map(float, p.stdout.readline().split())))
        p.wait()
    return (n // workers) * workers / (max(e for _, e in spans) - min(s for s, _ in spans))


async def measure(url: str, quick: bool) -> dict[str, str]:
    # quick: every row once, tiny (2 samples, 1 in the full queue, 1 process: 4 run the same code)
    bus = await open_bus(url)
    try:
        n_lat = 2 if quick else 40
        n_tp = 32 if quick else 2000
        warm = 4 if quick else 20
        registered, up = await latency(bus, n_lat)
        finished = 50 if quick else FINISHED
        big, _ = await latency(bus, n_lat // 2, finished)
        await throughput(bus, f"warm{uuid.uuid4().hex[:6]}", warm)
        one, _, _ = await throughput(bus, f"tp{uuid.uuid4().hex[:8]}", n_tp)
    finally:
        await bus.close()
    workers = 1 if quick else WORKERS
    processes = "processes" if workers > 1 else "process"
    par = parallel_throughput(url, n_tp, workers=workers, warm=warm)
    par_at_once = parallel_throughput(url, n_tp * 2, AT_ONCE, workers=workers, warm=warm)
    return {
        "done -> agent registered p50/p99 (ms)": f"{pct(registered, 0.5):.1f} / {pct(registered, 0.99):.1f}",
        "done -> agent process up p50/p99 (ms)": f"{pct(up, 0.5):.1f} / {pct(up, 0.99):.1f}",
        f"done -> agent registered, {finished:,} tasks finished before, p50/p99 (ms)": (
            f"{pct(big, 0.5):.1f} / {pct(big, 0.99):.1f}"
        ),
        "enqueue+complete, 1 process (tasks/s)": f"{one:,.0f}",
        f"enqueue+complete, {workers} {processes} (tasks/s)": f"{par:,.0f}",
        f"enqueue+complete, {workers} {processes} x {AT_ONCE} calls at once (tasks/s)": f"{par_at_once:,.0f}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="every row once, tiny: 1 process, a few tasks")
    quick = parser.parse_args().quick
    columns: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory(prefix="wavewait-bench-queue-") as d:
        os.environ["WAVEWAIT_LOG_DIR"] = os.path.join(d, "logs")
        print("directory bus ...", file=sys.stderr)
        columns["directory"] = asyncio.run(measure(os.path.join(d, "bus"), quick))
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    try:
        print("PostgreSQL bus ...", file=sys.stderr)
        with tempfile.TemporaryDirectory(prefix="wavewait-bench-queue-") as d:
            os.environ["WAVEWAIT_LOG_DIR"] = d
            columns["PostgreSQL"] = asyncio.run(measure(with_schema(PG_URL, schema), quick))
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    rows = list(next(iter(columns.values())))
    head = ["", *columns]
    table = [[r, *(columns[c][r] for c in columns)] for r in rows]
    widths = [max(len(str(x[i])) for x in [head, *table]) for i in range(len(head))]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in table:
        print("| " + " | ".join(str(x).ljust(w) for x, w in zip(r, widths, strict=True)) + " |")
    print(
        f"targets: done -> agent registered p99 <= 50 ms; enqueue+complete with {WORKERS} processes "
        ">= 2,000 tasks/s (directory), >= 5,000 (PostgreSQL)"
    )
    print("checked: in every throughput row each task was enqueued once and completed once, with its handoff")
    print(f"load: {' '.join(f'{x:.2f}' for x in os.getloadavg())} (1, 5, 15 min) on {os.cpu_count()} cores")
    print(
        "durability: directory bus "
        + ("fsync before every rename" if DURABLE else "no fsync (WAVEWAIT_FSYNC=0)")
        + "; PostgreSQL synchronous_commit "
        + ("as the URL sets it" if "synchronous_commit" in PG_URL else "off (the bus's default)")
    )


if __name__ == "__main__":
    main()
