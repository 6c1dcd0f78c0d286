"""Agent presets: how to run a coding agent's CLI headless as a flight, kept as data.

A preset turns a prompt into an argv: the agent's CLI in its non-interactive mode, its
machine-readable events on stdout (read by the flight's supervisor, core/agent_events.py),
and wavewait's MCP server for the same bus given on the command line, so the flight has
wavewait's tools on its first turn with nothing written in the user's files. It only adds:
the user's own set-up of each CLI (login, model, API address, ~/.codex/config.toml,
~/.claude) is used as it is.

Built in: `claude` (Claude Code `-p`, stream-json in and out, the flight's own
`--mcp-config` and an allow rule for wavewait's tools, file edits accepted in its worktree)
and `codex` (`codex app-server`, `-c mcp_servers.wavewait.*` overrides with `required =
true`; its threads run in sandbox `workspace-write` with approval `never`, so it can neither
stall on a question nor write outside its worktree). Both hold a conversation (core/talk/):
the prompt is the first user message, a `tell` the next, and an ended one is resumed. A TOML file (`--presets FILE`, else `$WAVEWAIT_PRESETS`) changes
them or adds others:

    [presets.claude]
    program = "/opt/claude/bin/claude"    # the CLI (default: found on PATH)
    extra_args = ["--max-turns", "40"]    # added before the prompt

    [presets.gemini]
    program = "gemini"
    args = ["--yolo", "{extra}", "-p", "{prompt}"]
    events = "none"                       # no events to read: the flight reports by itself
    mcp = "none"

In `args`, the whole-word tokens `{mcp}` (the MCP server, as the CLI takes it),
`{model_args}` (`model_args` with `{model}` filled, only when a model is given) and
`{extra}` (`extra_args`) become several words; `{prompt}`, `{model}`, `{agent_id}` and
`{bus}` are replaced inside a word.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from .agent_events import FORMATS
from .agents import wavewait_bin
from .errors import BadInput
from .limits import check_text, shown
from .proc import python_module

McpStyle = Literal["claude", "codex", "none"]
MCP_STYLES = ("claude", "codex", "none")
PRESET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,39}")
MAX_FILE_BYTES = 256 << 10
MAX_PRESETS = 100
MAX_ARGS = 200
MAX_ARG_CHARS = 8192
ALLOW = "mcp__wavewait"  # Claude Code's permission rule for every wavewait tool
PERMISSION_TOOL = "mcp__wavewait__approve"  # where Claude Code's permission prompts go (wavewait/mcp)
CODEX_TOOL_TIMEOUT = 300  # Codex's cut for one MCP call; the server returns long waits before it
KEYS = {
    "program",
    "args",
    "extra_args",
    "model_args",
    "env",
    "events",
    "mcp",
    "worktree",
    "conversation",
    "resume_args",
}
#: the host protocols a flight is talked to on (core/talk/), or none
CONVERSATIONS = ("claude", "codex", "none")


@dataclass(frozen=True)
class McpServer:
    """wavewait's MCP server as the flight's CLI must start it: the same bus, the flight's identity."""

    command: list[str]
    env: dict[str, str]


@dataclass(frozen=True)
class Preset:
    name: str
    program: str
    args: tuple[str, ...]
    model_args: tuple[str, ...] = ()
    extra_args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    events: str | None = None  # an agent_events format, or None (nothing to read)
    mcp: McpStyle = "none"
    worktree: bool = True  # its own worktree by default, in a repository
    #: the host protocol its agent is talked to on (core/talk/): then the prompt is its first
    #: user message, not a word of its command line; None: one prompt, one run, no `tell`
    conversation: str | None = None
    resume_args: tuple[str, ...] = ()  # added to its command to resume the session `{session}`

    def argv(
        self,
        prompt: str | None,
        *,
        server: McpServer,
        model: str | None = None,
        agent_id: str = "",
        bus: str = "",
    ) -> list[str]:
        """The command that runs this preset's agent on `prompt`."""
        words = {"{mcp}": mcp_args(self.mcp, server), "{extra}": list(self.extra_args)}
        words["{model_args}"] = [a.replace("{model}", model) for a in self.model_args] if model else []
        inline = {"{prompt}": prompt or "", "{model}": model or "", "{agent_id}": agent_id, "{bus}": bus}
        out = [self.program]
        for a in self.args:
            if a in words:
                out += words[a]
                continue
            for key, value in inline.items():
                a = a.replace(key, value)
            out.append(a)
        return out


