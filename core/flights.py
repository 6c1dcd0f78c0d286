"""Coding flights: an agent from a preset, in a worktree of its own, that reports by itself.

`start` prepares a flight before its process runs (its preset's argv, its worktree), then
spawns it under a supervisor. When the agent's run ends, the supervisor calls `wrap_up`:
the tokens it spent, what it left uncommitted committed on its branch, what it changed
counted, and (if the flight did not report itself) its `worker_complete` sent from the
agent's own final event. `prune` removes the worktrees of ended flights.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from . import admission, agent_sessions, agents, budgets, changes, messages, presets, transcript, watch, worktrees
from .agent_events import LINE_LIMIT, EventReader
from .bus import Bus
from .errors import BadInput, WavewaitError
from .ids import check_name, check_wave, check_word, new_id
from .launch_plan import LaunchPlan, SpawnRequest
from .limits import check_argv
from .model import Agent, ChangeSummary, Usage
from .proc import alive, hostname

log = logging.getLogger("wavewait.flights")

#: characters of the agent's final answer a report carries (what both hosts show whole)
REPORT_CHARS = 30_000
CHANGES_REPORTED = 1000  # paths in a report's `changes` (limits.MAX_LIST_LEN)
LIVE_CHANGES_EVERY = 5.0  # seconds between two counts of a running flight's changes, unwatched
RECOUNT_GAP = 0.5  # seconds at least between two counts after edits seen in its worktree
SESSION_EVERY = 1.0  # seconds between two looks at a running Codex flight's rollout file (a stat)
WATCH_DEBOUNCE_MS = 200  # edits this close together are one batch (watchfiles' debounce)
WATCH_STEP_MS = 100  # how often the watcher's thread looks for a batch to hand over


async def plan(bus: Bus, request: SpawnRequest) -> LaunchPlan:
    """Resolve `request` once into the plan the layers below take whole: every value checked,
    the preset's argv built, whether it gets a worktree decided, the wave's settings it was
    given kept and the wave's settings read, and a wave that spent its budget refused, all
    before anything is made (no record, no worktree; nothing kept for a refused spawn).

    A preset's agent runs on the request's prompt, a plain command as given; in its own
    worktree when asked (`worktree=True`) or by default for a preset in a git repository."""
    r = request
    wave = None if r.wave is None else check_wave(r.wave)  # one rule for a wave's name, limit or none
    given = budgets.check(
        r.wave,
        budget_tokens=r.budget_tokens,
        budget_usd=r.budget_usd,
        flight_budget_tokens=r.flight_budget_tokens,
        flight_budget_usd=r.flight_budget_usd,
    )
    keep = dict(given.wave)
    if r.max_parallel is not None:
        if r.wave is None:
            raise BadInput("{max_parallel}: caps a wave; give {wave} too", fields=("max_parallel", "wave"))
        keep["max_parallel"] = r.max_parallel
    name = check_name(r.name)
    model = None if r.model is None else check_word(r.model, "model")
    base = None if r.base is None else check_word(r.base, "base")
    command = None if r.command is None else check_argv(r.command)
    folder = os.path.realpath(r.cwd or os.getcwd())
    chosen, prompt = None, r.prompt
    if r.preset is not None:
        chosen = presets.get(r.preset, r.presets_file)
        if command is not None:
            raise BadInput("command: a preset runs its own agent; give prompt, not command")
        prompt = presets.check_prompt(prompt)
    else:
        if model is not None:
            raise BadInput("model: applies to a preset's agent; give --preset too")
        if not command:
            raise BadInput("command: give the program and its arguments (or a preset and a prompt)")
    keep_open = check_keep_open(r.keep_open)
    if r.keep_open is not None and (chosen is None or chosen.conversation is None):
        raise BadInput("keep_open: applies to a preset's agent that holds a conversation (claude, codex); drop it")
    use_worktree = r.worktree if r.worktree is not None else bool(chosen and chosen.worktree)
    if base is not None and not use_worktree:
        raise BadInput("base: applies to a flight in its own worktree; drop --no-worktree, or drop --base")
    if use_worktree and worktrees.find_repo(folder) is None:
        if r.worktree:
            raise BadInput(f"worktree: {folder} is not in a git repository; run without --worktree, or in a repository")
        use_worktree = False
    parent = agents.caller_id(r.parent)
    settings = await budgets.admit(bus, wave, keep)  # all else checked; nothing made yet
    flight_id = new_id()
    env = dict(os.environ if r.base_env is None else r.base_env) | (r.env or {})
    fields: dict[str, Any] = {"budget": given.flight}
    if chosen is not None:
        assert prompt is not None
        server = presets.server_for(bus.url, flight_id, parent, extra_env=r.server_env)
        talk = chosen.conversation
        command = check_argv(
            chosen.argv(None if talk else prompt, server=server, model=model, agent_id=flight_id, bus=bus.url)
        )
        env.update(chosen.env)
        fields |= {"preset": chosen.name, "events": chosen.events}
        if talk is not None:  # its prompt is its first user message (core/turns.py), told by its spawner
            fields |= {"conversation": talk, "resume_args": list(chosen.resume_args), "keep_open": keep_open}
    assert command is not None
    first = prompt if fields.get("conversation") else None
    record, child_env = agents.record_of(
        bus, name, command, wave=wave, parent_id=parent, env=env, cwd=folder, agent_id=flight_id
    )
    if first is not None:
        fields["resume_env"] = child_env
    return LaunchPlan(
        record.model_copy(update=fields), child_env, settings, worktree=use_worktree, base=base, prompt=first
    )


#: how long a conversation stays open between turns at most (docs/conversations.md)
MAX_KEEP_OPEN = 24 * 3600.0


def check_keep_open(value: object) -> float:
    """Seconds an idle conversation stays open (0: it ends after each turn; a tell resumes it)."""
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_KEEP_OPEN:
        raise BadInput(f"keep_open: give seconds from 0 to {MAX_KEEP_OPEN:g}, got {value!r}")
    return float(value)


async def launch(bus: Bus, plan: LaunchPlan, *, on_record: agents.OnRecord | None = None) -> Agent:
    """Start the flight `plan` resolved: its worktree made first when it gets one, then let in
    by its wave's limit (core/admission.py). `on_record`, called once its record is kept,
    before it starts (`agents.recorded`)."""
    info = None
    if plan.worktree:
        r = plan.record
        folder = r.cwd or os.getcwd()
        info = await asyncio.to_thread(
            worktrees.create, folder, name=r.name, flight_id=r.id, wave=r.wave, base=plan.base
        )
        plan = plan.in_worktree(info, worktrees.start_dir(info, folder))
    try:
        if plan.prompt is not None:  # waiting for its supervisor, which takes its tells in order
            r = plan.record
            await bus.deliver(transcript.tell_item(r.id, plan.prompt, r.parent_id or "spawner", prompt=True))
        return await admission.launch(bus, plan, on_record=on_record)
    except BaseException:
        if info is not None:  # nothing ran in it: leave no worktree or branch behind
            await asyncio.to_thread(_discard, info)
        raise


async def start(
    bus: Bus,
    name: str,
    *,
    parent_id: str,
    env: dict[str, str] | None = None,
    budget: budgets.BudgetArgs | None = None,
    on_record: agents.OnRecord | None = None,
    **options: Any,
) -> Agent:
    """`plan` and `launch` for a caller without a face's request (a test, a bench): the
    options are a `SpawnRequest`'s, `env` the whole environment it starts from, `budget`
    what `budgets.check` made of the budgets given."""
    if budget is not None:
        cap = budget.flight
        options |= {
            "budget_tokens": budget.wave.get("budget_tokens"),
            "budget_usd": budget.wave.get("budget_usd"),
            "flight_budget_tokens": cap.tokens if cap else None,
            "flight_budget_usd": cap.usd if cap else None,
        }
    request = SpawnRequest(name=name, parent=parent_id, base_env=env, **options)
    return await launch(bus, await plan(bus, request), on_record=on_record)


def _discard(info: Any) -> None:
    try:
        worktrees.remove(info, force=True)
        worktrees.delete_branch(info, force=True)
    except WavewaitError as e:
        log.warning("could not remove the unused worktree %s: %s", info.path, e)


# --------------------------------------------------------------------------- while it runs, and at its end
async def count_changes(bus: Bus, agent: Agent, *, final: bool = False) -> ChangeSummary | None:
    """Count what the flight changed and keep it on its record (None without a worktree)."""
    if agent.worktree is None:
        return None
    summary = await asyncio.to_thread(changes.count, agent.worktree, final=final)
    await bus.update_agent(agent.id, changes=summary)
    return summary


def report_text(reader: EventReader) -> str:
    """The report's message: the agent's final answer (bounded), else what ended its run."""
    return clip_report(reader.final_text or "", reader.status or "ended", reader.last_error)


def clip_report(final: str, status: str, error: str | None = None) -> str:
    """A run's or a turn's report: its final answer (bounded), else how it ended and why."""
    text = final.strip()
    if not text:
        why = error or status
        text = f"finished: {status}" + (f" ({why})" if why != status else "")
    if len(text) > REPORT_CHARS:
        text = (
            text[: REPORT_CHARS - 80] + f"\n… [cut at {REPORT_CHARS:,} characters; the whole run is in its output log]"
        )
    return text


async def final_usage(reader: EventReader) -> Usage | None:
    """What the run spent: its events' count when it finished; for a run cut short (killed,
    crashed) what its CLI's session file says, which knows each model response, else the
    events' count when they had one, else None: unknown, never a 0 it did not report."""
    if reader.ended:
        return reader.usage
    found = await asyncio.to_thread(agent_sessions.usage_of, reader.format, reader.session_id)
    if found is not None:
        # the file may lag the events (a CLI killed before it wrote its last entry): a spend
        # the events showed, and a budget stopped the flight on, is never taken back
        return at_least(found, reader.usage)
    if reader.format == "codex" and not reader.usage.turns:  # Codex counts only completed turns
        return None
    return reader.usage


