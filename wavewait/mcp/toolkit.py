"""What every tool module shares: how a tool is declared on the server and how it answers.

`server.py` registers the tool modules (`tools.py`, `flight_tools.py`, `queue_tools.py`);
each declares its tools with `declare` and answers with `reply` / `structured` (the result
as structured content and as JSON text) or, for something the caller must fix, `error`
(readable text that starts `Error:`). Imports go one way, server → tool modules → this
module, and an import-linter contract in pyproject.toml keeps it so.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent, ToolAnnotations

from ..core.results import Result

ToolFn = TypeVar("ToolFn", bound=Callable[..., Any])


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