def _toml_str(s: str) -> str:
    return json.dumps(s)  # a JSON string is a TOML basic string (same escapes)


def mcp_args(style: McpStyle, server: McpServer) -> list[str]:
    """The words that give the flight's CLI wavewait's server (and its tools' allow rule)."""
    if style == "claude":
        cfg = {
            "mcpServers": {
                "wavewait": {
                    "type": "stdio",
                    "command": server.command[0],
                    "args": server.command[1:],
                    "env": server.env,
                }
            }
        }
        return ["--mcp-config", json.dumps(cfg), "--permission-prompt-tool", PERMISSION_TOOL, "--allowedTools", ALLOW]
    if style == "codex":
        key = "mcp_servers.wavewait"
        env = ", ".join(f"{k} = {_toml_str(v)}" for k, v in server.env.items())
        settings = [
            f"{key}.command={_toml_str(server.command[0])}",
            f"{key}.args=[{', '.join(_toml_str(a) for a in server.command[1:])}]",
            f"{key}.env={{ {env} }}",
            f"{key}.required=true",
            f"{key}.startup_timeout_sec=30",
            f"{key}.tool_timeout_sec={CODEX_TOOL_TIMEOUT}",
            f'{key}.default_tools_approval_mode="approve"',
        ]
        return [w for s in settings for w in ("-c", s)]
    return []


BUILTIN: dict[str, Preset] = {
    "claude": Preset(
        name="claude",
        program="claude",
        args=(
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--permission-mode",
            "acceptEdits",
            "--input-format",
            "stream-json",
            "--replay-user-messages",  # each user message echoed as it is taken: where a tell went
            "{model_args}",
            "{extra}",
            "{mcp}",
        ),
        model_args=("--model", "{model}"),
        events="claude",
        mcp="claude",
        conversation="claude",
        resume_args=("--resume", "{session}"),
    ),
    "codex": Preset(
        name="codex",
        program="codex",
        args=("app-server", "{model_args}", "{extra}", "{mcp}"),
        model_args=("-c", 'model="{model}"'),
        events="codex",
        mcp="codex",
        conversation="codex",  # the sandbox and approval policy go in its thread/start (core/talk/codex.py)
    ),
}


