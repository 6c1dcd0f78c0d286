"""The queue tools through the real MCP client over stdio, on both buses: present only with a
queue, strict input, every guard as an error naming it plus a guard_tripped event, leaf gating."""

from __future__ import annotations

import pytest
from qtools import HANDOFF, handoff, make_queue, types_file

from wavewait.core.tasks import enqueue_task

from conftest import has_waits, until
from mcptools import data, error_text, mcp_client

pytestmark = [pytest.mark.anyio, pytest.mark.one_bus]
QUEUE_TOOLS = {"enqueue_task", "complete_task", "read_handoffs", "list_tasks"}


def queue_flags(tmp_path, *more: str) -> tuple[str, ...]:
    return ("--queue", "q1", "--task-types", str(types_file(tmp_path)), *more)


async def tool_names(client) -> set[str]:
    return {t.name for t in (await client.list_tools()).tools}


async def test_the_queue_tools_exist_only_when_a_queue_is_named(bus, tmp_path):
    async with mcp_client(bus) as c:
        assert not (await tool_names(c)) & QUEUE_TOOLS
    env = {"WAVEWAIT_QUEUE": "q1", "WAVEWAIT_TASK_TYPES": str(types_file(tmp_path))}
    async with mcp_client(bus, env=env) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
    assert QUEUE_TOOLS <= set(tools) and "wait_for_event" in tools
    enqueue = tools["enqueue_task"].input_schema
    assert set(enqueue["properties"]) == {"type", "inputs", "dependsOn", "model", "reason"}
    assert set(enqueue["required"]) == {"type", "inputs", "reason"}
    complete = tools["complete_task"].input_schema
    assert set(complete["properties"]) == {"taskId", "status", "handoff"}
    assert complete["properties"]["handoff"]["required"] == ["goals", "did", "forNextAgent"]
    assert set(tools["read_handoffs"].input_schema["properties"]) == {"type", "taskId"}
    assert set(tools["list_tasks"].input_schema["properties"]) == {"status"}
    for name in QUEUE_TOOLS:
        assert tools[name].input_schema["additionalProperties"] is False
        assert tools[name].output_schema["type"] == "object"
    assert tools["list_tasks"].annotations.read_only_hint is True


@pytest.mark.both_buses
async def test_enqueue_list_complete_and_read_handoffs(bus, tmp_path):
    async with mcp_client(bus, *queue_flags(tmp_path)) as c:
        a = data(await c.call_tool("enqueue_task", {"type": "research", "inputs": {"topic": "auth"}, "reason": "r"}))
        assert (a["type"], a["depth"], a["status"]) == ("research", 0, "queued") and a["id"]
        b = data(
            await c.call_tool(
                "enqueue_task",
                {"type": "fix", "inputs": {"file": "a.py"}, "reason": "r", "dependsOn": [a["id"]], "model": "m"},
            )
        )
        listed = data(await c.call_tool("list_tasks", {}))["tasks"]
        assert [(t["id"], t["status"], t["dependsOn"]) for t in listed] == [
            (a["id"], "queued", []),
            (b["id"], "queued", [a["id"]]),
        ]
        assert listed[0] == {
            "id": a["id"],
            "type": "research",
            "status": "queued",
            "depth": 0,
            "parent": None,
            "dependsOn": [],
            "attempts": 0,
            "inputs": {"topic": "auth"},
            "reason": "r",
        }
        done = data(
            await c.call_tool(
                "complete_task", {"taskId": a["id"], "status": "done", "handoff": handoff(filesTouched=["x.py"])}
            )
        )
        assert done == {"taskId": a["id"], "status": "done"}
        assert [t["id"] for t in data(await c.call_tool("list_tasks", {"status": "done"}))["tasks"]] == [a["id"]]
        by_task = data(await c.call_tool("read_handoffs", {"taskId": a["id"]}))["handoffs"]
        assert by_task == [
            {"taskId": a["id"], "type": "research", "status": "done", **HANDOFF, "filesTouched": ["x.py"]}
        ]
        assert data(await c.call_tool("read_handoffs", {"type": "research"}))["handoffs"] == by_task
        assert data(await c.call_tool("read_handoffs", {"type": "fix"}))["handoffs"] == []
        twice = error_text(
            await c.call_tool("complete_task", {"taskId": a["id"], "status": "done", "handoff": HANDOFF})
        )
        assert f"task {a['id']} is already done; a task is completed once" in twice