def at_least(usage: Usage, seen: Usage) -> Usage:
    """`usage` with each count raised to what `seen` already counted."""
    costs = [c for c in (usage.cost_usd, seen.cost_usd) if c is not None]
    return Usage(
        input_tokens=max(usage.input_tokens, seen.input_tokens),
        output_tokens=max(usage.output_tokens, seen.output_tokens),
        cache_read_tokens=max(usage.cache_read_tokens, seen.cache_read_tokens),
        cache_creation_tokens=max(usage.cache_creation_tokens, seen.cache_creation_tokens),
        cost_usd=max(costs) if costs else None,
        turns=max(usage.turns or 0, seen.turns or 0) or None,
    )


async def wrap_up(
    bus: Bus, agent_id: str, code: int, reader: EventReader | None, *, stopped_at: Usage | None = None
) -> str | None:
    """What a supervisor does when its agent's process ended, before it records the end.

    Keeps the final usage, commits the worktree's leftovers on the branch (the report's first
    line as the message), keeps the final changes, and sends the flight's `worker_complete`
    from the agent's final event unless the flight reported by itself (it is idle then) or
    a budget stopped it (`stopped_at`: the usage it was stopped on, never taken back). A
    final event that is not sent as a report is still the flight's `last_message`.
    Returns what the events say about a run that did not finish (for a death's reason).
    """
    agent = await bus.get_agent(agent_id)
    if agent is None:
        return None
    if reader is not None and reader.lines:
        usage = await final_usage(reader)
        if stopped_at is not None:
            usage = at_least(usage, stopped_at) if usage is not None else stopped_at
        if usage is not None:
            await bus.update_agent(agent_id, usage=usage)
    message = report_text(reader) if reader is not None and reader.ended else ""
    summary = None
    if agent.worktree is not None:
        subject = worktrees.commit_subject(message, f"{agent.name}: what it left (exit {code})")
        await asyncio.to_thread(worktrees.commit_leftovers, agent.worktree, subject)
        summary = await count_changes(bus, agent, final=True)
    current = await bus.get_agent(agent_id) or agent
    if reader is not None and reader.ended and current.status == "running" and stopped_at is None:
        await messages.notify_completion(
            bus,
            agent_id,
            status=reader.status or "error",
            message=message,
            changes=[c.path for c in summary.paths][:CHANGES_REPORTED] if summary else [],
        )
    elif reader is not None and reader.ended and current.status != "idle":  # stopped, killed or closed
        await bus.update_agent(agent_id, last_message=messages.preview(message), last_message_at=time.time())
    if current.status == "closed" and current.worktree is not None:
        await asyncio.to_thread(worktrees.remove, current.worktree)  # closed while it ran: tidy now
    return reader.reason() if reader is not None and not reader.ended else None


