"""Reading an agent CLI's machine-readable events: how its run ended, what it said, what it cost.

A flight started from a preset prints its events on stdout, one JSON object a line: Claude
Code's `--output-format stream-json --verbose`, Codex's `exec --json`. Its supervisor feeds
every line to an `EventReader`, which keeps what the flight's report needs: the final
answer, the status (success, error, max turns), tokens and money, and for a run that never
finished, what it was last doing. What the events say is data about the run, never about
who the flight is (its identity is what its supervisor started).

Claude Code (2.1.x): `{"type": "assistant", "message": {content, usage}}` per model turn,
then one `{"type": "result", "subtype": "success" | "error_max_turns" | …, "is_error",
"result", "usage", "total_cost_usd", "num_turns", "errors", "terminal_reason"}`.
Codex (0.16x): `thread.started`, `turn.started`, `item.started` / `item.completed` (items
`agent_message {text}`, `command_execution`, `file_change`, `mcp_tool_call`, `error`),
`turn.completed {usage}` or `turn.failed {error: {message}}`, and top-level `error {message}`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from .model import Usage

#: the event formats a preset may name (`events = "..."` in a preset)
FORMATS = ("claude", "codex")
EventFormat = Literal["claude", "codex"]
RunStatus = Literal["success", "error", "max_turns"]
LINE_LIMIT = 4 << 20  # a longer line is skipped (it is still in the output log)
TEXT_LIMIT = 2000  # characters of a last activity or error kept for a death's reason


def _short(text: str, n: int = TEXT_LIMIT) -> str:
    text = text.strip()
    return text if len(text) <= n else text[: n - 1] + "…"


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0


@dataclass
class EventReader:
    """Feed it lines; read `ended`, `status`, `final_text`, `usage`, `last_error`, `last_activity`."""

    format: EventFormat
    ended: bool = False  # the run's own final event was read (a result, a completed or failed turn)
    status: RunStatus | None = None
    final_text: str | None = None
    last_text: str | None = None  # the latest thing the agent said, final or not
    last_error: str | None = None
    last_activity: str | None = None  # e.g. "tool Write", "command `pytest` exited 1"
    usage: Usage = field(default_factory=Usage)
    session_id: str | None = None  # the CLI's own session (Claude Code) or thread (Codex): its session file
    lines: int = 0
    skipped: int = 0  # lines that were not JSON objects (or too long)
    _turn_usage: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)

    def feed(self, line: bytes | str) -> bool:
        """Read one line; True if something a record shows (usage, the end) changed."""
        self.lines += 1
        if len(line) > LINE_LIMIT:
            self.skipped += 1
            return False
        try:
            event = json.loads(line)
        except ValueError:
            self.skipped += 1
            return False
        if not isinstance(event, dict):
            self.skipped += 1
            return False
        return self._claude(event) if self.format == "claude" else self._codex(event)

    # ------------------------------------------------------------------ Claude Code
    def _claude(self, e: dict[str, Any]) -> bool:
        kind = e.get("type")
        if self.session_id is None and isinstance(e.get("session_id"), str):
            self.session_id = e["session_id"]
        if kind == "assistant" and isinstance(e.get("message"), dict):
            msg = e["message"]
            for block in msg.get("content") or []:
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "text" and isinstance(block.get("text"), str):
                    self.last_text = block["text"]
                    self.last_activity = "said: " + _short(block["text"], 300)
                elif block.get("type") == "tool_use":
                    self.last_activity = f"tool {block.get('name', '?')}"
            if isinstance(e.get("error"), str):
                self.last_error = _short(self.last_text or e["error"])
            u = msg.get("usage")
            if isinstance(u, dict) and not self.ended:  # live: per model message, the last count wins
                self._turn_usage[str(msg.get("id", len(self._turn_usage)))] = (
                    _int(u.get("input_tokens")),
                    _int(u.get("output_tokens")),
                    _int(u.get("cache_read_input_tokens")),
                    _int(u.get("cache_creation_input_tokens")),
                )
                self._sum_turns()
                return True
            return False
        if kind == "result":
            return self._claude_result(e)
        if kind == "system" and e.get("subtype") == "api_error":
            self.last_error = _short(json.dumps(e.get("error", e))[:TEXT_LIMIT])
        return False

    def _sum_turns(self) -> None:
        counts = list(self._turn_usage.values())
        self.usage = Usage(
            input_tokens=sum(c[0] for c in counts),
            output_tokens=sum(c[1] for c in counts),
            cache_read_tokens=sum(c[2] for c in counts),
            cache_creation_tokens=sum(c[3] for c in counts),
        )

    def _claude_result(self, e: dict[str, Any]) -> bool:
        self.ended = True
        subtype = str(e.get("subtype", ""))
        reason = str(e.get("terminal_reason") or "")
        if subtype == "error_max_turns" or reason == "max_turns":
            self.status = "max_turns"
        elif e.get("is_error") or subtype.startswith("error"):
            self.status = "error"
        else:
            self.status = "success"
        result = e.get("result")
        if isinstance(result, str):
            self.final_text = result
        errors = [str(x) for x in e.get("errors") or [] if x]
        if self.status != "success":
            self.last_error = _short(
                "; ".join(errors) or (result if isinstance(result, str) else "") or reason or subtype
            )
        u = _dict(e.get("usage"))
        cost = e.get("total_cost_usd")
        self.usage = Usage(
            input_tokens=_int(u.get("input_tokens")),
            output_tokens=_int(u.get("output_tokens")),
            cache_read_tokens=_int(u.get("cache_read_input_tokens")),
            cache_creation_tokens=_int(u.get("cache_creation_input_tokens")),
            cost_usd=float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) else None,
            turns=_int(e.get("num_turns")) or None,
        )
        return True

    # ------------------------------------------------------------------ Codex
    def _codex(self, e: dict[str, Any]) -> bool:
        kind = e.get("type")
        item = e.get("item") if isinstance(e.get("item"), dict) else None
        if kind in ("item.started", "item.completed") and item is not None:
            self._codex_item(item, done=kind == "item.completed")
            return False
        if kind == "thread.started" and isinstance(e.get("thread_id"), str):
            self.session_id = e["thread_id"]
            return False
        if kind == "turn.completed":
            u = _dict(e.get("usage"))
            self.usage = Usage(
                input_tokens=self.usage.input_tokens + _int(u.get("input_tokens")),
                output_tokens=self.usage.output_tokens + _int(u.get("output_tokens")),
                cache_read_tokens=self.usage.cache_read_tokens + _int(u.get("cached_input_tokens")),
                cache_creation_tokens=self.usage.cache_creation_tokens + _int(u.get("cache_write_input_tokens")),
                turns=(self.usage.turns or 0) + 1,
            )
            self.ended, self.status = True, "success"
            self.final_text = self.last_text
            return True
        if kind == "turn.failed":
            err = e.get("error")
            message = err.get("message") if isinstance(err, dict) else None
            self.last_error = _short(_api_message(str(message or self.last_error or "the turn failed")))
            self.ended, self.status = True, "error"
            self.final_text = self.last_text
            return True
        if kind == "error":
            self.last_error = _short(_api_message(str(e.get("message", ""))))
        return False

    def _codex_item(self, item: dict[str, Any], *, done: bool) -> None:
        kind = item.get("type")
        if kind == "agent_message" and done and isinstance(item.get("text"), str):
            self.last_text = item["text"]
            self.last_activity = "said: " + _short(item["text"], 300)
        elif kind == "command_execution":
            code = item.get("exit_code")
            cmd = _short(str(item.get("command", "")), 200)
            self.last_activity = f"command `{cmd}`" + (f" exited {code}" if done and code is not None else "")
        elif kind == "file_change":
            paths = [str(c.get("path", "")) for c in item.get("changes") or [] if isinstance(c, dict)]
            self.last_activity = "edited " + ", ".join(p.rsplit("/", 1)[-1] for p in paths[:5])
        elif kind == "mcp_tool_call":
            self.last_activity = f"tool {item.get('server', '?')}.{item.get('tool', '?')}"
        elif kind == "error" and isinstance(item.get("message"), str):
            self.last_error = _short(item["message"])

    # ------------------------------------------------------------------ for people
    def reason(self) -> str | None:
        """What the run was last doing or what went wrong, for a death's reason (None if nothing)."""
        parts = []
        if self.last_error:
            parts.append(f"error: {self.last_error}")
        if self.last_activity:
            parts.append(f"last: {self.last_activity}")
        return "; ".join(parts) or None


def _api_message(text: str) -> str:
    """The `message` inside an API error's JSON body, when the text is one (Codex passes it through)."""
    try:
        body = json.loads(text)
    except ValueError:
        return text
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return str(err["message"])
    return text
