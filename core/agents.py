"""Agents: registering, spawning under supervision, liveness, closing and killing.

A spawned agent runs under a small supervisor process (`supervise.py`) that leads its own
process group, so the exit code is recorded the moment the agent ends. If the supervisor
is killed along with it, the liveness sweep that every wait runs notices the vanished pid
within its interval. Agents not spawned here keep a lease by heartbeat instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

import anyio.lowlevel

from . import worktrees
from .bus import Bus
from .errors import BadInput, WavewaitError
from .identity import SECRET_ENV, new_secret, supervised_flight_id, supervisor_argv, this_command
from .ids import check_id, check_name, check_wave, new_id, resolve
from .launch_plan import LaunchPlan
from .limits import MAX_AGENT_IDS, check_argv, check_list, shown
from .model import Agent, Item, now
from .proc import alive, group_members, hostname, pid_start
from .results import SpawnResult, iso

KILL_GRACE = 2.0
SWEEP_INTERVAL = 0.5  # a dead pid is noticed within this (the issue asks for 1 s)
SWEEP_SLICE = 1_000  # targets a sweep looks at before it lets the event loop run
#: on a bus shared by several hosts, a supervisor renews its agent's lease every third of
#: this, so an agent whose whole host vanished is marked dead once the lease runs out
AGENT_LEASE = float(os.environ.get("WAVEWAIT_AGENT_LEASE", "10"))

#: called with a flight's record once it is on the bus and before its process starts (or it
#: is queued for a slot): the queue runner names the flight in its task there (core/runner.py)
OnRecord = Callable[[Agent], Awaitable[None]]


def caller_id(explicit: str | None = None) -> str:
    """Who is calling: `--agent`, else `WAVEWAIT_AGENT_ID`, else the flight this process runs
    in (a host may start its MCP servers with a bare environment), else `orchestrator`."""
    chosen = explicit or os.environ.get("WAVEWAIT_AGENT_ID") or supervised_flight_id() or "orchestrator"
    return check_id(chosen, "agent")


#: per bus object, the ids this process has seen registered (agent records are never deleted)
_known: weakref.WeakKeyDictionary[Bus, set[str]] = weakref.WeakKeyDictionary()


async def ensure_registered(bus: Bus, agent_id: str) -> None:
    """`ensure_agent` for a caller that only needs the record to exist: a process that
    waits again and again (a server's next-message loop) reads it once, not per wait."""
    known = _known.setdefault(bus, set())
    if agent_id not in known:
        await ensure_agent(bus, agent_id)
        known.add(agent_id)


#: how long a process trusts an agent's name it read (a name changes only if the agent is
#: registered again), and how many it keeps
NAME_TTL = 30.0
NAMES_KEPT = 10_000
_names: weakref.WeakKeyDictionary[Bus, dict[str, tuple[str, float]]] = weakref.WeakKeyDictionary()


async def name_of(bus: Bus, agent_id: str) -> str:
    """The name to show for `agent_id` (its id if it has no record), read at most once per
    NAME_TTL: a server returning 1,000 messages/s from a few senders reads each name once."""
    names = _names.setdefault(bus, {})
    t = time.monotonic()
    cached = names.get(agent_id)
    if cached is not None and t - cached[1] < NAME_TTL:
        return cached[0]
    agent = await bus.get_agent(agent_id)
    name = agent.name if agent else agent_id
    if len(names) >= NAMES_KEPT:
        names.clear()
    names[agent_id] = (name, t)
    return name


async def ensure_agent(bus: Bus, agent_id: str, name: str | None = None, **fields: object) -> Agent:
    """The agent record for `agent_id`, registering it (running, no pid) if it is new."""
    agent = await bus.get_agent(agent_id)
    if agent is None:
        agent = Agent(id=check_id(agent_id, "agent"), name=check_name(name or agent_id), **fields)
        await bus.put_agent(agent)
    return agent


async def register(
    bus: Bus,
    agent_id: str,
    name: str | None = None,
    *,
    lease: float | None = None,
    parent_id: str | None = None,
    wave: str | None = None,
) -> Agent:
    """Register an agent that was not spawned here; with `lease`, it must `heartbeat`."""
    agent = Agent(
        id=check_id(agent_id, "agent"),
        name=check_name(name or agent_id),
        wave=wave,
        parent_id=parent_id,
        host=hostname(),
        lease_expires_at=now() + lease if lease else None,
    )
    await bus.put_agent(agent)
    return agent


async def heartbeat(bus: Bus, agent_id: str, lease: float) -> Agent | None:
    return await bus.transition(
        agent_id, "running", ("running", "idle"), lease_expires_at=now() + lease
    ) or await bus.get_agent(agent_id)


async def resolve_agent(bus: Bus, token: str, field: str = "agent") -> Agent:
    """An agent by exact id or unique prefix (≥ 4 characters)."""
    check_id(token, field)  # a malformed token is refused before the bus is read
    agent = await bus.get_agent(token)
    if agent is not None:
        return agent
    agents = {a.id: a for a in await bus.list_agents()}
    return agents[resolve(token, agents, field)]


async def resolve_agents(bus: Bus, tokens: Iterable[str], field: str = "agents") -> list[Agent]:
    """Resolve several ids or prefixes, deduplicated, in the order given."""
    tokens = check_list(
        list(tokens), field, check_id, max_len=MAX_AGENT_IDS
    )  # bounded and well-formed before the bus is read
    if not tokens:
        return []
    # exact ids in one read; the whole list only when some token is a prefix (or unknown)
    agents = await bus.get_agents(tokens)
    if len(agents) < len(set(tokens)):
        agents = {a.id: a for a in await bus.list_agents()}
    out: dict[str, Agent] = {}
    for i, token in enumerate(tokens):
        # an exact id is a dict lookup; only a prefix goes through `resolve` (a pass over all ids)
        agent_id = token if token in agents else resolve(token, agents, f"{field}[{i}]")
        out.setdefault(agent_id, agents[agent_id])
    return list(out.values())


async def spawn_without_admission(bus: Bus, plan: LaunchPlan, *, on_record: OnRecord | None = None) -> Agent:
    """Start the flight `plan` resolved, as a supervised agent in its own process group; its record.

    It starts at once, whatever its wave's limit: only `admission.launch` calls it, and so
    keeps to that limit (hence the name: nothing else may skip admission by accident). The
    plan was checked, its budget kept and its wave's settings read when it was made
    (core/flights.py): nothing is checked or read again here. `on_record`, see `recorded`."""
    secret, digest = new_secret()  # its credential: in its environment only, hashed on the bus
    agent = plan.record.model_copy(update={"started_at": plan.record.created_at, "secret_hash": digest})
    await bus.put_agent(agent)
    await recorded(bus, agent, on_record)
    return await launch(bus, agent, plan.env, secret)


async def recorded(bus: Bus, agent: Agent, on_record: OnRecord | None) -> None:
    """Call `on_record` on a flight that is on the bus and has not started: whoever is told
    of the flight there can read its record. An error from it leaves the flight dead, never
    started, and is raised to the spawner."""
    if on_record is None:
        return
    try:
        await on_record(agent)
    except Exception as e:
        reason = f"not started: {e}"
        await bus.transition(agent.id, "dead", (agent.status,), reason=reason, ended_at=now(), launch_env=None)
        raise


def prepare(
    bus: Bus,
    name: str,
    command: Sequence[str],
    *,
    wave: str | None = None,
    parent_id: str | None = None,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    agent_id: str | None = None,
) -> tuple[Agent, dict[str, str]]:
    """A plain command's flight, checked: its record (not kept yet) and the environment its
    command runs in (`record_of`), for a caller that starts one without a face's request."""
    check_name(name)
    command = check_argv(command)
    if wave is not None:
        check_wave(wave)
    parent_id = caller_id(parent_id)
    agent_id = new_id() if agent_id is None else check_id(agent_id, "agent_id")
    return record_of(bus, name, command, wave=wave, parent_id=parent_id, env=env, cwd=cwd, agent_id=agent_id)


def record_of(
    bus: Bus,
    name: str,
    command: Sequence[str],
    *,
    wave: str | None,
    parent_id: str,
    env: dict[str, str] | None,
    cwd: str | None,
    agent_id: str,
) -> tuple[Agent, dict[str, str]]:
    """A flight's record (not kept yet) and the environment its command runs in, from values
    checked already: everything a spawn decides before its process starts, wherever that
    starts it."""
    agent = Agent(
        id=agent_id,
        name=name,
        wave=wave,
        parent_id=parent_id,
        host=hostname(),
        command=list(command),
        log_path=bus.log_path(agent_id),
        cwd=cwd or os.getcwd(),  # where the spawner stood: a queued flight starts there from any process
    )
    return agent, flight_env(bus, dict(os.environ if env is None else env), agent.id, parent_id)


def flight_env(bus: Bus, env: dict[str, str], agent_id: str, parent_id: str) -> dict[str, str]:
    """The environment a flight's command runs in: `env` with the bus's variables, its identity
    and this wavewait within reach (a spawn, and the resume of a conversation)."""
    env.pop(SECRET_ENV, None)  # the spawner's own, if it is a flight: each flight gets its own at start
    env.update(WAVEWAIT_BUS=bus.url, WAVEWAIT_AGENT_ID=agent_id, WAVEWAIT_PARENT_ID=parent_id)
    env.update(reach_wavewait(env.get("PATH", "")))
    return env


async def launch(
    bus: Bus,
    agent: Agent,
    env: dict[str, str],
    secret: str | None = None,
    *,
    announce: bool = False,
    command: Sequence[str] | None = None,
) -> Agent:
    """Start the supervisor of `agent` (kept on the bus, `running`, not started yet) with
    `env`; its record once the command runs, or BadInput (it is dead then, and with
    `announce` its parent hears of it: a queued flight's spawner is not there to be told).

    The supervisor only starts a flight whose credential it holds (supervise.py): `secret`,
    whose digest the record has, or (None) a new one, put on the record first. `command`: what
    runs instead of the record's own (a conversation resumed: its command and `resume_args`)."""
    command = list(agent.command or []) if command is None else list(command)
    if secret is None:
        secret, digest = new_secret()
        agent = await bus.update_agent(agent.id, secret_hash=digest) or agent
    child_env = {**env, SECRET_ENV: secret}
    try:
        supervisor = subprocess.Popen(
            supervisor_argv(agent.id, command),
            env=child_env,
            cwd=agent.cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as e:  # its folder went away while it was queued, say
        detail = f"cannot start its supervisor: {e.strerror or e}"
        await _failed(bus, agent.id, detail, announce)
        raise BadInput(f"command: cannot start {shown(command[:1])}: {detail}") from e
    assert supervisor.stdin is not None and supervisor.stdout is not None
    # recorded before it starts anything: the flight's processes are known by this ancestor
    # from their first instruction on (identity.py); then the go (supervise.py). On a bus of
    # several hosts its lease starts here too, so a host that vanishes before its supervisor's
    # first renewal still leaves a flight that other hosts mark dead
    lease = {"lease_expires_at": now() + AGENT_LEASE} if bus.multi_host else {}
    recorded = await bus.update_agent(
        agent.id, supervisor_pid=supervisor.pid, supervisor_start=pid_start(supervisor.pid, zombie_ok=True), **lease
    )
    if recorded is not None and recorded.status == "running":
        plan = {"log": agent.log_path, "events": agent.events, "conversation": agent.conversation}
        with contextlib.suppress(BrokenPipeError):  # it has ended: what it said is read below
            supervisor.stdin.write((json.dumps(plan) + "\n").encode())
    with contextlib.suppress(BrokenPipeError):
        supervisor.stdin.close()  # no go for a flight killed or closed meanwhile: it never runs
    line = (await asyncio.to_thread(supervisor.stdout.readline)).decode().strip()
    supervisor.stdout.close()
    if not line.isdigit():
        await asyncio.to_thread(supervisor.wait)
        if recorded is None or recorded.status != "running":
            state = "gone from the bus" if recorded is None else recorded.status
            detail = f"it is {state} ({recorded.reason if recorded else 'no record'}); not starting it"
        else:
            detail = line.removeprefix("error: ") or f"the supervisor exited with code {supervisor.returncode}"
        await _failed(bus, agent.id, detail, announce)
        raise BadInput(f"command: cannot start {shown(command[0])}: {detail}")
    pid = int(line)  # on the record at once: a kill right after the spawn ends the command
    answer = await bus.update_agent(agent.id, pid=pid, pid_start=pid_start(pid, zombie_ok=True)) or agent
    # reap the supervisor when it ends, so a long-lived spawner leaves no zombies
    threading.Thread(target=supervisor.wait, name=f"wavewait-reap {supervisor.pid}", daemon=True).start()
    return answer


async def _failed(bus: Bus, agent_id: str, detail: str, announce: bool) -> None:
    if announce:
        await mark_dead(bus, agent_id, detail)
    else:  # the spawner is told by the error it gets
        await bus.transition(agent_id, "dead", ("running",), reason=detail, ended_at=now())


def wavewait_bin() -> str | None:
    """The `wavewait` program of this installation (next to this Python), if there is one."""
    here = os.path.join(os.path.dirname(sys.executable), "wavewait")
    return here if os.access(here, os.X_OK) else None


def reach_wavewait(path: str) -> dict[str, str]:
    """PATH and WAVEWAIT_BIN for a child, so it runs the same `wavewait` that spawned it.

    A newcomer's venv is often not activated: the child would find no `wavewait` (exit 127)
    or another one. This installation's directory goes first on PATH.
    """
    program = wavewait_bin()
    if program is None:
        return {}
    first = os.path.dirname(program)
    rest = [p for p in path.split(os.pathsep) if p and p != first]
    return {"PATH": os.pathsep.join([first, *rest]), "WAVEWAIT_BIN": program}


OUTPUT_LINES = 1000  # the most lines `read_output` returns
OUTPUT_BYTES = 256 * 1024  # and the most bytes it reads from the end of the log


def output_tail(path: str | None, lines: int = 50, max_bytes: int = OUTPUT_BYTES) -> list[str]:
    """The last `lines` lines of an output log (reading at most `max_bytes` from its end)."""
    if not path:
        return []
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except FileNotFoundError:
        return []
    text = data.decode("utf-8", "replace").splitlines()
    if size > max_bytes and text:
        text = text[1:]  # the first line read is cut
    return text[-lines:] if lines > 0 else []


async def read_output(bus: Bus, agent: Agent, lines: int = 50) -> list[str]:
    """A flight's recent stdout and stderr (its output log): the last `lines`, bounded."""
    if isinstance(lines, bool) or not isinstance(lines, int) or not 1 <= lines <= OUTPUT_LINES:
        raise BadInput(f"lines: give a whole number from 1 to {OUTPUT_LINES}, got {lines!r}")
    path = agent.log_path or bus.log_path(agent.id)
    if agent.host not in (None, hostname()) and not os.path.exists(path or ""):
        raise BadInput(f"agent: {agent.name} ran on host {agent.host}; its output log is there")
    return await asyncio.to_thread(output_tail, path, lines)


async def close_without_admission(bus: Bus, agent: Agent, reason: str = "closed") -> Agent:
    """Mark an agent closed (terminal). Its process, if any, is left to finish.

    Its wave's next queued flight is not started: `admission.close` is the close that does.

    A flight's worktree goes once its process has ended, if clean (its branch stays); one
    still running is tidied by its supervisor at its end (core/flights.py)."""
    closed = await bus.transition(
        agent.id,
        "closed",
        ("queued", "running", "idle"),
        reason=reason,
        ended_at=now(),
        launch_env=None,
        closed_for_good=True,  # a conversation it held ends: a later tell is refused (docs/conversations.md)
        resume_env=None,
    )
    if closed is None:
        current = await bus.get_agent(agent.id)
        if current is not None and current.status == "closed" and not current.closed_for_good:
            current = await bus.update_agent(agent.id, closed_for_good=True, reason=reason, resume_env=None) or current
        if current is not None and current.status == "dead":
            raise BadInput(
                f"{{agentId}}: {agent.name} ({agent.id[:8]}) is dead, not open; nothing to close", fields=("agentId",)
            )
        closed = current or agent
    if closed.worktree is not None and closed.host in (None, hostname()) and not alive(closed.pid, closed.pid_start):
        try:
            await asyncio.to_thread(worktrees.remove, closed.worktree)
        except WavewaitError as e:  # closed all the same; prune can take the worktree later
            logging.getLogger("wavewait.agents").warning("%s: its worktree stays: %s", closed.name, e)
    return closed


async def kill_without_admission(bus: Bus, agent: Agent, by: str | None = None) -> Agent:
    """Mark the agent dead, then end its process group (TERM, then KILL after a grace).

    Its wave's next queued flight is not started: `admission.kill` is the kill that does.

    An agent that already ended keeps its word (`closed` or `dead`, and why): dead means it
    died. A closed agent's process that still runs is ended all the same. `kill_said` gives
    the words for people when nothing was marked dead.
    """
    if agent.host not in (None, hostname()) and agent.pid:
        raise BadInput(f"agent: {agent.name} runs on host {agent.host}; kill it from there")
    return await stop(bus, agent, f"killed by {by or 'request'}")


async def stop(bus: Bus, agent: Agent, reason: str) -> Agent:
    """Mark a flight on this host dead for `reason` (once), then end its process group.

    `kill_without_admission` is this for a person or an agent; a flight's own supervisor calls it when the
    flight spent its budget (core/budgets.py), and then leaves itself out of the group it
    leads. A flight still queued never started: it is dead at once, nothing to end."""
    unstarted = await bus.transition(
        agent.id, "dead", ("queued",), reason=f"{reason} before it started", ended_at=now(), launch_env=None
    )
    if unstarted is not None:  # it never ran: nothing to end, and its worktree never held work
        await _announce_death(bus, unstarted)
        if unstarted.worktree is not None and unstarted.host in (None, hostname()):
            await asyncio.to_thread(_discard_unstarted, unstarted)
        return unstarted
    # its record as it is now, not as the caller read it: a flight admitted meanwhile has a
    # pid its queued record lacked (ending the old record's none would leave it running)
    dead = await _record_death(bus, agent.id, reason)
    agent = dead or await bus.get_agent(agent.id) or agent
    pgid = agent.supervisor_pid or agent.pid
    termed = False
    try:  # TERMed before anything else is awaited: a caller ended from here on (a host's KILL
        # of a server that stops its flights) leaves no flight running under a dead record
        if pgid and alive(agent.pid, agent.pid_start):
            termed = _signal(pgid, signal.SIGTERM)
    finally:
        if dead is not None:
            await _announce_death(bus, dead)
    if pgid and termed:
        await _end_group(pgid, agent, termed=True)
    return await bus.get_agent(agent.id) or agent


async def end_run(agent: Agent) -> None:
    """End a flight's process group as `stop` does, recording nothing: for its own
    supervisor, which records the death once the run has ended and its final usage is kept
    (a budget stop, core/flights.py)."""
    pgid = agent.supervisor_pid or agent.pid
    if pgid and alive(agent.pid, agent.pid_start):
        await _end_group(pgid, agent)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    """Signal every process of the group, except this command's own when they are in it (a
    supervisor stopping its own flight stays to record how it ended; a flight's own `wavewait
    kill` of itself, run by a warm process's child, keeps the launcher its end depends on)."""
    spared = this_command()
    if pgid != os.getpgrp() and all(_group_of(pid) != pgid for pid in spared):
        os.killpg(pgid, sig)
        return
    for pid in group_members(pgid):
        if pid not in spared:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                continue


def _group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _discard_unstarted(agent: Agent) -> None:
    """The worktree and branch made for a flight that never started (nothing is in them)."""
    assert agent.worktree is not None
    try:
        worktrees.remove(agent.worktree, force=True)
        worktrees.delete_branch(agent.worktree, force=True)
    except WavewaitError as e:  # dead all the same; prune can take them later
        logging.getLogger("wavewait.agents").warning("%s: its worktree stays: %s", agent.name, e)


def _signal(pgid: int, sig: signal.Signals) -> bool:
    """Signal the group: False if it is gone already."""
    try:
        _signal_group(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError as e:
        raise BadInput(f"agent: not allowed to signal process group {pgid}: {e}") from e
    return True


async def _end_group(pgid: int, agent: Agent, termed: bool = False) -> None:
    """TERM the group (unless `termed`: sent already), KILL it if the flight outlives the grace."""
    if not termed and not _signal(pgid, signal.SIGTERM):
        return
    if not await _ended_within(agent, KILL_GRACE) and _signal(pgid, signal.SIGKILL):
        await _ended_within(agent, KILL_GRACE)


async def _ended_within(agent: Agent, seconds: float) -> bool:
    """Whether the flight's process ended within `seconds` (polled: it is not our child)."""
    deadline = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < deadline:
        if not alive(agent.pid, agent.pid_start):
            return True
        await asyncio.sleep(0.02)
    return False


async def mark_dead(bus: Bus, agent_id: str, reason: str, **fields: object) -> Agent | None:
    """Record a death once and tell the parent (an `agent_dead` event in its inbox)."""
    dead = await _record_death(bus, agent_id, reason, **fields)
    if dead is not None:
        await _announce_death(bus, dead)
    return dead


async def _record_death(bus: Bus, agent_id: str, reason: str, **fields: object) -> Agent | None:
    """The death on the record, once (None: ended already); `stop` announces it after its TERM."""
    return await bus.transition(agent_id, "dead", ("running", "idle"), reason=reason, ended_at=now(), **fields)


async def _announce_death(bus: Bus, agent: Agent) -> None:
    if agent.parent_id and agent.parent_id != agent.id:
        await bus.deliver(
            Item(
                id=new_id(),
                type="agent_dead",
                to=agent.parent_id,
                sender=agent.id,
                body=agent.reason or "dead",
                data={"agent_id": agent.id, "name": agent.name, "exit_code": agent.exit_code},
            )
        )


async def sweep_without_admission(bus: Bus, agents: Iterable[Agent]) -> list[Agent]:
    """Mark dead the agents whose process vanished or whose lease ran out; return those.

    The slots they free are not given on: `admission.sweep` is the sweep that does."""
    dead = []
    t = now()
    for i, a in enumerate(agents):
        if i % SWEEP_SLICE == SWEEP_SLICE - 1:
            await anyio.lowlevel.checkpoint()  # 100,000 targets take 150 ms: other waits go on between slices
        if a.finished:
            continue
        reason = None
        here = bool(a.pid) and a.host == hostname()  # on its own host the pid decides
        if here and not alive(a.pid, a.pid_start):
            # its supervisor, by pid and start time: pids wrap within minutes on a busy machine,
            # and a dead supervisor's pid taken by another process would keep it running forever
            if a.exit_code is None and a.supervisor_pid and alive(a.supervisor_pid, a.supervisor_start):
                continue  # its supervisor is recording how it ended (exit code, signal)
            reason = "process vanished" if a.exit_code is None else f"exited with code {a.exit_code}"
        elif not here and a.lease_expires_at is not None and a.lease_expires_at < t:
            # elsewhere the lease is all we can see
            reason = (
                "lease ran out (no heartbeat)"
                if a.supervisor_pid is None
                else f"lease ran out (host {a.host} stopped renewing it)"
            )
        if reason and (d := await mark_dead(bus, a.id, reason)) is not None:
            dead.append(d)
    return dead


def kill_said(before: Agent, after: Agent) -> str | None:
    """The hint a kill answers with when the agent had already ended (nothing marked dead)."""
    if not before.finished and after.status == "dead":
        return None
    why = f" ({after.reason})" if after.reason else ""
    return f"{after.name} had already ended: it is {after.status}{why}; nothing was marked dead"


def agent_view(a: Agent) -> dict[str, Any]:
    """What `wavewait agents` and the `list_agents` tool show of an agent (one shape for both)."""
    return {
        "id": a.id,
        "name": a.name,
        "wave": a.wave,
        "status": a.status,
        "state": a.state,
        "question": a.question if a.state == "needs_input" else None,
        "age_sec": round(max(0.0, now() - a.created_at), 1),
        "last_message": a.last_message,
        "last_message_at": iso(a.last_message_at),
        "pid": a.pid,
        "exit_code": a.exit_code,
        "reason": a.reason,
        "parent_id": a.parent_id,
        "preset": a.preset,
        "conversation": a.conversation,  # the host protocol a tell goes on; None: it cannot be told
        "session_id": a.session_id,
        "turn": a.turn,
        "closed_for_good": a.closed_for_good,
        "worktree": a.worktree,
        "changes": a.changes.model_copy(update={"paths": a.changes.paths[:LISTED_PATHS]}) if a.changes else None,
        "usage": a.usage,
    }


def spawn_result(a: Agent) -> SpawnResult:
    """What `spawn` and `spawn_agent` answer: the flight, and whether it runs or is queued (and why)."""
    queued = a.status == "queued"
    return SpawnResult(
        agent_id=a.id,
        name=a.name,
        pid=a.pid,
        status="queued" if queued else "running",
        reason=a.reason if queued else None,
    )


LISTED_PATHS = 20  # files of a flight's changes a listing shows (wavewait diff shows them all)