async def close_worktree(agent: Agent) -> bool:
    """`close` on a flight whose process has ended: remove its worktree if clean (its branch stays)."""
    if agent.worktree is None or alive(agent.pid, agent.pid_start):
        return False
    return await asyncio.to_thread(worktrees.remove, agent.worktree)


# --------------------------------------------------------------------------- after it ended
async def diff(agent: Agent) -> str:
    """The flight's patch against its base, what it has not committed included."""
    if agent.worktree is None:
        raise BadInput(f"agent: {agent.name} ({agent.id[:8]}) has no worktree, so no diff; spawn it with --worktree")
    if agent.host not in (None, hostname()) and not os.path.isdir(agent.worktree.repo):
        raise BadInput(f"agent: {agent.name} ran on host {agent.host}; its worktree is there")
    if not os.path.isdir(agent.worktree.path) and os.path.isdir(agent.worktree.repo):
        owner = (await asyncio.to_thread(worktrees.owners, agent.worktree.repo)).get(agent.worktree.branch)
        if owner not in (None, agent.id):  # the name was reused: that branch is another flight's work
            raise BadInput(
                f"agent: the worktree and branch of {agent.name} ({agent.id[:8]}) are gone; "
                f"{agent.worktree.branch} is now the branch of flight {owner[:8]}"
            )
    return await asyncio.to_thread(changes.diff, agent.worktree)