def _words(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or len(value) > MAX_ARGS:
        raise BadInput(f"{where}: give a list of at most {MAX_ARGS} strings")
    for v in value:
        if not isinstance(v, str) or len(v) > MAX_ARG_CHARS or "\0" in v:
            raise BadInput(f"{where}: each word is a string of at most {MAX_ARG_CHARS} characters, without NUL")
    return tuple(value)


def _preset(name: str, table: object, base: Preset | None, where: str) -> Preset:
    if not PRESET_NAME.fullmatch(name):
        raise BadInput(f"{where}: a preset's name is 1-40 letters, digits, '-' or '_'")
    if not isinstance(table, dict):
        raise BadInput(f"{where}: must be a table of settings")
    unknown = set(table) - KEYS
    if unknown:
        raise BadInput(f"{where}: unknown setting(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(KEYS))}")
    if base is None and not {"program", "args"} <= set(table):
        raise BadInput(f"{where}: a new preset needs program and args")
    p = base or Preset(name=name, program="", args=())
    changes: dict[str, Any] = {}
    if "program" in table:
        if not isinstance(table["program"], str) or not table["program"].strip():
            raise BadInput(f"{where}.program: the agent's program, a non-empty string")
        changes["program"] = os.path.expanduser(table["program"])
    for key in ("args", "extra_args", "model_args"):
        if key in table:
            changes[key] = _words(table[key], f"{where}.{key}")
    if "env" in table:
        env = table["env"]
        if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise BadInput(f'{where}.env: a table of NAME = "value" strings')
        changes["env"] = {**p.env, **env}
    if "events" in table:
        ev = table["events"]
        if ev not in (*FORMATS, "none"):
            raise BadInput(f"{where}.events: one of {', '.join(FORMATS)} or none, got {ev!r}")
        changes["events"] = None if ev == "none" else ev
    if "mcp" in table:
        if table["mcp"] not in MCP_STYLES:
            raise BadInput(f"{where}.mcp: one of {', '.join(MCP_STYLES)}, got {table['mcp']!r}")
        changes["mcp"] = table["mcp"]
    if "worktree" in table:
        if not isinstance(table["worktree"], bool):
            raise BadInput(f"{where}.worktree: true or false")
        changes["worktree"] = table["worktree"]
    if "conversation" in table:
        talk = table["conversation"]
        if talk not in CONVERSATIONS:
            raise BadInput(f"{where}.conversation: one of {', '.join(CONVERSATIONS)}, got {talk!r}")
        changes["conversation"] = None if talk == "none" else talk
    if "resume_args" in table:
        changes["resume_args"] = _words(table["resume_args"], f"{where}.resume_args")
    p = replace(p, **changes)
    has_prompt = "{prompt}" in " ".join(p.args)
    if p.conversation is None and not has_prompt:
        raise BadInput(f"{where}.args: must contain {{prompt}}, where the prompt goes")
    if p.conversation is not None and has_prompt:
        raise BadInput(
            f"{where}.args: a preset with a conversation gives the prompt as its first message, "
            'not on the command line: drop {prompt}, or set conversation = "none"'
        )
    if p.conversation is not None and p.events != p.conversation:
        raise BadInput(f"{where}.events: a {p.conversation} conversation reads {p.conversation} events")
    return p


def load(path: str | None = None) -> dict[str, Preset]:
    """The built-in presets, changed and extended by `path` (else $WAVEWAIT_PRESETS), if any."""
    path = path or os.environ.get("WAVEWAIT_PRESETS") or None
    presets = dict(BUILTIN)
    if path is None:
        return presets
    try:
        with open(os.path.expanduser(path), "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise BadInput(
            f"presets: cannot read {path} ({e.strerror or e}); give a TOML file of [presets.NAME] tables"
        ) from e
    if len(raw) > MAX_FILE_BYTES:
        raise BadInput(f"presets: {path} is larger than {MAX_FILE_BYTES >> 10} KiB")
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise BadInput(f"presets: {path} is not valid TOML: {e}") from e
    tables = data.get("presets", {})
    if set(data) - {"presets"} or not isinstance(tables, dict):
        raise BadInput(f"presets: {path} holds only [presets.NAME] tables")
    if len(tables) > MAX_PRESETS:
        raise BadInput(f"presets: at most {MAX_PRESETS} presets in {path}")
    for name, table in tables.items():
        presets[name] = _preset(name, table, presets.get(name), f"presets.{name} ({path})")
    return presets


def get(name: str, path: str | None = None, field: str = "preset") -> Preset:
    """The preset `name` (of `path`'s file, or built in); its name is checked before the file is read."""
    if not isinstance(name, str) or not PRESET_NAME.fullmatch(name):
        raise BadInput(f"{field}: {shown(name)} is not a preset's name (1-40 letters, digits, '-' or '_'), e.g. claude")
    presets = load(path)
    if name not in presets:
        raise BadInput(
            f"{field}: no preset {name!r}; known: {', '.join(sorted(presets))} (add one with --presets FILE)"
        )
    return presets[name]


#: a preset's prompt is one word of the agent's command line, and Linux refuses a word over
#: 128 KiB (MAX_ARG_STRLEN): longer instructions belong in a file the prompt names
MAX_PROMPT_BYTES = 100 << 10


def check_prompt(prompt: object) -> str:
    if isinstance(prompt, str) and len(prompt.encode(errors="replace")) > MAX_PROMPT_BYTES:
        raise BadInput(
            f"prompt: at most {MAX_PROMPT_BYTES >> 10} KiB for an agent preset (it goes on the agent's command "
            "line); write the long part to a file in the repository and name that file in the prompt"
        )
    return check_text(prompt, "prompt")


def server_for(
    bus_url: str,
    agent_id: str,
    parent_id: str,
    program: Sequence[str] | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> McpServer:
    """wavewait's MCP server for a flight: this installation's wavewait, the same bus, its
    identity, and `extra_env` (a task agent's queue and task: an agent CLI need not pass
    its own environment on to the servers it starts)."""
    command = list(program) if program else ([b] if (b := wavewait_bin()) else python_module("wavewait"))
    env = {"WAVEWAIT_BUS": bus_url, "WAVEWAIT_AGENT_ID": agent_id, "WAVEWAIT_PARENT_ID": parent_id}
    return McpServer(command=[*command, "mcp"], env=dict(extra_env or {}) | env)
