"""What each slash command does, and the shapes the command table (`commands.py`) is made of.

A handler takes the `Console` it runs in (the main screen, as far as commands use it) and
the parsed line; `commands.py` names each command's handler, and the screen runs it in a
worker, so a slow bus never blocks the view. Bad values are the core's errors (WavewaitError).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from rich.text import Text

from ..core import admission, conversation, merge, messages, spawning
from ..core import agents as agents_mod
from ..core.bus import Bus
from ..core.errors import WavewaitError
from ..core.ids import resolve, short
from ..core.merge import MergeResult
from ..core.model import WaitRecord
from ..core.results import TellResult
from ..core.wait import CHECK_TIMEOUT, FilesTarget, Plan, WaitRequest, check_timeout, parse_need, plan
from ..spawn_flags import spawn_request
from .host import Host
from .state import one_line, word


class Usage(ValueError):
    """Bad input for a slash command; the message is the usage line plus what was wrong."""


@dataclass(frozen=True)
class SlashCommand:
    name: str
    usage: str
    help: str
    run: Handler  # what it does, given the console and the parsed line
    takes_ids: bool = False  # completion offers flight ids after the command
    runs_bare: bool = False  # the palette can run it without arguments


@dataclass
class Parsed:
    command: SlashCommand
    args: list[str] = field(default_factory=list)
    rest: list[str] = field(default_factory=list)  # after `--` (spawn's command), or a preset's prompt
    wave: str | None = None
    preset: str | None = None  # /spawn --preset: `rest` is the prompt
    options: dict[str, object] = field(default_factory=dict)  # /merge's flags, /spawn's flags given
    spawn: argparse.Namespace | None = None  # /spawn: its flags, as `wavewait spawn` parses them
    repeated: dict[str, list[str]] = field(default_factory=dict)  # /wait's --files and --event


class MergeView(Protocol):
    """The merge view a /merge shows its progress in (`screens/merge.py`)."""

    def show(self, result: MergeResult, *, done: bool = False) -> None: ...

    def show_error(self, message: str) -> None: ...


class Console(Protocol):
    """What the commands need from the screen that runs them (`screens/main.py`)."""

    merging: bool  # a /merge runs (one at a time)

    @property
    def bus(self) -> Bus: ...

    @property
    def me(self) -> str: ...

    @property
    def host(self) -> Host: ...

    @property
    def waiting(self) -> bool:
        """The person's own wait runs."""
        ...

    @property
    def own_waits(self) -> set[str]:
        """The ids of the person's own waits (not another process's to interrupt)."""
        ...

    def say(self, line: Text | str) -> None: ...

    def say_bad(self, message: str) -> None: ...

    def start_wait(self, planned: Plan) -> object: ...

    def sent_work(self, agent_id: str, at: float) -> None:
        """The person sent `agent_id` work at `at` (the message's time): its reports after
        that count as a new round's."""

    async def interrupt_other(self, rec: WaitRecord) -> None: ...

    def open_merge(self, what: str, watch: Bus | None = None) -> MergeView: ...

    def show_log(self, agent_id: str | None) -> None: ...


Handler = Callable[[Console, Parsed], Awaitable[None] | None]


async def wait(c: Console, p: Parsed) -> None:
    """The one wait entry of the faces (core/wait/entry.py), planned here so that the panel
    shows the targets it read; the own-wait widget runs the plan."""
    if _refuse_second_wait(c):
        return
    o = p.options
    request = WaitRequest(
        timeout=check_timeout(p.args[0], "TIMEOUT"),
        ids=p.args[1:] or None,
        wave=str(o["wave"]) if "wave" in o else None,
        files=[FilesTarget.parse(f, os.getcwd()) for f in p.repeated.get("files", [])],
        events=p.repeated.get("event", []),
        need=parse_need(str(o.get("need", "all"))),
        check=str(o["check"]) if "check" in o else None,
        check_timeout=check_timeout(str(o.get("check_timeout", CHECK_TIMEOUT)), "--check-timeout"),
        stop_rest=bool(o.get("stop_rest")),
    )
    planned = await plan(c.bus, request)
    if _refuse_second_wait(c):  # one may have started while the targets were read
        return
    c.start_wait(planned)


def _refuse_second_wait(c: Console) -> bool:
    if c.waiting:
        c.say_bad("a wait is already running; Escape interrupts it")
    return c.waiting


async def send(c: Console, p: Parsed) -> None:
    to, body = p.args
    recipient = await agents_mod.resolve_agent(c.bus, to, "ID")
    item = await messages.send(c.bus, c.me, recipient.id, body)
    c.sent_work(recipient.id, item.sent_at)  # not now: its answer may be in already
    c.say(f"sent to {recipient.name} ({short(recipient.id)}): message {short(item.id)}")


