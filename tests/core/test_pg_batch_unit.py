"""The group-commit queue of the PostgreSQL bus on its own (pg_batch.py): who shares a
statement, who gets which error, and what a cancelled caller waits for."""

from __future__ import annotations

import asyncio

import pytest

from wavewait.core.bus.pg_batch import Batcher

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


class Statements:
    """Runs 'statements' that each wait for the test to let them end."""

    def __init__(self) -> None:
        self.runs: list[list[str]] = []
        self.go = asyncio.Event()
        self.fail: Exception | None = None

    async def one(self, r: str) -> str:
        return (await self.many([r]))[0]

    async def many(self, rs: list[str]) -> list[str]:
        self.runs.append(rs)
        await self.go.wait()
        if self.fail is not None:
            raise self.fail
        return [f"done {r}" for r in rs]


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_requests_queued_behind_a_running_statement_share_the_next_one_except_equal_keys():
    s = Statements()
    batcher: Batcher[str, str] = Batcher(s.one, s.many, key=lambda r: r.split(":")[0])
    calls = [asyncio.create_task(batcher("a:1"))]
    await settle()
    assert s.runs == [["a:1"]]  # alone, at once
    calls += [asyncio.create_task(batcher(r)) for r in ("b:1", "c:1", "b:2", "d:1")]
    await settle()
    assert s.runs == [["a:1"]]  # the rest queue behind it
    s.go.set()
    assert await asyncio.gather(*calls) == [f"done {r}" for r in ("a:1", "b:1", "c:1", "b:2", "d:1")]
    assert s.runs == [["a:1"], ["b:1", "c:1", "d:1"], ["b:2"]]  # never two of one key together


async def test_an_error_reaches_every_request_of_its_statement_and_no_other():
    s = Statements()
    batcher: Batcher[str, str] = Batcher(s.one, s.many, key=lambda r: r)
    first = asyncio.create_task(batcher("x"))
    await settle()
    s.fail = RuntimeError("server said no")
    s.go.set()
    with pytest.raises(RuntimeError, match="server said no"):
        await first
    s.fail = None
    assert await batcher("y") == "done y"  # the queue goes on


async def test_a_cancelled_caller_returns_only_after_its_statement_ended():
    """A claim may be running with the cancelled wait in it: the caller's clean-up (a
    release of its claims) must not run before the claim is settled."""
    s = Statements()
    batcher: Batcher[str, str] = Batcher(s.one, s.many, key=lambda r: r)
    call = asyncio.create_task(batcher("claim"))
    await settle()
    call.cancel()
    await settle()
    assert not call.done()  # still waiting for the statement it is part of
    s.go.set()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert s.runs == [["claim"]]


async def test_inline_a_lone_request_runs_in_its_callers_task_and_what_queued_meanwhile_shares_the_next():
    s = Statements()
    batcher: Batcher[str, str] = Batcher(s.one, s.many, key=lambda r: r.split(":")[0], inline=True)
    tasks_before = len(asyncio.all_tasks())
    first = asyncio.create_task(batcher("a:1"))
    await settle()
    assert s.runs == [["a:1"]] and len(asyncio.all_tasks()) == tasks_before + 1  # no task of its own
    calls = [asyncio.create_task(batcher(r)) for r in ("a:2", "b:1", "c:1")]
    await settle()
    assert s.runs == [["a:1"]]  # they queue behind it
    s.go.set()
    assert await asyncio.gather(first, *calls) == [f"done {r}" for r in ("a:1", "a:2", "b:1", "c:1")]
    assert s.runs == [["a:1"], ["a:2", "b:1", "c:1"]]


async def test_inline_a_cancelled_lone_caller_cancels_its_statement_and_the_queue_still_runs():
    s = Statements()
    batcher: Batcher[str, str] = Batcher(s.one, s.many, key=lambda r: r, inline=True)
    first = asyncio.create_task(batcher("a"))
    await settle()
    second = asyncio.create_task(batcher("b"))
    await settle()
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    s.go.set()
    assert await second == "done b"
    assert s.runs == [["a"], ["b"]]
