"""The status layer of a running wait: "Waiting for sub-agents:" with one line per target."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.text import Text
from textual.widgets import Static

from ...core.ids import short
from ..state import GLYPH, ago, one_line, spinner


class WaitStatus(Static):
    """Shown only while the person's own wait runs; fed by the wait's progress and the panel."""

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
        out = Text()
        if not targets:
            out.append(f"{spinner(t)} Waiting for the next message", style="bold")
        else:
            out.append("Waiting for sub-agents:", style="bold")
        if left is not None:
            out.append(f"  ({ago(left)} left · Escape interrupts)", style="dim")
        width = max((len(n) for _, n in targets), default=0)
        for agent_id, name in targets:
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
        if progress and not targets:
            out.append(f"\n  {progress}", style="dim")
        self.update(out)
