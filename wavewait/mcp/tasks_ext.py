"""The MCP Tasks extension (`io.modelcontextprotocol/tasks`) for the wait tools.

A `tools/call` of a wait tool whose request declares the extension (2026-07-28 protocol:
`_meta["io.modelcontextprotocol/clientCapabilities"].extensions`) is answered at once with
a `CreateTaskResult` (`resultType: "task"`); the wait runs in this server's background and
its result is stored in the task's record on the bus (core/mcptasks.py). Then:

- `tasks/get` from any process on the same bus, acting as the same caller, returns the
  task's status and, once settled, its result (a `CallToolResult`) or error; a poll of a
  task this process is running is answered from memory (a host polls every backgrounded
  wait each `pollIntervalMs`: bench/bench_tasks_poll.py), the rest from the bus;
- `tasks/cancel` cancels the wait (here, or through a bus interrupt when another process
  runs it): what it had taken goes back to the inbox, and the task ends `cancelled`;
- `tasks/update` is acknowledged (a wait never asks for input) for a known task.

A consuming wait's items leave the inbox once the result is stored in the task record: the
record, not the response to `tools/call`, carries them to the caller. Requests that do not
declare the extension, and every other tool, are served exactly as before.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.abc import TaskGroup
from mcp import MCPError
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Extension, MethodBinding, require_client_extension
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, CallToolRequestParams, RequestParams
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

from ..core import mcptasks, wait
from ..core.bus import Bus
from ..core.delivery import Delivery, delivering
from ..core.errors import WavewaitError
from ..core.model import MCP_TASK_TERMINAL, McpTask
from ..core.results import iso

log = logging.getLogger(__name__)


class _NotStored(Exception):
    """A task's result was not stored (a cancel came first): what its wait took goes back."""


TASKS = "io.modelcontextprotocol/tasks"
#: the tools that may run as tasks: the blocking waits
WAIT_TOOLS = frozenset({"wait", "wait_for_event", "wait_agent", "wave_wait_for_signal"})
#: the poll interval suggested to clients (a wait's result is stored the moment it settles).
#: Interactive Claude Code polls each backgrounded wait at it and wakes the model at the first
#: poll after the task completed: the wake comes interval/2 late on average. A `tasks/get`
#: cost the server about 1 ms of CPU however it was answered (bench/bench_tasks_poll.py: 200
#: waits at 250 ms, 57 % of a core; at 500 ms, 32 %; at 1,000 ms, 18 %), 0.3-0.6 ms since
#: (docs/performance.md). So: 500 ms while few tasks run here, longer with more, so their
#: polls stay near POLLS_PER_S in all
POLL_INTERVAL_MS = 500
POLLS_PER_S = 200
MODERN = frozenset(MODERN_PROTOCOL_VERSIONS)
CANCELLED_BY_CLIENT = "cancelled by tasks/cancel; what the wait had taken went back to the inbox"
SERVER_STOPPED = "the server stopped before the wait finished; what it had taken went back to the inbox"


@dataclass
class TaskRun:
    """A wait running as a task in this process: its control (wait id, interrupt) and, once
    a consuming wait returned, its claims until the result is stored."""

    control: wait.Control
    task: McpTask | None = None  # its record as created (`working`) while it runs here
    delivery: Delivery | None = None
    #: its `tasks/get` answer while it runs here, for a poll interval: the same until it settles
    #: (a host polls each backgrounded wait every interval; formatting it each time was a tenth
    #: of a poll's CPU with the server's stamp)
    shown: tuple[McpTask, int, dict[str, Any]] | None = None


_current: ContextVar[TaskRun | None] = ContextVar("wavewait_mcp_task", default=None)


def running_task() -> TaskRun | None:
    """The task the current tool call runs as, if it runs as one (tools.py and toolkit.py ask)."""
    return _current.get()


class TaskIdParams(RequestParams):
    task_id: str


class UpdateTaskParams(TaskIdParams):
    input_responses: dict[str, Any] | None = None


