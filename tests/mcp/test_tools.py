"""Each tool through the real MCP client over stdio, talking to `wavewait mcp` as a subprocess.

For every tool: its success path, its timeout (a normal result with the partial state), an
interrupt from outside, and its validation errors (an `isError` that names the field and
changes nothing).
"""

from __future__ import annotations

import json
import subprocess
import sys

import anyio
import pytest

from wavewait.core import messages

from conftest import PYTHON, Background, has_progress, has_waits, register_crew, until, wavewait_cmd
from mcptools import data, error_text, mcp_client, server_env

pytestmark = [pytest.mark.anyio, pytest.mark.one_bus]

WAITS = ("wait", "wave_wait_for_signal", "wait_agent", "wait_for_event")


# --------------------------------------------------------------------------- tools/list
async def test_tools_list_publishes_schemas_and_honest_annotations(bus):
    async with mcp_client(bus) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        instructions = c.instructions or ""
    assert set(tools) == {
        "wait",
        "wave_wait_for_signal",
        "wait_agent",
        "wait_for_event",
        "notify_completion",
        "send",
        "spawn_agent",
        "list_agents",
        "close_agent",
        "kill_agent",
        "read_output",
        "tell_agent",
        "read_transcript",
        "reply",
        "ask",
        "approve",
        "merge_wave",
    }
    for t in tools.values():
        if t.name == "approve":  # Claude Code's permission tool contract: one text block, no structured result
            assert t.output_schema is None
            continue
        assert t.output_schema and t.output_schema["type"] == "object", t.name
        assert t.input_schema["additionalProperties"] is False, t.name
        assert t.annotations is not None and t.description
    # seed parameter names
    assert tools["wait"].input_schema["required"] == ["timeout"]
    joins = {"wave", "files", "events", "need", "check", "check_timeout", "stop_rest"}  # docs/joins.md
    assert set(tools["wait"].input_schema["properties"]) == {"timeout", "from_agents", "max_messages", *joins}
    assert tools["wait"].input_schema["properties"]["max_messages"]["default"] == 1
    sig = tools["wave_wait_for_signal"].input_schema["properties"]
    assert sig["timeout_sec"]["default"] == 1800 and sig["min_count"]["default"] == 1
    assert set(tools["wait_agent"].input_schema["required"]) == {"id", "agentId", "kind", "description"}
    assert tools["wait_for_event"].input_schema["properties"]["timeout_secs"]["default"] == 240
    # waits that consume are not read-only; watching is; kill and close are destructive
    assert tools["wait"].annotations.read_only_hint is False
    assert tools["wait_for_event"].annotations.read_only_hint is False
    assert tools["list_agents"].annotations.read_only_hint is True
    assert tools["kill_agent"].annotations.destructive_hint is True
    assert tools["close_agent"].annotations.destructive_hint is True
    # each description says first what its tool is (a search by name or purpose finds it: tests/hosts);
    # what every wait shares is said once, in the server's instructions
    assert tools["wait"].description.startswith("Wait for messages from agents")
    assert tools["wait_for_event"].description.startswith("Wait for the next event")
    assert tools["wave_wait_for_signal"].description.startswith("Wait for signal files")
    assert tools["wait_agent"].description.startswith("Wait until agents are idle")
    assert not [n for n, t in tools.items() if "instead of sleep" in t.description]
    assert "instead of sleep" in instructions and "timeout is a normal result" in instructions
    assert all(n in instructions for n in ("wait", "wait_for_event", "wait_agent", "wave_wait_for_signal"))


# --------------------------------------------------------------------------- wait
async def test_wait_next_message_returns_the_oldest_then_times_out_normally(bus):
    await register_crew(bus, "file-reader")
    await messages.send(bus, "file-reader", "orchestrator", "first")
    await messages.send(bus, "file-reader", "orchestrator", "second")
    async with mcp_client(bus) as c:
        r1 = data(await c.call_tool("wait", {"timeout": 5}))
        r2 = data(await c.call_tool("wait", {"timeout": 5}))
        r3 = data(await c.call_tool("wait", {"timeout": 0.2}))
    assert (r1["from"], r1["name"], r1["message"]) == ("file-reader", "file-reader", "first")
    assert r1["sent_at"] and r2["message"] == "second"
    assert r3["status"] == "timeout" and "call wait again" in r3["hint"].lower()


