"""The tools: each one validates its input, calls the core, and shapes the answer.

Nothing here waits, claims or decides by itself; the core does (DESIGN: one path for every
face). What this layer adds is what only an MCP caller needs: progress notifications,
`--max-block`, path policy for signals, and a `hint` that tells a model what to do next.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel, Field

from ..core import agents, messages, wait
from ..core.bus import Bus
from ..core.errors import BadInput
from ..core.model import now
from ..core.results import AgentWait, FanIn, NextMessage, Result, iso
from .outputs import AgentInfo, AgentList, CloseResult, KillResult, NotifyResult, SendResult, SpawnResult

log = logging.getLogger(__name__)


@dataclass
class Settings:
    """How this server was started (flags and environment), fixed for its lifetime."""

    caller: str
    project_dir: str
    max_block: float | None = None
    allow_paths: list[str] = field(default_factory=list)
    agent_command: str | None = None


def ok(data: dict[str, Any]) -> CallToolResult:
    """A result with `structuredContent` and the same JSON as text (for hosts that read text)."""
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(data, ensure_ascii=False))],
        structured_content=data,
    )


def error(message: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)


class Reporter:
    """Turns the core's progress callbacks into `notifications/progress`.

    `progress` is the elapsed time in seconds and must grow with every notification, so
    two reports within the same millisecond are nudged apart. Without a progress token
    from the client, the SDK makes this a no-op.
    """

    def __init__(self, ctx: Context, total: float | None) -> None:
        self.ctx, self.total, self.last = ctx, total, -1.0
        self.failed = False

    async def __call__(self, p: wait.Progress) -> None:
        value = max(p.elapsed, self.last + 0.001)
        self.last = value
        try:
            await self.ctx.report_progress(round(value, 3), self.total, p.message)
        except Exception as e:  # a lost notification must not end the wait
            if not self.failed:
                log.warning("progress notification not sent: %s", e)
            self.failed = True


# --------------------------------------------------------------------------- descriptions
SIT_STILL = (
    "Call this instead of sleep, a polling loop, or ending your turn to 'check back later': "
    "it blocks (without using tokens) until the condition holds, then returns at once. "
)
TIMEOUT_NORMAL = (
    "A timeout is a normal result, not an error: it carries the partial state, and the flights "
    "keep running; call again to keep waiting. "
)

WAIT_DOC = (
    SIT_STILL + "Two modes. Without from_agents: returns the oldest message (or completion report, or "
    "question) in your inbox as {from, name, message, sent_at}, or {status: 'timeout'}. With "
    "from_agents (ids or unique prefixes of at least 4 characters): waits until each listed agent "
    "has sent one message, or is idle, closed or dead, and returns {status: complete|timeout|"
    "interrupted, results: [{agent_id, name, status: received|running|idle|dead|closed, "
    "message?}], elapsed_sec}, one entry per agent in the order you gave. Messages are consumed: "
    "the ones returned are yours and will not come again, so keep them. It takes at most one "
    "message (the oldest) per listed agent; messages from others stay queued. "
    + TIMEOUT_NORMAL
    + "To wait again only on what is pending, call wait with from_agents set to the agent_ids "
    "whose status is still 'running'. A 'dead' agent will not report: handle it (re-dispatch or "
    "report the failure) instead of waiting for it. timeout 0 is an instant check."
)
SIGNAL_DOC = (
    SIT_STILL + "Waits until at least min_count files match signal_path (a path or glob such as "
    "wavebus/wave-7/flights/*.done; relative paths are taken from the project directory). "
    "Returns {matched: [absolute paths, sorted], elapsed_sec}, or on timeout {timed_out: true, "
    "elapsed_sec, partial_matches: [...]}. This is the sanctioned alternative to Bash(sleep) or a "
    "while-loop over ls. "
    + TIMEOUT_NORMAL
    + "Files already matched count again on the next call, so call again with the same arguments."
)
WAIT_AGENT_DOC = (
    SIT_STILL + "Waits until agents are idle (finished their job; kind 'agent-idle') or closed (kind "
    "'agent-closed'). Targets are agentId plus agentIds; match 'all' (default) or 'any'. "
    "Returns {waitId, agentId, status: 'resolved', kind, match, resolution: {status: "
    "agent_idle|agent_closed|agent_dead|timed_out|interrupted, resolvedAgentIds, "
    "pendingAgentIds, deadAgentIds}}; 'agent_dead' means a target died, so the condition can no "
    "longer hold. id names the wait: calling again with the same id returns the stored "
    "resolution once it resolved. timeoutAt is an ISO-8601 time; without it the call waits as "
    "long as needed. " + TIMEOUT_NORMAL + "To wait only on what is pending, pass a new id and the pendingAgentIds."
)
EVENT_DOC = (
    SIT_STILL + "Takes one event from your inbox, oldest first, and returns it: {event_id, type: "
    "'worker_complete', worker_id, status, changes, message} | {event_id, type: 'message', from, "
    "body} | {event_id, type: 'question', from, question_id, body} | {event_id, type: "
    "'agent_dead', from, body, ...}, or {type: 'timeout'}. types filters (default: all types); "
    "events of other types stay queued for later. The event is consumed. "
    + TIMEOUT_NORMAL
    + "Call it once per expected event; timeout_secs 0 is an instant check."
)
NOTIFY_DOC = (
    "Report that you (a worker) finished your job: sends a worker_complete event to the agent "
    "that spawned you (session_id, default: your parent) and marks you idle. Call it once when "
    "done, with status 'success' or 'error', a short message, and the files you changed. "
    "Returns {success: true, event_id}."
)
SEND_DOC = (
    "Send a message to an agent's inbox (to: id or unique prefix). Returns {message_id}. An "
    "empty message, an unknown agent, or a dead or closed recipient is an error and sends "
    "nothing. The recipient gets it from wait or wait_for_event."
)
SPAWN_DOC = (
    "Start a flight: run command (an argv list, e.g. ['python', 'job.py']) or prompt (run "
    "through this server's configured agent command) as a supervised agent, optionally in a "
    "named wave. Returns {agent_id, name, pid} at once; the agent runs on. It gets "
    "WAVEWAIT_BUS, WAVEWAIT_AGENT_ID and WAVEWAIT_PARENT_ID (you) in its environment. Then "
    "call wait with from_agents=[agent_id, ...] (or wave_wait_for_signal) and sit still."
)
LIST_DOC = (
    "List agents with id, name, wave, status (running|idle|closed|dead), age, last message and "
    "why a dead one died. Read-only; it consumes nothing. Do not call it in a loop to wait: "
    "call wait instead."
)
CLOSE_DOC = (
    "Mark an agent closed: done for good (terminal). It receives no more messages; waits for "
    "'agent-closed' resolve. Its process, if any, is left to finish. Returns {agentId, status}."
)
KILL_DOC = (
    "Kill an agent: end its process group (TERM, then KILL) and mark it dead. Waits on it end "
    "with status 'dead'. Returns {agent_id, status: 'dead'}."
)

# --------------------------------------------------------------------------- parameter types
Timeout = Annotated[float, Field(ge=0, description="Seconds to wait at most (0 = instant check).")]
AgentIds = Annotated[
    list[str] | None,
    Field(description="Agent ids or unique prefixes (≥ 4 characters) to fan in on; omit for the next message."),
]


class Tools:
    """The tool functions, bound to one bus and the server's settings."""

    def __init__(self, bus: Bus, settings: Settings) -> None:
        self.bus, self.s = bus, settings

    # ----------------------------------------------------------------- helpers
    def _clamp(self, timeout: float | None) -> tuple[float | None, bool]:
        """Apply `--max-block`: return the timeout to use and whether it was cut."""
        mb = self.s.max_block
        if mb is None or (timeout is not None and timeout <= mb):
            return timeout, False
        return mb, True

    def _cut_hint(self, asked: float | None) -> str:
        asked_s = "no limit" if asked is None else f"{asked:g} s"
        return (
            f"Returned after this server's max-block of {self.s.max_block:g} s (you asked for "
            f"{asked_s}); this is a normal timeout, nothing is lost and the flights keep running. "
        )

    @staticmethod
    def _reply(result: Result | BaseModel, hint: str | None = None) -> CallToolResult:
        data = result.to_json() if isinstance(result, Result) else result.model_dump(mode="json")
        if hint:
            data["hint"] = hint.strip()
        return ok(data)

    # ----------------------------------------------------------------- wait
    async def wait(self, ctx: Context, timeout: Timeout, from_agents: AgentIds = None) -> CallToolResult:
        timeout = wait.check_timeout(timeout)
        eff, cut = self._clamp(timeout)
        rep = Reporter(ctx, eff)
        if from_agents is None:
            nxt = await wait.wait_next(self.bus, self.s.caller, eff, on_progress=rep)
            return self._reply(nxt, self._next_hint(nxt, timeout, cut))
        fan = await wait.wait_fan_in(self.bus, self.s.caller, eff, from_agents, on_progress=rep)
        return self._reply(fan, self._fan_hint(fan, timeout, cut))

    def _next_hint(self, r: NextMessage, asked: float, cut: bool) -> str | None:
        if r.status == "received":
            return None
        head = self._cut_hint(asked) if cut and r.status == "timeout" else ""
        if r.status == "interrupted":
            head = "A person interrupted this wait (TUI or `wavewait interrupt`). "
        return head + "No message was taken. Call wait again to keep waiting."

    def _fan_hint(self, r: FanIn, asked: float, cut: bool) -> str | None:
        running = [t for t in r.results if t.status == "running"]
        dead = [t for t in r.results if t.status == "dead"]
        got = [t for t in r.results if t.status == "received"]
        if r.status == "complete" and not dead and len(got) == len(r.results):
            return None
        parts = []
        if r.status == "interrupted":
            parts.append("A person interrupted this wait (TUI or `wavewait interrupt`).")
        elif r.status == "timeout":
            parts.append(
                self._cut_hint(asked).strip()
                if cut
                else "Timed out; this is a normal result and the flights keep running."
            )
        if got:
            parts.append(f"Received from {', '.join(t.name for t in got)}: those messages are consumed now, keep them.")
        if dead:
            parts.append(
                "Dead, will not report: "
                + ", ".join(f"{t.name} ({t.reason or 'no reason recorded'})" for t in dead)
                + "; handle them."
            )
        if running:
            ids = json.dumps([t.agent_id for t in running])
            parts.append(
                f"Still running: {', '.join(t.name for t in running)}. To wait only on "
                f"them, call wait with from_agents={ids}."
            )
        return " ".join(parts)

    # ----------------------------------------------------------------- signals
    def resolve_signal_path(self, raw: str) -> str:
        """Absolute, normalised pattern; refused outside the project dir, the bus and --allow-path."""
        if not isinstance(raw, str) or not raw.strip():
            raise BadInput("signal_path: give a path or glob, e.g. wavebus/wave-7/flights/*.done")
        if "\x00" in raw:
            raise BadInput("signal_path: may not contain a NUL character")
        path = os.path.expanduser(raw)
        if not os.path.isabs(path):
            path = os.path.join(self.s.project_dir, path)
        path = os.path.normpath(path)
        base = os.path.realpath(wait.glob_base(path))
        roots = self.allowed_roots()
        if not any(base == r or base.startswith(r.rstrip(os.sep) + os.sep) for r in roots):
            raise BadInput(
                f"signal_path: {path} is outside the project directory ({self.s.project_dir})"
                f"{' and the bus' if self._bus_dir() else ''}; watch files under the project, or "
                "start the server with --allow-path DIR to allow another folder"
            )
        return path

    def _bus_dir(self) -> str | None:
        url = self.bus.url
        return None if "://" in url else os.path.realpath(url)

    def allowed_roots(self) -> list[str]:
        roots = [os.path.realpath(self.s.project_dir)]
        if (b := self._bus_dir()) is not None:
            roots.append(b)
        roots += [os.path.realpath(os.path.expanduser(p)) for p in self.s.allow_paths]
        return roots

    async def wave_wait_for_signal(
        self,
        ctx: Context,
        signal_path: Annotated[
            str,
            Field(
                description="Path or glob to watch, e.g. wavebus/wave-7/flights/*.done (relative to the project directory)."
            ),
        ],
        timeout_sec: Annotated[int, Field(gt=0, description="Seconds to wait at most (whole number > 0).")] = 1800,
        min_count: Annotated[int, Field(gt=0, description="How many matching files satisfy the signal.")] = 1,
    ) -> CallToolResult:
        pattern = self.resolve_signal_path(signal_path)
        eff, cut = self._clamp(float(timeout_sec))
        r = await wait.wait_signal(
            self.bus, self.s.caller, pattern, timeout=eff, min_count=min_count, on_progress=Reporter(ctx, eff)
        )
        hint = None
        if r.interrupted:
            hint = "A person interrupted this wait. Call again with the same arguments to keep waiting."
        elif r.timed_out:
            n = len(r.partial_matches or [])
            hint = (
                (self._cut_hint(timeout_sec) if cut else "Timed out; the flights keep running. ")
                + f"{n}/{min_count} files so far. Call again with the same arguments to keep "
                "waiting; files already there count again."
            )
        return self._reply(r, hint)

    # ----------------------------------------------------------------- agents idle/closed
    async def wait_agent(
        self,
        ctx: Context,
        id: Annotated[
            str,
            Field(
                description="A name you choose for this wait (e.g. 'wait-1'); the same id returns the stored resolution."
            ),
        ],
        agentId: Annotated[str, Field(description="Primary agent id (or unique prefix) to wait on.")],
        kind: Annotated[
            Literal["agent-closed", "agent-idle"],
            Field(description="agent-idle: finished its job (idle or closed); agent-closed: closed for good."),
        ],
        description: Annotated[str, Field(description="In a few words, what is being waited for.")],
        agentIds: Annotated[
            list[str] | None, Field(description="More agents to include (deduplicated with agentId).")
        ] = None,
        match: Annotated[
            Literal["any", "all"], Field(description="all (default): every target; any: the first one.")
        ] = "all",
        timeoutAt: Annotated[
            str | None, Field(description="ISO-8601 time at which the wait times out, e.g. 2026-01-31T12:00:00Z.")
        ] = None,
    ) -> CallToolResult:
        asked = wait._parse_deadline(timeoutAt)
        eff_at, eff, cut = timeoutAt, asked, False
        mb = self.s.max_block
        if mb is not None and (asked is None or asked - now() > mb):
            eff = now() + mb
            eff_at, cut = iso(eff), True
        rep = Reporter(ctx, None if eff is None else max(0.0, eff - now()))
        r: AgentWait = await wait.wait_agents(
            self.bus,
            self.s.caller,
            id=id,
            agent_id=agentId,
            agent_ids=agentIds or [],
            kind=kind,
            description=description,
            match=match,
            timeout_at=eff_at,
            on_progress=rep,
        )
        hint = None
        res = r.resolution
        if cut and res.status == "timed_out":
            res.timeout_at = iso(asked)
            hint = (
                self._cut_hint(None if asked is None else asked - now())
                + "Call wait_agent again with the same arguments to keep waiting."
            )
        elif res.status == "timed_out":
            hint = (
                f"Timed out; the agents keep running. Pending: {', '.join(res.pending)}. To keep "
                "waiting, call again with a new id, a later timeoutAt and the pending agents."
            )
        elif res.status == "interrupted":
            hint = "A person interrupted this wait. Call again with the same arguments to keep waiting."
        elif res.status == "agent_dead":
            hint = f"Dead, will not finish: {', '.join(res.dead)}; handle them instead of waiting."
        return self._reply(r, hint)

    # ----------------------------------------------------------------- events
    async def wait_for_event(
        self,
        ctx: Context,
        types: Annotated[
            list[str] | None, Field(description="Event types to take, e.g. ['worker_complete']; default: all.")
        ] = None,
        timeout_secs: Annotated[float, Field(ge=0, description="Seconds to wait at most (0 = instant check).")] = 300,
    ) -> CallToolResult:
        timeout = wait.check_timeout(timeout_secs, "timeout_secs")
        eff, cut = self._clamp(timeout)
        r = await wait.wait_event(self.bus, self.s.caller, eff, types, on_progress=Reporter(ctx, eff))
        hint = None
        if r.type == "timeout":
            hint = (
                self._cut_hint(timeout) if cut else "No event yet; the workers keep running. "
            ) + "Call wait_for_event again to keep waiting."
        elif r.type == "interrupted":
            hint = "A person interrupted this wait. Call again to keep waiting."
        return self._reply(r, hint)

    # ----------------------------------------------------------------- messages
    async def notify_completion(
        self,
        status: Annotated[Literal["success", "error"], Field(description="How the job ended.")],
        message: Annotated[str, Field(description="A short summary of what was done (or what failed).")],
        worker_id: Annotated[str | None, Field(description="Who finished (default: you).")] = None,
        session_id: Annotated[str | None, Field(description="Who to tell (default: your parent).")] = None,
        changes: Annotated[list[str] | None, Field(description="Files you changed.")] = None,
    ) -> CallToolResult:
        item = await messages.notify_completion(
            self.bus,
            self.s.caller,
            status=status,
            message=message,
            changes=changes,
            worker_id=worker_id,
            session_id=session_id,
        )
        return self._reply(NotifyResult(success=True, event_id=item.id))

    async def send(
        self,
        to: Annotated[str, Field(description="Recipient id or unique prefix (≥ 4 characters).")],
        message: Annotated[str, Field(description="The message (non-empty).")],
    ) -> CallToolResult:
        item = await messages.send(self.bus, self.s.caller, to, message)
        return self._reply(SendResult(message_id=item.id))

    # ----------------------------------------------------------------- agents
    async def spawn_agent(
        self,
        name: Annotated[str, Field(description="A label for people, e.g. 'file-reader'.")],
        command: Annotated[
            list[str] | None, Field(description="Program and arguments, e.g. ['python', 'job.py'].")
        ] = None,
        prompt: Annotated[
            str | None, Field(description="A task for an agent, run through the server's agent command.")
        ] = None,
        wave: Annotated[str | None, Field(description="A wave name to group flights, e.g. 'wave-7'.")] = None,
    ) -> CallToolResult:
        argv = self._argv(command, prompt)
        await agents.ensure_agent(self.bus, self.s.caller)
        a = await agents.spawn(self.bus, name, argv, wave=wave, parent_id=self.s.caller, cwd=self.s.project_dir)
        return self._reply(SpawnResult(agent_id=a.id, name=a.name, pid=a.pid))

    def _argv(self, command: Sequence[str] | None, prompt: str | None) -> list[str]:
        if (command is None) == (prompt is None):
            raise BadInput("command, prompt: give exactly one: command (an argv list) or prompt (a task text)")
        if command is not None:
            if not command or not all(isinstance(c, str) and c for c in command):
                raise BadInput("command: give the program and its arguments as a non-empty list of non-empty strings")
            return list(command)
        if not prompt or not prompt.strip():
            raise BadInput("prompt: must be a non-empty string")
        if not self.s.agent_command:
            raise BadInput(
                "prompt: this server has no agent command to run a prompt with; start it with "
                "--agent-command 'claude -p' (or set WAVEWAIT_AGENT_COMMAND), or pass command as an argv list"
            )
        return [*shlex.split(self.s.agent_command), prompt]

    async def list_agents(
        self,
        wave: Annotated[str | None, Field(description="Only agents of this wave.")] = None,
    ) -> CallToolResult:
        found = await agents.list_swept(self.bus, wave)
        return self._reply(AgentList(agents=[AgentInfo(**agents.agent_view(a)) for a in found]))

    async def close_agent(
        self,
        agentId: Annotated[str, Field(description="Agent id or unique prefix.")],
    ) -> CallToolResult:
        a = await agents.close(self.bus, await agents.resolve_agent(self.bus, agentId, "agentId"))
        return self._reply(CloseResult(agentId=a.id, status=a.status))

    async def kill_agent(
        self,
        agent: Annotated[str, Field(description="Agent id or unique prefix.")],
    ) -> CallToolResult:
        target = await agents.resolve_agent(self.bus, agent, "agent")
        a = await agents.kill(self.bus, target, by=self.s.caller)
        return self._reply(KillResult(agent_id=a.id, status=a.status))
