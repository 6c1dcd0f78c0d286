"""What only the protocol has: client cancellation, progress notifications, concurrent clients."""

from __future__ import annotations

import time

import anyio
import pytest

from wavewait.core import messages

from conftest import has_waits, register_crew, until
from mcptools import data, mcp_client

pytestmark = [pytest.mark.anyio, pytest.mark.one_bus]


@pytest.mark.both_buses
async def test_a_call_cancelled_by_the_client_gives_back_its_claims_in_order(bus):
    await register_crew(bus, "file-reader", "test-runner")
    for body in ("reader-1", "reader-2"):
        await messages.send(bus, "file-reader", "orchestrator", body)
    claimed = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        if message and message.startswith("1/2 received"):
            claimed.set()

    async with mcp_client(bus) as c:
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                c.call_tool, "wait", {"timeout": 60, "from_agents": ["file-reader", "test-runner"]}, None, on_progress
            )
            with anyio.fail_after(20):
                await claimed.wait()  # the wait holds reader-1 and waits on test-runner
            assert [i.body for i in await bus.peek("orchestrator")] == ["reader-2"]
            tg.cancel_scope.cancel()  # the client gives up: notifications/cancelled, the reply is dropped
        await until(lambda: has_waits(bus, 0), what="the cancelled wait's record removed")
        assert [i.body for i in await bus.peek("orchestrator")] == ["reader-1", "reader-2"]
        again = data(await c.call_tool("wait", {"timeout": 5, "from_agents": ["file-reader"]}))
        nxt = data(await c.call_tool("wait", {"timeout": 5}))
    assert again["results"][0]["message"] == "reader-1"
    assert nxt["message"] == "reader-2"


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_progress_notifications_reach_the_client_and_always_increase(bus, mode):
    await register_crew(bus, "file-reader", "test-runner")
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))
        if len(seen) == 2:
            await messages.send(bus, "file-reader", "orchestrator", "done")

    async with mcp_client(bus, "--progress-every", "0.3", mode=mode) as c:
        r = data(
            await c.call_tool(
                "wait", {"timeout": 1.5, "from_agents": ["file-reader", "test-runner"]}, progress_callback=on_progress
            )
        )
    assert r["status"] == "timeout"
    assert len(seen) >= 3
    values = [p for p, _, _ in seen]
    assert values == sorted(values) and len(set(values)) == len(values)
    assert all(total == 1.5 for _, total, _ in seen)
    assert seen[0][2] == "0/2 received · waiting on file-reader, test-runner"
    assert any(m and m.startswith("1/2 received: file-reader") for _, _, m in seen)


@pytest.mark.long
async def test_progress_arrives_at_least_every_15_seconds_during_a_20_second_wait(file_bus):
    """The real cadence (no --progress-every): a host's idle timer is reset well before 15 s."""
    await register_crew(file_bus)
    stamps: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        stamps.append(time.monotonic())

    async with mcp_client(file_bus) as c:
        start = time.monotonic()
        r = data(await c.call_tool("wait", {"timeout": 20}, progress_callback=on_progress))
        end = time.monotonic()
    assert r["status"] == "timeout"
    assert len(stamps) >= 2
    gaps = [b - a for a, b in zip([start, *stamps], [*stamps, end], strict=False)]
    assert max(gaps) < 15, gaps


@pytest.mark.both_buses
async def test_two_clients_waiting_on_one_inbox_get_disjoint_messages(bus):
    await register_crew(bus, "producer")
    got: dict[str, list[str]] = {"a": [], "b": []}

    async def drain(c, key: str) -> None:
        while (r := data(await c.call_tool("wait", {"timeout": 1.5})))["status"] == "received":
            got[key].append(r["message"])

    async with mcp_client(bus) as a, mcp_client(bus) as b:
        async with anyio.create_task_group() as tg:
            tg.start_soon(drain, a, "a")
            tg.start_soon(drain, b, "b")
            await until(lambda: has_waits(bus, 2), what="both clients waiting")
            for i in range(20):
                await messages.send(bus, "producer", "orchestrator", f"m{i}")
    assert not set(got["a"]) & set(got["b"])
    assert sorted(got["a"] + got["b"], key=lambda m: int(m[1:])) == [f"m{i}" for i in range(20)]
    for key in got:  # each client saw its share in FIFO order
        assert got[key] == sorted(got[key], key=lambda m: int(m[1:]))
