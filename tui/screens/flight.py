"""One flight up close: its record, its messages and events, and its output log (live).

A flight that holds a conversation (docs/conversations.md) opens on its conversation instead,
followed live on the bus (core/transcript.py), with a line at the foot that tells it and a key
that interrupts its turn; its messages, changes and raw output log are the other tabs.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import time
from collections.abc import Callable

from rich.syntax import Syntax
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, RichLog, Static, TabbedContent, TabPane

from ...core import changes, conversation, transcript
from ...core.bus import Bus
from ...core.errors import WavewaitError
from ...core.model import Agent, Item, is_report
from ...core.results import TellResult
from ...words import said
from ..host import host_of
from ..state import ago, flight_state, one_line, word
from ..widgets.talklog import TalkLog

LOG_TAIL = 64 * 1024
DIFF_SHOWN = 256 * 1024  # bytes of a flight's patch its screen shows (wavewait diff ID has it all)
RELOAD_EVERY = 0.1  # every agent's change wakes the screen: at most ten reloads a second
TALK_TAIL = 500  # entries of a conversation read when the screen opens (the bus keeps 2,000)
KEYS_SAID = "Enter tells it · ctrl+s interrupts its turn · Esc closes"


class FlightScreen(ModalScreen[None]):
    CSS_PATH = "flight.tcss"
    BINDINGS = [
        Binding("escape,q", "dismiss", "Close"),
        Binding("ctrl+s", "interrupt_turn", "Interrupt turn", show=False),
    ]

    def __init__(
        self, bus: Bus, me: str, agent_id: str, clock: Callable[[], float], received: bool, talks: bool = False
    ) -> None:
        super().__init__()
        self.bus, self.me, self.agent_id, self.clock, self.received = bus, me, agent_id, clock, received
        self.talks = talks  # it holds a conversation: shown first, with a line to tell it
        self.flight_name = agent_id[:8]  # its name, once read
        self._log_size = -1
        self._diff_of: object = None  # the changes the diff shown was made for
        self._telling = asyncio.Lock()  # tells go out one at a time, in the order typed

    def compose(self) -> ComposeResult:
        with Vertical(id="flight-box"):
            yield Static(id="flight-info")
            if self.talks:
                yield from self._tabs()
                return
            yield Static("Messages and events", classes="section")
            yield RichLog(id="flight-items", wrap=True, markup=False, highlight=False)
            yield Static("Changes", id="flight-diff-title", classes="section")
            yield RichLog(id="flight-diff", wrap=False, markup=False, highlight=False)
            yield Static("Output log", classes="section")
            yield RichLog(id="flight-output", wrap=False, markup=False, highlight=False)

    def _tabs(self) -> ComposeResult:
        """A conversation first; the rest a tab away (the raw log is the host's JSON lines)."""
        with TabbedContent(id="flight-tabs"):
            with TabPane("Conversation", id="tab-talk"):
                yield TalkLog(id="flight-talk")
            with TabPane("Messages and events", id="tab-items"):
                yield RichLog(id="flight-items", wrap=True, markup=False, highlight=False)
            with TabPane("Changes", id="tab-diff"):
                yield Static("Changes", id="flight-diff-title", classes="section")
                yield RichLog(id="flight-diff", wrap=False, markup=False, highlight=False)
            with TabPane("Output log", id="tab-output"):
                yield RichLog(id="flight-output", wrap=False, markup=False, highlight=False)
        yield Static(id="talk-said")
        line = Input(placeholder="tell it something (--now MESSAGE: interrupt its turn first)", id="talk-line")
        line.border_subtitle = KEYS_SAID
        yield line

    def on_mount(self) -> None:
        for part in ("#flight-diff-title", "#flight-diff"):  # shown for a flight with a worktree
            self.query_one(part).display = False
        if self.talks:
            self.query_one("#talk-said").display = False
            self.query_one(TabbedContent).hide_tab("tab-diff")
            self.query_one("#talk-line", Input).focus()  # the line that tells it, as the main screen's
            self.follow_talk()
        self.follow()
        self.tail_log()
        self.set_interval(0.5, self.tail_log)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return self.talks if action == "interrupt_turn" else True

    # ------------------------------------------------------------------ the conversation
    @work(exclusive=True, group="talk", exit_on_error=False, description="following the conversation")
    async def follow_talk(self) -> None:
        """Its last entries, then each batch as its supervisor keeps them on the bus."""
        log = self.query_one(TalkLog)
        log.roles = host_of(self.app).roles
        first = await transcript.read(self.bus, self.agent_id, tail=TALK_TAIL)
        log.add(transcript.entry_view(i) for i in first)
        async for batch in transcript.follow(self.bus, self.agent_id, log.last_seq):
            log.add(transcript.entry_view(i) for i in batch)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        event.input.value = ""
        if text:
            self.tell(text)

    @work(group="tell", exit_on_error=False, description="telling the flight")
    async def tell(self, text: str) -> None:
        """Tell it `text` (`--now ` first: interrupt its turn) and say where it went."""
        now = text.startswith("--now ")
        text = text.removeprefix("--now ").strip()
        async with self._telling:
            self._say(Text(f"telling {self.flight_name}: {one_line(text)[:60]} …", style="dim"))
            try:
                answer = await conversation.tell(self.bus, self.agent_id, text, by=self.me, interrupt=now)
            except WavewaitError as e:
                self._say(Text(said(e), style=host_of(self.app).roles["bad"]))
                return
            self._say(Text(TellResult(**answer).summary(), style=host_of(self.app).roles["good"]))

    def action_interrupt_turn(self) -> None:
        self.interrupt()

    @work(group="interrupt", exclusive=True, exit_on_error=False, description="interrupting the flight's turn")
    async def interrupt(self) -> None:
        self._say(Text(f"interrupting {self.flight_name}'s turn …", style="dim"))
        try:
            answer = await conversation.interrupt_turn(self.bus, self.agent_id, by=self.me)
        except WavewaitError as e:
            self._say(Text(said(e), style=host_of(self.app).roles["bad"]))
            return
        if answer["interrupted"]:
            self._say(
                Text(f"interrupted {answer['name']}'s turn {answer['turn']}", style=host_of(self.app).roles["warn"])
            )
        else:
            self._say(Text(f"no turn of {answer['name']} was running (it is at turn {answer['turn']})", style="dim"))

    def _say(self, line: Text) -> None:
        """What the last tell or interrupt came to, on the line above the input (hidden till then)."""
        said_line = self.query_one("#talk-said", Static)
        said_line.update(line)
        said_line.display = True

    @work(exclusive=True, group="flight", exit_on_error=False)
    async def follow(self) -> None:
        """Re-read on every change of the flight or of either inbox (wakes are hints).

        The subscription wakes on any agent's change, so with a big wave the reloads (two
        histories each) are coalesced, as the app coalesces its reads of the bus.
        """
        changes = await self.bus.subscribe(agents=True, inboxes=[self.me, self.agent_id])
        try:
            while True:
                started = time.monotonic()
                await self.reload()
                await changes.wait()
                await asyncio.sleep(max(0.0, RELOAD_EVERY - (time.monotonic() - started)))
        finally:
            changes.close()

    async def reload(self) -> None:
        agent = await self.bus.get_agent(self.agent_id)
        info = self.query_one("#flight-info", Static)
        bad = host_of(self.app).roles["bad"]
        if agent is None:
            info.update(Text(f"no agent {self.agent_id} on the bus", style=bad))
            return
        self.flight_name = agent.name
        t = self.clock()
        state = flight_state(agent)
        head = Text()
        head.append(agent.name, style="bold")
        head.append(f"  {agent.id}  ", style="dim")
        head.append(word(state), style="bold")
        if self.received:
            head.append(" · reported to you")
        if agent.state == "needs_input":
            head.append(f"\nasks: {agent.question}  (answer: /reply {agent.id[:8]} ANSWER)")
        if agent.reason:
            head.append(f" · {agent.reason}", style=bad if agent.status == "dead" else "")
        head.append(f"\nwave {agent.wave or '—'} · started {ago(t - agent.created_at)} ago · pid {agent.pid or '—'}")
        if agent.conversation is not None:
            head.append(f" · turn {agent.turn}" + (" · closed for good" if agent.closed_for_good else ""))
        if agent.exit_code is not None:
            head.append(f" · exit code {agent.exit_code}")
        if agent.command:
            head.append("\n$ " + shlex.join(agent.command), style="dim")
        info.update(head)
        await self.show_diff(agent)
        mine = [
            i
            for i in await self.bus.history(self.me, 1000) + await self.bus.peek(self.me)
            if i.sender == self.agent_id or i.data.get("agent_id") == self.agent_id
        ]
        theirs = await self.bus.history(self.agent_id, 1000) + await self.bus.peek(self.agent_id)
        items = sorted(mine + theirs, key=lambda i: i.sent_at)
        log = self.query_one("#flight-items", RichLog)
        log.clear()
        if not items:
            log.write(Text("no messages or events yet", style="dim"))
        for item in items:
            log.write(self._item_line(item, agent.created_at))

    async def show_diff(self, agent: Agent) -> None:
        """A coding flight's patch against its base, highlighted; made again only when its
        counted changes differ (its supervisor counts them while it runs)."""
        if agent.worktree is None:
            return
        c = agent.changes
        key = (agent.worktree.branch, c.files, c.added, c.deleted, c.final, c.at) if c else (agent.worktree.branch,)
        if key == self._diff_of:
            return
        self._diff_of = key
        for part in ("#flight-diff-title", "#flight-diff"):
            self.query_one(part).display = True
        if self.talks:
            self.query_one(TabbedContent).show_tab("tab-diff")
        title = f"Changes on {agent.worktree.branch}"
        if c is not None:
            title += f": +{c.added} −{c.deleted} in {c.files} file{'s' if c.files != 1 else ''}"
        self.query_one("#flight-diff-title", Static).update(title)
        log = self.query_one("#flight-diff", RichLog)
        try:
            patch = await asyncio.to_thread(changes.diff, agent.worktree, limit=DIFF_SHOWN)
        except WavewaitError as e:
            log.clear()
            log.write(Text(f"no diff: {e}", style=host_of(self.app).roles["bad"]))
            return
        log.clear()
        log.write(
            Syntax(patch, "diff", theme="ansi_dark", word_wrap=False) if patch else Text("no changes yet", style="dim")
        )

    def _item_line(self, item: Item, t0: float) -> Text:
        where = "queued" if item.taken_by is None else f"taken by {item.taken_by}"
        arrow = "→ you" if item.to == self.me else f"→ {item.to[:8]}"
        kind = item.type if is_report(item.type) else f"event {item.type}"
        line = Text(f"+{ago(item.sent_at - t0):>6} ", style="dim")
        line.append(
            f"{kind} {arrow} ({where}): ",
            style="bold" if is_report(item.type) else host_of(self.app).roles["bad"],
        )
        line.append(item.body)
        return line

    def tail_log(self) -> None:
        """The output log is a plain file outside the watched folders; follow it by size."""
        out = self.query_one("#flight-output", RichLog)
        agent_path = self.bus.log_path(self.agent_id)
        if not agent_path or not os.path.exists(agent_path):
            if self._log_size != -2:
                out.write(Text("no output log (not spawned here)", style="dim"))
                self._log_size = -2
            return
        size = os.path.getsize(agent_path)
        if size == self._log_size:
            return
        with open(agent_path, "rb") as f:
            if size > LOG_TAIL:
                f.seek(size - LOG_TAIL)
            data = f.read().decode("utf-8", "replace")
        out.clear()
        for line in data.splitlines():
            out.write(Text(line))
        self._log_size = size
