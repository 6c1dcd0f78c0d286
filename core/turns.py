"""A conversation's supervisor side: the agent's turns, the tells it is given, its transcript.

A flight whose preset has a conversation (core/talk/) runs with its stdin open. Its
supervisor (core/supervise.py) hands the agent's pipes to a `Talk`, which:
- reads every line the agent prints (into the output log, then to the host's driver), keeps
  the transcript on the bus (core/transcript.py) and the flight's record current: its session
  id, its turn's number, its usage added up across turns, `running` while a turn runs and
  `idle` between turns;
- makes each turn's final message a report (`worker_complete` with the turn's number), its
  leftovers committed and its changes counted first, as at a one-turn flight's end;
- takes the flight's tells in order (claim → write to the agent → say where it went →
  acknowledge), interrupting the running turn first for one given `now`;
- ends the conversation (closes the agent's stdin, so its process ends by itself) once it has
  been idle for the flight's `keep_open` seconds with no tell waiting, or once `close` closed
  it: a later tell resumes it from its session (core/conversation.py), unless it was `close`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import IO, Any

from . import flights, messages, transcript, worktrees
from .agent_events import LINE_LIMIT, EventReader
from .bus import Bus
from .model import Agent, Item, Usage
from .talk import Driver, Entry, Step, TurnEnd, driver_for

log = logging.getLogger("wavewait.turns")

INTERRUPT_GRACE = 30.0  # seconds a `now` tell waits for the interrupted turn to end
STEER_GRACE = 30.0  # seconds a tell waits for the host's answer to a steer
START_GRACE = 120.0  # seconds a tell to an idle agent waits for its turn to start (a resume loads the session)


def added(base: Usage, turns: Usage, session_cost: float | None) -> Usage:
    """The flight's usage: what it had spent before this process, plus this process's turns;
    money is the host's own running total of the session where it says one (it goes on across
    a resume), else what was kept."""
    costs = [c for c in (base.cost_usd, session_cost) if c is not None]
    return Usage(
        input_tokens=base.input_tokens + turns.input_tokens,
        output_tokens=base.output_tokens + turns.output_tokens,
        cache_read_tokens=base.cache_read_tokens + turns.cache_read_tokens,
        cache_creation_tokens=base.cache_creation_tokens + turns.cache_creation_tokens,
        cost_usd=max(costs) if costs else None,
        turns=(base.turns or 0) + (turns.turns or 0) or None,
    )


class Talk:
    """The agent's pipes and turns, for its supervisor. `reader` and `dirty` are what the
    supervisor's beat reads of a relay (flights.tick): the usage so far; a conversation's
    reader never says `ended` (each turn reports as it ends)."""

    def __init__(self, bus: Bus, agent: Agent, stdin: IO[bytes], log_file: Any, on_usage: Callable[[], object]) -> None:
        assert agent.conversation is not None
        self.bus, self.agent, self.stdin, self.log = bus, agent, stdin, log_file
        self.driver: Driver = driver_for(agent.conversation, agent.turn)
        self.reader = EventReader(agent.events or agent.conversation)  # type: ignore[arg-type]
        self.reader.session_id = agent.session_id
        self.reader.usage = agent.usage or Usage()
        self.dirty = False
        self.on_usage = on_usage
        self.base = agent.usage or Usage()
        self.spent = Usage()  # this process's turns
        self.live = EventReader(self.reader.format)  # the running turn's events: its usage per model message
        self.resumed = agent.turn > 0  # a session resumed: its first tell is told `resumed`
        self.turn_change = asyncio.Event()  # a turn started or ended, or the host refused something
        self.failed: str | None = None
        self.ended = False  # the agent's output ended: its process is ending
        self.closed_stdin = False
        self._lines: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._write_lock = asyncio.Lock()
        #: held while a line of the agent is read, and while a tell is written and kept: so
        #: the told message is in the transcript, with its turn, before what the agent answers
        self._order = asyncio.Lock()
        self._thread: threading.Thread | None = None
        self._idle_at: float | None = None
        self._kept = 0  # entries kept since the transcript was last trimmed
        self.fell_back = False  # the host moved the tell being given to the next turn
        self.fell_into = 0  # that turn's number
        self.telling = False  # a tell is being given: the conversation does not end under it
        self.owed = 0  # tells the host holds for its next turns: the flight is not idle between them

    # ------------------------------------------------------------------ the pipes
    def start(self, pipe: Any) -> None:
        loop = asyncio.get_running_loop()

        def pump() -> None:
            try:
                while line := pipe.readline(LINE_LIMIT + 1):
                    self.log.write(line)
                    self.reader.lines += 1
                    loop.call_soon_threadsafe(self._lines.put_nowait, line)
            except (OSError, ValueError) as e:
                self.log.write(f"\nwavewait supervise: stopped reading the agent's output: {e}\n".encode())
            finally:
                pipe.close()
                with contextlib.suppress(RuntimeError):  # the loop closed: the end is recorded already
                    loop.call_soon_threadsafe(self._lines.put_nowait, None)

        self._thread = threading.Thread(target=pump, name="wavewait-talk", daemon=True)
        self._thread.start()

    def finish(self, grace: float = 5.0) -> EventReader:
        if self._thread is not None:
            self._thread.join(grace)
        return self.reader

    async def _write(self, lines: list[bytes]) -> bool:
        """Write to the agent; False when its stdin is closed (its process is ending)."""
        if not lines:
            return True
        async with self._write_lock:
            if self.closed_stdin:
                return False
            try:
                await asyncio.to_thread(self._write_now, b"".join(lines))
            except (BrokenPipeError, ValueError, OSError):
                return False
        return True

    def _write_now(self, data: bytes) -> None:
        self.stdin.write(data)
        self.stdin.flush()

    async def close_stdin(self, why: str) -> None:
        """End the conversation: the agent finishes what it is doing and its process ends."""
        async with self._write_lock:
            if self.closed_stdin:
                return
            self.closed_stdin = True
            with contextlib.suppress(OSError, ValueError):  # its reader is gone already: nothing to end
                await asyncio.to_thread(self.stdin.close)
        self.log.write(f"\nwavewait supervise: conversation ended ({why})\n".encode())

    # ------------------------------------------------------------------ the whole of it
    async def run(self) -> None:
        """Until the agent's output ends: read its lines, take its tells, end it when due."""
        opening = self.driver.open(self.agent.session_id, self.agent.cwd or os.getcwd())
        await self._write(opening)
        tasks = [asyncio.ensure_future(c) for c in (self._read(), self._tells(), self._watch_record())]
        try:
            await tasks[0]
        finally:
            for t in tasks[1:]:
                t.cancel()
            await asyncio.gather(*tasks[1:], return_exceptions=True)

    async def _read(self) -> None:
        while (line := await self._lines.get()) is not None:
            try:
                async with self._order:
                    self._live(line)
                    await self._on(self.driver.feed(line))
            except Exception as e:  # keep reading: the end must still be recorded
                self.log.write(f"\nwavewait supervise: could not record a line of the conversation: {e!r}\n".encode())
        self.ended = True
        self.turn_change.set()

    def _live(self, line: bytes) -> None:
        """The running turn's spend as each model message says it, so a budget stops a flight
        mid-turn; and what it was last doing, for a death's reason."""
        if self.live.feed(line) and not self.live.ended:
            s, u = self.spent, self.live.usage
            turns = Usage(
                input_tokens=s.input_tokens + u.input_tokens,
                output_tokens=s.output_tokens + u.output_tokens,
                cache_read_tokens=s.cache_read_tokens + u.cache_read_tokens,
                cache_creation_tokens=s.cache_creation_tokens + u.cache_creation_tokens,
            )
            self.reader.usage = added(self.base, turns, self.reader.usage.cost_usd)
            self.dirty = True
            self.on_usage()
        self.reader.last_activity = self.live.last_activity or self.reader.last_activity
        self.reader.last_error = self.live.last_error or self.reader.last_error

    async def _on(self, step: Step) -> None:
        if any(e.data.get("told") == "next_turn" for e in step.entries):
            self.fell_back = True  # a tell came too late for its turn: it starts the next one
            self.fell_into = self.driver.turn + (0 if self.driver.running else 1)
            if not self.driver.running:
                self.owed = max(self.owed, 1)  # its end is not idle: the next turn (one, for all) is due
        if step.write:
            await self._write(step.write)
        if step.session_id and step.session_id != self.reader.session_id:
            self.reader.session_id = step.session_id
            await self.bus.update_agent(self.agent.id, session_id=step.session_id)
        if step.started is not None:
            self._idle_at = None
            self.owed = max(0, self.owed - 1)
            self.live = EventReader(self.reader.format)
            await self.bus.transition(self.agent.id, "running", ("idle",))
            await self.bus.update_agent(self.agent.id, turn=step.started)
            await self._keep([Entry("turn", f"turn {step.started} started", step.started)])
        if step.entries:
            self._last_activity(step.entries[-1])
            await self._keep(step.entries)
        if step.failed:
            self.failed = step.failed
            await self._keep([Entry("note", step.failed, self.driver.turn)])
        if step.ended is not None:
            await self._turn_ended(step.ended)
        self.turn_change.set()

    def _last_activity(self, e: Entry) -> None:
        """What it was last doing, for a death's reason, whatever the host's protocol."""
        if e.kind == "tool":
            self.reader.last_activity = f"tool {e.text}"
        elif e.kind == "agent":
            self.reader.last_activity = "said: " + e.text[:300]

    async def _turn_ended(self, end: TurnEnd) -> None:
        """A turn's end: its usage kept, its work committed and counted, its report sent; then,
        whatever failed of that, it is idle (and its conversation may end)."""
        try:
            await self._report(end)
        finally:
            if not self.owed:  # else the host starts its next turn at once
                self._idle_at = time.monotonic()
        self.dirty = True  # the beat checks the budgets with this usage
        self.on_usage()
        await self._maybe_end()

    async def _report(self, end: TurnEnd) -> None:
        s = self.spent
        u = end.usage
        self.spent = Usage(
            input_tokens=s.input_tokens + u.input_tokens,
            output_tokens=s.output_tokens + u.output_tokens,
            cache_read_tokens=s.cache_read_tokens + u.cache_read_tokens,
            cache_creation_tokens=s.cache_creation_tokens + u.cache_creation_tokens,
            turns=(s.turns or 0) + 1,
        )
        usage = added(self.base, self.spent, u.cost_usd)
        self.reader.usage = usage
        await self.bus.update_agent(self.agent.id, usage=usage)
        said = {"usage": usage.model_dump(exclude_none=True), "status": end.status}
        await self._keep([Entry("turn", f"turn {end.turn} {end.status}", end.turn, data=said)])
        summary = None
        if self.agent.worktree is not None:
            subject = worktrees.commit_subject(end.text, f"{self.agent.name}: turn {end.turn}")
            await asyncio.to_thread(worktrees.commit_leftovers, self.agent.worktree, subject)
            summary = await flights.count_changes(self.bus, self.agent)
        current = await self.bus.get_agent(self.agent.id)
        if end.status == "interrupted" or current is None or current.status != "running":
            if not self.owed:  # a `now` tell's turn: no report
                await self.bus.transition(self.agent.id, "idle", ("running",))
        else:
            await messages.notify_completion(
                self.bus,
                self.agent.id,
                status=end.status,
                message=flights.clip_report(end.text, end.status, end.error),
                changes=[c.path for c in summary.paths][: flights.CHANGES_REPORTED] if summary else [],
                turn=end.turn,
                idle=not self.owed,
            )

    async def _maybe_end(self) -> None:
        """Idle for `keep_open` seconds with no tell waiting: end the conversation."""
        if self._idle_at is None or self.driver.running or self.closed_stdin or self.telling:
            return
        if time.monotonic() - self._idle_at < self.agent.keep_open:
            return
        if await self.bus.pending(transcript.tells_inbox(self.agent.id)):
            return
        await self.close_stdin(f"idle for {self.agent.keep_open:g} s; a tell resumes it")

    async def _watch_record(self) -> None:
        """A `close` ends the conversation; an idle one ends when its time is up."""
        changes = await self.bus.subscribe(agents=[self.agent.id])
        try:
            while not self.closed_stdin:
                current = await self.bus.get_agent(self.agent.id)
                if current is None or current.status in ("closed", "dead"):
                    await self.close_stdin("closed" if current and current.status == "closed" else "ended")
                    return
                await self._maybe_end()
                wait = (
                    None
                    if self._idle_at is None
                    else max(0.05, self._idle_at + self.agent.keep_open - time.monotonic())
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changes.wait(), wait)
        finally:
            changes.close()

    async def _keep(self, entries: list[Entry]) -> None:
        """Keep entries of the conversation; the oldest go past transcript.KEPT (checked every
        TRIM_EVERY entries), so the transcript on the bus stays bounded however long it talks."""
        await transcript.append(self.bus, self.agent.id, entries)
        self._kept += len(entries)
        if self._kept >= transcript.TRIM_EVERY:
            self._kept = 0
            await transcript.trim(self.bus, self.agent.id)

    # ------------------------------------------------------------------ tells
    async def _tells(self) -> None:
        inbox = transcript.tells_inbox(self.agent.id)
        changes = await self.bus.subscribe(inboxes=[inbox])
        try:
            while not self.ended:
                claimed = await self._claim(inbox)
                if claimed is None:
                    await changes.wait()
                    continue
                item, wait_id = claimed
                self.telling = True
                try:
                    done = await self._tell(item)
                except BaseException:
                    await self._give_back(inbox, wait_id)
                    raise
                finally:
                    self.telling = False
                if done is None:  # the agent is ending: the tell stays for its resume
                    await self._give_back(inbox, wait_id)
                    return
                await self.bus.put_resolution(transcript.resolution_key(item.id), done)
                await self.bus.take(inbox, wait_id, self.agent.id, end=True)
        finally:
            changes.close()

    async def _claim(self, inbox: str) -> tuple[Item, str] | None:
        record = transcript.short_wait(self.agent.id, "tell")
        got = await self.bus.register_wait(record, claim_from=inbox, types=[transcript.TELL], limit=1)
        if not got:
            await self.bus.end_wait(record.id)
            return None
        return got[0], record.id

    async def _give_back(self, inbox: str, wait_id: str) -> None:
        """The tell back to the head of its inbox, for a resumed agent; if that fails, the
        wait's end leaves it to the bus's recovery sweep, which returns claims of ended waits."""
        try:
            await self.bus.release(inbox, wait_id)
        except Exception as e:
            self.log.write(f"\nwavewait supervise: could not give a tell back ({e!r}); recovery returns it\n".encode())
        try:
            await self.bus.end_wait(wait_id)
        except Exception as e:
            self.log.write(f"\nwavewait supervise: could not end the wait {wait_id}: {e!r}\n".encode())

    async def _tell(self, item: Item) -> dict[str, Any] | None:
        """Give one tell to the agent: where it went, or None when the agent is ending."""
        if self.closed_stdin or self.ended:
            return None
        cut = False
        if item.data.get("now") and self.driver.running:
            self.turn_change.clear()
            if not await self._write(self.driver.interrupt()):
                return None
            await self._until(lambda: not self.driver.running, INTERRUPT_GRACE)
            async with self._order:  # the end's line is read under it: its record (idle) is written once it is free
                cut = not self.driver.running
            await self._keep([Entry("note", f"interrupted by {item.sender}", self.driver.turn)])
        if item.data.get("only"):  # an interrupt alone: nothing to tell
            return {"interrupted": cut, "turn": self.driver.turn}
        async with self._order:
            was_running, before = self.driver.running, self.driver.turn
            self.failed = None
            self.turn_change.clear()
            lines, told = self.driver.tell(item.body)
            if not await self._write(lines):
                return None
            if was_running and told == "next_turn":
                self.owed += 1
            turn = before if told == "in_turn" else before + self.owed if was_running else before + 1
            by = "prompt" if item.data.get("prompt") else item.sender
            if told != "in_turn":
                await self._keep([Entry("user", item.body, turn, by=by)])
        if told == "in_turn":  # where the host answers a steer, the answer says where it went
            self.fell_back = False
            await self._until(lambda: self.driver.unanswered == 0, STEER_GRACE)  # its lines read meanwhile
            if self.fell_back:
                told, turn = "next_turn", self.fell_into
            await self._keep([Entry("user", item.body, turn, by=by)])
        if not was_running:  # it starts a turn: said once the host started it, or refused it

            def started() -> bool:  # since the write (a quick agent may have ended that turn already)
                return self.driver.turn > before

            await self._until(lambda: started() or self.failed is not None, START_GRACE)
            if self.failed is not None:
                return {"error": self.failed, "turn": turn}
            if not started():  # its agent ended first: the tell stays on the bus for its resume
                return None
            turn = before + 1
        if self.resumed and not item.data.get("prompt"):
            self.resumed = False
            told = "resumed"
        return {"told": told, "turn": turn}

    async def _until(self, done: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not done() and not self.ended:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.turn_change.wait(), left)
            self.turn_change.clear()
