"""Codex's app-server conversation: `codex app-server [-c key=value ...]`, JSON-RPC over stdio,
one object a line (0.169.0, checked with the real CLI).

- Open: `initialize` (its `initialized` notification right after), then `thread/start`
  (cwd, sandbox, approval policy) or `thread/resume {threadId}`. All three are written at
  once; the server answers in order. A `turn/*` request needs the thread id, which a new
  thread has only once `thread/start` answers: tells given before then are held, and go out
  through the `Step.write` of that answer, in order.
- Tell: `turn/steer {threadId, expectedTurnId, input}` while a turn runs (the text reaches
  the model's next request of the same turn), else `turn/start`. A steer that meets a turn
  already ended is refused (`-32600 no active turn to steer`): the driver then writes the
  text as `turn/start` and says so in a `note` entry whose `data["told"]` is `next_turn`.
  Tells given while a steer is unanswered are held behind it, so a fallback never overtakes
  them. (`turn/start` while a turn runs joins that turn: the server answers with the running
  turn's id, so held tells written after a fallback keep their order too.)
- Interrupt: `turn/interrupt {threadId, turnId}`, answered `{}`; the turn then ends with
  `turn/completed` status `interrupted` (the cut command gets no `item/completed`). A turn
  that ended first is refused with `no active turn to interrupt`, which is not a failure.
- Out: `turn/started`, `item/started` and `item/completed` (agentMessage, commandExecution,
  fileChange, mcpToolCall, ...), `thread/tokenUsage/updated` (the thread's running `total`
  and the request's `last`), `turn/completed {turn: {status, items, error}}`; the streaming
  deltas are opted out of at `initialize`, as nothing here reads them.
- Server requests (approvals, user input, elicitations) are answered with a JSON-RPC error,
  so the server never waits on us: with approval policy `never` none should come.
- Unknown thread: `thread/resume` is answered `-32600 no rollout found for thread id ID`.
"""

from __future__ import annotations

import itertools
import json
import shlex
from dataclasses import dataclass
from typing import Any

from ..model import Usage
from .base import RESULT_KEPT, TEXT_KEPT, Entry, Step, Told, TurnEnd, short
from .claude import result_text, tool_line

SANDBOX = "workspace-write"  # as the `codex exec` preset: edits in the worktree, no network
APPROVAL = "never"  # nobody is there to approve: a refused command is the model's to work around
#: notifications nothing reads: per-token and per-chunk streams, rate limits, the turn's diff so far
QUIET = (
    "item/agentMessage/delta",
    "item/reasoning/summaryTextDelta",
    "item/reasoning/summaryPartAdded",
    "item/reasoning/textDelta",
    "item/commandExecution/outputDelta",
    "item/fileChange/outputDelta",
    "item/plan/delta",
    "turn/diff/updated",
    "account/rateLimits/updated",
)
USAGE_KEYS = ("inputTokens", "outputTokens", "cachedInputTokens", "cacheWriteInputTokens")
NO_ANSWER = -32601  # "method not found": the client answers no server request


def _line(obj: dict[str, Any]) -> bytes:
    return (json.dumps(obj, ensure_ascii=False) + "\n").encode()


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0


def _text_input(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text, "text_elements": []}]


def command_of(item: dict[str, Any]) -> str:
    """The command as the model wrote it: Codex runs it as `/bin/bash -lc '...'`."""
    cmd = str(item.get("command", ""))
    try:
        argv = shlex.split(cmd)
    except ValueError:
        return cmd
    if len(argv) == 3 and argv[1] in ("-c", "-lc") and argv[0].rsplit("/", 1)[-1] in ("bash", "sh", "zsh"):
        return argv[2]
    return cmd


@dataclass
class _Ask:
    """One of our requests, until the server answers it."""

    method: str
    text: str = ""  # a tell's text (turn/start, turn/steer)


