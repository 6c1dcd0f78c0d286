"""The wait core against the seed's 5 s glob polling, side by side, in one run.

    python bench/bench_core.py            # full run (a few minutes)
    python bench/bench_core.py --quick    # a few seconds: that it runs (CI), not a figure; every row, tiny

Prints one table. Rows: wake latency p50/p99 (a file or a message appears -> the wait
returns, with 1,000 files already in the folder), idle CPU of one process holding 100
waits, fan-in over 1,000 flights (last completion -> return), messages/s with 1, 4 and 16
sending processes. Targets (issue 2): wake p50 <= 10 ms, p99 <= 25 ms; idle CPU <= 2 % of a
core; fan-in return <= 100 ms after the last completion; >= 2,000 messages/s.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from wavewait.core import wait
from wavewait.core.agents import register
from wavewait.core.bus.file import FileBus
from wavewait.core.ids import new_id
from wavewait.core.model import Item

POLL_EVERY = 5.0  # the seed design: glob, sleep 5 s, repeat


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


async def poll_until(pattern: str, count: int = 1) -> float:
    """The seed's wait: glob every POLL_EVERY (5 s) until `count` files match; returns when it saw them."""
    while len(glob.glob(pattern)) < count:
        await asyncio.sleep(POLL_EVERY)
    return time.time()


def fill(folder: Path, n: int = 1000) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (folder / f"existing-{i:04d}.txt").write_text("x")


def touch(path: Path) -> float:
    t = time.time()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.close(fd)
    return t


async def registered(bus: FileBus, n: int = 1) -> None:
    while len(await bus.list_waits()) < n:
        await asyncio.sleep(0.002)


# ------------------------------------------------------------------------ wake latency
async def wake_wavewait_file(bus: FileBus, folder: Path, samples: int) -> list[float]:
    out = []
    for i in range(samples):
        target = folder / f"s{i}.done"
        task = asyncio.create_task(wait.wait_signal(bus, "orchestrator", str(folder / f"s{i}.done"), timeout=60))
        await registered(bus)
        await asyncio.sleep(random.uniform(0.01, 0.05))  # let the watcher go idle
        t0 = touch(target)
        r = await task
        assert r.matched, r
        out.append(time.time() - t0)
    return out


async def wake_wavewait_message(bus: FileBus, samples: int) -> list[float]:
    out = []
    for i in range(samples):
        task = asyncio.create_task(wait.wait_fan_in(bus, "orchestrator", 60, ["flight-x"]))
        await registered(bus)
        await asyncio.sleep(random.uniform(0.01, 0.05))
        t0 = time.time()
        await bus.deliver(Item(id=new_id(), type="message", to="orchestrator", sender="flight-x", body=str(i)))
        r = await task
        assert r.status == "complete", r
        out.append(time.time() - t0)
    return out


async def timer_jitter(samples: int) -> list[float]:
    """How late a 20 ms timer fires: the machine's own floor under every wake figure (a VM
    whose CPU is stolen shows it here too, with no bus involved)."""
    out = []
    for _ in range(samples):
        t0 = time.perf_counter()
        await asyncio.sleep(0.02)
        out.append(time.perf_counter() - t0 - 0.02)
    return out


async def wake_polling(folder: Path, samples: int) -> list[float]:
    """`samples` pollers at random phases; every file appears at once; each notes its wake."""
    pollers = []
    for i in range(samples):

        async def one(i: int = i) -> float:
            await asyncio.sleep(random.uniform(0, POLL_EVERY))
            return await poll_until(str(folder / f"p{i}.done"))

        pollers.append(asyncio.create_task(one()))
    await asyncio.sleep(POLL_EVERY + 0.1)
    t0 = time.time()
    for i in range(samples):
        touch(folder / f"p{i}.done")
    return [t - t0 for t in await asyncio.gather(*pollers)]


# ------------------------------------------------------------------------ idle CPU
async def idle_cpu(bus: FileBus, folder: Path, seconds: float, polling: bool, settle: float = 1.0) -> float:
    if polling:
        tasks = [asyncio.create_task(poll_until(str(folder / f"never-{i}.done"))) for i in range(100)]
    else:
        tasks = [asyncio.create_task(wait.wait_next(bus, "idler", 3600)) for _ in range(50)]
        tasks += [asyncio.create_task(wait.wait_fan_in(bus, "idler", 3600, ["flight-x"])) for _ in range(50)]
        await registered(bus, 100)
    await asyncio.sleep(settle)
    c0, t0 = time.process_time(), time.monotonic()
    await asyncio.sleep(seconds)
    share = (time.process_time() - c0) / (time.monotonic() - t0)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return share * 100


