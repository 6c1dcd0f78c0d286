"""The MCP task records on the bus (core/mcptasks.py), on both buses: one writer wins a change
of status, a task whose process is gone or that outlived its TTL is settled on read, and an
expired task is gone."""

from __future__ import annotations

import subprocess
import sys

import anyio
import pytest

from wavewait.core import mcptasks
from wavewait.core.model import now

pytestmark = pytest.mark.anyio


async def test_a_task_is_read_back_by_its_caller_only(bus):
    t = await mcptasks.create(bus, "orchestrator", "wait", {"timeout": 5}, "wait-1")
    got = await mcptasks.load(bus, t.id, "orchestrator")
    assert got is not None and (got.status, got.tool, got.arguments, got.wait_id) == (
        "working",
        "wait",
        {"timeout": 5},
        "wait-1",
    )
    assert await mcptasks.load(bus, t.id, "someone-else") is None
    assert await mcptasks.load(bus, "0" * 32, "orchestrator") is None


async def test_a_cancel_and_the_result_race_and_exactly_one_wins(bus):
    t = await mcptasks.create(bus, "orchestrator", "wait", {}, "wait-1")
    results = []

    async def finish() -> None:
        results.append(("complete", await mcptasks.complete(bus, t.id, {"content": []})))

    async def cancel() -> None:
        results.append(("cancel", await mcptasks.request_cancel(bus, t)))

    async with anyio.create_task_group() as tg:
        tg.start_soon(finish)
        tg.start_soon(cancel)
    winners = [name for name, r in results if r is not None]
    assert len(winners) == 1
    final = await bus.get_mcp_task(t.id)
    assert final is not None
    if winners == ["complete"]:
        assert final.status == "completed" and final.result == {"content": []}
    else:
        assert final.status == "cancelling"
        assert (await mcptasks.cancelled(bus, t.id, "asked")).status == "cancelled"
        assert await mcptasks.complete(bus, t.id, {"content": []}) is None  # settled stays settled


async def test_a_task_whose_process_is_gone_reads_failed(bus):
    t = await mcptasks.create(bus, "orchestrator", "wait", {}, "wait-1")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    await bus.put_mcp_task(t.model_copy(update={"pid": gone.pid, "pid_start": "1"}))
    got = await mcptasks.load(bus, t.id, "orchestrator")
    assert got is not None and got.status == "failed"
    assert got.error == {"code": -32603, "message": mcptasks.OWNER_GONE}


async def test_a_task_of_another_host_past_its_ttl_reads_failed(bus):
    t = await mcptasks.create(bus, "orchestrator", "wait", {}, "wait-1")
    await bus.put_mcp_task(t.model_copy(update={"host": "elsewhere", "created_at": now() - 7200}))
    got = await mcptasks.load(bus, t.id, "orchestrator")
    assert got is not None and got.status == "failed" and got.status_message == mcptasks.OVERDUE


async def test_a_settled_task_past_its_ttl_is_expired_and_deleted(bus):
    t = await mcptasks.create(bus, "orchestrator", "wait", {}, "wait-1")
    await mcptasks.complete(bus, t.id, {"content": []})
    done = await bus.get_mcp_task(t.id)
    assert done is not None
    await bus.put_mcp_task(done.model_copy(update={"created_at": now() - 7200}))
    with pytest.raises(mcptasks.Expired):
        await mcptasks.load(bus, t.id, "orchestrator")
    assert await bus.get_mcp_task(t.id) is None
