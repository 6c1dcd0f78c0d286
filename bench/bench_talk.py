"""Talking to a flight (docs/conversations.md) on both buses, in one run.

    python bench/bench_talk.py              # 200 tells a bus (about a minute)
    python bench/bench_talk.py --quick      # a few: that it runs (CI), not a figure
    python bench/bench_talk.py --claude     # also the real Claude Code of the host suite (installed)
    WAVEWAIT_TEST_PG=postgresql://...       # the server (default postgres@127.0.0.1:5432/test)

Rows, for each bus, with a stand-in agent that speaks Claude Code's stream-json
(bench/talk_standin.py: it answers each message at once, so no model is measured):
- tell -> the line on the agent's stdin: from the call of `conversation.tell` to the moment the
  agent read the message (the tell's item delivered, its supervisor woken, claimed, written);
- tell -> its answer: until `tell` returned `next_turn`, the agent's turn started;
- tell to an ended flight -> the agent read it: the flight's agent had ended (keep-open 0); the
  tell resumes it (a new supervisor, a new agent process, `--resume`);
- the memory an open idle flight holds: its supervisor's and its agent's resident memory.
With --claude, the last two rows again with the real Claude Code (its first model request, from a
scripted model on 127.0.0.1, tests/hosts/modelserver.py), and its idle memory.
Target (issue 42): tell -> stdin line p50 <= 10 ms, p99 <= 25 ms on the directory bus.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from bench_queue import pct, with_schema  # the queue bench's percentiles and schema URLs
from psycopg import sql

from wavewait.core import admission, conversation, flights
from wavewait.core.bus import Bus, open_bus
from wavewait.core.model import Agent

PG_URL = os.environ.get("WAVEWAIT_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
STANDIN = Path(__file__).with_name("talk_standin.py")


def rss_kib(pid: int | None) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def tree_rss_kib(pid: int | None) -> int:
    """A process and its descendants (an agent CLI may run helpers)."""
    if not pid:
        return 0
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss_kib(p)
        try:
            todo += [int(c) for c in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
        except OSError:
            pass
    return total


async def until(bus: Bus, agent_id: str, ok: Any, timeout: float = 120) -> Agent:
    """The flight's record once `ok(record)` holds (woken by its changes)."""
    changes = await bus.subscribe(agents=[agent_id])
    try:
        deadline = time.monotonic() + timeout
        while True:
            a = await bus.get_agent(agent_id)
            if a is not None and ok(a):
                return a
            await asyncio.wait_for(changes.wait(), max(0.01, deadline - time.monotonic()))
    finally:
        changes.close()


def logged(log: Path, what: str) -> float:
    """When the stand-in noted `what` (its last such line)."""
    found = [line for line in log.read_text().splitlines() if line.split(" ", 1)[1] == what]
    if not found:
        raise RuntimeError(f"the stand-in never noted {what!r}")
    return float(found[-1].split(" ", 1)[0])


async def start(
    bus: Bus, name: str, preset: str, presets: Path, env: dict[str, str], cwd: Path, keep_open: float
) -> Agent:
    """A flight of `preset` told "hello", without a worktree, the bench its parent."""
    return await flights.start(
        bus,
        name,
        parent_id="bench",
        env=env,
        preset=preset,
        presets_file=str(presets),
        prompt="hello",
        keep_open=keep_open,
        cwd=str(cwd),
        worktree=False,
    )


async def open_flight(bus: Bus, folder: Path, name: str, keep_open: float, log: Path) -> Agent:
    presets = folder / "presets.toml"
    presets.write_text(
        f"[presets.standin]\nprogram = {json.dumps(sys.executable)}\nargs = [{json.dumps(str(STANDIN))}]\n"
        'events = "claude"\nconversation = "claude"\nresume_args = ["--resume", "{session}"]\n'
        'mcp = "none"\nworktree = false\n'
    )
    a = await start(bus, name, "standin", presets, dict(os.environ, STANDIN_LOG=str(log)), folder, keep_open)
    return await until(bus, a.id, lambda r: r.turn >= 1 and r.status in ("idle", "closed"))


async def open_flight_rows(bus: Bus, folder: Path, n: int) -> dict[str, Any]:
    log = folder / "open.log"
    a = await open_flight(bus, folder, "open", 3600.0, log)
    to_stdin, to_answer = [], []
    for i in range(n):
        t0 = time.time()
        said = await conversation.tell(bus, a.id, f"m{i}", by="bench")
        t1 = time.time()
        assert said["told"] == "next_turn", said
        to_stdin.append((logged(log, f"user m{i}") - t0) * 1000)
        to_answer.append((t1 - t0) * 1000)
        await until(bus, a.id, lambda r, turn=said["turn"]: r.turn >= turn and r.status == "idle")
    record = await bus.get_agent(a.id)
    assert record is not None
    memory = (rss_kib(record.supervisor_pid), tree_rss_kib(record.pid))

    await admission.close(bus, record)
    return {"stdin": to_stdin, "answer": to_answer, "memory": memory}


async def ended_flight_rows(bus: Bus, folder: Path, n: int) -> list[float]:
    log = folder / "ended.log"
    a = await open_flight(bus, folder, "ended", 0.0, log)
    out = []
    for i in range(n):
        await until(bus, a.id, lambda r: r.status == "closed")
        t0 = time.time()
        said = await conversation.tell(bus, a.id, f"again{i}", by="bench")
        assert said["told"] == "resumed", said
        out.append((logged(log, f"user again{i}") - t0) * 1000)
    # its last turn ends, then it is closed for good: its supervisor never outlives the bench's bus
    await admission.close(bus, await until(bus, a.id, lambda r: r.status == "closed"))
    return out