async def test_wait_with_max_messages_drains_a_burst_in_one_call(bus):
    await register_crew(bus, "file-reader", "linter")
    for i in range(4):
        await messages.send(bus, ("file-reader", "linter")[i % 2], "orchestrator", f"report {i}")
    async with mcp_client(bus) as c:
        r = data(await c.call_tool("wait", {"timeout": 5, "max_messages": 3}))
        last = data(await c.call_tool("wait", {"timeout": 5, "max_messages": 3}))
        # acknowledged once the grace after each response passed (a session ending first gives them back)
        await until(lambda: has_waits(bus, 0), what="both calls acknowledged")
    assert (r["from"], r["message"]) == ("file-reader", "report 0")
    assert [(m["from"], m["name"], m["message"]) for m in r["more"]] == [
        ("linter", "linter", "report 1"),
        ("file-reader", "file-reader", "report 2"),
    ]
    assert last["message"] == "report 3" and "more" not in last
    assert [i.body for i in await bus.history("orchestrator")] == [f"report {i}" for i in range(4)]


async def test_wait_fan_in_returns_early_when_the_rest_are_dead(bus):
    await register_crew(bus, "file-reader", "test-runner", "linter")
    await messages.send(bus, "test-runner", "orchestrator", "green")
    await messages.send(bus, "linter", "orchestrator", "from someone not listed")
    await bus.transition("file-reader", "dead", ("running",), reason="exited with code 1")
    async with mcp_client(bus) as c:
        r = data(await c.call_tool("wait", {"timeout": 30, "from_agents": ["test-runner", "file-reader"]}))
        rest = data(await c.call_tool("wait", {"timeout": 0}))
    assert r["status"] == "complete" and r["elapsed_sec"] < 30
    assert [(x["name"], x["status"]) for x in r["results"]] == [("test-runner", "received"), ("file-reader", "dead")]
    assert r["results"][0]["message"] == "green"
    assert "file-reader" in r["hint"] and "exited with code 1" in r["hint"]
    assert rest["message"] == "from someone not listed"  # others' messages stay queued


@pytest.mark.both_buses
async def test_wait_fan_in_timeout_keeps_partial_state_and_says_what_to_rewait(bus):
    await register_crew(bus, "file-reader", "test-runner")
    await messages.send(bus, "file-reader", "orchestrator", "found 3 issues")
    async with mcp_client(bus) as c:
        r = data(await c.call_tool("wait", {"timeout": 0.3, "from_agents": ["file", "test-runner"]}))
    assert r["status"] == "timeout"
    assert [(x["agent_id"], x["status"]) for x in r["results"]] == [
        ("file-reader", "received"),
        ("test-runner", "running"),
    ]
    assert r["results"][0]["message"] == "found 3 issues"
    assert 'from_agents=["test-runner"]' in r["hint"]


async def test_a_client_that_reads_only_content_gets_every_report_the_wait_took(bus):
    """A Codex code cell reads `r.content` (tests/hosts), as plain MCP clients do: the text block
    is the whole result as compact JSON, not a one-line summary; an error stays readable text."""
    names = [f"flight-{i:02d}" for i in range(40)]
    await register_crew(bus, *names)
    for n in names:
        await messages.send(bus, n, "orchestrator", f"REPORT<{n}> all tests pass")
    async with mcp_client(bus) as c:
        res = await c.call_tool("wait", {"timeout": 5, "from_agents": names})
        bad = await c.call_tool("wait", {"timeout": -1})
    text = "\n".join(b.text for b in res.content if b.type == "text")
    assert [n for n in names if f"REPORT<{n}> all tests pass" not in text] == []
    assert json.loads(text) == res.structured_content and ", " not in text and ": " not in text
    assert bad.is_error and bad.structured_content is None
    assert bad.content[0].text.startswith("Error: wait: invalid arguments, nothing was done.")


BAD_WAIT_ARGS = [
    ({}, "timeout"),
    ({"timeout": -1}, "timeout"),
    ({"timeout": "soon"}, "timeout"),
    ({"timeout": "nan"}, "timeout"),
    ({"timeout": 1, "from_agents": "file-reader"}, "from_agents"),
    ({"timeout": 1, "from_agents": []}, "from_agents"),
    ({"timeout": 1, "from_agents": ["nobody"]}, "from_agents[0]"),
    ({"timeout": 1, "from_agents": ["fi"]}, "from_agents[0]"),
    ({"timeout": 1, "from_agent": ["file-reader"]}, "from_agent"),
    ({"timeout": 1, "max_messages": 0}, "max_messages"),
    ({"timeout": 1, "max_messages": 101}, "max_messages"),
    ({"timeout": 1, "from_agents": ["file-reader"], "max_messages": 5}, "max_messages"),
]


