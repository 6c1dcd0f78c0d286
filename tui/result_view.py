"""How the TUI shows a wait's result: one summary line, and the block in the scrollback.

The one-line summary is the core result's own `summary()`; this module only lays out the block.
"""

from __future__ import annotations

from collections.abc import Mapping

from rich.text import Text

from ..core.ids import short
from ..core.results import FanIn, NextMessage, Result
from .state import GLYPH, one_line

OUTPUT_LINES = 6  # a failed check's last lines shown under its flight (the JSON keeps them all)


def render_result(result: Result, roles: Mapping[str, str]) -> list[Text]:
    """The result block in the scrollback: every requested flight with its status, then a
    join's files, events and the flights it stopped (docs/joins.md)."""
    lines = [Text(result.summary(), style="bold")]
    if isinstance(result, FanIn):
        lines += _flights(result, roles)
        lines += _join_targets(result, roles)
    elif isinstance(result, NextMessage):
        if result.status == "received":
            lines = [
                Text(f"From: {result.name} ({short(result.sender or '')})", style="bold"),
                Text(result.message or ""),
            ]
        elif result.status == "timeout":
            lines = [Text("No messages.", style="bold")]
    return lines


def _flights(result: FanIn, roles: Mapping[str, str]) -> list[Text]:
    lines = []
    width = max((len(r.name) for r in result.results), default=0)
    for r in result.results:
        glyph = "✓" if r.status == "received" else GLYPH.get(r.status, "…")
        line = Text(f"  {glyph} {r.name:<{width}}  {short(r.agent_id)}  ")
        line.append(f"{r.status:<8}", style=roles.get(r.status, ""))
        if r.message is not None:
            line.append("  " + one_line(r.message))
        if r.reason:
            line.append(f"  ({one_line(r.reason)})", style=roles["bad"] if r.status == "dead" else "dim")
        lines.append(line)
        if r.output:  # a check that failed: what it printed last, as it printed it
            for out in r.output.splitlines()[-OUTPUT_LINES:]:
                lines.append(Text(f"      │ {out}", style="dim"))
    if result.omitted:
        counts = ", ".join(f"{n:,} {word}" for word, n in result.omitted.items())
        lines.append(Text(f"  … and {counts} (left out: over the output budget)", style="dim"))
    return lines


def _join_targets(result: FanIn, roles: Mapping[str, str]) -> list[Text]:
    """A join's file and event targets, and the flights `--stop-rest` stopped."""
    lines = []
    for f in result.files or []:
        line = Text(f"  {'✓' if f.status == 'met' else '…'} files {f.glob}  ")
        line.append(f"{f.status:<8}", style=roles["received"] if f.status == "met" else "dim")
        line.append(f"  {f.matched}/{f.min_count} matched")
        if f.files:
            line.append(": " + ", ".join(f.files))
        lines.append(line)
    for e in result.events or []:
        line = Text(f"  {'✓' if e.status == 'met' else '…'} event {e.type}  ")
        line.append(f"{e.status:<8}", style=roles["received"] if e.status == "met" else "dim")
        if e.event and (body := e.event.get("body") or e.event.get("message")):
            line.append("  " + one_line(str(body)))
        lines.append(line)
    if result.stopped:
        names = {r.agent_id: r.name for r in result.results}
        stopped = ", ".join(f"{names.get(a, short(a))} ({short(a)})" for a in result.stopped)
        lines.append(Text(f"  stopped (--stop-rest): {stopped}", style=roles["dead"]))
    return lines


def received_from(result: Result) -> set[str] | None:
    """Ids of the flights a fan-in heard from (a question is a report too), the sender of a
    next message; None: no word."""
    if isinstance(result, FanIn):
        return {r.agent_id for r in result.results if r.status in ("received", "needs_input")}
    if isinstance(result, NextMessage) and result.sender:
        return {result.sender}
    return None
