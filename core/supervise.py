"""The supervisor of one spawned agent: `python -m wavewait.core.supervise AGENT_ID -- CMD...`.

It leads the agent's process group, starts the command with its output in the agent's
log, reports the child's pid to the spawner on stdout, and records the exit the moment
it happens, so every wait on the agent learns of a death at once.

Its spawner (agents.launch) records it as the flight's supervisor, then gives it the go on
stdin: where the log is and whether the command's events are read. It starts the command
then, before importing anything beyond the standard library, so a spawn answers without
waiting for the imports (about 0.3 s of CPU); then it checks, by the flight's record, that it
holds the credential and is the recorded supervisor, and takes the command down if not (a
flight killed or closed since the go is ended, or left to finish, as any running one).
Without a go (not started by the spawner) the command never runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from typing import IO, TYPE_CHECKING, Any

from .exits import Exit  # the standard library only: this module starts the command before more imports

if TYPE_CHECKING:
    from .bus import Bus

TAIL_LINES = 5  # of the output log, in a death's reason: what the flight last said
TAIL_CHARS = 600


def _describe(code: int, log_path: str | None = None) -> str:
    """Why it died, for people: the exit code or signal, then the last lines it wrote."""
    from .agents import output_tail

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


def start(agent_id: str, command: list[str]) -> tuple[subprocess.Popen[bytes], IO[bytes]] | None:
    """Start the command once the spawner gave the go on stdin (standard library only): the
    child and its log; None (said on stdout) if not."""
    go = sys.stdin.readline()
    if not go:
        print(
            f"error: this process does not hold the credential of {agent_id}; only its spawner supervises it",
            flush=True,
        )
        return None
    plan = json.loads(go)
    # 0600 whatever the umask: an agent's output is as private as the bus it came from
    # (named by its path, so that a failure after it was closed can still be said there: main)
    log = open(  # noqa: SIM115 -- held while the child runs
        plan["log"] or os.devnull,
        "ab",
        buffering=0,
        opener=lambda path, flags: os.open(path, flags | os.O_CLOEXEC, 0o600),
    )
    relay = bool(plan["events"])  # its stdout is its events, read by the relay
    talk = bool(plan.get("conversation"))  # its stdin stays open: the conversation (core/turns.py)
    # a supervisor started by another one (an admission step at that flight's end) inherits
    # its ignored TERM and INT, and an ignored signal stays ignored across exec: the command
    # gets the defaults, so a kill's TERM ends it rather than waiting for the KILL
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        child = subprocess.Popen(
            command,
            stdin=subprocess.PIPE if talk else subprocess.DEVNULL,
            stdout=subprocess.PIPE if relay or talk else log,
            stderr=log if relay or talk else subprocess.STDOUT,
        )
    except OSError as e:
        log.close()
        print(f"error: {e.strerror or e}", flush=True)
        return None
    # a TERM to the group is for the agent; we stay to record how it ended
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    print(child.pid, flush=True)
    sys.stdout.close()
    return child, log


async def supervise(agent_id: str, child: subprocess.Popen[bytes], log: IO[bytes]) -> int:
    """Supervise the started command to its end (asyncio and the rest imported only now)."""
    from .bus import open_bus

    bus = await open_bus()
    try:
        return await _supervise(bus, agent_id, child, log)
    finally:
        await bus.close()


async def _refuse(child: subprocess.Popen[bytes], log: IO[bytes], why: str) -> int:
    """Not this flight's to run after all: take the command down, say why in its log."""
    import asyncio

    log.write(f"\nwavewait supervise: {why}; stopping the command\n".encode())
    with contextlib.suppress(ProcessLookupError):
        child.kill()
    await asyncio.to_thread(child.wait)
    log.close()
    return Exit.BAD_INPUT


async def _supervise(bus: Bus, agent_id: str, child: subprocess.Popen[bytes], log: IO[bytes]) -> int:
    import asyncio

    from . import admission, flights
    from .agents import AGENT_LEASE, mark_dead
    from .identity import SECRET_ENV, holds_secret
    from .model import Usage, now
    from .proc import pid_start
    from .turns import Talk

    agent = await bus.get_agent(agent_id)
    if agent is None:
        return await _refuse(child, log, f"no agent {agent_id} on the bus {bus.url}")
    # only the spawner's own supervisor runs the flight and is the ancestor its processes are
    # known by (identity.py): it holds the flight's credential, and its spawner recorded it
    if not holds_secret(agent, os.environ.get(SECRET_ENV)):
        return await _refuse(child, log, f"this process does not hold the credential of {agent_id}")
    if (agent.supervisor_pid, agent.supervisor_start) != (os.getpid(), pid_start(os.getpid())):
        return await _refuse(child, log, f"{agent_id} is supervised by another process (pid {agent.supervisor_pid})")
    loop = asyncio.get_running_loop()
    usage_seen = asyncio.Event()  # its events said it spent more: keep the record, check its budgets now

    def wake() -> None:  # in the reading thread
        # RuntimeError: the loop has closed, so the end was recorded already, with the final usage
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(usage_seen.set)

    relay: flights.Relay | Talk | None = None  # its events: read, then logged
    if agent.conversation is not None and child.stdin is not None:
        relay = Talk(bus, agent, child.stdin, log, on_usage=wake)
    elif agent.events:
        relay = flights.Relay(agent.events, log, on_usage=wake)
    watch = None
    if agent.worktree is not None:  # its every edit is counted within a second
        watch = flights.WorktreeWatch(
            agent.worktree.path, lambda said: log.write(f"\nwavewait supervise: {said}\n".encode())
        )
        watch.edited.set()  # counted once now: the command ran while this process was starting
    leased = bus.multi_host  # other hosts cannot see our pids: keep a lease
    await bus.update_agent(
        agent_id,
        pid=child.pid,
        pid_start=pid_start(child.pid, zombie_ok=True),
        **({"lease_expires_at": now() + AGENT_LEASE} if leased else {}),
    )
    if relay is not None:
        relay.start(child.stdout)
    talking = asyncio.ensure_future(relay.run()) if isinstance(relay, Talk) else None
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
    if talking is not None:  # its last lines read (a turn's report sent) before the end is recorded
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(talking), 10)
        talking.cancel()
        try:
            await talking
        except asyncio.CancelledError:
            pass  # ended by us, its last lines read
        except Exception as e:  # the end must still be recorded; what failed is said in the log
            log.write(f"\nwavewait supervise: the conversation of {agent_id} failed: {e!r}\n".encode())
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
    return Exit.OK


def main() -> None:
    args = sys.argv[1:]
    if len(args) < 3 or args[1] != "--":
        print("error: usage: python -m wavewait.core.supervise AGENT_ID -- CMD ...", flush=True)
        sys.exit(Exit.BAD_INPUT)
    started = start(args[0], args[2:])
    if started is None:
        sys.exit(Exit.BAD_INPUT)
    child, log = started
    import asyncio

    try:
        code = asyncio.run(supervise(args[0], child, log))
    except Exception as e:
        # said in the flight's log: this process's stderr goes nowhere, and the sweep can only
        # say that the flight's process vanished
        import traceback

        with open(log.name, "ab") as said:
            said.write(
                f"\nwavewait supervise: failed, its end is not recorded: {e!r}\n{traceback.format_exc()}".encode()
            )
        raise
    sys.exit(code)


if __name__ == "__main__":
    main()
