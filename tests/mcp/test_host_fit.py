"""What makes `wavewait mcp` fit real hosts (issue: Claude Code and Codex out of the box), through
the real MCP client over stdio: the output budget, the compact text, the max-block the host's
own timeout implies, the printed set-up, and the truthful wait_agent answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import tomllib

import anyio
import pytest

from wavewait.core import messages
from wavewait.core.agents import register
from wavewait.core.proc import alive

from conftest import env_for, register_crew, until, wavewait_cmd
from mcptools import data, error_text, mcp_client, server_pid

pytestmark = [pytest.mark.anyio, pytest.mark.one_bus]


async def test_a_fan_in_over_the_output_budget_leaves_the_rest_queued_and_says_so(bus):
    names = [f"flight-{i:02d}" for i in range(10)]
    await register_crew(bus, *names)
    for n in names:
        await messages.send(bus, n, "orchestrator", f"REPORT<{n}> " + "x" * 1990)
    seen: list[str] = []
    calls = 0
    async with mcp_client(bus, "--output-budget", "6000") as c:
        while len(seen) < len(names) and calls < 10:
            rest_ids = [n for n in names if n not in seen]  # what the hint says to wait on
            res = await c.call_tool("wait", {"timeout": 5, "from_agents": rest_ids})
            r = data(res)
            calls += 1
            got = [x for x in r["results"] if x["status"] == "received"]
            assert sum(len(x["message"]) for x in got) <= 6000 * 0.8  # the rest lists the others
            seen += [x["name"] for x in got]
            if r["status"] == "partial":
                assert r["more_waiting"] == len(names) - len(seen)
                assert "call wait again" in r["hint"].lower()
                assert json.dumps([n for n in names if n not in seen]) in r["hint"]
                assert f"{r['more_waiting']} more message(s) are waiting" in r["hint"]
            else:
                assert r["status"] == "complete"
        rest = data(await c.call_tool("wait", {"timeout": 0}))
    assert calls == 5  # two reports of 2,000 characters fit in 4,800 (of 6,000)
    assert sorted(seen) == names  # every report seen exactly once
    assert rest["status"] == "timeout"  # and none left behind


@pytest.mark.long
async def test_a_fan_in_over_2000_flights_fits_what_hosts_show_and_the_rest_comes_once(bus):
    """The default budget bounds the whole answer, not only its messages: 2,000 entries were
    590 KB, which Claude Code moves to a file and Codex cuts in the middle."""
    ids = [f"flight-{i:04d}" for i in range(2_000)]
    await register(bus, "orchestrator")
    for i in range(0, len(ids), 200):
        await asyncio.gather(*(register(bus, f, parent_id="orchestrator") for f in ids[i : i + 200]))
        await asyncio.gather(*(messages.send(bus, f, "orchestrator", f"REPORT {f}") for f in ids[i : i + 200]))
    async with mcp_client(bus) as c:
        res = await c.call_tool("wait", {"timeout": 30, "from_agents": ids})
        r = data(res)
        text = res.content[0].text  # type: ignore[union-attr]
        got = [x["message"] for x in r["results"] if x["status"] == "received"]
        while True:
            more = data(await c.call_tool("wait", {"timeout": 0, "max_messages": 100}))
            if more["status"] != "received":
                break
            got += [more["message"], *(m["message"] for m in more.get("more") or [])]
    assert len(text) < 34_000, len(text)  # the entries within 30,000, the hint and counts besides
    assert r["status"] == "partial" and r["more_waiting"] + r["met"] == 2_000
    assert len(r["results"]) + sum(r["omitted"].values()) == 2_000
    assert "max_messages=100" in r["hint"] and len(r["hint"]) < 2_000
    assert sorted(got) == [f"REPORT {f}" for f in ids]  # each report once


async def test_the_first_message_is_taken_even_when_it_alone_is_over_the_budget(bus):
    await register_crew(bus, "big", "small")
    await messages.send(bus, "big", "orchestrator", "y" * 3000)
    await messages.send(bus, "small", "orchestrator", "z")
    async with mcp_client(bus, "--output-budget", "1000") as c:
        r = data(await c.call_tool("wait", {"timeout": 5, "from_agents": ["big", "small"]}))
        again = data(await c.call_tool("wait", {"timeout": 5, "from_agents": ["small"]}))
    # the small report stays queued, at its place: the entry says so ("reported")
    assert [x["status"] for x in r["results"]] == ["received", "reported"] and r["more_waiting"] == 1
    assert again["status"] == "complete" and again["results"][0]["message"] == "z"


async def test_claude_codes_tool_timeout_caps_max_block(bus):
    """Claude Code passes MCP_TOOL_TIMEOUT to the server and drops the call at it without a word."""
    await register_crew(bus, "slow")
    async with mcp_client(bus, env={"MCP_TOOL_TIMEOUT": "3000"}) as c:
        with anyio.fail_after(30):
            r = data(await c.call_tool("wait", {"timeout": 120, "from_agents": ["slow"]}))
    assert r["status"] == "timeout" and r["elapsed_sec"] < 3
    assert "max-block" in r["hint"]


async def test_wait_agent_names_the_unknown_id_and_is_not_resolved_when_it_timed_out(bus):
    await register_crew(bus, "writer-1")
    base = {"id": "w1", "agentId": "writer-1", "kind": "agent-idle", "description": "the draft"}
    async with mcp_client(bus, "--max-block", "0.3") as c:
        unknown_first = error_text(await c.call_tool("wait_agent", {**base, "agentId": "nobody"}))
        unknown_more = error_text(await c.call_tool("wait_agent", {**base, "agentIds": ["writer-1", "ghost"]}))
        cut = data(await c.call_tool("wait_agent", {**base, "timeoutAt": "2099-01-01T00:00:00Z"}))
    assert unknown_first.startswith("wait_agent: ") and "agentId:" in unknown_first and "agentIds" not in unknown_first
    assert "agentIds[1]" in unknown_more and "ghost" in unknown_more
    assert cut["status"] == "pending" and cut["resolution"]["status"] == "timed_out"
    assert "2099-01-01T00:00:00+00:00" in cut["hint"] and "max-block of 0.3 s" in cut["hint"]


def printed(*args: str, cwd: str | None = None) -> str:
    return subprocess.run(
        wavewait_cmd("mcp", "--print-config", *args), capture_output=True, text=True, check=True, cwd=cwd
    ).stdout


def test_print_config_codex_is_required_approved_and_cuts_below_the_timeout(tmp_path):
    cfg = tomllib.loads(printed("codex", "--bus", str(tmp_path / "bus")))["mcp_servers"]["wavewait"]
    assert cfg["required"] is True and cfg["default_tools_approval_mode"] == "approve"
    assert os.path.isabs(cfg["command"])
    mb = float(cfg["args"][cfg["args"].index("--max-block") + 1])
    assert mb < cfg["tool_timeout_sec"] <= 300  # below Codex's default cut, and the wait returns before it
    assert cfg["env"]["WAVEWAIT_BUS"] == str(tmp_path / "bus")


def test_print_config_claude_loads_and_allows_the_tools_headless(tmp_path):
    server = json.loads(printed("claude-json", cwd=str(tmp_path)))["mcpServers"]["wavewait"]
    assert os.path.isabs(server["command"]) and "--max-block" in server["args"]
    assert json.loads(printed("claude-settings")) == {"permissions": {"allow": ["mcp__wavewait"]}}
    flags = printed("claude-flags", cwd=str(tmp_path)).split()
    assert flags == ["--mcp-config", str(tmp_path / ".mcp.json"), "--allowedTools", "mcp__wavewait"]
    everything = printed("claude", cwd=str(tmp_path))
    assert "--mcp-config" in everything and "settings.local.json" in everything and "mcp__wavewait" in everything


async def test_a_stop_hook_after_notify_completion_reports_nothing_more(bus):
    """One report per flight, whatever mix of the tool and the `wavewait notify` Stop hook sent it."""
    await register_crew(bus, "worker-1")
    ids = {"WAVEWAIT_AGENT_ID": "worker-1", "WAVEWAIT_PARENT_ID": "orchestrator"}
    async with mcp_client(bus, env=ids) as c:
        data(await c.call_tool("notify_completion", {"status": "success", "message": "done"}))
    hook = subprocess.run(
        wavewait_cmd("notify", "--message", "session stopped"), env=env_for(bus, **ids), capture_output=True, text=True
    )
    assert hook.returncode == 0 and json.loads(hook.stdout)["already_reported"] is True
    assert "already reported" in hook.stderr and "nothing sent" in hook.stderr
    taken = [i for i in await bus.peek("orchestrator") if i.type == "worker_complete"]
    assert [i.body for i in taken] == ["done"]
    await messages.send(bus, "orchestrator", "worker-1", "one more thing")  # a new round
    again = subprocess.run(
        wavewait_cmd("notify", "--message", "second"), env=env_for(bus, **ids), capture_output=True, text=True
    )
    assert again.returncode == 0 and "event_id" in json.loads(again.stdout)


async def test_flights_of_a_session_that_ended_are_stopped_and_say_why(bus, tmp_path):
    async with mcp_client(bus, cwd=str(tmp_path)) as c:
        r = data(await c.call_tool("spawn_agent", {"name": "sleeper", "command": ["sleep", "60"]}))
        done = data(await c.call_tool("spawn_agent", {"name": "quick", "command": ["true"]}))

        async def quick_ended() -> bool:  # a spawn answers once its command started, not ended
            a = await bus.get_agent(done["agent_id"])
            return a is not None and a.status != "running"

        await until(quick_ended, 20, "the quick flight to end while its session is open")

    # stdin closed: the session is over
    async def stopped() -> bool:
        a = await bus.get_agent(r["agent_id"])
        return a is not None and a.status == "dead"

    await until(stopped, 20, "the orphaned flight stopped")
    a = await bus.get_agent(r["agent_id"])
    assert a is not None and "the session that spawned it ended" in (a.reason or "")
    q = await bus.get_agent(done["agent_id"])
    assert q is not None and "session that spawned it ended" not in (q.reason or "")


async def test_a_host_that_signals_its_server_while_it_stops_its_flights_leaves_none_running(bus, tmp_path):
    """A host closes the server's stdin, then TERMs it (the SDK's client 2 s later, sooner
    under load): signals that land while the server stops its flights must not cut the stops
    short, or a flight runs on, unseen, its record often saying dead."""
    async with anyio.create_task_group() as tg:
        async with mcp_client(bus, cwd=str(tmp_path)) as c:
            spawned = [
                data(await c.call_tool("spawn_agent", {"name": f"sleeper-{i}", "command": ["sleep", "600"]}))
                for i in range(6)
            ]
            ids = [s["agent_id"] for s in spawned]
            server = server_pid()

            async def signal_once_the_stops_begin() -> None:
                async def stopping() -> bool:
                    return any(a.status == "dead" for a in (await bus.get_agents(ids)).values())

                await until(stopping, 30, "the session's end to stop its first flight")
                while alive(server):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(server, signal.SIGTERM)
                    await anyio.sleep(0.002)  # a host's signals, again and again, until the server ends

            tg.start_soon(signal_once_the_stops_begin)
        # stdin closed: the session is over

    records = await bus.get_agents(ids)
    assert all(records[i].status == "dead" for i in ids), {r.name: r.status for r in records.values()}

    def none_running() -> bool:
        return not any(
            alive(r.pid, r.pid_start) or alive(r.supervisor_pid, r.supervisor_start) for r in records.values()
        )

    await until(none_running, 20, "every flight's processes to end")
