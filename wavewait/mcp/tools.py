"""The tools: each one a typed function that checks its input, calls the core and returns a core result.

Nothing here waits, claims or decides by itself; the core does (one path for every
face). What this layer adds is what only an MCP caller needs: progress notifications,
`--max-block`, path policy for signals, and a `hint` that tells a model what to do next.
The SDK derives each tool's input schema from its signature and its output schema from the
result model in its return annotation, and checks every answer against it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable
from typing import Annotated, Literal, TypeVar

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult
from pydantic import Field

from ..core import admission, agents, messages, spawning, wait
from ..core.agents import spawn_result
from ..core.bus import Bus
from ..core.delivery import holding
from ..core.errors import BadInput
from ..core.ids import check_id
from ..core.limits import check_path, shown
from ..core.model import Agent, now
from ..core.results import (
    AgentInfo,
    AgentList,
    AgentWait,
    CloseResult,
    Event,
    FanIn,
    KillResult,
    NextMessage,
    NotifyResult,
    Result,
    SendResult,
    Signal,
    SpawnResult,
    TargetResult,
    WaitResult,
    iso,
)
from .delivery import Deliveries
from .settings import Settings
from .spawn_args import (
    BudgetTokens,
    BudgetUsd,
    FlightBudgetTokens,
    FlightBudgetUsd,
    SpawnBase,
    SpawnCwd,
    SpawnEnv,
    SpawnModel,
    SpawnPreset,
    SpawnWorktree,
    spawn_request,
)
from .tasks_ext import running_task
from .toolkit import AgentRef, Reporter, clamp, declare, max_block, reply

# --------------------------------------------------------------------------- descriptions
# Each description says first what its tool is, in the words a search for it would use (hosts
# that defer tools find them by BM25 over name, title and description: tests/hosts); what every
# wait shares (sit still instead of sleeping; a timeout is a normal result) is said once, in the
# server's instructions (server.py).
WAIT_DOC = (
    "Wait for messages from agents: wavewait's main wait, for the reports of the flights you "
    "started. Without from_agents: returns the oldest message (a report, completion or question) "
    "in your inbox as {from, name, message, sent_at}, "
    "or {status: 'timeout'}; with max_messages N, also up to N-1 more already queued, in more: "
    "[{from, name, message, sent_at}], oldest first. With from_agents (ids or unique prefixes of "
    "at least 4 characters), a fan-in: returns once each listed agent has sent one message or is "
    "idle, closed or dead: {status: complete|partial|timeout|interrupted, results: [{agent_id, "
    "name, status: received|reported|queued|running|idle|dead|closed, message?}], elapsed_sec}, in "
    "your order. It takes at most one message (the oldest) per listed agent, within the output "
    "budget (the rest: reported, call again); others' stay queued. Messages returned are "
    "consumed: keep them. A 'dead' agent will not report: handle it. A join: wait for any or the "
    "first K (need)."
)
SIGNAL_DOC = (
    "Wait for signal files: returns once at least min_count files match signal_path (a path or "
    "glob such as wavebus/wave-7/flights/*.done; relative paths are taken from the project "
    "directory) with {matched: [absolute paths, sorted], elapsed_sec}, or on timeout {timed_out: "
    "true, elapsed_sec, partial_matches: [...]}. The alternative to a sleep or a loop over ls. "
    "Files already matched count again, so call again with the same arguments."
)
WAIT_AGENT_DOC = (
    "Wait until agents are idle (finished their job; kind 'agent-idle') or closed (kind "
    "'agent-closed'). Targets are agentId plus agentIds; match 'all' (default) or 'any'. "
    "Returns {waitId, agentId, status: 'resolved', kind, match, resolution: {status: "
    "agent_idle|agent_closed|agent_dead|timed_out|interrupted, resolvedAgentIds, "
    "pendingAgentIds, deadAgentIds}}; 'agent_dead' means a target died, so the condition can no "
    "longer hold. id names the wait: the same id again returns the stored resolution. timeoutAt "
    "is an ISO-8601 time (none: as long as needed). After a timeout, pass a new id and the "
    "pendingAgentIds."
)
EVENT_DOC = (
    "Wait for the next event in your inbox and take it: one event of the given types (default: "
    "all), oldest first: {event_id, type: 'worker_complete', worker_id, status, changes, "
    "message} | {event_id, type: 'message', from, body} | {event_id, type: 'question', from, "
    "question_id, body} | {event_id, type: 'agent_dead', from, body, ...}, or {type: "
    "'timeout'}. Events of other types stay queued. Call it once per expected event; "
    "timeout_secs 0 is an instant check."
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
    "nothing."
)
SPAWN_DOC = (
    "Start a flight: run command (an argv list, e.g. ['python', 'job.py']) or prompt (run "
    "through this server's configured agent command) as a supervised agent, optionally in a "
    "named wave. Returns {agent_id, name, pid} at once; the agent runs on, with WAVEWAIT_BUS, "
    "WAVEWAIT_AGENT_ID and WAVEWAIT_PARENT_ID (you) in its environment. With "
    "preset ('claude' or 'codex') and prompt, it runs that coding agent headless in its own git "
    "worktree; it reports by itself with its answer, changed files and tokens. budget_tokens / "
    "budget_usd set the wave's budget (a spawn once it is spent is an error naming it); "
    "flight_budget_tokens / flight_budget_usd cap this flight: past a cap it is stopped, dead with "
    "a reason starting 'budget:'. max_parallel (N or 'auto', with wave) caps the wave's running "
    "flights: a spawn past it is queued (status 'queued', pid null), not refused, and starts when "
    "one ends; wait on it, kill or close it like any other."
)
LIST_DOC = (
    "List agents with id, name, wave, status (queued|running|idle|closed|dead), age, last message and "
    "why a dead one died; with wave, that wave's (a wave no agent is in is refused). Read-only; it "
    "consumes nothing."
)
CLOSE_DOC = (
    "Close an agent for good (terminal): it receives no more messages. Its process, if any, is "
    "left to finish. Returns {agentId, status}."
)
KILL_DOC = (
    "Kill an agent: end its process group (TERM, then KILL) and mark it dead. Returns {agent_id, status: 'dead'}."
)

# --------------------------------------------------------------------------- parameter types
Timeout = Annotated[float, Field(ge=0, description="Seconds to wait at most (0 = instant check).")]
AgentIds = Annotated[
    list[str] | None,
    Field(description="Agent ids or unique prefixes (≥ 4 characters) to fan in on; omit for the next message."),
]
Wave = Annotated[str | None, Field(description="A join: every flight of this wave too, queued ones included.")]
Files = Annotated[
    list[wait.FilesTarget] | None,
    Field(description="A join: file targets, each met once min_count files match glob (relative to the project)."),
]
Events = Annotated[list[str] | None, Field(description="A join: event types, each met by one event of that type.")]
Need = Annotated[
    int | Literal["all", "any"],
    Field(description="How many targets must be met: all (default), any (the first one), or K (the first K of N)."),
]
Check = Annotated[
    str | None,
    Field(description="A flight counts only once this shell command passes in its worktree (e.g. 'pytest -q')."),
]
CheckTimeout = Annotated[float, Field(gt=0, description="Seconds one check may run (default 600).")]
StopRest = Annotated[bool, Field(description="Once the need is met, stop the flights still running or queued.")]
MaxMessages = Annotated[
    int,
    Field(
        ge=1,
        le=wait.MAX_MESSAGES,
        description="Without from_agents: return up to this many queued messages in one call "
        "(the first as usual, the rest in `more`, oldest first). 1 by default.",
    ),
]
SignalPath = Annotated[
    str,
    Field(description="Path or glob to watch, e.g. wavebus/wave-7/flights/*.done (relative to the project directory)."),
]
WaitId = Annotated[
    str,
    Field(description="A name you choose for this wait (e.g. 'wait-1'); the same id returns the stored resolution."),
]
AgentKind = Annotated[
    Literal["agent-closed", "agent-idle"],
    Field(description="agent-idle: finished its job (idle or closed); agent-closed: closed for good."),
]
R = TypeVar("R", bound=Result)
INTERRUPTED = "A person interrupted this wait. Call again with the same arguments to keep waiting."


# --------------------------------------------------------------------------- helpers
def cut_hint(s: Settings, asked: float | None) -> str:
    asked_s = "no limit" if asked is None else f"{asked:g} s"
    return (
        f"Returned after this server's max-block of {s.max_block:g} s (you asked for "
        f"{asked_s}); this is a normal timeout, nothing is lost and the flights keep running. "
    )


def next_hint(s: Settings, r: NextMessage, asked: float, cut: bool) -> str | None:
    if r.status == "received":
        return None
    head = cut_hint(s, asked) if cut and r.status == "timeout" else ""
    if r.status == "interrupted":
        head = "A person interrupted this wait (TUI or `wavewait interrupt`). "
    return head + "No message was taken. Call wait again to keep waiting."


#: names a hint lists per group ("…, and 1,980 more"); ids its from_agents may list
HINT_NAMES = 20
HINT_IDS = 100


def _listed(entries: list[TargetResult], more: int = 0, reasons: bool = False) -> str:
    """The first HINT_NAMES names (with the dead's reasons), and how many more."""
    shown = [f"{t.name} ({t.reason or 'no reason recorded'})" if reasons else t.name for t in entries[:HINT_NAMES]]
    more += len(entries) - len(shown)
    return ", ".join(shown) + (f", and {more:,} more" if more else "")


def fan_hint(s: Settings, r: FanIn, asked: float, cut: bool) -> str | None:
    """What to do next, bounded like the result: names by the first few, ids only when few."""
    omitted = r.omitted or {}
    running = [t for t in r.results if t.status == "running"]
    dead = [t for t in r.results if t.status == "dead"]
    got = [t for t in r.results if t.status == "received"]
    if r.status == "complete" and not dead and len(got) == len(r.results) and not omitted and not r.stopped:
        return None
    parts = []
    if r.status == "needs_input":
        parts.append(
            "A flight needs your answer (needs_input: its question is the entry's message, or its "
            "record's): answer it with reply, then call wait again with the same arguments to go on."
        )
    elif r.status == "unmet":
        parts.append(
            f"The need ({r.need}) can no longer be met: {r.met} met, and the other targets ended "
            "without meeting it (dead, closed, or their check failed). Spawn more, or take what came."
        )
    elif r.status == "interrupted":
        parts.append("A person interrupted this wait (TUI or `wavewait interrupt`).")
    elif r.status == "timeout":
        parts.append(
            cut_hint(s, asked).strip() if cut else "Timed out; this is a normal result and the flights keep running."
        )
    if r.more_waiting or r.status == "partial":
        rest = [t.agent_id for t in r.results if t.status in ("reported", "running", "queued")]
        every = not any(omitted.get(k) for k in ("reported", "running", "queued"))
        how = (
            f" with from_agents={json.dumps(rest)}"
            if every and len(rest) <= HINT_IDS
            else " (or wait with max_messages=100: it takes them oldest first)"
        )
        parts.append(
            f"{r.more_waiting or 'Some'} more message(s) are waiting (status reported): they did not fit "
            f"in this result and stay queued, nothing is lost. Call wait again for them{how}."
        )
    if got:
        parts.append(f"Received from {_listed(got)}: those messages are consumed now, keep them.")
    if dead or omitted.get("dead"):
        parts.append(f"Dead, will not report: {_listed(dead, omitted.get('dead', 0), reasons=True)}; handle them.")
    if r.stopped:
        parts.append(f"Stopped once the need was met (stop_rest): {len(r.stopped)} flight(s), now dead.")
    failed = [t for t in r.results if t.status == "check_failed"]
    if failed:
        parts.append(f"Check failed: {_listed(failed)} (their reports are consumed; see output).")
    if (running or omitted.get("running")) and r.status != "complete":
        more = omitted.get("running", 0)
        tail = (
            f" To wait only on them, call wait with from_agents={json.dumps([t.agent_id for t in running])}."
            if not more and len(running) <= HINT_IDS and not r.more_waiting  # else the call above says it
            else ""
        )
        parts.append(f"Still running: {_listed(running, more)}.{tail}")
    if omitted:
        counts = ", ".join(f"{n:,} {k}" for k, n in omitted.items())
        parts.append(f"Not listed in results, to keep the answer within the output budget: {counts}.")
    return " ".join(parts)


def allowed_roots(s: Settings) -> list[str]:
    """Where signals may be watched: the project, the bus directory (if any), and --allow-path."""
    roots = [os.path.realpath(s.project_dir)]
    if "://" not in s.bus:
        roots.append(os.path.realpath(os.path.expanduser(s.bus)))
    return roots + [os.path.realpath(os.path.expanduser(p)) for p in s.allow_paths]


async def resolve_signal_path(s: Settings, raw: str) -> str:
    """Absolute, normalised pattern; refused outside the project dir, the bus and --allow-path.

    Its length is checked first; the file system is asked (`realpath`, one `lstat` a folder)
    in a worker thread, so no pattern holds the event loop."""
    if not raw.strip():
        raise BadInput("signal_path: give a path or glob, e.g. wavebus/wave-7/flights/*.done")
    check_path(raw, "signal_path")
    return await anyio.to_thread.run_sync(_resolve_signal_path, s, raw)


def _resolve_signal_path(s: Settings, raw: str) -> str:
    path = os.path.normpath(os.path.join(s.project_dir, os.path.expanduser(raw)))
    check_path(path, "signal_path")  # `~` may have grown it
    base = os.path.realpath(wait.glob_base(path))
    if not any(base == r or base.startswith(r.rstrip(os.sep) + os.sep) for r in allowed_roots(s)):
        raise BadInput(
            f"signal_path: {shown(path, 300)} is outside the project directory ({s.project_dir})"
            f"{' and the bus' if '://' not in s.bus else ''}; watch files under the project, or "
            "start the server with --allow-path DIR to allow another folder"
        )
    return path


async def consuming(ctx: Context, deliveries: Deliveries, run: Callable[[wait.Control], Awaitable[R]]) -> R:
    """Run a wait that takes inbox items so that they leave the inbox only once the response
    that carries them is out (wavewait/mcp/delivery.py), or, for a wait run as a task, once
    its result is stored in the task's record (tasks_ext.py); any failure before gives them back."""
    task = running_task()
    control = wait.Control() if task is None else task.control
    control.hold = True
    async with holding(lambda: control.delivery):
        result = await run(control)
        if control.delivery is not None:
            if task is None:
                await deliveries.hold(ctx.request_context, ctx.request_id, control.delivery)
            else:
                await control.delivery.confirm()
                task.delivery = control.delivery
    return result


def task_control() -> wait.Control | None:
    """The control of the task this call runs as (its wait id is on the task's record)."""
    task = running_task()
    return None if task is None else task.control


# --------------------------------------------------------------------------- the tools
def register(server: MCPServer, bus: Bus, s: Settings, deliveries: Deliveries) -> list[str]:
    """Every tool, acting on `bus` as `s.caller`. Waits that consume inbox items are not read-only.

    Returns the list `spawn_agent` adds each flight's id to: the flights of this session.
    """
    spawned: list[str] = []

    ws = s.wait_settings()
    tool = declare(server)

    @tool("wait", WAIT_DOC, "Wait for messages from agents", read_only=False)
    async def wait_(
        ctx: Context,
        timeout: Timeout,
        from_agents: AgentIds = None,
        max_messages: MaxMessages = 1,
        wave: Wave = None,
        files: Files = None,
        events: Events = None,
        need: Need = "all",
        check: Check = None,
        check_timeout: CheckTimeout = wait.CHECK_TIMEOUT,
        stop_rest: StopRest = False,
    ) -> Annotated[CallToolResult, WaitResult]:
        timeout = wait.check_timeout(timeout)
        eff, cut = clamp(s, timeout, ctx)
        request = wait.WaitRequest(
            timeout=eff,
            ids=from_agents,
            wave=wave,
            files=[f.model_copy(update={"glob": await resolve_signal_path(s, f.glob)}) for f in files or ()],
            events=events or (),
            need=need,
            check=check,
            check_timeout=check_timeout,
            stop_rest=stop_rest,
            max_messages=max_messages,
        )
        result = await consuming(
            ctx,
            deliveries,
            lambda c: wait.wait_for(
                bus,
                s.caller,
                request,
                control=c,
                on_progress=Reporter(ctx, eff),
                settings=ws,
                budget=s.output_budget,
            ),
        )
        if isinstance(result, FanIn):
            return reply(result, fan_hint(s, result, timeout, cut))
        return reply(result, next_hint(s, result, timeout, cut))

    @tool("wave_wait_for_signal", SIGNAL_DOC, "Wait for signal files", read_only=True, idempotent=True)
    async def wave_wait_for_signal(
        ctx: Context,
        signal_path: SignalPath,
        timeout_sec: Annotated[int, Field(gt=0, description="Seconds to wait at most (whole number > 0).")] = 1800,
        min_count: Annotated[int, Field(gt=0, description="How many matching files satisfy the signal.")] = 1,
    ) -> Annotated[CallToolResult, Signal]:
        pattern = await resolve_signal_path(s, signal_path)
        eff, cut = clamp(s, float(timeout_sec), ctx)
        r = await wait.wait_signal(
            bus,
            s.caller,
            pattern,
            timeout=eff,
            min_count=min_count,
            on_progress=Reporter(ctx, eff),
            control=task_control(),
            settings=ws,
        )
        hint = None
        if r.interrupted:
            hint = INTERRUPTED
        elif r.timed_out:
            hint = (
                (cut_hint(s, timeout_sec) if cut else "Timed out; the flights keep running. ")
                + f"{len(r.partial_matches or [])}/{min_count} files so far. Call again with the same arguments "
                "to keep waiting; files already there count again."
            )
        return reply(r, hint)

    @tool("wait_agent", WAIT_AGENT_DOC, "Wait until agents are idle or closed", read_only=True, idempotent=True)
    async def wait_agent(
        ctx: Context,
        id: WaitId,
        agentId: Annotated[str, Field(description="Primary agent id (or unique prefix) to wait on.")],
        kind: AgentKind,
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
    ) -> Annotated[CallToolResult, AgentWait]:
        check_id(id, "id")  # measured before any agent is looked up
        # resolved here first so an unknown id is named as the caller gave it (agentId or agentIds[i])
        first = (await agents.resolve_agent(bus, agentId, "agentId")).id
        more = [a.id for a in await agents.resolve_agents(bus, agentIds or [], "agentIds")]
        asked = wait.parse_deadline(timeoutAt)
        eff_at, eff, cut = timeoutAt, asked, False
        mb = max_block(s, ctx)
        if mb is not None and (asked is None or asked - now() > mb):
            eff = now() + mb
            eff_at, cut = iso(eff), True
        r = await wait.wait_agent(
            bus,
            s.caller,
            id=id,
            agent_id=first,
            agent_ids=more,
            kind=kind,
            description=description,
            match=match,
            timeout_at=eff_at,
            on_progress=Reporter(ctx, None if eff is None else max(0.0, eff - now())),
            control=task_control(),
            settings=ws,
        )
        hint = None
        res = r.resolution
        if cut and res.status == "timed_out":
            res.timeout_at = iso(asked)
            until = "no timeoutAt" if timeoutAt is None else f"timeoutAt {iso(asked)}"
            hint = (
                f"Returned after this server's max-block of {s.max_block:g} s ({until}); this is a normal "
                "timeout, nothing is lost and the agents keep running. Call wait_agent again with the same "
                "arguments to keep waiting."
            )
        elif res.status == "timed_out":
            hint = (
                f"Timed out; the agents keep running. Pending: {', '.join(res.pending)}. To keep "
                "waiting, call again with a new id, a later timeoutAt and the pending agents."
            )
        elif res.status == "interrupted":
            hint = INTERRUPTED
        elif res.status == "agent_dead":
            hint = f"Dead, will not finish: {', '.join(res.dead)}; handle them instead of waiting."
        return reply(r, hint)

    @tool("wait_for_event", EVENT_DOC, "Wait for the next event", read_only=False)
    async def wait_for_event(
        ctx: Context,
        types: Annotated[
            list[str] | None, Field(description="Event types to take, e.g. ['worker_complete']; default: all.")
        ] = None,
        timeout_secs: Annotated[float, Field(ge=0, description="Seconds to wait at most (0 = instant check).")] = 240,
    ) -> Annotated[CallToolResult, Event]:
        timeout = wait.check_timeout(timeout_secs, "timeout_secs")
        eff, cut = clamp(s, timeout, ctx)
        r = await consuming(
            ctx,
            deliveries,
            lambda c: wait.wait_event(
                bus, s.caller, eff, types, on_progress=Reporter(ctx, eff), control=c, settings=ws
            ),
        )
        hint = None
        if r.type == "timeout":
            hint = (
                cut_hint(s, timeout) if cut else "No event yet; the workers keep running. "
            ) + "Call wait_for_event again to keep waiting."
        elif r.type == "interrupted":
            hint = "A person interrupted this wait. Call again to keep waiting."
        return reply(r, hint)

    @tool("notify_completion", NOTIFY_DOC, "Report that a worker finished", read_only=False)
    async def notify_completion(
        status: Annotated[Literal["success", "error"], Field(description="How the job ended.")],
        message: Annotated[str, Field(description="A short summary of what was done (or what failed).")],
        worker_id: Annotated[str | None, Field(description="Who finished (default: you).")] = None,
        session_id: Annotated[str | None, Field(description="Who to tell (default: your parent).")] = None,
        changes: Annotated[list[str] | None, Field(description="Files you changed.")] = None,
    ) -> Annotated[CallToolResult, NotifyResult]:
        item = await messages.notify_completion(
            bus, s.caller, status=status, message=message, changes=changes, worker_id=worker_id, session_id=session_id
        )
        return reply(NotifyResult(success=True, event_id=item.id))

    @tool("send", SEND_DOC, "Send a message to an agent", read_only=False)
    async def send(
        to: Annotated[str, Field(description="Recipient id or unique prefix (≥ 4 characters).")],
        message: Annotated[str, Field(description="The message (non-empty).")],
    ) -> Annotated[CallToolResult, SendResult]:
        item = await messages.send(bus, s.caller, to, message)
        return reply(SendResult(message_id=item.id))

    @tool("spawn_agent", SPAWN_DOC, "Start a flight (an agent process)", read_only=False, open_world=True)
    async def spawn_agent(
        name: Annotated[str, Field(description="A label for people, e.g. 'file-reader'.")],
        command: Annotated[
            list[str] | None, Field(description="Program and arguments, e.g. ['python', 'job.py'].")
        ] = None,
        prompt: Annotated[
            str | None, Field(description="A task for an agent, run through the server's agent command.")
        ] = None,
        wave: Annotated[str | None, Field(description="A wave name to group flights, e.g. 'wave-7'.")] = None,
        cwd: SpawnCwd = None,
        env: SpawnEnv = None,
        preset: SpawnPreset = None,
        model: SpawnModel = None,
        worktree: SpawnWorktree = None,
        base: SpawnBase = None,
        budget_tokens: BudgetTokens = None,
        budget_usd: BudgetUsd = None,
        flight_budget_tokens: FlightBudgetTokens = None,
        flight_budget_usd: FlightBudgetUsd = None,
        max_parallel: Annotated[
            int | Literal["auto"] | None,
            Field(
                description="With wave: at most this many of its flights run at once (1-1000), or 'auto' "
                "(as many as the machine's cores, free memory and load allow); more are queued. Kept as "
                "the wave's setting until changed."
            ),
        ] = None,
    ) -> Annotated[CallToolResult, SpawnResult]:
        request = await spawn_request(
            s,
            name,
            command=command,
            prompt=prompt,
            cwd=cwd,
            env=env,
            preset=preset,
            wave=wave,
            model=model,
            worktree=worktree,
            base=base,
            budget_tokens=budget_tokens,
            budget_usd=budget_usd,
            flight_budget_tokens=flight_budget_tokens,
            flight_budget_usd=flight_budget_usd,
            max_parallel=max_parallel,
        )
        a = await spawning.spawn(bus, request)
        spawned.append(a.id)
        return reply(spawn_result(a))

    @tool("list_agents", LIST_DOC, "List agents", read_only=True, idempotent=True)
    async def list_agents(
        wave: Annotated[str | None, Field(description="Only agents of this wave.")] = None,
    ) -> Annotated[CallToolResult, AgentList]:
        found = await admission.list_wave(bus, wave)
        return reply(AgentList(agents=[AgentInfo(**agents.agent_view(a)) for a in found]))

    @tool("close_agent", CLOSE_DOC, "Close an agent for good", read_only=False, destructive=True, idempotent=True)
    async def close_agent(agentId: AgentRef) -> Annotated[CallToolResult, CloseResult]:
        a = await admission.close(bus, await agents.resolve_agent(bus, agentId, "agentId"))
        return reply(CloseResult(agentId=a.id, status=a.status))

    @tool("kill_agent", KILL_DOC, "Kill an agent", read_only=False, destructive=True, idempotent=True)
    async def kill_agent(agent: AgentRef) -> Annotated[CallToolResult, KillResult]:
        before = await agents.resolve_agent(bus, agent, "agent")
        a = await admission.kill(bus, before, by=s.caller)
        return reply(KillResult(agent_id=a.id, status=a.status), agents.kill_said(before, a))

    return spawned


async def stop_orphans(bus: Bus, s: Settings, spawned: list[str]) -> list[str]:
    """The session that spawned these flights ended: stop the ones still running (docs/tools.md).

    Nobody is left to wait for their reports, so they would run on unseen; each is recorded dead
    with the reason, so `list_agents` and the TUI say why.
    """
    # all at once, the queued first (a running one's end would start them), as a join's stop_rest;
    # one that could not be stopped is logged by kill_all and left out of the list
    outcome = await admission.kill_all(bus, spawned, f"killed by {s.caller}: the session that spawned it ended")
    return [i for i in spawned if isinstance(outcome.get(i), Agent)]
