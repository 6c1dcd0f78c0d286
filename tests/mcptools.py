"""Helpers for tests that drive `wavewait mcp` as a subprocess through the real `mcp` client."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import wirerelay
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import CallToolResult

from wavewait.core.bus import Bus

from conftest import PYTHON, env_for

PASS_THROUGH = ("WAVEWAIT_LOG_DIR",)  # set by the PostgreSQL bus fixture for spawned agents' logs


def server_env(bus: Bus, **extra: str) -> dict[str, str]:
    keep = {k: os.environ[k] for k in PASS_THROUGH if k in os.environ}
    return env_for(bus, **keep, **extra)


@asynccontextmanager
async def mcp_client(
    bus: Bus, *flags: str, env: dict[str, str] | None = None, cwd: str | None = None, mode: str = "auto"
) -> AsyncIterator[Client]:
    """A client session with `wavewait mcp --bus BUS FLAGS...` over stdio."""
    params = StdioServerParameters(
        command=PYTHON,
        args=["-m", "wavewait", "mcp", "--bus", bus.url, *flags],
        env=server_env(bus, **(env or {})),
        cwd=cwd,
    )
    async with Client(params, mode=mode) as client:  # type: ignore[arg-type]
        yield client


def relayed(bus: Bus, log: Path, *flags: str, env: dict[str, str] | None = None) -> Client:
    """A client of `wavewait mcp --bus BUS FLAGS...` with the wire logged to `log` (tests/wirerelay.py)."""
    params = StdioServerParameters(
        command=PYTHON,
        args=[wirerelay.__file__, str(log), "--", PYTHON, "-m", "wavewait", "mcp", "--bus", bus.url, *flags],
        env=server_env(bus, **(env or {})),
    )
    return Client(params)  # type: ignore[arg-type]


def data(result: CallToolResult) -> dict[str, Any]:
    """The structured result of a successful call; its one text block is the same JSON, compact
    (what clients that read `content`, such as a Codex code cell, see)."""
    text = result.content[0].text if result.content else ""
    assert not result.is_error, text
    assert result.structured_content is not None
    assert len(result.content) == 1 and json.loads(text) == result.structured_content, text[:300]
    assert text == json.dumps(result.structured_content, ensure_ascii=False, separators=(",", ":")), text[:300]
    return result.structured_content


def error_text(result: CallToolResult) -> str:
    """An error's text after its `Error: ` mark (hosts that drop the error flag show only the text)."""
    assert result.is_error, result
    text = result.content[0].text
    assert text.startswith("Error: "), text
    return text.removeprefix("Error: ")


def server_pid() -> int:
    """The `wavewait mcp` child of this test process (the MCP client started it)."""
    me = str(os.getpid())
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = (d / "stat").read_text().rsplit(")", 1)[1].split()[1]
            cmd = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if ppid == me and b"mcp" in cmd and b"wavewait" in cmd:
            return int(d.name)
    raise AssertionError("no wavewait mcp server among this process's children")