async def test_wait_rejects_bad_input_naming_the_field_and_takes_nothing(bus):
    await register_crew(bus, "file-reader")
    await messages.send(bus, "file-reader", "orchestrator", "keep me")
    async with mcp_client(bus) as c:
        for args, field in BAD_WAIT_ARGS:
            text = error_text(await c.call_tool("wait", args))
            assert field in text, (args, text)
            assert "allowed" in text.lower() or "agent" in text, (args, text)
    assert [i.body for i in await bus.peek("orchestrator")] == ["keep me"]
    assert await bus.list_waits() == []


async def test_ambiguous_prefix_is_an_error_naming_both(bus):
    await register_crew(bus, "flight-one", "flight-two")
    async with mcp_client(bus) as c:
        text = error_text(await c.call_tool("wait", {"timeout": 1, "from_agents": ["flight"]}))
    assert "flight-one" in text and "flight-two" in text


@pytest.mark.both_buses
async def test_wait_is_registered_with_tool_and_caller_and_interrupt_returns_partial_state(bus):
    await register_crew(bus, "file-reader", "test-runner")
    await messages.send(bus, "file-reader", "orchestrator", "done reading")
    async with mcp_client(bus) as c:
        async with anyio.create_task_group() as tg:
            bg = Background(tg)
            bg.start("wait", c.call_tool, "wait", {"timeout": 60, "from_agents": ["file-reader", "test-runner"]})
            await until(lambda: has_progress(bus, "1/2 received"), what="the wait on the bus, holding one message")
            (w,) = await bus.list_waits()
            assert (w.tool, w.waiter, w.kind) == ("wait", "orchestrator", "fan_in")
            assert w.targets == ["file-reader", "test-runner"] and w.deadline is not None
            # interrupt from outside, the way a person does it
            done = await anyio.run_process(wavewait_cmd("interrupt", w.id[:8]), env=server_env(bus), check=False)
            assert done.returncode == 0, done.stderr
    r = data(bg.results["wait"])
    assert r["status"] == "interrupted"
    assert [x["status"] for x in r["results"]] == ["received", "running"]
    assert r["results"][0]["message"] == "done reading"
    assert "interrupted" in r["hint"]
    await until(lambda: has_waits(bus, 0), what="the wait record removed")


async def test_max_block_returns_a_normal_timeout_that_says_to_call_again(bus):
    await register_crew(bus, "test-runner")
    async with mcp_client(bus, "--max-block", "0.5") as c:
        r = data(await c.call_tool("wait", {"timeout": 600, "from_agents": ["test-runner"]}))
        e = data(await c.call_tool("wait_for_event", {"timeout_secs": 600}))
        a = data(
            await c.call_tool(
                "wait_agent",
                {"id": "w1", "agentId": "test-runner", "kind": "agent-idle", "description": "tests finish"},
            )
        )
    assert r["status"] == "timeout" and r["elapsed_sec"] < 60
    assert "max-block" in r["hint"] and 'from_agents=["test-runner"]' in r["hint"]
    assert e["type"] == "timeout" and "max-block" in e["hint"]
    assert a["resolution"]["status"] == "timed_out" and "timeoutAt" not in a["resolution"]
    assert "max-block" in a["hint"] and a["resolution"]["pendingAgentIds"] == ["test-runner"]


# --------------------------------------------------------------------------- wait_for_event
@pytest.mark.both_buses
async def test_wait_for_event_takes_by_type_fifo_and_leaves_others_queued(bus):
    await register_crew(bus, "fix-bug", "add-tests")
    await messages.send(bus, "fix-bug", "orchestrator", "a plain message")
    await messages.notify_completion(bus, "fix-bug", status="success", message="fixed", changes=["a.py"])
    await messages.notify_completion(bus, "add-tests", status="error", message="red")
    async with mcp_client(bus) as c:
        e1 = data(await c.call_tool("wait_for_event", {"types": ["worker_complete"], "timeout_secs": 5}))
        e2 = data(await c.call_tool("wait_for_event", {"types": ["worker_complete"], "timeout_secs": 5}))
        e3 = data(await c.call_tool("wait_for_event", {"types": ["worker_complete"], "timeout_secs": 0}))
        e4 = data(await c.call_tool("wait_for_event", {"timeout_secs": 0}))
        bad = error_text(await c.call_tool("wait_for_event", {"types": ["Worker Complete"]}))
        bad2 = error_text(await c.call_tool("wait_for_event", {"timeout_secs": -3}))
    assert (e1["type"], e1["worker_id"], e1["status"], e1["changes"], e1["message"]) == (
        "worker_complete",
        "fix-bug",
        "success",
        ["a.py"],
        "fixed",
    )
    assert e1["event_id"] and (e2["worker_id"], e2["status"]) == ("add-tests", "error")
    assert e3["type"] == "timeout" and "hint" in e3
    assert (e4["type"], e4["from"], e4["body"]) == ("message", "fix-bug", "a plain message")
    assert "types[0]" in bad and "timeout_secs" in bad2


