"""Claude Code's stream-json conversation: `claude -p --input-format stream-json
--output-format stream-json --verbose` (2.1.x, checked with the real CLI).

- In: one JSON object a line, `{"type": "user", "message": {"role": "user", "content": TEXT}}`
  for each user message, read for as long as stdin is open. A message written while a turn
  runs is taken into that turn (Claude Code puts it beside the next tool result, "how Claude
  Code surfaces messages the user sends mid-turn"); one written in the turn's last model
  request starts the next turn instead. With `--replay-user-messages` the CLI echoes each user
  message when it takes it (`"isReplay": true`, with the `uuid` we gave it): echoed before the
  turn's `result`, it went into that turn; else it starts the next one. `{"type": "control_request",
  "request_id": ID, "request": {"subtype": "interrupt"}}` ends the running turn: its tool call
  is cut, and its `result` comes with `subtype: error_during_execution`.
- Out: each turn starts with `{"type": "system", "subtype": "init", "session_id"}` and ends
  with one `{"type": "result"}`, whose `usage` is the turn's and `total_cost_usd` the
  session's so far (it goes on across `--resume`).
- Resumed with `--resume SESSION_ID` on the command line (the preset's `resume_args`); an
  unknown session ends the process with code 1 and says `No conversation found` on stderr.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from ..model import Usage
from .base import RESULT_KEPT, TEXT_KEPT, Entry, Step, Told, TurnEnd, short

#: the argument that says most of what a tool call does, by the tool's name
MAIN_ARG = ("command", "file_path", "path", "pattern", "url", "query", "description", "prompt")


def _line(obj: dict[str, Any]) -> bytes:
    return (json.dumps(obj, ensure_ascii=False) + "\n").encode()


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0


def tool_line(name: str, args: Any) -> str:
    """A tool call as one line: its name and its main argument."""
    args = _dict(args)
    main = next((args[k] for k in MAIN_ARG if isinstance(args.get(k), str)), None)
    if main is None:
        main = next((v for v in args.values() if isinstance(v, str)), "")
    return f"{name} {short(main.replace(chr(10), ' '), 200)}".rstrip()


def result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


class ClaudeDriver:
    name = "claude"

    def __init__(self, turn: int = 0) -> None:
        self.turn = turn
        self.running = False
        self.interrupting = False  # an interrupt was asked: the turn's end is not a report
        self._said = ""  # the turn's last text, should its result carry none
        self._tools = 0  # the turn's tool calls still running: a message told now is taken into it
        self._echo: dict[str, int] = {}  # uuid -> the running turn a message was told into, until echoed

    @property
    def unanswered(self) -> int:
        """Messages told into a turn that is between tool calls (its model is answering): the
        echo or the turn's end says whether the turn took them."""
        return len(self._echo)

    def open(self, session_id: str | None, cwd: str) -> list[bytes]:
        return []  # the prompt comes as the first tell; a resume is on the command line

    def tell(self, text: str) -> tuple[list[bytes], Told]:
        uid = str(uuid.uuid4())
        line = _line({"type": "user", "message": {"role": "user", "content": text}, "uuid": uid})
        if not self.running:
            return [line], "next_turn"
        if not self._tools:  # no tool runs: the model may be giving its last answer; the echo says
            self._echo[uid] = self.turn
        return [line], "in_turn"

    def interrupt(self) -> list[bytes]:
        if not self.running:
            return []
        self.interrupting = True
        request = {"subtype": "interrupt"}
        return [_line({"type": "control_request", "request_id": uuid.uuid4().hex, "request": request})]

    def feed(self, line: bytes) -> Step:
        try:
            e = json.loads(line)
        except ValueError:
            return Step()
        if not isinstance(e, dict):
            return Step()
        step = Step(session_id=e["session_id"] if isinstance(e.get("session_id"), str) else None)
        kind = e.get("type")
        if kind == "system" and e.get("subtype") == "init" and not self.running:
            self.running, self.interrupting, self._said, self._tools = True, False, "", 0
            self.turn += 1
            step.started = self.turn
        elif kind == "assistant":
            self._assistant(_dict(e.get("message")), step)
        elif kind == "user" and e.get("isReplay"):
            self._echoed(str(e.get("uuid")), step)
        elif kind == "user":
            self._tool_results(_dict(e.get("message")), step)
        elif kind == "result" and not self.running:  # no turn started: it refused the conversation
            errors = "; ".join(str(x) for x in e.get("errors") or [] if x)
            step.failed = f"Claude Code refused it: {errors or e.get('subtype') or 'no turn started'}"
        elif kind == "result":
            step.ended = self._result(e)
            for uid in list(self._echo):  # not taken by the turn that ended: each starts a next one
                self._echoed(uid, step)
        return step

    def _echoed(self, uid: str, step: Step) -> None:
        told_into = self._echo.pop(uid, None)
        if told_into is not None and not (self.running and self.turn == told_into):
            note = "the turn was giving its last answer when the message came: it starts the next turn"
            step.entries.append(Entry("note", note, self.turn, data={"told": "next_turn"}))

    def _assistant(self, msg: dict[str, Any], step: Step) -> None:
        for block in msg.get("content") or []:
            b = _dict(block)
            if b.get("type") == "text" and isinstance(b.get("text"), str) and b["text"].strip():
                self._said = b["text"]
                step.entries.append(Entry("agent", short(b["text"], TEXT_KEPT), self.turn))
            elif b.get("type") == "tool_use":
                self._tools += 1
                name = str(b.get("name", "?"))
                step.entries.append(Entry("tool", tool_line(name, b.get("input")), self.turn, data={"tool": name}))

    def _tool_results(self, msg: dict[str, Any], step: Step) -> None:
        content = msg.get("content")
        for block in content if isinstance(content, list) else []:
            b = _dict(block)
            if b.get("type") == "tool_result":
                self._tools = max(0, self._tools - 1)
                text = short(result_text(b.get("content")), RESULT_KEPT)
                step.entries.append(Entry("result", text, self.turn, data={"error": bool(b.get("is_error"))}))

    def _result(self, e: dict[str, Any]) -> TurnEnd:
        self.running, self._tools = False, 0
        subtype = str(e.get("subtype", ""))
        if self.interrupting:
            status = "interrupted"
        elif subtype == "error_max_turns" or e.get("terminal_reason") == "max_turns":
            status = "max_turns"
        elif e.get("is_error") or subtype.startswith("error"):
            status = "error"
        else:
            status = "success"
        self.interrupting = False
        text = e["result"] if isinstance(e.get("result"), str) else self._said
        errors = "; ".join(str(x) for x in e.get("errors") or [] if x) or None
        u = _dict(e.get("usage"))
        cost = e.get("total_cost_usd")
        usage = Usage(
            input_tokens=_int(u.get("input_tokens")),
            output_tokens=_int(u.get("output_tokens")),
            cache_read_tokens=_int(u.get("cache_read_input_tokens")),
            cache_creation_tokens=_int(u.get("cache_creation_input_tokens")),
            cost_usd=float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) else None,
            turns=_int(e.get("num_turns")) or None,
        )
        return TurnEnd(self.turn, status, text, usage, error=errors if status != "success" else None)  # type: ignore[arg-type]
