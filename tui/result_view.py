"""How the TUI shows a wait's result: one summary line, and the block in the scrollback.

The one-line summary is the core result's own `summary()`; this module only lays out the block.
"""

from __future__ import annotations

from collections.abc import Mapping

from rich.text import Text

from ..core.ids import short
from ..core.results import FanIn, NextMessage, Result
from .state import GLYPH, one_line


def render_result(result: Result, roles: Mapping[str, str]) -> list[Text]:
    """The result block in the scrollback: every requested flight with its status."""
    lines = [Text(result.summary(), style="bold")]
    if isinstance(result, FanIn):
        width = max((len(r.name) for r in result.results), default=0)
        for r in result.results:
            glyph = "✓" if r.status == "received" else GLYPH.get(r.status, "…")
            line = Text(f"  {glyph} {r.name:<{width}}  {short(r.agent_id)}  ")
            line.append(f"{r.status:<8}", style=roles.get(r.status, ""))
            if r.message is not None:
                line.append("  " + one_line(r.message))
            elif r.reason:
                line.append(f"  ({one_line(r.reason)})", style=roles["bad"] if r.status == "dead" else "dim")
            lines.append(line)
    elif isinstance(result, NextMessage):
        if result.status == "received":
            lines = [
                Text(f"From: {result.name} ({short(result.sender or '')})", style="bold"),
                Text(result.message or ""),
            ]
        elif result.status == "timeout":
            lines = [Text("No messages.", style="bold")]
    return lines


def received_from(result: Result) -> set[str] | None:
    """Ids of the flights a fan-in heard from (a question is a report too), the sender of a
    next message; None: no word."""
    if isinstance(result, FanIn):
        return {r.agent_id for r in result.results if r.status in ("received", "needs_input")}
    if isinstance(result, NextMessage) and result.sender:
        return {result.sender}
    return None
