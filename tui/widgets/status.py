"""The status layer of a running wait: "Waiting for sub-agents:" with one line per target."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.text import Text
from textual.widgets import Static

from ...core.ids import short
from ..state import GLYPH, ago, one_line, spinner


class WaitStatus(Static):
    """Shown only while the person's own wait runs; fed by the wait's progress and the panel.

    It takes at most `room` lines (the screen gives what five flight rows leave, so the
    flights panel keeps them in view): one line per target when they fit, else the targets
    still waited on and a count of the rest (the panel shows each flight's state).
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.room: int | None = None  # lines of text it may take; None: as many as it has
        self._wait: dict[str, Any] | None = None

    def fit(self, room: int) -> None:
        """Take at most `room` lines of text from now on."""
        if room != self.room:
            self.room = room
            if self._wait is not None:
                self.render_wait(**self._wait)

    def render_wait(
        self,
        *,
        targets: Sequence[tuple[str, str]],
        received: set[str],
        states: Mapping[str, tuple[str, str]],
        t: float,
        left: float | None,
        progress: str,
        roles: Mapping[str, str],
    ) -> None:
        """`states` maps agent id to (lifecycle status, reason) as the panel knows it;
        `roles` are the theme's styles by role."""
        self._wait = dict(
            targets=targets, received=received, states=states, t=t, left=left, progress=progress, roles=roles
        )
        room = len(targets) + 2 if self.room is None else max(1, self.room)
        out = Text()
        join = progress.startswith("met ")  # a join's line: `met M / need K · ... · checking NAME`
        if not targets:
            out.append(f"{spinner(t)} Waiting for the " + ("join" if join else "next message"), style="bold")
        else:
            out.append("Waiting for sub-agents:", style="bold")
        if join:
            parts = progress.split(" · ")
            out.append(" " + " · ".join([parts[0], *(p for p in parts if p.startswith("checking "))]), style="bold")
        shown: list[tuple[str, str]] = list(targets)
        got: list[tuple[str, str]] = []
        rest = 0
        compact = len(targets) + 1 > room
        if compact:  # no room for one line each: those still waited on, then a count
            got = [x for x in targets if x[0] in received and states.get(x[0], ("",))[0] != "needs_input"]
            shown = [target for target in targets if target not in got][: max(0, room - 2)]
            rest = len(targets) - len(shown) - len(got)
            if room == 1:
                out.append(f" {len(got)} of {len(targets)} received", style="bold")
        if left is not None:
            out.append(f"  ({ago(left)} left · Escape interrupts)", style="dim")
        width = max((len(n) for _, n in shown), default=0)
        for agent_id, name in shown:
            out.append("\n  ")
            out.append(name.ljust(width), style="bold")
            out.append(f"  {short(agent_id)}  ", style="dim")
            status, reason = states.get(agent_id, ("running", ""))
            if status == "needs_input":  # what the wait took from it is a question: answer it
                out.append("? needs input", style=roles["needs_input"])
            elif agent_id in received:
                out.append("✓ received", style=roles["received"])
            elif status == "dead":
                out.append(f"✖ dead ({one_line(reason or 'dead')})", style=roles["dead"])
            elif status == "running":
                out.append(f"{spinner(t)} running", style=roles["running"])
            else:
                out.append(f"{GLYPH.get(status, '■')} {status}", style=roles.get(status, ""))
        if compact and room > 1:
            out.append(f"\n  ✓ {len(got)} of {len(targets)} received", style=roles["received"])
            if rest:
                out.append(f" · {rest} more in the flights panel", style="dim")
        if progress and not targets and room > 1:
            out.append(f"\n  {progress}", style="dim")
        self.update(out)
