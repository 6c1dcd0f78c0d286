"""Print a client session with `wavewait mcp`: dispatch three flights, then wait on them.

    python bench/transcript_mcp.py [--bus PATH]
    python bench/transcript_mcp.py --quick   # every delay and the first wait's timeout halved

Each flight is a shell command that works for a while, drops `wavebus/wave-1/flights/NAME.done`
and reports with `wavewait notify`; one of them is slower than the first wait, so the
transcript shows a timeout with partial results and a re-wait on what is pending.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import time

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from wavewait.core.bus import open_bus


def flight(name: str, delay: float) -> list[str]:
    ww = f"{shlex.quote(sys.executable)} -m wavewait"
    done = f"wavebus/wave-1/flights/{name}.done"
    return [
        "sh",
        "-c",
        f"sleep {delay} && echo ok > {done}.tmp && mv {done}.tmp {done} && "
        f"{ww} notify --status success --message {shlex.quote(name + ': all good')}",
    ]


async def main(bus: str, project: str, scale: float = 1.0) -> None:
    os.makedirs(os.path.join(project, "wavebus", "wave-1", "flights"), exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAVEWAIT_")}
    env |= {"WAVEWAIT_BUS": bus, "WAVEWAIT_PROJECT_DIR": project}
    params = StdioServerParameters(command=sys.executable, args=["-m", "wavewait", "mcp"], env=env)
    async with Client(params) as c:

        async def call(tool: str, args: dict) -> dict:
            print(f"→ {tool} {json.dumps(args)}")

            async def progress(p: float, total: float | None, message: str | None) -> None:
                print(f"   … progress {p:.1f}/{total:g} s: {message}")

            r = await c.call_tool(tool, args, progress_callback=progress)
            out = r.structured_content if not r.is_error else {"isError": r.content[0].text}
            print(f"← {json.dumps(out, ensure_ascii=False)}\n")
            return out

        ids = []
        for name, delay in (("file-reader", 0.3), ("test-runner", 1.0), ("code-analyzer", 4.0)):
            ids.append(
                (await call("spawn_agent", {"name": name, "wave": "wave-1", "command": flight(name, delay * scale)}))[
                    "agent_id"
                ]
            )
        await call(
            "wave_wait_for_signal", {"signal_path": "wavebus/wave-1/flights/*.done", "min_count": 1, "timeout_sec": 60}
        )
        first = await call("wait", {"timeout": 2 * scale, "from_agents": ids})
        pending = [r["agent_id"] for r in first["results"] if r["status"] == "running"]
        await call("wait", {"timeout": 60, "from_agents": pending})
        # a flight's process ends after its report: wait for that, not for a while (and its
        # supervisor's last write lands before the bus's folder is removed)
        closed = {"id": "wave-1-closed", "agentId": ids[0], "agentIds": ids[1:], "kind": "agent-closed"}
        await call("wait_agent", closed | {"description": "every flight of wave-1 closed"})
        await call("list_agents", {"wave": "wave-1"})
    await _supervisors_gone(bus, ids)


async def _supervisors_gone(bus_url: str, ids: list[str], within: float = 30.0) -> None:
    """Return once each flight's supervisor has exited: it records the flight's end, then
    admits the wave's next flight, so it may still write to the bus after its flight closed
    (and the bus's folder is removed when this script ends)."""
    bus = await open_bus(bus_url)
    try:
        pids = [a.supervisor_pid for a in (await bus.get_agents(ids)).values() if a.supervisor_pid]
    finally:
        await bus.close()
    deadline = time.monotonic() + within
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        await anyio.sleep(0.05)  # not our children: nothing to wait on but the pid itself


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bus", default=None)
    ap.add_argument("--quick", action="store_true", help="every delay halved")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        anyio.run(main, a.bus or os.path.join(d, "bus"), os.path.join(d, "project"), 0.5 if a.quick else 1.0)