# ------------------------------------------------------------------------ fan-in over 1,000
COMPLETER = r"""
import asyncio, sys, time
from wavewait.core.bus.file import FileBus
from wavewait.core import messages
async def main(root, n):
    bus = FileBus(root)
    sys.stdin.readline()
    for i in range(n):
        await messages.notify_completion(bus, f"f{i:04d}", status="success", message="ok",
                                         session_id="orchestrator")
    print(time.time(), flush=True)
asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""

FILE_COMPLETER = r"""
import os, sys, time
folder, n = sys.argv[1], int(sys.argv[2])
sys.stdin.readline()
for i in range(n):
    fd = os.open(os.path.join(folder, f"f{i:04d}.done"), os.O_WRONLY | os.O_CREAT, 0o600); os.close(fd)
print(time.time(), flush=True)
"""


def start(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


async def fan_in_wavewait(bus: FileBus, n: int) -> float:
    ids = [f"f{i:04d}" for i in range(n)]
    for a in ids:
        await register(bus, a, parent_id="orchestrator")
    proc = start(COMPLETER, str(bus.root), str(n))
    task = asyncio.create_task(wait.wait_fan_in(bus, "orchestrator", 600, ids))
    await registered(bus)
    proc.stdin.write("go\n")
    proc.stdin.flush()
    r = await task
    returned = time.time()
    last = float(await asyncio.to_thread(proc.stdout.readline))
    proc.wait()
    assert r.status == "complete" and all(t.status == "received" for t in r.results), r.status
    return returned - last


async def fan_in_polling(folder: Path, n: int) -> float:
    folder.mkdir(parents=True, exist_ok=True)
    proc = start(FILE_COMPLETER, str(folder), str(n))
    task = asyncio.create_task(poll_until(str(folder / "*.done"), n))
    proc.stdin.write("go\n")
    proc.stdin.flush()
    seen = await task
    last = float(await asyncio.to_thread(proc.stdout.readline))
    proc.wait()
    return seen - last


# ------------------------------------------------------------------------ messages/s
SENDER = r"""
import asyncio, sys, time
from wavewait.core.bus.file import FileBus
from wavewait.core import messages
async def main(root, me, n):
    bus = FileBus(root)
    await messages.send(bus, me, "orchestrator", "warm-up")
    print("ready", flush=True)
    sys.stdin.readline()
    t0 = time.time()
    for i in range(n):
        await messages.send(bus, me, "orchestrator", f"{me} {i}")
    print(t0, time.time(), flush=True)
asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""

FILE_SENDER = r"""
import os, sys, time
folder, me, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
print("ready", flush=True)
sys.stdin.readline()
t0 = time.time()
for i in range(n):
    path = os.path.join(folder, f"{me}-{i}.msg")
    with open(path, "w") as f:
        f.write(f"{me} {i}")
print(t0, time.time(), flush=True)
"""


async def throughput(code: str, root: str, procs: int, total: int) -> float:
    each = total // procs
    ps = [start(code, root, f"s{p:02d}", str(each)) for p in range(procs)]
    for p in ps:
        assert (await asyncio.to_thread(p.stdout.readline)).strip() == "ready"
    for p in ps:
        p.stdin.write("go\n")
        p.stdin.flush()
    spans = [tuple(map(float, (await asyncio.to_thread(p.stdout.readline)).split())) for p in ps]
    for p in ps:
        p.wait()
    return each * procs / (max(e for _, e in spans) - min(s for s, _ in spans))


