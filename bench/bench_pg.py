"""The PostgreSQL bus beside the directory bus, in one run, through the same Bus protocol.

    python bench/bench_pg.py             # full run (about two minutes)
    python bench/bench_pg.py --quick     # every row once, tiny: that it runs (CI), not a figure
    WAVEWAIT_TEST_PG=postgresql://...    # the server (default postgres@127.0.0.1:5432/test)

Rows, for each bus:
- wake latency p50/p99 with 1, 4 and 16 sending processes, paced (about 200 messages/s in
  all): a message is delivered -> the consumer, asleep on its subscription, is woken,
  re-reads the inbox, claims the message and takes it. Measured from the item's `sent_at`
  (set just before the delivery) to the take. Children start together once all are
  connected and exit together after the last take, so no process start-up or exit (seconds
  of CPU on a small machine) lands inside a measurement.
- messages/s with 1, 4 and 16 sending processes delivering as fast as they can, while the
  same consumer drains the inbox (first delivery -> last take).
- claims/s with 8 consumer processes over a pre-filled inbox: by reference (`pending` then
  `claim`, the protocol every wait uses; every round re-lists the whole inbox, so it slows
  as the backlog grows) on both buses, and on PostgreSQL also `claim_next` (ten oldest rows
  per statement, `FOR UPDATE SKIP LOCKED`) then `take`, and `take_next` (ten oldest rows
  claimed and moved to history in one statement).
Targets (issue 5): p99 wake <= 10 ms; >= 5,000 claims/s with 8 consumers.
The PostgreSQL schema is fresh for the run and dropped after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import sql

from wavewait.core.bus import Bus, open_bus
from wavewait.core.ids import new_id
from wavewait.core.model import Item, ItemRef, WaitRecord
from wavewait.core.proc import hostname, me

PG_URL = os.environ.get("WAVEWAIT_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
INBOX = "orchestrator"


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))] if values else float("nan")


def cpu_times() -> tuple[int, int]:
    """(steal, total) jiffies of all CPUs: on a virtual machine the hypervisor may take the
    CPU away (steal), which no code in the guest can shorten; the table says how much."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return 0, 0
    return (fields[7] if len(fields) > 7 else 0), sum(fields[:8])


def with_schema(url: str, schema: str) -> str:
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "schema"] + [("schema", schema)]
    return urlunsplit(parts._replace(query=urlencode(query)))


# ----------------------------------------------------------------------------- child processes
async def ready_set_go() -> None:
    """Tell the parent this child is connected, then wait for its go: no child is still
    importing or connecting (seconds of CPU on a small machine) while the others are measured."""
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)


async def child_send(url: str, sender: str, count: int, pace: float) -> None:
    """Deliver `count` items; with `pace`, one every `pace` s (jittered), else flat out."""
    bus = await open_bus(url)
    rng = random.Random(sender)
    try:
        await bus.pending(INBOX)  # a first statement: the pooled connection is up
        await ready_set_go()
        for i in range(count):
            if pace:
                await asyncio.sleep(pace * rng.uniform(0.5, 1.5))
            await bus.deliver(Item(id=new_id(), type="message", to=INBOX, sender=sender, body=f"{sender}-{i}"))
        await ready_set_go()  # stay until all are taken: no exiting process competes for the CPU
    finally:
        await bus.close()


async def child_claim(url: str, mode: str) -> None:
    """Claim from the pre-filled inbox until it is empty; print count and first/last times."""
    bus = await open_bus(url)
    wait_id = new_id()
    pid, start = me()
    await bus.register_wait(
        WaitRecord(id=wait_id, waiter=INBOX, kind="next", tool="bench", host=hostname(), pid=pid, pid_start=start)
    )
    rng = random.Random(os.getpid())
    n, first = 0, None
    await ready_set_go()
    try:
        while True:
            got = 0
            if mode == "take_next":  # claim and take in one statement
                taken = len(await bus.take_next(INBOX, wait_id, INBOX, limit=10))  # type: ignore[attr-defined]
                if taken:
                    first = first or time.time()
                    n += taken
                    continue
            elif mode == "next":
                got = len(await bus.claim_next(INBOX, wait_id, limit=10))  # type: ignore[attr-defined]
            else:
                refs = await bus.pending(INBOX)
                if refs:
                    k = rng.randrange(len(refs))
                    for ref in (refs[k:] + refs[:k])[:40]:
                        if await bus.claim(INBOX, ref, wait_id) is not None:
                            got += 1
                            if got == 10:
                                break
            if got:
                first = first or time.time()
                n += len(await bus.take(INBOX, wait_id, INBOX))
            elif not await bus.pending(INBOX):
                break
        print(json.dumps({"n": n, "first": first, "last": time.time()}))
    finally:
        await bus.end_wait(wait_id)
        await bus.close()


