"""The headline rows, against the figures docs/performance.md gives: exit 1 at 3× one of them.

    python bench/guard.py            # what .ci/run runs (under 90 s on a quiet 2-core machine)
    python bench/guard.py --record   # print each row's ratio, to write into docs/performance.md

A busy machine must not fail it, and a real regression must: each latency row is divided by a
calibration measured around it in the same run (a child's pipe round trip and a fixed piece of
JSON work: what scheduling and the interpreter's speed cost on this machine now), and that
ratio is compared with the ratio docs/performance.md gives. A unitless row (CPU per report at
2,000 flights ÷ at 100; the MCP face's CPU per delivered message ÷ the core's) is compared as it is.
A row above its limit is measured again once, with its calibrations, and fails only if both
measurements are above (both tables are printed). Each row is measured at the face users call
(through a real MCP client over stdio where the row is about the MCP face), by the bench
modules' own functions.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
#: this process's own writes are set-up (thousands of flight records) or a row's trigger, both
#: without fsync; the measured servers, writers and waiting processes are its children, each
#: with the bus's default (bench_mcp.server, bench_mcp.fanin's writer, bench_scale.Run.child)
os.environ["WAVEWAIT_FSYNC"] = "0"
import bench_mcp  # noqa: E402  (the bench modules sit beside this script)
import bench_scale  # noqa: E402
import bench_startup  # noqa: E402

DOC = os.path.join(HERE, "..", "docs", "performance.md")
#: a row fails above this many times the ratio the docs give
LIMIT = 3.0
#: a guard row's key in docs/performance.md's table: `| \`key\` | ... | ratio | ...`
ROW = re.compile(r"^\|\s*`(?P<key>[a-z0-9-]+)`\s*\|(?P<cells>.*)\|\s*$")


def documented() -> dict[str, float]:
    """The ratio docs/performance.md gives each guard row (its fifth column)."""
    out = {}
    with open(DOC, encoding="utf-8") as f:
        for line in f:
            if m := ROW.match(line.strip()):
                cells = [c.strip() for c in m["cells"].split("|")]
                out[m["key"]] = float(cells[3].rstrip("×x"))
    return out


class Calibration:
    """Milliseconds of fixed work, measured now: a line echoed by a child Python process and a
    JSON round trip of 2,000 fan-in entries (what a fan-in answer costs to encode and read).
    A row's p50 is divided by the calibration's p50, its p99 by the calibration's p99: a busy
    machine stretches the tails of both."""

    ENTRIES: ClassVar[list[dict[str, str]]] = [
        {"agent_id": f"flight-{i:06d}", "name": f"flight-{i:06d}", "status": "received", "message": f"r{i}"}
        for i in range(2000)
    ]

    def __init__(self) -> None:
        code = "import sys\nfor line in sys.stdin:\n    sys.stdout.write(line)\n    sys.stdout.flush()"
        self.echo = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def unit(self) -> float:
        assert self.echo.stdin is not None and self.echo.stdout is not None
        t0 = time.perf_counter()
        json.loads(json.dumps(self.ENTRIES))
        self.echo.stdin.write("ping\n")
        self.echo.stdin.flush()
        self.echo.stdout.readline()
        return (time.perf_counter() - t0) * 1000

    def measure(self, n: int = 60) -> list[float]:
        return [self.unit() for _ in range(n)]

    def close(self) -> None:
        if self.echo.stdin is not None:
            self.echo.stdin.close()
        self.echo.wait(10)


@dataclass
class Row:
    key: str
    measure: str
    figure: float  # ms, or a unitless ratio when `unit` is "×"
    unit: str
    calibration: float | None  # ms measured around the row (the same percentile); None: compared as it is
    seconds: float  # what the row took to measure, calibrations included

    @property
    def ratio(self) -> float:
        return self.figure / self.calibration if self.calibration else self.figure


async def rows(cal: Calibration, only: set[str] | None = None) -> list[Row]:
    """Every row, or those of `only`."""
    # the one-inbox row at 100 messages/s (the documented row's 1,000/s needs 60 % of a core; on
    # a busy machine the waiting process falls behind and its p99 is the queue it built, which
    # no calibration scales: at 200/s it did so in 3 of 5 runs at load 8-17, at 100/s in none)
    argv = ["--rate", "500", "--duration", "8", "--waits", "200", "--load-rate", "100"]
    run = bench_scale.Run(bench_scale.parse(argv))
    out: list[Row] = []

    async def add(key: str, measure: str, figure: Callable[[], Awaitable[float]], q: float | None = 50) -> None:
        """Measure a row; with `q`, between two calibrations whose `q`th percentile divides it."""
        if only is not None and key not in only:
            return
        t0 = time.monotonic()
        before = await asyncio.to_thread(cal.measure) if q is not None else []
        value = await figure()
        after = await asyncio.to_thread(cal.measure) if q is not None else []
        c = bench_mcp.pct(before + after, q) if q is not None else None
        out.append(Row(key, measure, value, "ms" if q is not None else "×", c, time.monotonic() - t0))
        print(f"  {key}: {value:.2f} ({time.monotonic() - t0:.0f} s)", file=sys.stderr, flush=True)

    async def on(kind: str, what: Callable[[str], Awaitable[Any]]) -> Any:
        url, bus = await run.fresh_bus(kind)
        try:
            return await what(url)
        finally:
            await run.drop(kind, url, bus)

    async def wake(kind: str) -> float:
        return statistics.median(await on(kind, lambda url: bench_mcp.message_wake_ms(url, 40)))

    async def fanin() -> float:
        """The best of three runs: a stall of a busy machine (a disk still writing back what
        was installed before) lands in one or two, a held answer in all three."""
        return min(run["ms"] for run in await on("files", lambda url: bench_mcp.fanin(url, 2000, 200.0, 3)))

    async def cpu_ratio() -> float:
        small, large = await run.fanin("files", 100), await run.fanin("files", 2000)
        return float(large["cpu_ms"] / small["cpu_ms"])

    async def one_inbox() -> float:
        r = await run.load("files", "next-one-inbox")
        if r["received"] != r["distinct"]:
            raise RuntimeError(f"200 waits on one inbox: {r['received'] - r['distinct']} duplicated")
        return float(r["p99"]) * 1000

    async def mcp_ratio() -> float:
        """The MCP face's CPU per delivered message ÷ the core's, each face in a process of its
        own under the same load: 200 re-issued waits, a backlog and 4 writers offering 1,000/s."""
        argv = ["--waits", "200", "--duration", "5", "--load-rate", "1000", "--backlog", "1000"]
        sat = bench_scale.Run(bench_scale.parse(argv))
        mcp, core = await sat.saturation("files", "mcp"), await sat.saturation("files", "core")
        for face, r in (("MCP", mcp), ("core", core)):
            if r["lost"] or r["doubled"]:
                raise RuntimeError(f"saturation, {face}: {r['lost']} lost, {r['doubled']} doubled of {r['sent']}")
        return float(mcp["cpu_ms"] / core["cpu_ms"])

    async def tools_list() -> float:
        env = {k: v for k, v in os.environ.items() if not k.startswith("WAVEWAIT_")}
        env["WAVEWAIT_BUS"] = bus = tempfile.mkdtemp(prefix="guard-")
        cmd = [sys.executable, "-m", "wavewait", "mcp"]
        try:
            starts = [await asyncio.to_thread(bench_startup.one_start, cmd, env) for _ in range(6)]
        finally:
            shutil.rmtree(bus, ignore_errors=True)
        return statistics.median(lst for _, lst in starts[1:])  # the first warms the page cache

    for kind in ("files", "pg"):
        what = f"message → blocked `wait` returns, MCP client, p50 ({kind})"
        await add(f"wake-{kind}", what, functools.partial(wake, kind))
    what = "fan-in of 2,000 at 200/s: last report → answer read, MCP client, best of 3 (files)"
    await add("fanin-files", what, fanin)
    await add("cpu-ratio", "waiter CPU per report, 2,000 ÷ 100 flights (files)", cpu_ratio, None)
    what = "200 next-message waits on one inbox, 100 msg/s: p99 (files)"
    await add("one-inbox-p99", what, one_inbox, 99)
    await add("tools-list", "spawn → `tools/list` answered (as Codex opens), p50", tools_list)
    what = "CPU per delivered message, 200 re-issued waits: MCP server ÷ the core's `wait` (files)"
    await add("mcp-ratio", what, mcp_ratio, None)
    return out


def table(found: list[Row], docs: dict[str, float]) -> list[str]:
    """Print the table; the keys of the rows that failed."""
    print(
        f"bench/guard.py ({os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}); fails above {LIMIT:g}× the docs' ratio"
    )
    print("| row | measure | figure | calibration | ratio | docs' ratio | limit | | s |")
    print("|---|---|---|---|---|---|---|---|---|")
    failed = []
    for r in found:
        want = docs.get(r.key)
        ok = want is not None and r.ratio <= LIMIT * want
        failed += [] if ok else [r.key]
        cal = "-" if r.calibration is None else f"{r.calibration:.2f} ms"
        doc = "missing" if want is None else f"{want:.2f}"
        limit = "-" if want is None else f"{LIMIT * want:.2f}"
        print(
            f"| `{r.key}` | {r.measure} | {r.figure:.2f} {r.unit} | {cal} | {r.ratio:.2f} | {doc} | {limit} | {'ok' if ok else 'FAIL'} | {r.seconds:.0f} |"
        )
    return failed


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--record", action="store_true", help="only print the table (exit 0 whatever it says)")
    a = ap.parse_args()
    docs = {} if a.record else documented()
    t0 = time.monotonic()
    cal = Calibration()
    try:
        found = await rows(cal)
    finally:
        cal.close()
    failed = table(found, docs)
    if failed and not a.record:
        # measured again once, calibrations and all: a stall of the machine (a disk busy with
        # another job's writes, the page cache reclaimed) lands in one measurement, a
        # regression in both; a row fails only if both are above its limit
        print(f"measuring again: {', '.join(failed)}", file=sys.stderr, flush=True)
        cal = Calibration()
        try:
            again = {r.key: r for r in await rows(cal, set(failed))}
        finally:
            cal.close()
        found = [again.get(r.key, r) for r in found]
        failed = table(found, docs)
    print(f"({time.monotonic() - t0:.0f} s)")
    if failed and not a.record:
        print(
            f"bench/guard.py: {', '.join(failed)} above {LIMIT:g}× the ratio docs/performance.md gives", file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
