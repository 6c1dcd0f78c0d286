"""What every tool module shares: how a tool is declared on the server, how it answers, and
how a call that waits keeps to `--max-block` and reports progress.

`server.py` registers the tool modules (`tools.py`, `flight_tools.py`, `queue_tools.py`,
`question_tools.py`); each declares its tools with `declare` and answers with `reply` /
`structured` (the result as structured content and as JSON text) or, for something the
caller must fix, `error` (readable text that starts `Error:`). The tool modules import none
of each other: what two of them use is here (or, for `spawn_agent`'s arguments, in
`spawn_args.py`), and an import-linter contract in pyproject.toml keeps it so.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Annotated, Any, Protocol, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from ..core import wait
from ..core.results import Result
from . import front
from .settings import Settings
from .tasks_ext import running_task

log = logging.getLogger(__name__)

ToolFn = TypeVar("ToolFn", bound=Callable[..., Any])
AgentRef = Annotated[str, Field(description="Agent id or unique prefix.")]


class Declare(Protocol):
    def __call__(self, name: str, doc: str, title: str, **hints: bool) -> Callable[[ToolFn], ToolFn]: ...


def tool_hints(
    title: str, *, read_only: bool, destructive: bool = False, idempotent: bool = False, open_world: bool = False
) -> ToolAnnotations:
    return ToolAnnotations(
        title=title,
        read_only_hint=read_only,
        destructive_hint=destructive,
        idempotent_hint=idempotent,
        open_world_hint=open_world,
    )


def declare(server: MCPServer) -> Declare:
    """`tool(name, description, title, **hints)`: a decorator that registers a tool on `server`."""

    def tool(name: str, doc: str, title: str, **hints: bool) -> Callable[[ToolFn], ToolFn]:
        return server.tool(name=name, title=title, description=doc, annotations=tool_hints(title, **hints))

    return tool


def compact(data: dict[str, Any]) -> str:
    """The JSON as hosts re-serialise structured content: no spaces, text as it is."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def structured(data: dict[str, Any]) -> CallToolResult:
    """`structuredContent`, and the same JSON, compact, as the text block (as the MCP spec asks).

    Clients that read `content` (a Codex code cell's `r.content`, most plain MCP clients) get
    the whole result, not a summary of it. Claude Code and Codex's function tools show the
    model the structured content of a success and never its text (tests/hosts counts each
    report once in what the model saw), so the copy is not paid twice; the output budget
    bounds both alike.
    """
    return CallToolResult(content=[TextContent(type="text", text=compact(data))], structured_content=data)


def reply(result: Result, hint: str | None = None) -> CallToolResult:
    """A core result with its `hint` (what to do next), as every tool answers."""
    if hint:
        result.hint = hint.strip()
    return structured(result.to_json())


def error(message: str) -> CallToolResult:
    """An error the text alone says is one: Codex hands the model no error flag."""
    return CallToolResult(content=[TextContent(type="text", text=f"Error: {message}")], is_error=True)


class Reporter:
    """Turns the core's progress callbacks into `notifications/progress`.

    `progress` is the elapsed time in seconds and must grow with every notification, so
    two reports within the same millisecond are nudged apart. Without a progress token
    from the client, the SDK makes this a no-op.
    """

    def __init__(self, ctx: Context, total: float | None) -> None:
        self.ctx, self.total, self.last = ctx, total, -1.0
        self.failed = False

    async def __call__(self, p: wait.Progress) -> bool:
        """Send one notification; False when none was sent (no token, or a task's call)."""
        if running_task() is not None or not wants_progress(self.ctx):  # a task's call was answered long ago
            return False
        value = max(p.elapsed, self.last + 0.001)
        self.last = value
        try:
            await self.ctx.report_progress(round(value, 3), self.total, p.message)
        except Exception as e:  # a lost notification must not end the wait
            if not self.failed:
                log.warning("progress notification not sent: %s", e)
            self.failed = True
            return False
        return True


def wants_progress(ctx: Context) -> bool:
    """Whether the request carries a progress token (without one, nothing is sent)."""
    meta = ctx.request_context.meta or {}
    return meta.get("progressToken", meta.get("progress_token")) is not None


def max_block(s: Settings, ctx: Context | None) -> float | None:
    """`--max-block` for this call, less the time it waited for the server to start (front.queued)."""
    if s.max_block is None or ctx is None:
        return s.max_block
    return max(0.0, s.max_block - front.queued(ctx.request_context.request_id))


def clamp(s: Settings, timeout: float, ctx: Context | None = None) -> tuple[float, bool]:
    """Apply `--max-block`: the timeout to use, and whether it was cut."""
    mb = max_block(s, ctx)
    if mb is None or timeout <= mb:
        return timeout, False
    return mb, True
