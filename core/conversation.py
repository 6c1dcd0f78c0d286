"""Talking to a flight: `tell` (every face's one verb) and the resume of an ended conversation.

A tell is an item for the flight's supervisor (core/transcript.py), which gives it to the
agent on its host's protocol (core/turns.py) and says where it went: into the running turn
(`in_turn`), as the next turn (`next_turn`), or, for a flight whose agent had ended, into its
resumed session (`resumed`). A tell is never lost: it waits on the bus until a supervisor
takes it, and one to a flight whose process ended is kept while the flight is resumed here.

What each word means, and what a flight is between turns: docs/conversations.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from typing import Any

from . import agents, budgets, transcript
from .bus import Bus
from .errors import BadInput, WavewaitError
from .limits import check_text
from .model import Agent, Usage, now
from .proc import alive, hostname

log = logging.getLogger("wavewait.conversation")
MAX_TELL_BYTES = 100 << 10  # a user message, as a preset's prompt (presets.MAX_PROMPT_BYTES)
ANSWER_WAIT = 180.0  # seconds a tell waits for its supervisor to say where it went (a resume included)
RECHECK = 1.0  # seconds between two looks at the flight's record while waiting (a supervisor that died)


async def tell(bus: Bus, token: str, message: object, *, by: str, interrupt: bool = False) -> dict[str, Any]:
    """Tell the flight `token` `message` as a user message (`interrupt`: end its running turn
    first). The answer: `agent_id`, `name`, `told` (in_turn | next_turn | resumed) and `turn`,
    the number of the turn that takes it."""
    text = check_text(message, "message", max_bytes=MAX_TELL_BYTES)
    agent = await agents.resolve_agent(bus, token, "agent")
    refuse_why(agent)
    await refuse_spent(bus, agent)
    item = transcript.tell_item(agent.id, text, by, now_=interrupt)
    if agent.status in ("running", "idle") or agent.host == hostname():
        if agent.finished:
            check_resumable(agent)
        await bus.deliver(item)
    else:
        raise BadInput(
            f"{{agent}}: {agent.name} ({agent.id[:8]}) ran on host {agent.host} and its conversation ended; "
            "its session and worktree are there: tell it from that host",
            fields=("agent",),
        )
    try:
        answer = await _answer(bus, agent.id, item.id)
    except BaseException:
        await _withdraw_or_say(bus, agent.id, item.id)
        raise
    return {"agent_id": agent.id, "name": agent.name} | answer


async def interrupt_turn(bus: Bus, token: str, *, by: str) -> dict[str, Any]:
    """End the flight's running turn without telling it anything (the TUI's key on its screen):
    its turn is not a report; it is `idle` then, and a tell starts its next turn. The answer:
    `agent_id`, `name`, `interrupted` (False: no turn was running) and `turn`."""
    agent = await agents.resolve_agent(bus, token, "agent")
    refuse_why(agent)
    if agent.status != "running":
        return {"agent_id": agent.id, "name": agent.name, "interrupted": False, "turn": agent.turn}
    item = transcript.tell_item(agent.id, "", by, only=True)
    await bus.deliver(item)
    try:
        answer = await _answer(bus, agent.id, item.id, resume_ended=False)
    except BaseException:
        await _withdraw_or_say(bus, agent.id, item.id)
        raise
    return {"agent_id": agent.id, "name": agent.name} | answer


def refuse_why(agent: Agent) -> None:
    """A flight that cannot be told: no conversation, closed for good, or not started."""
    if agent.conversation is None:
        host = f"its preset {agent.preset!r} holds no conversation" if agent.preset else "it runs a plain command"
        raise BadInput(
            f"{{agent}}: {agent.name} ({agent.id[:8]}) cannot be told: {host}; "
            "`send` puts a message in its inbox instead",
            fields=("agent",),
        )
    if agent.closed_for_good:
        raise BadInput(
            f"{{agent}}: {agent.name} ({agent.id[:8]}) was closed with `close`, which ends its conversation for "
            "good; spawn a new flight",
            fields=("agent",),
        )
    if agent.status == "queued":
        raise BadInput(
            f"{{agent}}: {agent.name} ({agent.id[:8]}) is queued: it has not started (its wave is at its limit); "
            "tell it once it runs",
            fields=("agent",),
        )


def check_resumable(agent: Agent) -> None:
    """An ended flight is resumed from its session, in its worktree: both must be there."""
    if not agent.session_id:
        raise BadInput(
            f"{{agent}}: {agent.name} ({agent.id[:8]}) is {agent.status} and its agent never started a session, "
            "so there is nothing to resume; spawn a new flight",
            fields=("agent",),
        )
    if agent.worktree is not None and not os.path.isdir(agent.worktree.path):
        raise BadInput(
            f"{{agent}}: the worktree of {agent.name} ({agent.id[:8]}) is gone ({agent.worktree.path}; pruned?), "
            f"so it cannot go on there; its branch {agent.worktree.branch} keeps its work",
            fields=("agent",),
        )


async def refuse_spent(bus: Bus, agent: Agent) -> None:
    """A flight or wave past its budget takes no more turns: say which budget and the spend."""
    why = await budgets.crossed(bus, agent, agent.usage or Usage())
    if why is not None:
        raise BadInput(f"{{agent}}: {agent.name} ({agent.id[:8]}) takes no more turns: {why}", fields=("agent",))


async def _answer(bus: Bus, agent_id: str, item_id: str, *, resume_ended: bool = True) -> dict[str, Any]:
    """Where the tell went, once its supervisor said so; a flight whose agent ended with the
    tell still waiting is resumed here first (its new supervisor takes it), or, for an
    interrupt (`resume_ended=False`), there was nothing left to interrupt."""
    key = transcript.resolution_key(item_id)
    changes = await bus.subscribe(inboxes=[transcript.tells_inbox(agent_id)], agents=[agent_id])
    deadline = time.monotonic() + ANSWER_WAIT
    try:
        while True:
            said = await bus.get_resolution(key)
            if said is not None:
                if "error" in said:
                    raise BadInput(f"{{agent}}: the agent's host refused it, so it was not told: {said['error']}")
                return said
            agent = await bus.get_agent(agent_id)
            if agent is None:
                raise WavewaitError(f"the flight {agent_id} is gone from the bus; the tell was not given")
            waiting = any(r.id == item_id for r in await bus.pending(transcript.tells_inbox(agent_id)))
            if agent.finished and waiting and not resume_ended:
                await _withdraw(bus, agent_id, item_id)
                return {"interrupted": False, "turn": agent.turn}
            if agent.finished and waiting:
                await resume(bus, agent)
            elif agent.pending or agent.status == "idle":
                await _check_supervisor(bus, agent)
            left = deadline - time.monotonic()
            if left <= 0:
                raise WavewaitError(
                    f"{agent.name}'s supervisor did not take the tell within {ANSWER_WAIT:g} s; it was withdrawn "
                    "(not told): see `wavewait agents` and its output log"
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changes.wait(), min(left, RECHECK))
    finally:
        changes.close()


async def _check_supervisor(bus: Bus, agent: Agent) -> None:
    """A running flight whose supervisor is gone is marked dead (then resumed); one on another
    host whose lease ran out has nobody there to take the tell."""
    if agent.host == hostname():
        if agent.supervisor_pid and not alive(agent.supervisor_pid, agent.supervisor_start):
            await agents.sweep_without_admission(bus, [agent])
        return
    if agent.lease_expires_at is not None and agent.lease_expires_at < now():
        raise WavewaitError(
            f"no supervisor runs {agent.name} on host {agent.host} (its lease ran out); the tell was withdrawn"
        )


async def _withdraw_or_say(bus: Bus, agent_id: str, item_id: str) -> None:
    """`_withdraw` on the way out of a failed tell: its own failure is said, not raised over
    the tell's (the tell may then still be given later; its supervisor takes it in order)."""
    try:
        await _withdraw(bus, agent_id, item_id)
    except Exception as e:
        log.warning("could not withdraw the tell %s to %s: %s; it may still be given", item_id, agent_id, e)