async def test_bad_input_is_an_error_that_says_what_to_fix(bus, tmp_path):
    async with mcp_client(bus, *queue_flags(tmp_path)) as c:
        tid = data(await c.call_tool("enqueue_task", {"type": "research", "inputs": {"topic": "a"}, "reason": "r"}))[
            "id"
        ]
        cases = [
            (
                "enqueue_task",
                {"type": "research", "inputs": {"topic": "b"}, "reason": "r", "priority": 1},
                "unknown argument(s) priority",
            ),
            ("enqueue_task", {"type": "research", "inputs": {"topic": "b"}}, "reason"),
            ("enqueue_task", {"type": "research", "inputs": {"subject": "b"}, "reason": "r"}, "add 'topic' to inputs"),
            ("enqueue_task", {"type": "research", "inputs": "b", "reason": "r"}, "inputs"),
            (
                "complete_task",
                {"taskId": tid, "status": "done", "handoff": {"goals": "g", "did": "d"}},
                "handoff.forNextAgent: missing",
            ),
            (
                "complete_task",
                {"taskId": tid, "status": "done", "handoff": HANDOFF | {"goals": ""}},
                "handoff.goals: must be non-empty",
            ),
            (
                "complete_task",
                {"taskId": tid, "status": "done", "handoff": HANDOFF | {"did": "x" * 16385}},
                "handoff.did: at most 16384 bytes",
            ),
            ("complete_task", {"taskId": tid, "status": "ok", "handoff": HANDOFF}, "status"),
            ("complete_task", {"status": "done", "handoff": HANDOFF}, "taskId: this process is bound to no task"),
            ("complete_task", {"taskId": "nosuch", "status": "done", "handoff": HANDOFF}, "taskId: no task 'nosuch'"),
            ("read_handoffs", {}, "give type or taskId"),
            ("read_handoffs", {"type": "research", "taskId": tid}, "not both"),
            ("read_handoffs", {"type": "nope"}, "type: no task type 'nope'"),
            ("list_tasks", {"status": "finished"}, "status"),
            ("list_tasks", {"state": "done"}, "unknown argument(s) state"),
        ]
        for tool, args, expected in cases:
            text = error_text(await c.call_tool(tool, args))
            assert text.startswith(f"{tool}:") and expected in text, (tool, args, text)
        # nothing changed: still one queued task, no handoff
        assert [t["status"] for t in data(await c.call_tool("list_tasks", {}))["tasks"]] == ["queued"]
        assert data(await c.call_tool("read_handoffs", {"taskId": tid}))["handoffs"] == []
        # plain bad input trips no guard
        none = data(await c.call_tool("wait_for_event", {"types": ["guard_tripped"], "timeout_secs": 0}))
        assert none["type"] == "timeout"


async def guard_trip(client, args: dict, guard: str, expected: str) -> None:
    """The call is an isError naming the guard; the owner takes a guard_tripped event for it."""
    text = error_text(await client.call_tool("enqueue_task", {"reason": "r", **args}))
    assert text.startswith(f"enqueue_task: {guard}: ") and expected in text, text
    event = data(await client.call_tool("wait_for_event", {"types": ["guard_tripped"], "timeout_secs": 5}))
    assert (event["type"], event["guard"], event["task_type"]) == ("guard_tripped", guard, args["type"])
    assert expected in event["reason"]


