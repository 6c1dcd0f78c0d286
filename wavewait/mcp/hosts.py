"""`wavewait mcp --print-config HOST`: copy-paste set-up for agent hosts (see docs/hosts.md)."""

from __future__ import annotations

import json
import shlex

HOSTS = ("claude", "claude-json", "claude-hooks", "codex")


def _server_args(max_block: float | None) -> list[str]:
    return ["mcp", *(["--max-block", f"{max_block:g}"] if max_block else [])]


def claude(bus: str, max_block: float | None) -> str:
    args = " ".join(shlex.quote(a) for a in _server_args(max_block))
    return (
        "\n\n".join(
            [
                "# Claude Code: register the server for this project (writes .mcp.json with --scope project)",
                f"claude mcp add --scope project wavewait --env WAVEWAIT_BUS={shlex.quote(bus)} -- wavewait {args}",
                "# or put this in .mcp.json at the project root:\n" + claude_json(bus, max_block),
                "# and this in .claude/settings.json, so every worker session reports when it stops:\n"
                + claude_hooks(),
            ]
        )
        + "\n"
    )


def claude_json(bus: str, max_block: float | None) -> str:
    return json.dumps(
        {
            "mcpServers": {
                "wavewait": {
                    "type": "stdio",
                    "command": "wavewait",
                    "args": _server_args(max_block),
                    "env": {"WAVEWAIT_BUS": bus},
                }
            }
        },
        indent=2,
    )


def claude_hooks() -> str:
    hook = {"type": "command", "command": "wavewait notify --status success --message 'session stopped'"}
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
    mb = max_block or 50
    return (
        "\n".join(
            [
                "# Codex: ~/.codex/config.toml (or .codex/config.toml in a trusted project).",
                "# Codex cuts an MCP call after tool_timeout_sec (60 s by default), so the server returns",
                "# long waits as a normal timeout a little before that (--max-block) and the model calls again.",
                "[mcp_servers.wavewait]",
                'command = "wavewait"',
                f"args = {json.dumps(_server_args(mb))}",
                f"env = {{ WAVEWAIT_BUS = {json.dumps(bus)} }}",
                "startup_timeout_sec = 20",
                f"tool_timeout_sec = {int(mb) + 10}",
            ]
        )
        + "\n"
    )


def render(host: str, bus: str, max_block: float | None) -> str:
    if host == "claude":
        return claude(bus, max_block)
    if host == "claude-json":
        return claude_json(bus, max_block) + "\n"
    if host == "claude-hooks":
        return claude_hooks() + "\n"
    if host == "codex":
        return codex(bus, max_block)
    raise ValueError(host)