class CodexDriver:
    name = "codex"

    def __init__(self, turn: int = 0) -> None:
        self.turn = turn
        self.running = False
        self.thread_id: str | None = None
        self._cwd = ""
        self._resuming: str | None = None  # the thread asked for by thread/resume
        self._ready = False  # the thread is started or resumed: turn requests can name it
        self._turn_id: str | None = None  # the running turn's
        self._ids = itertools.count(1)
        self._asked: dict[int, _Ask] = {}
        self._held: list[str] = []  # tells waiting for the thread, or behind an unanswered steer
        self._steering = 0  # steers unanswered
        self._said = ""  # the turn's last agent message
        self._error: str | None = None  # the turn's last error notification
        self._base: dict[str, int] | None = None  # the thread's token total before this turn
        self._total: dict[str, int] | None = None  # the thread's token total at the turn's latest update

    # ------------------------------------------------------------------ what we write
    def _request(self, method: str, params: dict[str, Any], text: str = "") -> bytes:
        n = next(self._ids)
        self._asked[n] = _Ask(method, text)
        return _line({"id": n, "method": method, "params": params})

    @property
    def unanswered(self) -> int:
        return self._steering

    def open(self, session_id: str | None, cwd: str) -> list[bytes]:
        self._cwd = cwd.rstrip("/")
        caps = {"experimentalApi": False, "requestAttestation": False, "optOutNotificationMethods": list(QUIET)}
        info = {"name": "wavewait", "title": None, "version": "1"}
        settings = {"cwd": cwd, "sandbox": SANDBOX, "approvalPolicy": APPROVAL}
        lines = [
            self._request("initialize", {"clientInfo": info, "capabilities": caps}),
            _line({"method": "initialized"}),
        ]
        if session_id:
            self._resuming = session_id
            # excludeTurns: the history stays on disk for the model; it need not come down the pipe
            lines.append(self._request("thread/resume", {"threadId": session_id, **settings, "excludeTurns": True}))
        else:
            lines.append(self._request("thread/start", settings))
        return lines

    def tell(self, text: str) -> tuple[list[bytes], Told]:
        if not self._ready or self._steering:
            self._held.append(text)
            return [], "in_turn" if self.running else "next_turn"
        return self._tell_now(text)

    def _tell_now(self, text: str) -> tuple[list[bytes], Told]:
        if self.running and self._turn_id:
            self._steering += 1
            params = {"threadId": self.thread_id, "expectedTurnId": self._turn_id, "input": _text_input(text)}
            return [self._request("turn/steer", params, text)], "in_turn"
        return [self._start(text)], "next_turn"

    def _start(self, text: str) -> bytes:
        return self._request("turn/start", {"threadId": self.thread_id, "input": _text_input(text)}, text)

    def _flush(self, step: Step) -> None:
        """Write the held tells that may go now, in order (a steer holds the rest behind it)."""
        while self._held and self._ready and not self._steering:
            lines, _ = self._tell_now(self._held.pop(0))
            step.write += lines

    def interrupt(self) -> list[bytes]:
        if not (self.running and self._turn_id and self.thread_id):
            return []
        return [self._request("turn/interrupt", {"threadId": self.thread_id, "turnId": self._turn_id})]

    # ------------------------------------------------------------------ what we read
    def feed(self, line: bytes) -> Step:
        try:
            m = json.loads(line)
        except ValueError:
            return Step()
        if not isinstance(m, dict):
            return Step()
        step = Step()
        if "method" in m and "id" in m:
            self._server_request(m, step)
        elif "id" in m:
            self._answer(m, step)
        elif isinstance(m.get("method"), str):
            params = _dict(m.get("params"))
            thread = _str(params.get("threadId")) or _str(_dict(params.get("thread")).get("id"))
            if thread is None or self.thread_id is None or thread == self.thread_id:  # not a sub-agent's
                self._notification(m["method"], params, step)
        return step

    def _server_request(self, m: dict[str, Any], step: Step) -> None:
        method = str(m.get("method"))
        message = f"wavewait answers no {method} (approval policy {APPROVAL})"
        step.write.append(_line({"id": m["id"], "error": {"code": NO_ANSWER, "message": message}}))
        step.entries.append(Entry("note", f"codex asked {method}; answered with an error", self.turn))

    def _answer(self, m: dict[str, Any], step: Step) -> None:
        ask = self._asked.pop(m["id"], None) if isinstance(m["id"], int) else None
        if ask is None:
            return
        err = _dict(m.get("error")) if "error" in m else None
        why = str(err.get("message") or err) if err is not None else ""
        if ask.method in ("thread/start", "thread/resume"):
            if err is not None:
                self._held.clear()  # never written: the supervisor still holds them
                what = f"thread {self._resuming}" if ask.method == "thread/resume" else "a thread"
                step.failed = f"codex could not open {what} ({ask.method}): {why}"
                return
            thread = _str(_dict(_dict(m.get("result")).get("thread")).get("id"))
            self.thread_id = thread or self._resuming
            self._ready = self.thread_id is not None
            step.session_id = self.thread_id
            self._flush(step)
        elif ask.method == "turn/steer":
            self._steering -= 1
            if err is not None:  # the turn ended before the steer reached it: the text starts the next
                step.write.append(self._start(ask.text))
                note = f"the turn had ended before the message reached it ({why}): it starts the next turn"
                step.entries.append(Entry("note", note, self.turn, data={"told": "next_turn"}))
            self._flush(step)
        elif ask.method == "turn/start" and err is not None:
            step.failed = f"codex refused the message (turn/start): {why}"
        elif ask.method == "initialize" and err is not None:
            step.failed = f"codex refused initialize: {why}"
        # a refused turn/interrupt: the turn had ended already, its turn/completed says how

    def _notification(self, method: str, p: dict[str, Any], step: Step) -> None:
        if method == "thread/started":
            step.session_id = _str(_dict(p.get("thread")).get("id"))
        elif method == "turn/started":
            self._turn_started(_dict(p.get("turn")), step)
        elif method == "item/started":
            self._item_started(_dict(p.get("item")), step)
        elif method == "item/completed":
            self._item_completed(_dict(p.get("item")), step)
        elif method == "thread/tokenUsage/updated" and self.running and p.get("turnId") == self._turn_id:
            self._usage_update(_dict(p.get("tokenUsage")))
        elif method == "error":
            message = str(_dict(p.get("error")).get("message") or "error")
            self._error = message
            retry = " (codex retries)" if p.get("willRetry") else ""
            step.entries.append(Entry("note", short(message, RESULT_KEPT) + retry, self.turn))
        elif method == "turn/completed" and self.running:
            step.ended = self._turn_completed(_dict(p.get("turn")))

    def _turn_started(self, turn: dict[str, Any], step: Step) -> None:
        if self.running:
            return
        self.running, self._turn_id = True, _str(turn.get("id"))
        self._said, self._error, self._base, self._total = "", None, None, None
        self.turn += 1
        step.started = self.turn

    def _item_started(self, item: dict[str, Any], step: Step) -> None:
        kind = item.get("type")
        if kind == "commandExecution":
            line = f"shell {short(command_of(item).replace(chr(10), ' '), 200)}".rstrip()
            step.entries.append(Entry("tool", line, self.turn, data={"tool": "shell"}))
        elif kind == "fileChange":
            paths = [self._rel(str(_dict(c).get("path", ""))) for c in item.get("changes") or []]
            line = short("apply_patch " + " ".join(paths), 200)
            step.entries.append(Entry("tool", line, self.turn, data={"tool": "apply_patch"}))
        elif kind == "mcpToolCall":
            name = f"mcp__{item.get('server', '?')}__{item.get('tool', '?')}"
            step.entries.append(Entry("tool", tool_line(name, item.get("arguments")), self.turn, data={"tool": name}))
        elif kind == "dynamicToolCall":
            name = str(item.get("tool", "?"))
            step.entries.append(Entry("tool", tool_line(name, item.get("arguments")), self.turn, data={"tool": name}))
        elif kind == "webSearch":
            line = f"web_search {short(str(item.get('query', '')), 200)}".rstrip()
            step.entries.append(Entry("tool", line, self.turn, data={"tool": "web_search"}))

    def _item_completed(self, item: dict[str, Any], step: Step) -> None:
        kind = item.get("type")
        if kind == "agentMessage" and (text := _str(item.get("text"))) and text.strip():
            self._said = text
            step.entries.append(Entry("agent", short(text, TEXT_KEPT), self.turn))
        elif kind == "commandExecution":
            code = item.get("exitCode")
            out = str(item.get("aggregatedOutput") or "").strip() or f"exit {code}"
            failed = item.get("status") in ("failed", "declined") or (isinstance(code, int) and code != 0)
            data = {"error": failed, "exit": code}
            step.entries.append(Entry("result", short(out, RESULT_KEPT), self.turn, data=data))
        elif kind == "fileChange":
            status = str(item.get("status", ""))
            step.entries.append(Entry("result", status, self.turn, data={"error": status != "completed"}))
        elif kind in ("mcpToolCall", "dynamicToolCall"):
            err = _dict(item.get("error"))
            if err:
                text, failed = str(err.get("message", "")), True
            else:
                content = (
                    _dict(item.get("result")).get("content") if kind == "mcpToolCall" else item.get("contentItems")
                )
                text, failed = result_text(content), item.get("success") is False
            step.entries.append(Entry("result", short(text, RESULT_KEPT), self.turn, data={"error": failed}))

    def _rel(self, path: str) -> str:
        return path[len(self._cwd) + 1 :] if self._cwd and path.startswith(self._cwd + "/") else path

    def _usage_update(self, usage: dict[str, Any]) -> None:
        """The thread's total at the turn's first update, less that request's own, is the total
        before the turn: a resume replays the last turn's update, and a repeated update adds nothing."""
        total = {k: _int(_dict(usage.get("total")).get(k)) for k in USAGE_KEYS}
        if self._base is None:
            last = {k: _int(_dict(usage.get("last")).get(k)) for k in USAGE_KEYS}
            self._base = {k: max(0, total[k] - last[k]) for k in USAGE_KEYS}
        self._total = total

    def _turn_usage(self) -> Usage:
        base, total = self._base or {}, self._total or {}
        d = {k: max(0, total.get(k, 0) - base.get(k, 0)) for k in USAGE_KEYS}
        return Usage(
            input_tokens=d["inputTokens"],
            output_tokens=d["outputTokens"],
            cache_read_tokens=d["cachedInputTokens"],
            cache_creation_tokens=d["cacheWriteInputTokens"],
            turns=1,
        )

    def _turn_completed(self, turn: dict[str, Any]) -> TurnEnd:
        self.running, self._turn_id = False, None
        said = [
            i["text"] for i in turn.get("items") or [] if _dict(i).get("type") == "agentMessage" and _str(i.get("text"))
        ]
        text = said[-1] if said else self._said
        status = {"completed": "success", "interrupted": "interrupted"}.get(str(turn.get("status")), "error")
        error = None
        if status == "error":
            error = str(_dict(turn.get("error")).get("message") or self._error or f"the turn {turn.get('status')}")
        return TurnEnd(self.turn, status, text, self._turn_usage(), error=error)  # type: ignore[arg-type]