async def test_every_guard_is_an_error_naming_it_and_an_event_for_the_owner(bus, tmp_path):
    q = make_queue(bus, tmp_path, max_depth=1)
    root = (await enqueue_task(q, "orchestrator", type="research", inputs={"topic": "root"}, reason="r")).id
    child = (await enqueue_task(q, "x", type="research", inputs={"topic": "c"}, reason="r", bound=root)).id
    flags = queue_flags(tmp_path, "--max-tasks", "4", "--max-depth", "1")
    async with mcp_client(bus, *flags) as c:
        await guard_trip(
            c, {"type": "reserch", "inputs": {}}, "unknown_type", "the valid types are fix, research, step"
        )
        await guard_trip(
            c,
            {"type": "research", "inputs": {"topic": "x"}, "dependsOn": ["nosuchtask"]},
            "unknown_dependency",
            "no task 'nosuchtask'",
        )
        # dedup ignores the order of keys
        first = {"type": "step", "inputs": {"name": "n", "mode": "ok"}}
        data(await c.call_tool("enqueue_task", {"reason": "r", **first}))
        await guard_trip(c, {"type": "step", "inputs": {"mode": "ok", "name": "n"}}, "dedup", "the same inputs")
        data(await c.call_tool("enqueue_task", {"type": "research", "inputs": {"topic": "4th"}, "reason": "r"}))
        await guard_trip(c, {"type": "research", "inputs": {"topic": "5th"}}, "budget", "the budget is 4 (--max-tasks)")
        # the events taken are acknowledged once the grace passed (a session ending first gives them back)
        await until(lambda: has_waits(bus, 0), what="the events acknowledged")
    async with mcp_client(bus, *flags, env={"WAVEWAIT_TASK_ID": child, "WAVEWAIT_AGENT_ID": "agent-c"}) as c:
        text = error_text(
            await c.call_tool("enqueue_task", {"type": "research", "inputs": {"topic": "deep"}, "reason": "r"})
        )
        assert text.startswith("enqueue_task: depth: ") and "the limit is 1 (--max-depth)" in text
    async with mcp_client(bus, *flags) as c:  # the owner of the branch hears it
        event = data(await c.call_tool("wait_for_event", {"types": ["guard_tripped"], "timeout_secs": 5}))
        assert (event["guard"], event["from"]) == ("depth", "agent-c")


async def test_a_bound_server_enqueues_children_and_completes_its_own_task(bus, tmp_path):
    q = make_queue(bus, tmp_path)
    root = (await enqueue_task(q, "orchestrator", type="research", inputs={"topic": "root"}, reason="r")).id
    env = {"WAVEWAIT_QUEUE": "q1", "WAVEWAIT_TASK_TYPES": str(types_file(tmp_path)), "WAVEWAIT_TASK_ID": root}
    async with mcp_client(bus, env=env) as c:
        assert "enqueue_task" in await tool_names(c)
        kid = data(await c.call_tool("enqueue_task", {"type": "fix", "inputs": {"file": "a.py"}, "reason": "r"}))
        assert kid["depth"] == 1
        assert data(await c.call_tool("complete_task", {"status": "done", "handoff": HANDOFF})) == {
            "taskId": root,
            "status": "done",
        }
    task = await q.task(kid["id"])
    assert (task.parent, task.depth) == (root, 1)
    # the child's agent reads its dependencies' handoffs with no arguments
    grand = (
        await enqueue_task(q, "orchestrator", type="research", inputs={"topic": "g"}, reason="r", depends_on=[root])
    ).id
    async with mcp_client(bus, env=env | {"WAVEWAIT_TASK_ID": grand}) as c:
        (h,) = data(await c.call_tool("read_handoffs", {}))["handoffs"]
    assert (h["taskId"], h["did"]) == (root, HANDOFF["did"])


async def test_a_leaf_bound_server_has_no_enqueue_task_and_refuses_the_call(bus, tmp_path):
    q = make_queue(bus, tmp_path)
    leaf = (await enqueue_task(q, "orchestrator", type="fix", inputs={"file": "a.py"}, reason="r")).id
    env = {"WAVEWAIT_TASK_ID": leaf, "WAVEWAIT_AGENT_ID": "leaf-agent"}
    async with mcp_client(bus, *queue_flags(tmp_path), env=env) as c:
        names = await tool_names(c)
        assert "enqueue_task" not in names and {"complete_task", "read_handoffs", "list_tasks"} <= names
        text = error_text(
            await c.call_tool("enqueue_task", {"type": "research", "inputs": {"topic": "x"}, "reason": "r"})
        )
        assert text.startswith(f"enqueue_task: leaf: task {leaf} is of leaf type 'fix'")
        data(await c.call_tool("complete_task", {"status": "done", "handoff": HANDOFF}))
    async with mcp_client(bus, *queue_flags(tmp_path)) as c:
        event = data(await c.call_tool("wait_for_event", {"types": ["guard_tripped"], "timeout_secs": 5}))
        assert (event["guard"], event["task_type"], event["from"]) == ("leaf", "research", "leaf-agent")
        assert [t["status"] for t in data(await c.call_tool("list_tasks", {}))["tasks"]] == ["done"]
