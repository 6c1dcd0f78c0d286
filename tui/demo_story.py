"""What `wavewait demo` tells the person to do now: one step of its story at a time.

The steps are said in a fixed place on the screen (the guide line above the command line),
not in the scrollback, which a wave's lines push out of sight before a first-time reader
got to them. Each step follows from what the bus and the person's waits say, so the guide
is right whatever the person did (pressed Escape or not, answered or not).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..core.ids import short
from ..core.model import Agent
from ..core.results import Result
from .demo import WAVE

RESUME = f"/wait 60 --wave {WAVE}"
LINE = 78  # the guide's width at 80 columns, less its padding


@dataclass
class DemoStory:
    """The guide's state: which steps the person has been through."""

    asked: set[str] = field(default_factory=set)  # flights seen with a question
    waits_ended: int = 0

    def wait_ended(self) -> None:
        self.waits_ended += 1

    def step(self, flights: Sequence[Agent], waiting: bool, last: Result | None) -> str:
        """The step to show now: two lines of at most LINE characters (80 columns)."""
        asking = [a for a in flights if a.state == "needs_input"]
        self.asked.update(a.id for a in asking)
        if not waiting and not self.waits_ended:
            return (
                f"The demo starts six flights in {WAVE}, at most five at once: the sixth\n"
                "waits ◷ queued for a slot. A wait on the wave follows."
            )
        if waiting and self.waits_ended == 0:
            return (
                f"① A wait on {WAVE} runs (below) until every flight reported or ended.\n"
                "   Press Escape now to interrupt it: what it received is kept."
            )
        if waiting:
            return "The wait runs (below): Escape interrupts it, and what it received is kept."
        if asking:
            a = asking[0]
            return (
                f"③ {a.name} asks you (? needs input): Shift+Tab, select it, Enter,\n"
                f"   or type /reply {short(a.id)} docs/"
            )
        if not self.asked:
            return (
                "② Its result is above. doc-writer will ask you something soon:\n"
                f"   {RESUME} waits for it (Escape interrupts it again)."
            )
        if any(a.pending for a in flights) or last is None or last.outcome() != "satisfied":
            slow = next((a for a in flights if a.pending and a.name == "migrator"), None)
            nudge = f"\n   migrator waits for a go-ahead: /send {short(slow.id)} go" if slow else ""
            return f"④ Answered. {RESUME} takes what is left.{nudge}"
        return "⑤ Every flight reported or ended. Ctrl+Q quits, printing the last result."