# --------------------------------------------------------------------------- wait_agent
async def test_wait_agent_resolves_idle_and_a_repeated_id_returns_the_stored_resolution(bus):
    await register_crew(bus, "writer-1", "writer-2")
    await messages.notify_completion(bus, "writer-1", status="success", message="draft")
    args = {
        "id": "wait-2",
        "agentId": "writer-1",
        "agentIds": ["writer-1", "writer-2"],
        "kind": "agent-idle",
        "match": "any",
        "description": "the first draft",
    }
    async with mcp_client(bus) as c:
        r = data(await c.call_tool("wait_agent", args))
        await bus.transition("writer-1", "running", ("idle",))
        again = data(await c.call_tool("wait_agent", args))
        past = data(
            await c.call_tool(
                "wait_agent", {**args, "id": "wait-3", "match": "all", "timeoutAt": "2020-01-01T00:00:00Z"}
            )
        )
        unknown = error_text(await c.call_tool("wait_agent", {**args, "id": "w4", "agentId": "nobody"}))
        bad_kind = error_text(await c.call_tool("wait_agent", {**args, "id": "w5", "kind": "agent-done"}))
        bad_time = error_text(await c.call_tool("wait_agent", {**args, "id": "w6", "timeoutAt": "tomorrow"}))
    assert (r["waitId"], r["agentId"], r["status"], r["kind"], r["match"]) == (
        "wait-2",
        "writer-1",
        "resolved",
        "agent-idle",
        "any",
    )
    assert r["resolution"]["status"] == "agent_idle" and r["resolution"]["resolvedAgentIds"] == ["writer-1"]
    assert again == r
    assert past["resolution"]["status"] == "timed_out" and past["resolution"]["pendingAgentIds"] == [
        "writer-1",
        "writer-2",
    ]
    assert "nobody" in unknown and "kind" in bad_kind and "agent-idle" in bad_kind and "timeoutAt" in bad_time


async def test_wait_agent_closed_waits_until_close_agent(bus):
    await register_crew(bus, "researcher-1")
    async with mcp_client(bus) as c, mcp_client(bus) as other:
        async with anyio.create_task_group() as tg:
            bg = Background(tg)
            bg.start(
                "wait_agent",
                c.call_tool,
                "wait_agent",
                {
                    "id": "wait-1",
                    "agentId": "researcher-1",
                    "kind": "agent-closed",
                    "description": "research agent closes",
                },
            )
            await until(lambda: has_waits(bus, 1), what="the wait_agent wait")
            closed = data(await other.call_tool("close_agent", {"agentId": "researcher-1"}))
    assert closed == {"agentId": "researcher-1", "status": "closed"}
    assert data(bg.results["wait_agent"])["resolution"]["status"] == "agent_closed"


# --------------------------------------------------------------------------- send, notify, agents
async def test_send_delivers_and_refuses_empty_unknown_or_dead_recipients(bus):
    await register_crew(bus, "file-reader", "gone")
    await bus.transition("gone", "dead", ("running",), reason="killed")
    async with mcp_client(bus) as c:
        sent = data(await c.call_tool("send", {"to": "file-reader", "message": "start"}))
        empty = error_text(await c.call_tool("send", {"to": "file-reader", "message": "  "}))
        unknown = error_text(await c.call_tool("send", {"to": "nobody", "message": "x"}))
        dead = error_text(await c.call_tool("send", {"to": "gone", "message": "x"}))
    assert sent["message_id"]
    assert [i.body for i in await bus.peek("file-reader")] == ["start"]
    assert "message" in empty and "to" in unknown and "dead" in dead
    assert await bus.peek("gone") == []


async def test_notify_completion_reports_to_the_parent_and_marks_idle(bus):
    await register_crew(bus, "fix-bug")
    async with mcp_client(bus, env={"WAVEWAIT_AGENT_ID": "fix-bug"}) as worker:
        r = data(
            await worker.call_tool(
                "notify_completion", {"status": "success", "message": "fixed", "changes": ["src/a.py"]}
            )
        )
        bad = error_text(await worker.call_tool("notify_completion", {"status": "ok", "message": "x"}))
    assert r["success"] is True and r["event_id"]
    (item,) = await bus.peek("orchestrator")
    assert (item.id, item.type, item.sender, item.data["changes"]) == (
        r["event_id"],
        "worker_complete",
        "fix-bug",
        ["src/a.py"],
    )
    assert (await bus.get_agent("fix-bug")).status == "idle"
    assert "status" in bad and "success" in bad


