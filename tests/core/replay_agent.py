"""An agent CLI's run replayed: real event lines captured from Claude Code or Codex
(tests/core/agent_events/), printed on stdout as the CLI printed them, after doing in its
folder what the scenario says. Lets the supervisor's side of a coding flight (reading the
events, committing, counting, reporting) be tested where the real CLIs are not installed;
tests/hosts/test_coding_wave.py runs the real ones.

    python replay_agent.py '{"events": "claude-success.jsonl", "lines": 2, "write": {"f": "x"},
                             "notify": "mine", "gate": "/tmp/fifo", "then": "block" | "exit", "code": 0,
                             "on_term": "finish"}'

`gate`: a named pipe (os.mkfifo) to read before printing anything, so a test decides when
the run goes on (it writes to the pipe) without timing anything.
`on_term: "finish"`: a SIGTERM makes it print the rest of its lines (its final `result`
event) before it exits with 143, as a CLI that reports its run when it is stopped.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent / "agent_events"

plan = json.loads(sys.argv[1].removeprefix("plan: "))  # a prefix: MCP servers may parse JSON-looking strings
for name, text in plan.get("write", {}).items():
    Path(name).parent.mkdir(parents=True, exist_ok=True)
    Path(name).write_text(text)
if "notify" in plan:
    subprocess.run([sys.executable, "-m", "wavewait", "notify", "--message", plan["notify"]], check=True)
if "gate" in plan:
    Path(plan["gate"]).read_text()  # blocks until the test opens the pipe to write, and closes it
lines = (HERE / plan["events"]).read_text().splitlines()
printed = plan.get("lines", len(lines))
if plan.get("on_term") == "finish":

    def finish(_sig: int, _frame: object) -> None:
        for rest in lines[printed:]:
            print(rest, flush=True)
        sys.exit(143)

    signal.signal(signal.SIGTERM, finish)
for line in lines[:printed]:
    print(line, flush=True)
if plan.get("then") == "block":
    while True:  # a run still going, until it is killed
        time.sleep(60)
sys.exit(plan.get("code", 0))