async def one_bus(url: str, folder: Path, n: int, resumes: int) -> dict[str, Any]:
    bus = await open_bus(url)
    try:
        rows = await open_flight_rows(bus, folder, n)
        rows["resume"] = await ended_flight_rows(bus, folder, resumes)
        return rows
    finally:
        await bus.close()


def claude_rows(folder: Path, resumes: int) -> dict[str, Any]:
    """The real Claude Code of the host suite with a scripted model: tell to an ended flight ->
    its first model request, and an open idle flight's memory."""
    sys.path[:0] = [str(Path(__file__).parents[1] / "tests" / "hosts"), str(Path(__file__).parents[1] / "tests")]
    from hostkit import CLAUDE, install  # type: ignore[import-not-found]
    from modelserver import ModelServer, Say  # type: ignore[import-not-found]

    exe = install(CLAUDE)
    home = folder / "home"
    (home / "tmp").mkdir(parents=True)
    with ModelServer(lambda turn: Say("ok")) as m:
        env = dict(
            os.environ,
            HOME=str(home),
            TMPDIR=str(home / "tmp"),
            ANTHROPIC_BASE_URL=m.url,
            ANTHROPIC_API_KEY="sk-scripted",
            DISABLE_AUTOUPDATER="1",
            CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        )
        presets = folder / "claude.toml"
        presets.write_text(f"[presets.claude]\nprogram = {json.dumps(str(exe))}\n")

        async def go() -> dict[str, Any]:
            bus = await open_bus(str(folder / "bus"))
            try:
                a = await start(bus, "claude", "claude", presets, env, home, 3600.0)
                a = await until(bus, a.id, lambda r: r.turn >= 1 and r.status == "idle")
                memory = (rss_kib(a.supervisor_pid), tree_rss_kib(a.pid))

                await admission.close(bus, a)
                b = await start(bus, "claude2", "claude", presets, env, home, 0.0)
                firsts = []
                for i in range(resumes):
                    await until(bus, b.id, lambda r: r.status == "closed")
                    seen = len(m.rec.times)
                    t0 = time.time()
                    said = await conversation.tell(bus, b.id, f"again {i}", by="bench")
                    await until(bus, b.id, lambda r, turn=said["turn"]: r.turn >= turn and r.status != "running")
                    firsts.append((m.rec.times[seen] - t0) * 1000)
                return {"memory": memory, "resume": firsts}
            finally:
                await bus.close()

        return asyncio.run(go())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--claude", action="store_true")
    args = parser.parse_args()
    n, resumes = (2, 1) if args.quick else (200, 20)  # quick: every row once, tiny
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        print("directory bus ...", file=sys.stderr)
        results["directory"] = asyncio.run(one_bus(str(Path(tmp) / "bus"), Path(tmp), n, resumes))
        schema = f"bench_{uuid.uuid4().hex[:12]}"
        print("PostgreSQL bus ...", file=sys.stderr)
        (Path(tmp) / "pg").mkdir()
        try:
            results["PostgreSQL"] = asyncio.run(one_bus(with_schema(PG_URL, schema), Path(tmp) / "pg", n, resumes))
        finally:
            with psycopg.connect(PG_URL, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        claude = None
        if args.claude:
            print("Claude Code ...", file=sys.stderr)
            (Path(tmp) / "claude").mkdir()
            claude = claude_rows(Path(tmp) / "claude", resumes)
    rows = []
    for bus, r in results.items():
        rows.append(
            (bus, "tell -> line on the agent's stdin", f"{pct(r['stdin'], 0.5):.1f} / {pct(r['stdin'], 0.99):.1f}")
        )
        rows.append(
            (bus, "tell -> its answer (turn started)", f"{pct(r['answer'], 0.5):.1f} / {pct(r['answer'], 0.99):.1f}")
        )
        rows.append(
            (
                bus,
                "tell to an ended flight -> agent read it",
                f"{pct(r['resume'], 0.5):.0f} / {pct(r['resume'], 0.99):.0f}",
            )
        )
        sup, agent = r["memory"]
        rows.append((bus, "open idle flight: supervisor + stand-in RSS", f"{sup / 1024:.0f} + {agent / 1024:.0f} MiB"))
    if claude is not None:
        rows.append(
            (
                "directory",
                "Claude Code: tell to an ended flight -> first model request",
                f"{pct(claude['resume'], 0.5):.0f} / {pct(claude['resume'], 0.99):.0f}",
            )
        )
        sup, agent = claude["memory"]
        rows.append(
            (
                "directory",
                "Claude Code: open idle flight, supervisor + agent RSS",
                f"{sup / 1024:.0f} + {agent / 1024:.0f} MiB",
            )
        )
    head = ("bus", "row", "p50 / p99 ms")
    widths = [max(len(str(x[i])) for x in [head, *rows]) for i in range(3)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print("| " + " | ".join(str(x).ljust(w) for x, w in zip(r, widths, strict=True)) + " |")
    print(f"samples: {n} tells, {resumes} resumes a bus")
    print(f"load: {' '.join(f'{x:.2f}' for x in os.getloadavg())} (1, 5, 15 min) on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