async def test_spawn_list_and_kill_an_agent(bus, tmp_path):
    async with mcp_client(bus, env={"WAVEWAIT_PROJECT_DIR": str(tmp_path)}) as c:
        s = data(
            await c.call_tool("spawn_agent", {"name": "sleeper", "wave": "wave-7", "command": ["sh", "-c", "sleep 60"]})
        )
        listed = data(await c.call_tool("list_agents", {"wave": "wave-7"}))
        k = data(await c.call_tool("kill_agent", {"agent": s["agent_id"][:6]}))
        after = data(await c.call_tool("list_agents", {"wave": "wave-7"}))
        neither = error_text(await c.call_tool("spawn_agent", {"name": "x"}))
        both = error_text(await c.call_tool("spawn_agent", {"name": "x", "command": ["true"], "prompt": "p"}))
        prompt = error_text(await c.call_tool("spawn_agent", {"name": "x", "prompt": "fix the bug"}))
        missing = error_text(await c.call_tool("spawn_agent", {"name": "x", "command": ["/no/such/program"]}))
        unknown = error_text(await c.call_tool("kill_agent", {"agent": "nobody"}))
    assert s["name"] == "sleeper" and s["pid"] > 0
    (a,) = listed["agents"]
    assert (a["id"], a["name"], a["wave"], a["status"], a["parent_id"]) == (
        s["agent_id"],
        "sleeper",
        "wave-7",
        "running",
        "orchestrator",
    )
    assert k == {"agent_id": s["agent_id"], "status": "dead"}
    assert after["agents"][0]["status"] == "dead" and "killed" in after["agents"][0]["reason"]
    assert "command" in neither and "prompt" in both
    assert "--agent-command" in prompt and "WAVEWAIT_AGENT_COMMAND" in prompt
    assert "command" in missing and "nobody" in unknown


async def test_spawn_with_prompt_runs_the_configured_agent_command(bus, tmp_path):
    script = tmp_path / "agent.py"
    script.write_text(
        "import os, sys, subprocess\n"
        f"subprocess.run([{sys.executable!r}, '-m', 'wavewait', 'send', os.environ['WAVEWAIT_PARENT_ID'],"
        " 'got: ' + sys.argv[-1]], check=True)\n"
    )
    async with mcp_client(bus, "--agent-command", f"{PYTHON} {script}") as c:
        s = data(await c.call_tool("spawn_agent", {"name": "worker", "prompt": "fix the bug"}))
        r = data(await c.call_tool("wait", {"timeout": 30, "from_agents": [s["agent_id"]]}))
    assert r["results"][0]["message"] == "got: fix the bug"


async def test_print_config_prints_claude_and_codex_setup(bus):
    out = subprocess.run(
        wavewait_cmd("mcp", "--print-config", "claude", "--bus", bus.url), capture_output=True, text=True, check=True
    ).stdout
    assert "claude mcp add" in out and '"mcpServers"' in out and "SubagentStop" in out and "wavewait notify" in out
    out = subprocess.run(
        wavewait_cmd("mcp", "--print-config", "codex", "--max-block", "50"), capture_output=True, text=True, check=True
    ).stdout
    assert "[mcp_servers.wavewait]" in out and "tool_timeout_sec" in out and '"--max-block", "50"' in out


@pytest.mark.parametrize(
    "tool, args, check",
    [
        ("wait", {"timeout": 60}, lambda r: r["status"] == "interrupted"),
        ("wait_for_event", {"timeout_secs": 60}, lambda r: r["type"] == "interrupted"),
        (
            "wait_agent",
            {"id": "w-int", "agentId": "test-runner", "kind": "agent-idle", "description": "tests"},
            lambda r: (
                r["resolution"]["status"] == "interrupted" and r["resolution"]["pendingAgentIds"] == ["test-runner"]
            ),
        ),
    ],
)
async def test_each_blocking_tool_returns_interrupted_when_interrupted_from_outside(bus, tool, args, check):
    await register_crew(bus, "test-runner")
    async with mcp_client(bus) as c:
        async with anyio.create_task_group() as tg:
            bg = Background(tg)
            bg.start(tool, c.call_tool, tool, args)
            await until(lambda: has_waits(bus, 1), what=f"the {tool} wait on the bus")
            (w,) = await bus.list_waits()
            assert (w.tool, w.waiter) == (tool, "orchestrator")
            await bus.interrupt(w.id)
    r = data(bg.results[tool])
    assert check(r) and "interrupted" in r["hint"]
