"""Who is sending: the flight a process belongs to, not what its environment claims.

A flight is whatever its supervisor started (`supervise.py`). Its processes, and theirs (an
agent CLI, the MCP server and the hooks that CLI starts, a shell command it runs), descend
from that supervisor, whose pid and start time are in the flight's record. So on the
flight's host, a claim to send as flight X holds only if X's supervisor is an ancestor of
this process, and a process inside flight F sends only as F, whatever `--agent` or
`WAVEWAIT_AGENT_ID` says. No pid of another host can be seen: from another host the sender
must present X's credential, a secret made at spawn, given to X's processes in their
environment (`WAVEWAIT_AGENT_SECRET`, each flight only its own) and kept on the bus only as
its SHA-256.

A process inside no flight (a person's shell, the orchestrator, the TUI, a test) sends as
whoever it names, except as a flight supervised on this host (it is not one of its
processes) or on another host without that flight's credential. docs/reliability.md says
where this stops: processes of one user can read each other's environment and memory, and
whatever can write the bus can write anything into it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import weakref
from collections.abc import Sequence

from .bus import Bus
from .errors import ForgedSender
from .ids import is_id
from .model import Agent
from .proc import ancestors, cmdline, command_process, hostname, me, pid_start, python_module, run_for

SECRET_ENV = "WAVEWAIT_AGENT_SECRET"
SUPERVISOR_MODULE = "wavewait.core.supervise"


def new_secret() -> tuple[str, str]:
    """A flight's credential and the digest its record keeps."""
    secret = secrets.token_urlsafe(32)
    return secret, secret_digest(secret)


def secret_digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def holds_secret(agent: Agent, secret: str | None) -> bool:
    """Whether `secret` is `agent`'s credential (compared in constant time)."""
    if not secret or not agent.secret_hash:
        return False
    return hmac.compare_digest(secret_digest(secret), agent.secret_hash)


def supervisor_argv(agent_id: str, command: Sequence[str]) -> list[str]:
    """How a flight's supervisor is started: the one shape `_supervised_by` reads back."""
    return [*python_module(SUPERVISOR_MODULE), agent_id, "--", *command]


def _supervised_by(pid: int) -> str | None:
    """The agent id a process says it supervises (its arguments): a hint, checked against
    the agent's record before it is believed."""
    args = cmdline(pid)
    for i in range(len(args) - 2):
        if args[i] == "-m" and args[i + 1] == SUPERVISOR_MODULE:
            return args[i + 2]
    return None


def _is_supervisor(agent: Agent, pid: int, start: str | None) -> bool:
    """Whether the process (pid, start) is `agent`'s supervisor on this host, by its record."""
    return (
        agent.supervisor_pid == pid
        and agent.host == hostname()
        and (agent.supervisor_start is None or agent.supervisor_start == start)
    )


def supervised_flight_id() -> str | None:
    """The id of the flight this process runs in, as the nearest supervisor above it says:
    the caller's default when its environment names none (a host that starts its MCP servers
    with a bare environment). A default only: `check_sender` verifies it before any send."""
    for pid, _ in _my_ancestors():
        if (agent_id := _supervised_by(pid)) is not None:
            return agent_id if is_id(agent_id) else None
    return None


#: this process's ancestors, read once (pid, ancestors): a process's ancestry only changes
#: when an ancestor ends, and a flight whose supervisor ended has ended too
_ancestry: tuple[int, list[tuple[int, str | None]]] = (0, [])
#: per bus, the flight this process belongs to (None: no flight), found once
_flights: weakref.WeakKeyDictionary[Bus, tuple[int, Agent | None]] = weakref.WeakKeyDictionary()


def adopt_ancestry(pid: int, start: str | None) -> None:
    """Take the place in the process tree of process `pid` (started at `start`), as a warm
    start's child does (wavewait/warm.py): it runs the command that process was started for,
    which waits for it and takes it down when it ends. The pid is the kernel's word (the peer
    of a Unix socket), and is checked to be that process still after its ancestors are read."""
    global _ancestry
    found = [me(), (pid, start), *ancestors(pid)]
    if start is None or pid_start(pid) != start:
        found = [me()]  # it has gone: this process belongs to no flight
    _ancestry = (os.getpid(), found)
    run_for(pid, start)


def this_command() -> set[int]:
    """The processes of the command this process runs: itself, and the launcher it runs it
    for (a warm start's child: the launcher's end ends it, wavewait/warm.py)."""
    return {os.getpid(), command_process()[0]}


def _my_ancestors() -> list[tuple[int, str | None]]:
    """This process, then its ancestors: a supervisor is one of its own flight's processes
    (it sends the flight's report when the agent's run ends, core/flights.py)."""
    global _ancestry
    if _ancestry[0] != os.getpid():  # the first call, or a forked child
        _ancestry = (os.getpid(), [me(), *ancestors()])
    return _ancestry[1]


async def flight_of_process(bus: Bus) -> Agent | None:
    """The flight on `bus` this process belongs to: the nearest ancestor that is a flight's
    supervisor by that flight's record; None for a process inside no flight."""
    cached = _flights.get(bus)
    if cached is not None and cached[0] == os.getpid():
        return cached[1]
    found: Agent | None = None
    for pid, start in _my_ancestors():
        agent_id = _supervised_by(pid)
        if agent_id is None:
            continue
        agent = await bus.get_agent(agent_id)
        if agent is not None and _is_supervisor(agent, pid, start):
            found = agent
            break
    _flights[bus] = (os.getpid(), found)
    return found


def _label(agent: Agent) -> str:
    return agent.id if agent.name == agent.id else f"{agent.name} ({agent.id})"


async def check_sender(bus: Bus, claimed_id: str, claimed: Agent | None) -> None:
    """Refuse (`ForgedSender`, before anything is sent) a claim to send as `claimed_id`
    (`claimed`: its record, None if it has none yet) that this process cannot back."""
    mine = await flight_of_process(bus)  # the nearest: a sub-flight's processes are not its parent's
    who = _label(claimed) if claimed is not None else claimed_id
    if mine is not None:
        if mine.id == claimed_id:
            return  # one of the flight's own processes
        raise ForgedSender(
            f"sender: this process belongs to flight {_label(mine)}, not {who}: a flight sends only as "
            f"itself; nothing was sent. Drop --agent / WAVEWAIT_AGENT_ID={claimed_id} to send as {mine.id}"
        )
    if claimed is None or claimed.supervisor_pid is None:
        return  # a process inside no flight, as an agent that is nobody's flight
    if claimed.host == hostname():
        raise ForgedSender(
            f"sender: {who} is a flight supervised on this host (pid {claimed.supervisor_pid}), and this "
            f"process (pid {os.getpid()}) is not one of its processes: it belongs to no flight; nothing "
            "was sent. Only the flight's own processes send as it; send as yourself (orchestrator, or "
            "your own --agent id)"
        )
    if holds_secret(claimed, os.environ.get(SECRET_ENV)):
        return  # from another host, with the flight's credential
    said = "does not match" if os.environ.get(SECRET_ENV) else "is not set"
    raise ForgedSender(
        f"sender: {who} is a flight on host {claimed.host}, and this process on {hostname()} did not "
        f"present its credential ({SECRET_ENV} {said}); nothing was sent. A flight's processes on "
        f"another host send as it with the {SECRET_ENV} its supervisor gave it"
    )