async def prune(bus: Bus, *, force: bool = False, wave: str | None = None) -> dict[str, list[dict[str, str]]]:
    """Remove the worktrees of ended flights (of `wave`) and the branches that are merged.

    A worktree with uncommitted work, or a branch with commits not in HEAD, is kept (and
    said why) unless `force`. Running flights are never touched, nor a branch that is now a
    later flight's (a reused name, core/worktrees.py). A repository's folder of worktrees
    goes too once nothing of it is left (`worktrees.tidy_repo_folder`).
    """
    done: dict[str, list[dict[str, str]]] = {"removed": [], "kept": [], "branches_deleted": [], "branches_kept": []}
    listed = await admission.list_wave(bus, wave)
    taken = await asyncio.to_thread(worktrees.taken_branches, listed)
    repos: set[str] = set()
    for a in listed:
        if a.worktree is None or not a.finished or a.host not in (None, hostname()):
            continue
        wt = a.worktree
        repos.add(wt.repo)
        who = {"agent_id": a.id, "name": a.name, "path": wt.path, "branch": wt.branch}
        if os.path.isdir(wt.path):
            if await asyncio.to_thread(worktrees.remove, wt, force=force):
                done["removed"].append(who)
            else:
                done["kept"].append(who | {"why": "uncommitted work in it; --force removes it anyway"})
                continue
        if a.id not in taken and await asyncio.to_thread(worktrees.branch_exists, wt):
            if await asyncio.to_thread(worktrees.delete_branch, wt, force=force):
                done["branches_deleted"].append(who)
            else:
                done["branches_kept"].append(who | {"why": "commits not merged into HEAD; --force deletes it"})
    for repo in sorted(repos):  # its locks and scratch folder, once no worktree of it is left
        if os.path.isdir(repo):
            await asyncio.to_thread(worktrees.tidy_repo_folder, repo)
    return done


# --------------------------------------------------------------------------- the supervisor's side
class Relay:
    """The agent's stdout, read by its supervisor: every byte to the output log, every line to
    an EventReader. A thread reads the pipe, so the supervisor's loop stays free."""

    def __init__(self, fmt: str, log_file: Any, on_usage: Callable[[], object] | None = None) -> None:
        self.reader = EventReader(fmt)  # type: ignore[arg-type]
        self.log = log_file
        self.dirty = False  # usage changed since the record was last updated
        self.on_usage = on_usage  # called (in the reading thread) when it changed: the supervisor wakes
        self._thread: threading.Thread | None = None

    def start(self, pipe: Any) -> None:
        self._thread = threading.Thread(target=self._pump, args=(pipe,), name="wavewait-events", daemon=True)
        self._thread.start()

    def _pump(self, pipe: Any) -> None:
        partial = False  # in the middle of a line longer than the reader takes
        try:
            while line := pipe.readline(LINE_LIMIT + 1):
                self.log.write(line)
                whole = line.endswith(b"\n")
                if not partial and whole:
                    if self.reader.feed(line):
                        self.dirty = True
                        if self.on_usage is not None:
                            self.on_usage()
                elif not partial:
                    self.reader.skipped += 1
                partial = not whole
        except (OSError, ValueError) as e:
            self.log.write(f"\nwavewait supervise: stopped reading the agent's events: {e}\n".encode())
        finally:
            pipe.close()

    def finish(self, grace: float = 5.0) -> EventReader:
        """The reader once the pipe is drained (a grandchild holding it open gets `grace` seconds)."""
        if self._thread is not None:
            self._thread.join(grace)
        return self.reader


class Reads(Protocol):
    """What the supervisor's beat reads of whatever reads the agent's output: a `Relay`, or a
    conversation's `turns.Talk`."""

    dirty: bool
    reader: EventReader


