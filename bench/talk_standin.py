"""A stand-in agent that speaks Claude Code's stream-json conversation (core/talk/claude.py), for
bench/bench_talk.py: it answers each user message at once with one turn, and notes when it read
each line (`STANDIN_LOG`, one `<epoch> <kind> <text>` a line), so the bench measures what a tell
costs up to the agent's own stdin, without a model in the way.

    python bench/talk_standin.py [--resume SESSION_ID]
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid


def say(obj: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main() -> None:
    session = sys.argv[sys.argv.index("--resume") + 1] if "--resume" in sys.argv else str(uuid.uuid4())
    log = open(os.environ["STANDIN_LOG"], "a", buffering=1)
    log.write(f"{time.time()} start {session}\n")
    cost = 0.0
    for line in sys.stdin:
        read_at = time.time()
        msg = json.loads(line)
        if msg.get("type") == "control_request":
            say({"type": "control_response", "response": {"subtype": "success", "request_id": msg["request_id"]}})
            continue
        text = msg["message"]["content"]
        log.write(f"{read_at} user {text}\n")
        cost += 0.0001
        say({"type": "system", "subtype": "init", "session_id": session})
        say(
            {
                "type": "assistant",
                "session_id": session,
                "message": {
                    "id": uuid.uuid4().hex,
                    "content": [{"type": "text", "text": f"heard: {text}"}],
                    "usage": {"input_tokens": 10, "output_tokens": 5},
                },
            }
        )
        say(
            {
                "type": "result",
                "subtype": "success",
                "session_id": session,
                "result": f"heard: {text}",
                "usage": {"input_tokens": 10, "output_tokens": 5},
                "total_cost_usd": cost,
                "num_turns": 1,
            }
        )


if __name__ == "__main__":
    main()
