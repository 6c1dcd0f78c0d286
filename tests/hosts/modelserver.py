"""A scripted model on 127.0.0.1: the Anthropic Messages API and the OpenAI Responses API, streaming.

No model runs here. A scenario's `script` decides each turn from what the host sent (the
tools it offered, the tool results so far) and answers with one tool call, a code cell (Codex's
code mode) or a final text.
Every request body is recorded, so a test asserts on what the MODEL saw, not on what the
host printed.

Requests that are not the agent loop (a host's title or quota probes: no tools offered)
get a short text answer and are recorded too, but never reach the script.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Call:
    """The model calls `tool` (a wavewait tool's bare name, or a host tool's full name)."""

    tool: str
    args: dict[str, Any]


@dataclass
class Say:
    """The model ends its turn with this text."""

    text: str


@dataclass
class Code:
    """The model runs JavaScript in a code cell (Codex's code mode: its custom `exec` tool)."""

    source: str
    tool: str = "exec"


Action = Call | Say | Code


@dataclass
class Turn:
    """What the model saw on one agent-loop request, in host-neutral form."""

    api: str  # "anthropic" | "openai"
    tools: list[str]  # tool names offered on this request
    results: list[str]  # the text of every tool result in the conversation so far, in order
    errors: list[bool | None]  # per result: the host's error flag (None where the wire has none)
    body: dict[str, Any]
    called: list[str] = field(default_factory=list)  # per result: the tool name the model had called
    at: float = 0.0  # when the host sent it (unix time)
    index: int = 0  # its place among every request the server got (side requests included)


Script = Callable[[Turn], Action]


@dataclass
class Recorder:
    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (path, body)
    times: list[float] = field(default_factory=list)  # per request: when it arrived (unix time)
    turns: list[Turn] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


# --------------------------------------------------------------------------- reading requests
def _text_of(content: Any) -> str:
    """Text of a tool result's content in either API (a string or a list of parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, dict):
                if part.get("type") in ("text", "input_text", "output_text"):
                    out.append(str(part.get("text", "")))
                elif part.get("type") == "tool_reference":
                    out.append(f"<tool_reference {part.get('tool_name')}>")
                else:
                    out.append(json.dumps(part)[:2000])
        return "\n".join(out)
    return json.dumps(content)


def anthropic_turn(body: dict[str, Any]) -> Turn:
    tools = [t.get("name", "") for t in body.get("tools", []) if not t.get("defer_loading")]  # callable now
    results: list[str] = []
    errors: list[bool | None] = []
    called: list[str] = []
    names: dict[str, str] = {}
    for m in body.get("messages", []):
        if not isinstance(m.get("content"), list):
            continue
        for part in m["content"]:
            if not isinstance(part, dict):
                continue
            if part.get("type") == "tool_use":
                names[part.get("id", "")] = part.get("name", "")
            elif part.get("type") == "tool_result":
                content = part.get("content", "")
                if isinstance(content, list):  # ToolSearch loads deferred tools by reference
                    tools += [
                        c["tool_name"] for c in content if isinstance(c, dict) and c.get("type") == "tool_reference"
                    ]
                results.append(_text_of(content))
                errors.append(bool(part.get("is_error", False)))
                called.append(names.get(part.get("tool_use_id", ""), "?"))
    return Turn("anthropic", tools, results, errors, body, called)


def _openai_tool_names(tools: list[dict[str, Any]]) -> list[str]:
    names = []
    for t in tools:
        if t.get("type") == "namespace":  # tools grouped under a namespace (MCP servers)
            ns = t.get("name", "")
            sep = "" if ns.endswith("__") else "__"
            names += [f"{ns}{sep}{sub.get('name', '')}" for sub in t.get("tools", [])]
        else:
            names.append(t.get("name") or t.get("type", ""))
    return names


def openai_turn(body: dict[str, Any]) -> Turn:
    """Tools offered up front or loaded by a `tool_search_output`; results of function calls."""
    tools = _openai_tool_names(body.get("tools", []))
    results: list[str] = []
    errors: list[bool | None] = []
    called: list[str] = []
    names: dict[str, str] = {}
    for item in body.get("input", []):
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "custom_tool_call" and "mcp__wavewait" in str(item.get("input", "")):
            names[item.get("call_id", "")] = f"{item.get('name', '')} (a code cell calling mcp__wavewait)"
        elif kind in ("function_call", "custom_tool_call"):
            ns = item.get("namespace") or ""
            sep = "__" if ns and not ns.endswith("__") else ""
            names[item.get("call_id", "")] = f"{ns}{sep}{item.get('name', '')}"
        elif kind == "tool_search_call":
            names[item.get("call_id", "")] = "tool_search"
        elif kind == "tool_search_output":
            tools += _openai_tool_names(item.get("tools", []))
            results.append(json.dumps(item.get("tools", []))[:4000])
            errors.append(None)
            called.append("tool_search")
        elif kind in ("function_call_output", "custom_tool_call_output"):
            out = item.get("output", "")
            results.append(_text_of(out if not isinstance(out, dict) else out.get("content", out)))
            errors.append(out.get("success") is False if isinstance(out, dict) else None)
            called.append(names.get(item.get("call_id", ""), "?"))
    return Turn("openai", tools, results, errors, body, called)


def find_tool(turn: Turn, name: str) -> str | None:
    """The full name the host gave wavewait's tool `name` (e.g. mcp__wavewait__wait), if offered."""
    for t in turn.tools:
        if re.fullmatch(rf"mcp__wavewait__{re.escape(name)}", t):
            return t
    return None


# --------------------------------------------------------------------------- writing answers
_ids = itertools.count(1)


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def anthropic_stream(action: Action, model: str) -> Iterator[bytes]:
    if isinstance(action, Code):
        raise ValueError("code cells are Codex's (the OpenAI Responses API); answer Claude Code with Call or Say")
    n = next(_ids)
    yield _sse(
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": f"msg_{n}",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": 10, "output_tokens": 1},
            },
        },
    )
    if isinstance(action, Call):
        block = {"type": "tool_use", "id": f"toolu_{n:08d}", "name": action.tool, "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(action.args)}
        stop = "tool_use"
    else:
        block = {"type": "text", "text": ""}
        delta = {"type": "text_delta", "text": action.text}
        stop = "end_turn"
    yield _sse("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block})
    yield _sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
    yield _sse("content_block_stop", {"type": "content_block_stop", "index": 0})
    yield _sse(
        "message_delta",
        {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": 5}},
    )
    yield _sse("message_stop", {"type": "message_stop"})


def anthropic_message(action: Action, model: str) -> dict[str, Any]:
    """The same answer, not streamed (some hosts' side requests)."""
    text = action.text if isinstance(action, Say) else ""
    return {
        "id": f"msg_{next(_ids)}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 1},
    }


def openai_stream(action: Action, model: str) -> Iterator[bytes]:
    n = next(_ids)
    resp = {"id": f"resp_{n}", "object": "response", "model": model, "status": "in_progress", "output": []}
    yield _sse("response.created", {"type": "response.created", "response": resp})
    item: dict[str, Any]
    if isinstance(action, Code):
        item = {
            "type": "custom_tool_call",
            "id": f"ctc_{n}",
            "call_id": f"call_{n}",
            "name": action.tool,
            "input": action.source,
            "status": "completed",
        }
    elif isinstance(action, Call) and action.tool == "tool_search":
        item = {"type": "tool_search_call", "call_id": f"search_{n}", "execution": "client", "arguments": action.args}
    elif isinstance(action, Call) and set(action.args) == {"input"} and action.tool == "apply_patch":
        # a freeform tool (Codex's own file editor): its input is the raw text, not JSON
        item = {
            "type": "custom_tool_call",
            "id": f"ctc_{n}",
            "call_id": f"call_{n}",
            "name": action.tool,
            "input": action.args["input"],
            "status": "completed",
        }
    elif isinstance(action, Call):
        item = {
            "type": "function_call",
            "id": f"fc_{n}",
            "call_id": f"call_{n}",
            "name": action.tool,
            "arguments": json.dumps(action.args),
            "status": "completed",
        }
        if action.tool.startswith("mcp__"):  # Codex loads MCP tools under a namespace
            ns, _, fn = action.tool.rpartition("__")
            item["name"], item["namespace"] = fn, ns
    else:
        item = {
            "type": "message",
            "id": f"msg_{n}",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": action.text, "annotations": []}],
        }
        yield _sse(
            "response.output_item.added",
            {"type": "response.output_item.added", "output_index": 0, "item": {**item, "content": []}},
        )
        yield _sse(
            "response.output_text.delta",
            {"type": "response.output_text.delta", "item_id": item["id"], "output_index": 0, "delta": action.text},
        )
    yield _sse("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item})
    usage = {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 15,
    }
    done = {**resp, "status": "completed", "output": [item], "usage": usage}
    yield _sse("response.completed", {"type": "response.completed", "response": done})


# --------------------------------------------------------------------------- the server
class ModelServer:
    """`with ModelServer(script) as m:` serves on m.url until the block ends."""

    def __init__(self, script: Script, model: str = "scripted") -> None:
        self.script, self.model = script, model
        self.rec = Recorder()
        self.failures: list[str] = []
        handler = type("Handler", (_Handler,), {"server_ref": self})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> ModelServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def turns(self) -> list[Turn]:
        with self.rec.lock:
            return list(self.rec.turns)

    def decide(self, turn: Turn) -> Action:
        with self.rec.lock:
            self.rec.turns.append(turn)
        try:
            return self.script(turn)
        except Exception as e:  # the test reads this; the host gets a plain answer and ends
            self.failures.append(f"script failed on turn {len(self.rec.turns)}: {e!r}")
            return Say(f"script error: {e!r}")


class _Handler(BaseHTTPRequestHandler):
    server_ref: ModelServer
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:  # keep test output quiet
        pass

    def _json(self, code: int, data: dict[str, Any]) -> None:
        raw = json.dumps(data).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _stream(self, chunks: Iterator[bytes]) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        for c in chunks:
            self.wfile.write(c)
            self.wfile.flush()
        self.close_connection = True

    def do_GET(self) -> None:
        ms = self.server_ref
        with ms.rec.lock:
            ms.rec.requests.append((f"GET {self.path}", {}))
            ms.rec.times.append(time.time())
        path = self.path.split("?")[0]
        if path.endswith("/models"):
            self._json(200, {"object": "list", "data": [], "models": []})
        else:
            self._json(404, {"error": {"type": "not_found", "message": f"no {self.path} here"}})

    def do_POST(self) -> None:
        ms = self.server_ref
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {"_raw": raw[:2000].decode("utf-8", "replace")}
        path = self.path.split("?")[0]
        with ms.rec.lock:
            ms.rec.requests.append((f"POST {self.path}", body))
            ms.rec.times.append(at := time.time())
            index = len(ms.rec.requests) - 1

        def turn(t: Turn) -> Turn:
            t.at, t.index = at, index
            return t

        if path.endswith("/messages/count_tokens"):
            self._json(200, {"input_tokens": 100})
        elif path.endswith("/messages"):
            agent_loop = bool(body.get("tools"))
            action = ms.decide(turn(anthropic_turn(body))) if agent_loop else Say("ok")
            if body.get("stream"):
                self._stream(anthropic_stream(action, body.get("model", ms.model)))
            else:
                self._json(200, anthropic_message(action, body.get("model", ms.model)))
        elif path.endswith("/responses"):
            agent_loop = bool(body.get("tools"))
            action = ms.decide(turn(openai_turn(body))) if agent_loop else Say("ok")
            self._stream(openai_stream(action, body.get("model", ms.model)))
        else:
            self._json(404, {"error": {"type": "not_found", "message": f"no {self.path} here"}})
