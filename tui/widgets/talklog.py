"""A flight's conversation as people read it: who told it what, what it said and did, each
turn's end with its usage so far; it follows its end (scroll lock, as the scrollback)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rich.text import Text
from textual import events
from textual.widgets import RichLog

from ..state import money, one_line, role_styles, tokens
from .followlog import FollowLog

RESULT_SHOWN = 160  # characters of a tool's result shown on its one line (the transcript keeps 400)
TURN_ROLE = {"success": "good", "interrupted": "warn", "error": "bad", "max_turns": "bad"}


def entry_text(entry: Mapping[str, Any], roles: Mapping[str, str]) -> Text:
    """One entry of `transcript.entry_view`, with the heads `wavewait transcript` prints."""
    kind, turn, body = entry.get("kind"), entry.get("turn"), str(entry.get("text", ""))
    out = Text(f"[{turn}] ", style="dim")
    if kind == "user":
        by = entry.get("by")
        out.append("prompt:" if by == "prompt" else f"told by {by}:", style=roles["needs_input"])
        out.append(" " + body)
    elif kind == "agent":
        out.append("agent:", style="bold")
        out.append(" " + body)
    elif kind == "tool":
        out.append("  ↳ " + one_line(body), style="dim")
    elif kind == "result":
        line = one_line(body)
        line = line if len(line) <= RESULT_SHOWN else line[: RESULT_SHOWN - 1] + "…"
        error = bool((entry.get("data") or {}).get("error"))
        out.append("    = " + line, style=roles["bad"] if error else "dim")
    elif kind == "turn":
        data = entry.get("data") or {}
        status = data.get("status")
        if status is None:  # a turn started
            out.append(f"── {body} ──", style="dim")
        else:
            out.append(f"── {body}", style=roles.get(TURN_ROLE.get(status, ""), ""))
            out.append(_usage(data.get("usage") or {}), style="dim")
    else:
        out.append("· " + body, style=roles["warn"])
    return out


def _usage(u: Mapping[str, Any]) -> str:
    """The flight's usage after a turn: `· 1.2k tok $0.0123 so far`."""
    n = int(u.get("input_tokens") or 0) + int(u.get("output_tokens") or 0)
    if not n and u.get("cost_usd") is None:
        return ""
    cost = u.get("cost_usd")
    return f" · {tokens(n)} tok" + ("" if cost is None else f" {money(float(cost))}") + " so far"


class TalkLog(FollowLog):
    """The entries of a flight's transcript, as they come (`add`); `roles` set from above.

    A RichLog wraps a line once, at the width it has when the line comes: here the lines are
    kept (the last KEPT) and wrapped again when the width changes (a resize, the first layout
    of its tab), so a message reads whole at 80 columns and uses the width of 200.
    """

    KEPT = 2000  # lines kept to wrap again, as many as the bus keeps entries

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(wrap=True, markup=False, highlight=False, min_width=1, **kwargs)
        self.roles: Mapping[str, str] = role_styles({})
        self.last_seq = 0  # the newest entry shown: the next read follows from it
        self._texts: list[Text] = []
        self._wrapped_at = 0  # the width the lines shown were wrapped to

    def add(self, entries: Iterable[Mapping[str, Any]]) -> None:
        for e in entries:
            seq = int(e.get("seq") or 0)
            if seq and seq <= self.last_seq:
                continue  # shown already (a read that crossed a batch)
            self.last_seq = max(self.last_seq, seq)
            text = entry_text(e, self.roles)
            self._texts.append(text)
            self.write(text, width=self._width())
        del self._texts[: -self.KEPT]

    def _width(self) -> int | None:
        """The width to wrap to: the view's (the console's may be another), once it is known."""
        return self.scrollable_content_region.width or None if self._size_known else None

    def on_resize(self, event: events.Resize) -> None:
        super().on_resize(event)
        self.call_after_refresh(self._rewrap)

    def _rewrap(self) -> None:
        width = self.scrollable_content_region.width
        if not width or width == self._wrapped_at:
            return
        self._wrapped_at = width
        RichLog.clear(self)  # not FollowLog's: a person scrolled up stays locked
        for text in self._texts:
            RichLog.write(self, text, width=width, scroll_end=False)
        if self.following:
            self.scroll_end(animate=False, immediate=True, x_axis=False)