async def tick(
    bus: Bus, agent: Agent, relay: Reads | None, last: dict[str, Any], *, edited: bool = False
) -> float | None:
    """While the flight runs: its usage when it changed, its changes when its worktree was
    `edited` (at most every RECOUNT_GAP seconds) or else every LIVE_CHANGES_EVERY seconds
    (only written when they differ). A flight whose usage took it past a budget is stopped
    at once (core/budgets.py; `last["budget"]` then says why). Returns the seconds until a
    count it had to put off may run (edits came too soon after the last count), else None."""
    if relay is not None and relay.dirty:
        relay.dirty = False
        usage = relay.reader.usage
        await bus.update_agent(agent.id, usage=usage)
        if not relay.reader.ended:  # a run that reached its end is not stopped: it is ending
            await enforce_budget(bus, agent.id, usage, last)
    elif relay is not None:
        await live_codex_usage(bus, agent, relay.reader, last)
    if agent.worktree is None:
        return None
    t = time.monotonic()
    since: float = t - last.get("changes_at", -LIVE_CHANGES_EVERY)
    if edited and since < RECOUNT_GAP:
        return RECOUNT_GAP - since
    if not edited and since < LIVE_CHANGES_EVERY:
        return None
    last["changes_at"] = t
    summary = await asyncio.to_thread(changes.count, agent.worktree)
    key = (summary.files, summary.added, summary.deleted, [p.path for p in summary.paths])
    if key != last.get("changes"):
        last["changes"] = key
        await bus.update_agent(agent.id, changes=summary)
    return None


async def live_codex_usage(bus: Bus, agent: Agent, reader: EventReader, last: dict[str, Any]) -> None:
    """A running Codex flight's tokens before its turn completes (its events give them only
    then): the total its rollout file has after each model response, read from its end when
    the file grew (the supervisor looks every SESSION_EVERY seconds), written when it changed."""
    if reader.format != "codex" or reader.ended or not reader.session_id:
        return
    path = last.get("session_file")
    if path is None:
        t = time.monotonic()  # looked for (a glob) at most every SESSION_EVERY seconds until found
        if t - last.get("session_sought", -SESSION_EVERY) < SESSION_EVERY:
            return
        last["session_sought"] = t
        path = last["session_file"] = await asyncio.to_thread(agent_sessions.find, "codex", reader.session_id)
        if path is None:
            return
    try:
        size = os.stat(path).st_size
    except OSError:
        return
    if size == last.get("session_size"):
        return
    last["session_size"] = size
    found = await asyncio.to_thread(agent_sessions.read, "codex", path)
    if found is not None and found != last.get("session_usage") and not reader.ended:
        last["session_usage"] = found
        await bus.update_agent(agent.id, usage=found)
        await enforce_budget(bus, agent.id, found, last)


async def enforce_budget(bus: Bus, agent_id: str, usage: Usage, last: dict[str, Any]) -> str | None:
    """End the flight's run if `usage` took it past its own cap or its wave's budget; the
    reason, if so (kept in `last` as `budget`, with the usage as `budget_usage`).

    Its death is recorded by its supervisor once the run has ended (`budget_stop`), from
    the final usage then kept: the reason it states and every later count (a refused spawn,
    the TUI's header) are the same record's."""
    if "budget" in last:  # stopped already: its last events are still being read
        return None
    current = await bus.get_agent(agent_id)
    if current is None or current.finished:
        return None
    why = await budgets.crossed(bus, current, usage)
    if why is not None:
        last["budget"], last["budget_usage"] = why, usage
        await agents.end_run(current)
    return why


async def budget_stop(bus: Bus, agent_id: str, stopped_for: str) -> str:
    """The reason of a flight its supervisor stopped for a budget, stated from the usage on
    its record once its run ended (`wrap_up` kept it): the count a spawn refused for the
    same budget states. `stopped_for` stands when it no longer holds (the budget was raised
    meanwhile) or the record is gone."""
    current = await bus.get_agent(agent_id)
    if current is None or current.usage is None:
        return stopped_for
    return await budgets.crossed(bus, current, current.usage) or stopped_for


class WorktreeWatch:
    """Edits in a flight's worktree, as they happen: `edited` is set after each batch.

    The project's recursive watcher (core/watch.py: inotify through watchfiles), set up
    before this returns, so no edit made after it is missed; a worktree that cannot be
    watched (the kernel's watch limit, say) falls back to the supervisor's periodic count,
    with a note in the flight's log."""

    def __init__(self, path: str, note: Callable[[str], object]) -> None:
        self.edited = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._sub: watch.Subscription | None = None
        try:
            self._sub = watch.subscribe([path], on_paths=self._seen)
        except Exception as e:  # counted every LIVE_CHANGES_EVERY seconds instead
            note(f"not watching the worktree ({e}); counting its changes every {LIVE_CHANGES_EVERY:g} s")

    def _seen(self, _paths: set[str]) -> None:  # in the watcher's thread
        self._loop.call_soon_threadsafe(self.edited.set)

    def close(self) -> None:
        if self._sub is not None:
            self._sub.close()
