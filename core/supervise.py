"""The supervisor of one spawned agent: `python -m wavewait.core.supervise AGENT_ID -- CMD...`.

It leads the agent's process group, starts the command with its output in the agent's
log, reports the child's pid to the spawner on stdout, and records the exit the moment
it happens, so every wait on the agent learns of a death at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from typing import Any

from . import admission, flights
from .agents import AGENT_LEASE, mark_dead, output_tail
from .bus import Bus, open_bus
from .identity import SECRET_ENV, holds_secret
from .model import Usage, now
from .proc import pid_start

TAIL_LINES = 5  # of the output log, in a death's reason: what the flight last said
TAIL_CHARS = 600


def _describe(code: int, log_path: str | None = None) -> str:
    """Why it died, for people: the exit code or signal, then the last lines it wrote."""
    if code < 0:
        try:
            why = f"killed by {signal.Signals(-code).name}"
        except ValueError:
            why = f"killed by signal {-code}"
    else:
        why = f"exited with code {code}"
        if code == 127:
            why += " (command not found)"
    tail = "\n".join(line for line in output_tail(log_path, TAIL_LINES) if line.strip())
    if len(tail) > TAIL_CHARS:
        tail = "…" + tail[-(TAIL_CHARS - 1) :]
    return f"{why}; last output:\n{tail}" if tail else why


async def supervise(agent_id: str, command: list[str]) -> int:
    bus = await open_bus()
    try:
        return await _supervise(bus, agent_id, command)
    finally:
        await bus.close()


async def _supervise(bus: Bus, agent_id: str, command: list[str]) -> int:
    agent = await bus.get_agent(agent_id)
    if agent is None:
        print(f"error: no agent {agent_id} on the bus {bus.url}", flush=True)
        return 2
    # only the spawner's own supervisor may start the flight and become the ancestor its
    # processes are known by (identity.py): it holds the flight's credential, and comes first
    if not holds_secret(agent, os.environ.get(SECRET_ENV)):
        print(
            f"error: this process does not hold the credential of {agent_id}; only its spawner supervises it",
            flush=True,
        )
        return 2
    if agent.status != "running":  # killed or closed while it was being started: it never runs
        print(f"error: {agent_id} is {agent.status} ({agent.reason or 'ended'}); not starting it", flush=True)
        return 2
    if agent.supervisor_pid is not None or agent.pid is not None:
        print(f"error: {agent_id} is supervised already (pid {agent.supervisor_pid})", flush=True)
        return 2
    # recorded before the flight starts: its processes are known by this ancestor from their
    # first instruction on (identity.py)
    await bus.update_agent(agent_id, supervisor_pid=os.getpid(), supervisor_start=pid_start(os.getpid()))
    # 0600 whatever the umask: an agent's output is as private as the bus it came from
    fd = os.open(agent.log_path or os.devnull, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    log = open(fd, "ab", buffering=0)  # noqa: SIM115 -- held while the child runs
    loop = asyncio.get_running_loop()
    usage_seen = asyncio.Event()  # its events said it spent more: keep the record, check its budgets now

    def wake() -> None:  # in the reading thread
        # RuntimeError: the loop has closed, so the end was recorded already, with the final usage
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(usage_seen.set)

    relay = flights.Relay(agent.events, log, on_usage=wake) if agent.events else None  # its events: read, then logged
    watch = None
    if agent.worktree is not None:  # watched before the agent starts: its every edit is counted within a second
        watch = flights.WorktreeWatch(
            agent.worktree.path, lambda said: log.write(f"\nwavewait supervise: {said}\n".encode())
        )
    try:
        child = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if relay else log,
            stderr=log if relay else subprocess.STDOUT,
        )
    except OSError as e:
        if watch is not None:
            watch.close()
        log.close()
        print(f"error: {e.strerror or e}", flush=True)
        return 2
    # a TERM to the group is for the agent; we stay to record how it ended
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    leased = bus.multi_host  # other hosts cannot see our pids: keep a lease
    await bus.update_agent(
        agent_id,
        pid=child.pid,
        pid_start=pid_start(child.pid, zombie_ok=True),
        **({"lease_expires_at": now() + AGENT_LEASE} if leased else {}),
    )
    print(child.pid, flush=True)
    sys.stdout.close()
    if relay is not None:
        relay.start(child.stdout)
    ended_task = asyncio.ensure_future(asyncio.to_thread(child.wait))
    live = relay is not None or agent.worktree is not None  # usage and changes kept current
    beat = min(AGENT_LEASE / 3, flights.LIVE_CHANGES_EVERY) if leased and live else AGENT_LEASE / 3
    if live and not leased:
        beat = min(beat, flights.LIVE_CHANGES_EVERY)
    if relay is not None and relay.reader.format == "codex":  # its tokens so far are in its rollout file
        beat = min(beat, flights.SESSION_EVERY)
    seen: dict[str, object] = {}
    put_off: float | None = None  # a count put off to keep the rate bounded
    renew_every = min(AGENT_LEASE / 3, flights.LIVE_CHANGES_EVERY)  # the lease: not at every (1 s) beat
    renewed = time.monotonic()
    try:
        while leased or live:
            waits: set[asyncio.Future[Any]] = {ended_task}
            edited_wait = asyncio.ensure_future(watch.edited.wait()) if watch is not None else None
            usage_wait = asyncio.ensure_future(usage_seen.wait()) if relay is not None else None
            waits |= {w for w in (edited_wait, usage_wait) if w is not None}
            done, _ = await asyncio.wait(
                waits, timeout=beat if put_off is None else put_off, return_when="FIRST_COMPLETED"
            )
            for w in (edited_wait, usage_wait):
                if w is not None and not w.done():
                    w.cancel()
            usage_seen.clear()
            if ended_task in done:
                break
            edited = put_off is not None or (watch is not None and watch.edited.is_set())
            if watch is not None:
                watch.edited.clear()
            try:
                if leased and time.monotonic() - renewed >= renew_every * 0.9:  # a timer may fire a hair early
                    renewed = time.monotonic()
                    await bus.update_agent(agent_id, lease_expires_at=now() + AGENT_LEASE)
                if live:
                    put_off = await flights.tick(bus, agent, relay, seen, edited=edited)
            except Exception as e:  # keep supervising: the exit must still be recorded
                put_off = None
                log.write(f"\nwavewait supervise: could not update the record of {agent_id}: {e}\n".encode())
    finally:
        if watch is not None:
            watch.close()
    code = await ended_task
    ended = {"exit_code": code, "ended_at": now()}
    reader = relay.finish() if relay is not None else None
    why = None
    stopped_for = seen.get("budget")  # its own supervisor ended its run for a budget (flights.enforce_budget)
    stopped_at = seen.get("budget_usage")
    try:  # its usage, its leftovers committed, its changes, its report
        why = await flights.wrap_up(
            bus, agent_id, code, reader, stopped_at=stopped_at if isinstance(stopped_at, Usage) else None
        )
    except Exception as e:  # the end must still be recorded
        log.write(f"\nwavewait supervise: could not wrap up {agent_id}: {e}\n".encode())
    log.close()
    if isinstance(stopped_for, str):  # dead for the budget, its spend as its record now says
        reason = await flights.budget_stop(bus, agent_id, stopped_for)
        ended_now = await mark_dead(bus, agent_id, f"{reason}; {why}" if why else reason, exit_code=code)
    # a clean exit, or a run the agent itself finished, is closed; dead means it died
    elif code == 0 or (reader is not None and reader.ended):
        said = "exited with code 0" if code == 0 else f"finished: {reader.status if reader else '?'} (exit {code})"
        ended_now = await bus.transition(agent_id, "closed", ("running", "idle"), reason=said, **ended)
    else:
        reason = f"{_describe(code)}; {why}" if why else _describe(code, agent.log_path)
        ended_now = await mark_dead(bus, agent_id, reason, exit_code=code)
    if ended_now is None:  # already closed or killed: keep the code, and what its events said
        current = await bus.get_agent(agent_id)
        more = {"reason": f"{current.reason}; {why}"} if why and current and current.status == "dead" else {}
        await bus.update_agent(agent_id, exit_code=code, **more)
    if agent.wave is not None:  # its slot is free: the next queued flight of its wave may start
        try:
            await admission.step(bus, agent.wave)
        except Exception as e:  # its end is recorded; the next step (a sweep, a spawn) admits them
            with open(agent.log_path or os.devnull, "ab") as late:
                late.write(
                    f"\nwavewait supervise: could not start the next queued flight of {agent.wave}: {e}\n".encode()
                )
    return 0


def main() -> None:
    args = sys.argv[1:]
    if len(args) < 3 or args[1] != "--":
        print("error: usage: python -m wavewait.core.supervise AGENT_ID -- CMD ...", flush=True)
        sys.exit(2)
    sys.exit(asyncio.run(supervise(args[0], args[2:])))


if __name__ == "__main__":
    main()
