"""Waits run as tasks (the MCP Tasks extension), kept on the bus so any process on it answers.

A face creates the record before it answers the call (`create`), runs the wait, and stores
its result (`complete`) before the wait's items are acknowledged: the stored result is what
carries them to the caller. A cancel (`request_cancel`) marks the task `cancelling` and
interrupts its wait; the process running it settles it `cancelled` and returns what the wait
had taken to the inbox. A task whose process is gone is settled `failed` by whoever reads it
next (`load`), and recovery returns its wait's claims.

Protocol words (the JSON-RPC error a failed task carries) stay in the face; this module only
keeps records.
"""

from __future__ import annotations

from typing import Any

from .bus import Bus
from .ids import new_id
from .model import MCP_TASK_TERMINAL, McpTask, now
from .proc import alive, command_process, hostname

#: how long a task is kept after it was created (the extension's ttlMs); a task still
#: running then is kept until it settles
TTL_MS = 3_600_000
#: JSON-RPC "internal error": what a task whose server process ended carries
INTERNAL_ERROR = -32603
OWNER_GONE = (
    "the server process running this task ended before it finished; what its wait had taken went "
    "back to the inbox (nothing lost): call the tool again"
)

OVERDUE = (
    "the task outlived its time to live without settling (its server may have stopped on another "
    "host); what its wait had taken goes back to the inbox: call the tool again"
)


async def create(bus: Bus, caller: str, tool: str, arguments: dict[str, Any], wait_id: str) -> McpTask:
    """A new `working` task, durably stored (a `get` of its id resolves once this returns)."""
    pid, start = command_process()
    task = McpTask(
        id=new_id(),  # uuid4: 122 random bits, so a task id is unguessable
        caller=caller,
        tool=tool,
        arguments=arguments,
        ttl_ms=TTL_MS,
        wait_id=wait_id,
        host=hostname(),
        pid=pid,
        pid_start=start,
    )
    await bus.put_mcp_task(task)
    return task


def owner_gone(task: McpTask) -> bool:
    """Whether the process that runs this unsettled task is known to be gone (this host only:
    a process on another host is taken to be alive until its TTL is over)."""
    return task.status not in MCP_TASK_TERMINAL and task.host == hostname() and not alive(task.pid, task.pid_start)


def overdue(task: McpTask, at: float | None = None) -> bool:
    """Unsettled past its TTL: the extension lets a server fail it then (a process on another
    host that died is noticed here; one still running finds its result refused and gives
    its claims back)."""
    return (
        task.status not in MCP_TASK_TERMINAL
        and task.ttl_ms is not None
        and (now() if at is None else at) > task.created_at + task.ttl_ms / 1000
    )


def expired(task: McpTask, at: float | None = None) -> bool:
    """Past its TTL and settled (a task still running is kept until it settles)."""
    return (
        task.ttl_ms is not None
        and task.status in MCP_TASK_TERMINAL
        and (now() if at is None else at) > task.created_at + task.ttl_ms / 1000
    )


class Expired(Exception):
    """The task existed and was discarded after its TTL."""


async def load(bus: Bus, task_id: str, caller: str) -> McpTask | None:
    """The task, as any process on the bus sees it; None if there is no such task for this
    caller (another caller's task is not found, never shown). An unsettled task whose
    process is gone is settled `failed` here and its claims go back (recovery)."""
    task = await bus.get_mcp_task(task_id)
    if task is None or task.caller != caller:
        return None
    if expired(task):
        await bus.delete_mcp_task(task_id)
        raise Expired(task_id)
    if owner_gone(task) or overdue(task):
        why = OWNER_GONE if owner_gone(task) else OVERDUE
        settled = await bus.transition_mcp_task(
            task_id,
            "failed",
            ("working", "cancelling"),
            status_message=why,
            error={"code": INTERNAL_ERROR, "message": why},
        )
        await bus.recover(caller)
        task = settled or await bus.get_mcp_task(task_id) or task
    return task


async def complete(bus: Bus, task_id: str, result: dict[str, Any], summary: str | None = None) -> McpTask | None:
    """Store the result of a task still `working`; None if a cancel came first."""
    return await bus.transition_mcp_task(task_id, "completed", ("working",), result=result, status_message=summary)


async def fail(bus: Bus, task_id: str, error: dict[str, Any]) -> McpTask | None:
    """Settle a running task `failed` with a JSON-RPC error (a cancel that came first wins)."""
    return await bus.transition_mcp_task(
        task_id, "failed", ("working",), error=error, status_message=str(error.get("message", ""))
    )


async def cancelled(bus: Bus, task_id: str, why: str) -> McpTask | None:
    """Settle a task that was not finished `cancelled` (its claims are returned by the caller)."""
    return await bus.transition_mcp_task(task_id, "cancelled", ("working", "cancelling"), status_message=why)


async def request_cancel(bus: Bus, task: McpTask) -> McpTask | None:
    """Ask for a running task to be cancelled: mark it `cancelling` and interrupt its wait (the
    process running it settles it). None if it had already settled."""
    marked = await bus.transition_mcp_task(task.id, "cancelling", ("working",))
    if marked is not None and marked.wait_id:
        await bus.interrupt(marked.wait_id)
    return marked