def declared(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether this request declares the extension (only 2026-07-28 requests carry their own
    capabilities; the extension's results have no place on an older wire)."""
    if ctx.protocol_version not in MODERN:
        return False
    # what `require_client_extension` checks, without building the error it raises: every
    # `tools/call` of a wait asks, and most clients do not declare the extension
    capabilities = ctx.session.client_capabilities
    extensions = capabilities.extensions if capabilities else None
    return extensions is not None and TASKS in extensions


def poll_interval_ms(running: int) -> int:
    """What to suggest with `running` tasks in this process: 500 ms, or what keeps their polls
    near POLLS_PER_S (200 tasks: 1 s; 1,000: 5 s)."""
    return max(POLL_INTERVAL_MS, -(-1000 * running // POLLS_PER_S))


def view(task: McpTask, poll_ms: int = POLL_INTERVAL_MS) -> dict[str, Any]:
    """The task on the wire: a `Task`, with `result` or `error` once settled (`DetailedTask`)."""
    out: dict[str, Any] = {
        "taskId": task.id,
        "status": "working" if task.status == "cancelling" else task.status,
        "createdAt": iso(task.created_at),
        "lastUpdatedAt": iso(task.updated_at),
        "ttlMs": task.ttl_ms,
    }
    if task.status not in MCP_TASK_TERMINAL:
        out["pollIntervalMs"] = poll_ms
    if task.status_message:
        out["statusMessage"] = task.status_message
    if task.status == "completed":
        out["result"] = task.result or {}
    elif task.status == "failed":
        out["error"] = task.error or {"code": INTERNAL_ERROR, "message": "failed"}
    return out


def _dump(result: HandlerResult) -> dict[str, Any]:
    if isinstance(result, BaseModel):
        dumped: dict[str, Any] = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        return dumped
    return dict(result) if isinstance(result, dict) else {"content": [], "isError": False}


def _summary(result: dict[str, Any]) -> str | None:
    """A short text result (an error) as the task's status message; a structured result's
    text is the result itself (toolkit.structured), already in the task's `result`."""
    if result.get("structuredContent") is not None:
        return None
    content = result.get("content") or []
    text = content[0].get("text") if content and isinstance(content[0], dict) else None
    return text if isinstance(text, str) and len(text) <= 500 else None


class TasksExtension(Extension):
    """Serves the wait tools as tasks for clients that declare the extension."""

    identifier = TASKS

    def __init__(self, bus: Bus, caller: str) -> None:
        self.bus, self.caller = bus, caller
        #: the `_meta` of a `tasks/get` answer: the server's identity (spec #3002), which the SDK
        #: stamps on a result that has none by deep-copying it; a handler's own stamp wins
        self.meta: dict[str, Any] = {}
        self.local: dict[str, tuple[TaskRun, anyio.CancelScope]] = {}
        self._tg: TaskGroup | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[TasksExtension]:
        """Run tasks while the server serves; at its end, tasks still running are cancelled
        (their claims go back to the inbox) and recorded so."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            try:
                yield self
            finally:
                self._tg = None
                tg.cancel_scope.cancel()

    def methods(self) -> list[MethodBinding]:
        return [
            MethodBinding("tasks/get", TaskIdParams, self._get, protocol_versions=MODERN),
            MethodBinding("tasks/cancel", TaskIdParams, self._cancel, protocol_versions=MODERN),
            MethodBinding("tasks/update", UpdateTaskParams, self._update, protocol_versions=MODERN),
        ]

    # ------------------------------------------------------------------ tools/call
    async def intercept_tool_call(
        self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if params.name not in WAIT_TOOLS or self._tg is None or not declared(ctx):
            return await call_next(ctx)
        run = TaskRun(wait.Control())
        task = await mcptasks.create(
            self.bus, self.caller, params.name, dict(params.arguments or {}), run.control.wait_id
        )
        run.task, run.control.task_id = task, task.id
        scope = anyio.CancelScope()
        self.local[task.id] = (run, scope)
        self._tg.start_soon(self._run, task, run, scope, ctx, call_next)
        return {"resultType": "task", **view(task, poll_interval_ms(len(self.local)))}

    async def _run(
        self,
        task: McpTask,
        run: TaskRun,
        scope: anyio.CancelScope,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
    ) -> None:
        _current.set(run)
        result: dict[str, Any] | None = None
        error: dict[str, Any] | None = None
        why = CANCELLED_BY_CLIENT
        try:
            with scope:
                try:
                    result = _dump(await call_next(ctx))
                except MCPError as e:
                    error = {"code": e.code, "message": e.message}
                except Exception as e:  # a JSON-RPC internal error, as the plain call would answer
                    log.exception("wavewait mcp: task %s (%s) failed", task.id, task.tool)
                    error = {"code": INTERNAL_ERROR, "message": f"{type(e).__name__}: {e}"}
        except BaseException:
            why = SERVER_STOPPED
            raise
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await self._settle(task, run, result, error, why)
                except Exception:
                    log.exception("wavewait mcp: task %s could not be settled", task.id)
                self.local.pop(task.id, None)

    async def _settle(
        self, task: McpTask, run: TaskRun, result: dict[str, Any] | None, error: dict[str, Any] | None, why: str
    ) -> None:
        """Store the outcome; only then acknowledge what the wait took (the record carries it).
        A cancel that came first wins: the items go back."""
        try:
            async with delivering(run.delivery):
                stored = result is not None and await mcptasks.complete(self.bus, task.id, result, _summary(result))
                if not stored:
                    raise _NotStored
            return
        except _NotStored:
            pass  # what the wait took went back: no record carries it
        if error is not None and await mcptasks.fail(self.bus, task.id, error):
            return
        await mcptasks.cancelled(self.bus, task.id, why)

    # ------------------------------------------------------------------ tasks/*
    async def _load(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> McpTask:
        require_client_extension(ctx, TASKS)
        try:
            task = await mcptasks.load(self.bus, params.task_id, self.caller)
        except mcptasks.Expired:
            raise MCPError(INVALID_PARAMS, "Failed to retrieve task: Task has expired") from None
        except WavewaitError as e:  # not an id at all
            raise MCPError(INVALID_PARAMS, f"Failed to retrieve task: {e}") from None
        if task is None:
            raise MCPError(INVALID_PARAMS, f"Failed to retrieve task: Task not found: {params.task_id!r}")
        return task

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> dict[str, Any]:
        local = self.local.get(params.task_id)
        poll_ms = poll_interval_ms(len(self.local))
        if local is not None and (task := local[0].task) is not None:  # running here: `working` until it settles
            require_client_extension(ctx, TASKS)
            run = local[0]
            if run.shown is None or run.shown[0] is not task or run.shown[1] != poll_ms:
                run.shown = (task, poll_ms, self._answer(task, poll_ms))
            return run.shown[2]  # the SDK copies a handler's dict before it adds to it
        return self._answer(await self._load(ctx, params), poll_ms)

    def _answer(self, task: McpTask, poll_ms: int) -> dict[str, Any]:
        out = {"resultType": "complete", **view(task, poll_ms)}
        if self.meta:
            out["_meta"] = self.meta
        return out

    async def _cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> dict[str, Any]:
        task = await self._load(ctx, params)
        if task.status == "working":
            local = self.local.get(task.id)
            if local is not None:
                await self.bus.transition_mcp_task(task.id, "cancelling", ("working",))
                local[1].cancel()  # the wait is cancelled; its claims go back (core/wait/engine.py)
            else:
                await mcptasks.request_cancel(self.bus, task)  # the process running it settles it
        return {"resultType": "complete"}

    async def _update(self, ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams) -> dict[str, Any]:
        await self._load(ctx, params)  # a wait never asks for input: nothing is outstanding
        return {"resultType": "complete"}