async def spawn(c: Console, p: Parsed) -> None:
    assert p.spawn is not None
    agent = await spawning.spawn(c.bus, spawn_request(p.spawn, c.me))
    where = f", branch {agent.worktree.branch}" if agent.worktree else ""
    started = f"queued ({agent.reason})" if agent.status == "queued" else f"pid {agent.pid}"
    c.say(f"spawned {agent.name} ({short(agent.id)}), {started}{', wave ' + agent.wave if agent.wave else ''}{where}")


async def reply(c: Console, p: Parsed) -> None:
    to, answer = p.args
    agent = await agents_mod.resolve_agent(c.bus, to, "ID")
    item = await messages.answer(c.bus, c.me, agent.id, answer)
    c.say(f"answered {agent.name} ({short(agent.id)}): message {short(item.id)}")


async def tell(c: Console, p: Parsed) -> None:
    """`/tell ID MESSAGE`; a message that starts with `--now ` interrupts the running turn first."""
    to, text = p.args
    now = text.startswith("--now ")
    said = await conversation.tell(c.bus, to, text.removeprefix("--now ").strip(), by=c.me, interrupt=now)
    c.say(TellResult(**said).summary())


async def kill(c: Console, p: Parsed) -> None:
    before = await agents_mod.resolve_agent(c.bus, p.args[0], "ID")
    agent = await admission.kill(c.bus, before, by=c.me)
    if (said := agents_mod.kill_said(before, agent)) is not None:
        c.say(said)
        return
    c.say(f"{agent.name} ({short(agent.id)}) is {agent.status}{' (' + agent.reason + ')' if agent.reason else ''}")


async def close(c: Console, p: Parsed) -> None:
    agent = await agents_mod.resolve_agent(c.bus, p.args[0], "ID")
    agent = await admission.close(c.bus, agent)
    c.say(f"{agent.name} ({short(agent.id)}) is {agent.status}")


async def interrupt(c: Console, p: Parsed) -> None:
    waits = {w.id: w for w in await c.bus.list_waits() if w.id not in c.own_waits}
    wait_id = resolve(p.args[0], waits, "WAIT")
    await c.interrupt_other(waits[wait_id])


async def agents(c: Console, p: Parsed) -> None:
    found = await c.bus.list_agents()
    if not found:
        c.say("no agents on the bus")
    roles = c.host.roles
    for a in found:
        line = Text(f"  {a.name:<16} {short(a.id)}  ")
        line.append(f"{word(a.state):<11}", style=roles.get(a.state, ""))
        line.append(f" {a.wave or '—':<8} ")
        line.append(one_line(a.reason) if a.status == "dead" and a.reason else (a.last_message or ""), style="dim")
        c.say(line)


async def merge_wave(c: Console, p: Parsed) -> None:
    """Merge a wave (the core's merge queue) and show it live in the merge view; with
    --watch, only follow the wave's merge as the bus keeps it (run anywhere)."""
    if p.options.get("watch"):
        if not p.args:
            c.say_bad("/merge --watch: name the wave to follow")
            return
        c.open_merge(p.args[0], watch=c.bus)
        return
    if c.merging:
        c.say_bad("a merge is already running; wait for it (its view: /merge shows it again when done)")
        return
    c.merging = True
    view = c.open_merge(p.args[0] if p.args else "the wave")
    try:
        result = await merge.merge_wave(
            c.bus,
            p.args[0] if p.args else None,
            caller=c.me,
            into=_text(p.options.get("into")),
            check=_text(p.options.get("check")),
            dry_run=bool(p.options.get("dry_run")),
            resolve_with=_text(p.options.get("resolve_with")),
            presets_file=os.environ.get("WAVEWAIT_PRESETS") or None,
            on_change=view.show,
        )
    except WavewaitError as e:
        view.show_error(str(e))
        raise
    finally:
        c.merging = False
    view.show(result, done=True)
    c.say(result.summary())


def show_help(c: Console, p: Parsed) -> None:
    c.host.action_help()


def tasks(c: Console, p: Parsed) -> None:
    if not c.host.settings.queue:
        c.say_bad("no task queue here: start wavewait with --queue NAME (or set WAVEWAIT_QUEUE) to see one")
        return
    c.host.action_tasks()


async def show_log(c: Console, p: Parsed) -> None:
    agent_id = None
    if p.args:
        agent_id = (await agents_mod.resolve_agent(c.bus, p.args[0], "ID")).id
    c.show_log(agent_id)
    c.say("event log: " + (f"only {short(agent_id)}" if agent_id else "all flights"))


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
