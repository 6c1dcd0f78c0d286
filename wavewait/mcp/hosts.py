"""`wavewait mcp --print-config HOST`: copy-paste set-up for agent hosts (see docs/hosts.md).

Every block is what the host needs to load and allow the tools even when the server is slow
to start, measured with the real hosts by tests/hosts: Claude Code -p waits for a server only
when given `--mcp-config FILE` and runs its tools only when allowed; Codex waits only for a
`required` server and runs the tools that change things only when approved. The server
command is the absolute path of this wavewait, so it starts (and its flights find it)
without the virtualenv on PATH.
"""

from __future__ import annotations

import json
import os
import shlex
import sys

from ..core.proc import python_module

HOSTS = ("claude", "claude-json", "claude-settings", "claude-flags", "claude-hooks", "codex")

# Below every host's cut: Codex ends a call at tool_timeout_sec (300 s by default) and Claude
# Code at MCP_TOOL_TIMEOUT (the server also reads that variable and stays below it).
DEFAULT_MAX_BLOCK = 240.0
CODEX_MARGIN = 60  # tool_timeout_sec = max-block + this: the answer is back well before the cut
ALLOW = "mcp__wavewait"  # Claude Code's permission rule for every wavewait tool


def command() -> list[str]:
    """How to start this very wavewait: its script's absolute path, else this Python with -m."""
    argv0 = sys.argv[0] if sys.argv else ""
    if os.path.basename(argv0).startswith("wavewait") and os.path.isfile(argv0):
        return [os.path.abspath(argv0)]
    return python_module("wavewait")


def _server(max_block: float | None) -> list[str]:
    """The command and its arguments: command() + mcp --max-block N."""
    mb = max_block or DEFAULT_MAX_BLOCK
    return [*command(), "mcp", "--max-block", f"{mb:g}"]


def claude(bus: str, max_block: float | None, project: str) -> str:
    cmd = " ".join(shlex.quote(a) for a in _server(max_block))
    return (
        "\n\n".join(
            [
                "# Claude Code: register the server for this project (writes .mcp.json with --scope project)",
                f"claude mcp add --scope project wavewait --env WAVEWAIT_BUS={shlex.quote(bus)} -- {cmd}",
                "# or put this in .mcp.json at the project root:\n" + claude_json(bus, max_block),
                "# allow the tools (claude -p refuses MCP tools that are not allowed; the shared\n"
                "# .claude/settings.json's allow rules are ignored by -p): .claude/settings.local.json\n"
                + claude_settings(),
                "# headless (claude -p) waits for the server only with --mcp-config; add these flags\n"
                "# after the prompt (--allowedTools takes every word that follows it):\n"
                + claude_flags(project).strip(),
                "# and this in .claude/settings.json, so every worker session reports when it stops:\n"
                + claude_hooks(),
            ]
        )
        + "\n"
    )


def claude_json(bus: str, max_block: float | None) -> str:
    cmd = _server(max_block)
    server = {"type": "stdio", "command": cmd[0], "args": cmd[1:], "env": {"WAVEWAIT_BUS": bus}}
    return json.dumps({"mcpServers": {"wavewait": server}}, indent=2)


def claude_settings() -> str:
    return json.dumps({"permissions": {"allow": [ALLOW]}}, indent=2)


def claude_flags(project: str) -> str:
    return f"--mcp-config {shlex.quote(os.path.join(project, '.mcp.json'))} --allowedTools {ALLOW}\n"


def claude_hooks() -> str:
    notify = " ".join(shlex.quote(a) for a in command())
    hook = {"type": "command", "command": f"{notify} notify --hook --status success --message 'session stopped'"}
    return json.dumps(
        {
            "hooks": {
                "Stop": [{"hooks": [hook]}],
                "SubagentStop": [{"hooks": [hook]}],
            }
        },
        indent=2,
    )


def codex(bus: str, max_block: float | None) -> str:
    cmd = _server(max_block)
    mb = max_block or DEFAULT_MAX_BLOCK
    return (
        "\n".join(
            [
                "# Codex: ~/.codex/config.toml (or .codex/config.toml in a trusted project).",
                "# Codex cuts an MCP call after tool_timeout_sec (300 s when unset), so the server returns",
                "# longer waits as a normal timeout before that (--max-block) and the model calls again.",
                "# required: Codex waits for the server at start (else it starts without it after ~1 s);",
                "# approve: codex exec (approval policy never) refuses spawn/close/kill_agent otherwise.",
                "[mcp_servers.wavewait]",
                f"command = {json.dumps(cmd[0])}",
                f"args = {json.dumps(cmd[1:])}",
                f"env = {{ WAVEWAIT_BUS = {json.dumps(bus)} }}",
                "required = true",
                "startup_timeout_sec = 30",
                f"tool_timeout_sec = {int(mb) + CODEX_MARGIN}",
                'default_tools_approval_mode = "approve"',
            ]
        )
        + "\n"
    )


def render(host: str, bus: str, max_block: float | None, project: str | None = None) -> str:
    project = project or os.getcwd()
    if host == "claude":
        return claude(bus, max_block, project)
    if host == "claude-json":
        return claude_json(bus, max_block) + "\n"
    if host == "claude-settings":
        return claude_settings() + "\n"
    if host == "claude-flags":
        return claude_flags(project)
    if host == "claude-hooks":
        return claude_hooks() + "\n"
    if host == "codex":
        return codex(bus, max_block)
    raise ValueError(host)
