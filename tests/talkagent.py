"""A stand-in agent that speaks Claude Code's stream-json conversation (2.1.x), for tests of
what is built on it (the TUI's flight screen, `transcript --follow`) where the real CLI and
its model are not wanted; tests/hosts runs the real one.

    python talkagent.py [--resume SESSION_ID]

It reads one JSON object a line on stdin for as long as stdin is open, as
`claude -p --input-format stream-json --output-format stream-json --verbose` does
(core/talk/claude.py), and answers each user message with a turn: `system init`, a tool call
(`Bash`, `echo ...`) and its result, the answer `You said: TEXT`, then one `result` with the
turn's usage and the session's cost so far. A message that holds `SLOW` makes its turn work
until a `control_request` interrupt comes, which ends it with a `result` of subtype
`error_during_execution`, as the real CLI does. Messages that come during a turn are taken
as the next turns, in order. Standard library only.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import uuid
from typing import Any

COST_PER_TURN = 0.0003
SLOW_FOR = 600.0  # seconds a SLOW turn works, unless interrupted

session = sys.argv[sys.argv.index("--resume") + 1] if "--resume" in sys.argv else str(uuid.uuid4())
inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
turns = 0


def say(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def read_stdin() -> None:
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if isinstance(msg, dict):
            inbox.put(msg)
    inbox.put(None)


def text_of(msg: dict[str, Any]) -> str:
    content = msg.get("message", {}).get("content", "")
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content)


def usage(i: int, o: int) -> dict[str, int]:
    return {"input_tokens": i, "output_tokens": o, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}


def assistant(block: dict[str, Any]) -> None:
    message = {"role": "assistant", "type": "message", "content": [block], "usage": usage(10, 5)}
    say({"type": "assistant", "message": message, "parent_tool_use_id": None, "session_id": session})


def result(subtype: str, text: str | None) -> None:
    out: dict[str, Any] = {
        "type": "result",
        "subtype": subtype,
        "is_error": subtype != "success",
        "num_turns": 2,
        "session_id": session,
        "total_cost_usd": COST_PER_TURN * turns,
        "usage": usage(20, 10),
    }
    if text is not None:
        out["result"] = text
    say(out)


def turn(text: str, later: list[dict[str, Any]]) -> bool:
    """One turn on `text`; messages that come meanwhile go to `later`. False: stdin closed."""
    global turns
    turns += 1
    say({"type": "system", "subtype": "init", "session_id": session, "cwd": os.getcwd(), "tools": ["Bash"]})
    call = f"toolu_{turns:08d}"
    word = text.split()[0] if text.split() else "nothing"
    assistant({"type": "tool_use", "id": call, "name": "Bash", "input": {"command": f"echo {word}"}})
    say(
        {
            "type": "user",
            "message": {"role": "user", "content": [{"tool_use_id": call, "type": "tool_result", "content": word}]},
            "parent_tool_use_id": None,
            "session_id": session,
        }
    )
    if "SLOW" in text:
        while True:
            try:
                msg = inbox.get(timeout=SLOW_FOR)
            except queue.Empty:
                break
            if msg is None:
                return False
            if msg.get("type") == "control_request":
                request_id = msg.get("request_id")
                say({"type": "control_response", "response": {"subtype": "success", "request_id": request_id}})
                result("error_during_execution", None)
                return True
            later.append(msg)
    answer = f"You said: {text}"
    assistant({"type": "text", "text": answer})
    result("success", answer)
    return True


def main() -> None:
    threading.Thread(target=read_stdin, daemon=True).start()
    later: list[dict[str, Any]] = []
    while True:
        msg = later.pop(0) if later else inbox.get()
        if msg is None:
            return
        if msg.get("type") == "user" and not turn(text_of(msg), later):
            return


if __name__ == "__main__":
    main()