# ------------------------------------------------------------------------ main
async def main(quick: bool) -> None:
    global POLL_EVERY
    # quick: every row once, tiny (3 wakes, 1 poller at 0.2 s, 0.5 s idle, 100 items already
    # there, a fan-in over 100, messages/s with 1 process only: 4 and 16 run the same code)
    wake_n, poll_n, idle_s, msgs = (3, 1, 0.5, 100) if quick else (200, 24, 30.0, 4000)
    backlog = 100 if quick else 1000
    if quick:
        POLL_EVERY = 0.2
    tmp = Path(tempfile.mkdtemp(prefix="wavewait-bench-"))
    bus = FileBus(tmp / "bus")
    await register(bus, "orchestrator")
    await register(bus, "idler")
    await register(bus, "flight-x", parent_id="orchestrator")
    folder = tmp / "signals"
    fill(folder, backlog)
    for i in range(backlog):  # 1,000 items from others already queued in the inbox
        await bus.deliver(Item(id=new_id(), type="message", to="orchestrator", sender="orchestrator", body="old"))
    rows: list[tuple[str, str, str, str]] = []
    print(f"bus {bus.root}; {'quick' if quick else 'full'} run", file=sys.stderr)

    print("wake latency ...", file=sys.stderr)
    wf = await wake_wavewait_file(bus, folder, wake_n)
    wm = await wake_wavewait_message(bus, wake_n)
    jt = await timer_jitter(wake_n)
    pl = await wake_polling(folder, poll_n)
    ms = lambda v: f"{v * 1000:.1f} ms"  # noqa: E731
    rows.append(("wake p50, file signal", ms(pct(pl, 0.5)), ms(pct(wf, 0.5)), "<= 10 ms"))
    rows.append(("wake p99, file signal", ms(pct(pl, 0.99)), ms(pct(wf, 0.99)), "<= 25 ms"))
    rows.append(("wake p50, message (fan-in)", ms(pct(pl, 0.5)), ms(pct(wm, 0.5)), "<= 10 ms"))
    rows.append(("wake p99, message (fan-in)", ms(pct(pl, 0.99)), ms(pct(wm, 0.99)), "<= 25 ms"))
    rows.append(
        (
            "floor: 20 ms timer lateness p50 / p99",
            "-",
            f"{pct(jt, 0.5) * 1000:.1f} / {pct(jt, 0.99) * 1000:.1f} ms",
            "(no bus)",
        )
    )

    print("idle CPU ...", file=sys.stderr)
    settle = min(1.0, idle_s)
    cpu_poll = await idle_cpu(bus, folder, idle_s, polling=True, settle=settle)
    cpu_ww = await idle_cpu(bus, folder, idle_s, polling=False, settle=settle)
    rows.append((f"idle CPU, 100 waits, {idle_s:g} s", f"{cpu_poll:.2f} %", f"{cpu_ww:.2f} %", "<= 2 %"))

    print(f"fan-in over {backlog:,} ...", file=sys.stderr)
    fan_bus = FileBus(tmp / "fan-bus")
    await register(fan_bus, "orchestrator")
    fw = await fan_in_wavewait(fan_bus, backlog)
    await fan_bus.close()
    fp = await fan_in_polling(tmp / "fan-signals", backlog)
    rows.append((f"fan-in {backlog:,}: last completion -> return", ms(fp), ms(fw), "<= 100 ms"))

    print("messages/s ...", file=sys.stderr)
    for n in (1,) if quick else (1, 4, 16):
        mb = FileBus(tmp / f"msg-bus-{n}")
        await register(mb, "orchestrator")
        mf = tmp / f"msg-files-{n}"
        mf.mkdir()
        rate_w = await throughput(SENDER, str(mb.root), n, msgs)
        rate_p = await throughput(FILE_SENDER, str(mf), n, msgs)
        await mb.close()
        rows.append(
            (f"messages/s, {n} sending process{'es' if n > 1 else ''}", f"{rate_p:,.0f}", f"{rate_w:,.0f}", ">= 2,000")
        )
    await bus.close()
    shutil.rmtree(tmp)  # its buses and files: a bench leaves no folder behind

    head = ("measure", f"seed: glob every {POLL_EVERY:g} s", "wavewait", "target")
    widths = [max(len(r[i]) for r in [*rows, head]) for i in range(4)]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + " |"  # noqa: E731
    print(line(head))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print(line(r))
    print(
        f"\nwake samples: wavewait {wake_n} per row, {POLL_EVERY:g} s polling {poll_n}; messages per run {msgs}; "
        f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--quick",
        action="store_true",
        help="every row once, tiny: 3 wakes, the seed polling every 0.2 s, 0.5 s idle, 100 flights, 1 sender",
    )
    asyncio.run(main(ap.parse_args().quick))