def spawn(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, __file__, "--child", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def in_step(procs: list[subprocess.Popen]) -> None:
    """Wait until every child says it is ready, then let them all go on at once."""
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready", "a child failed to start"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()


# ----------------------------------------------------------------------------- measurements
async def consume(bus: Bus, total: int) -> tuple[list[float], float, float]:
    """Take `total` items as they come, woken by the subscription; latencies and first/last."""
    sub = await bus.subscribe(inboxes=[INBOX])
    wait_id = new_id()
    pid, start = me()
    await bus.register_wait(
        WaitRecord(id=wait_id, waiter=INBOX, kind="next", tool="bench", host=hostname(), pid=pid, pid_start=start)
    )
    lat: list[float] = []
    first = None
    try:
        while len(lat) < total:
            refs: list[ItemRef] = await bus.pending(INBOX)
            if not refs:
                await asyncio.wait_for(sub.wait(), 60)
                continue
            for ref in refs:
                await bus.claim(INBOX, ref, wait_id)
            taken = await bus.take(INBOX, wait_id, INBOX)
            t = time.time()
            first = first or min(i.sent_at for i in taken)
            lat += [t - i.sent_at for i in taken]
    finally:
        sub.close()
        await bus.end_wait(wait_id)
    return lat, first or time.time(), time.time()


async def senders_run(bus: Bus, senders: int, per_sender: int, pace: float) -> tuple[list[float], float]:
    procs = [spawn("send", bus.url, f"s{k:02d}", str(per_sender), str(pace)) for k in range(senders)]
    consumer = asyncio.create_task(consume(bus, senders * per_sender))
    await asyncio.to_thread(in_step, procs)
    lat, first, last = await consumer
    await asyncio.to_thread(in_step, procs)  # then let them all exit
    for p in procs:
        p.wait()
    return lat, senders * per_sender / (last - first)


async def claims_run(bus: Bus, n: int, mode: str, consumers: int = 8) -> float:
    async def fill(part: range) -> None:
        for i in part:
            await bus.deliver(Item(id=new_id(), type="message", to=INBOX, sender="filler", body=str(i)))

    await asyncio.gather(*(fill(range(k, n, 4)) for k in range(4)))
    procs = [spawn("claim", bus.url, mode) for _ in range(consumers)]
    await asyncio.to_thread(in_step, procs)
    outs = [json.loads(p.communicate()[0]) for p in procs]
    got = sum(o["n"] for o in outs)
    assert got == n, f"{got} claimed of {n}"
    return n / (max(o["last"] for o in outs) - min(o["first"] for o in outs if o["first"]))


async def bench_bus(url: str, quick: bool) -> dict[str, str]:
    rows: dict[str, str] = {}
    # quick: every row once, tiny: 1 sender (4 and 16 run the same code), 2 consumers (claims contend)
    for senders in (1,) if quick else (1, 4, 16):
        per = max(10, (20 if quick else 600) // senders)
        bus = await open_bus(url)
        try:
            lat, _ = await senders_run(bus, senders, per, pace=senders / 200)
            rows[f"wake p50 / p99, {senders} sender(s)"] = f"{pct(lat, 0.5) * 1e3:.2f} / {pct(lat, 0.99) * 1e3:.2f} ms"
            flood = (100 if quick else 4000) // senders
            _, rate = await senders_run(bus, senders, flood, pace=0)
            rows[f"messages/s, {senders} sender(s)"] = f"{rate:,.0f}"
        finally:
            await bus.close()
    n, k = (100, 2) if quick else (20000, 8)
    bus = await open_bus(url)
    try:
        rows[f"claims/s, {k} consumers, by reference"] = f"{await claims_run(bus, n, 'refs', k):,.0f}"
        if hasattr(bus, "claim_next"):
            rows[f"claims/s, {k} consumers, claim_next (10/stmt) + take"] = (
                f"{await claims_run(bus, n, 'next', k):,.0f}"
            )
        if hasattr(bus, "take_next"):
            rows[f"claims/s, {k} consumers, take_next (10/stmt)"] = f"{await claims_run(bus, n, 'take_next', k):,.0f}"
    finally:
        await bus.close()
    return rows


async def main(quick: bool) -> None:
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    pg_url = with_schema(PG_URL, schema)
    results = {}
    steal0, total0 = cpu_times()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            results["directory"] = await bench_bus(os.path.join(tmp, "bus"), quick)
        results["postgresql"] = await bench_bus(pg_url, quick)
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    load = os.getloadavg()
    steal1, total1 = cpu_times()
    steal = 100 * (steal1 - steal0) / max(1, total1 - total0)
    print(
        f"\nbench_pg.py{' --quick' if quick else ''} on {os.cpu_count()} cores, "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, CPU stolen by the hypervisor "
        f"during the run {steal:.0f}%"
    )
    keys = list(results["directory"]) + [k for k in results["postgresql"] if k not in results["directory"]]
    width = max(len(k) for k in keys)
    cols = [
        max(len(v) for v in (name, *results[b].values()))
        for b, name in (("directory", "directory bus"), ("postgresql", "PostgreSQL bus"))
    ]
    print(f"| {'measure'.ljust(width)} | {'directory bus'.rjust(cols[0])} | {'PostgreSQL bus'.rjust(cols[1])} |")
    print(f"|{'-' * (width + 2)}|{'-' * (cols[0] + 2)}|{'-' * (cols[1] + 2)}|")
    for k in keys:
        d, p = results["directory"].get(k, "-"), results["postgresql"].get(k, "-")
        print(f"| {k.ljust(width)} | {d.rjust(cols[0])} | {p.rjust(cols[1])} |")
    print("targets: PostgreSQL p99 wake <= 10 ms; >= 5,000 claims/s with 8 consumers")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind, args = sys.argv[2], sys.argv[3:]
        if kind == "send":
            asyncio.run(child_send(args[0], args[1], int(args[2]), float(args[3])))
        else:
            asyncio.run(child_claim(args[0], args[1]))
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 sender, 2 consumers, few messages")
    asyncio.run(main(parser.parse_args().quick))