async def _withdraw(bus: Bus, agent_id: str, item_id: str) -> None:
    """Take back a tell nobody took (a refusal, a timeout, an interrupted caller), so it is not
    given later behind the caller's back: claimed by a short wait of ours, then taken."""
    inbox = transcript.tells_inbox(agent_id)
    refs = [r for r in await bus.pending(inbox) if r.id == item_id]
    if not refs:
        return
    record = transcript.short_wait(agent_id, "tell_withdraw")
    await bus.register_wait(record)
    taken = False
    try:
        if await bus.claim(inbox, refs[0], record.id) is not None:
            await bus.take(inbox, record.id, "withdrawn", end=True)  # the take ends the wait
            taken = True
    except BaseException:
        await bus.release(inbox, record.id)
        raise
    finally:
        if not taken:
            await bus.end_wait(record.id)


async def resume(bus: Bus, agent: Agent) -> Agent:
    """Start a new supervisor for an ended flight: the same id, worktree and branch, its agent's
    own session continued (the preset's `resume_args`); `running` again. The tells waiting for
    it are the resumed agent's first messages."""
    check_resumable(agent)
    assert agent.session_id is not None
    started = await bus.transition(
        agent.id,
        "running",
        ("closed", "dead"),
        reason=None,
        exit_code=None,
        ended_at=None,
        pid=None,
        pid_start=None,
        started_at=now(),
    )
    if started is None:  # resumed (or closed for good) by someone else meanwhile
        return await bus.get_agent(agent.id) or agent
    words = [w.replace("{session}", agent.session_id) for w in agent.resume_args or []]
    command = [*(agent.command or []), *words]
    # as it was spawned (its session is found by its own HOME), not as the teller runs
    env = agents.flight_env(bus, dict(agent.resume_env or os.environ), agent.id, agent.parent_id or "orchestrator")
    return await agents.launch(bus, started, env, command=command)
