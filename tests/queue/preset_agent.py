"""A stand-in for an agent CLI that a preset runs (`mcp = "claude"`): `preset_agent.py
--mcp-config JSON … -- PROMPT`.

It takes its task's binding only from the MCP server the preset gives it (the queue and
task variables are removed from its own environment first: an agent CLI need not pass its
environment on), writes a file in the folder it runs in (its worktree), then does what
task_agent.py does: completes its task as a real agent would through wavewait's tools.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import task_agent


def main(argv: list[str]) -> int:
    server = json.loads(argv[argv.index("--mcp-config") + 1])["mcpServers"]["wavewait"]
    prompt = argv[argv.index("--") + 1]
    for key in [k for k in os.environ if k.startswith(("WAVEWAIT_TASK", "WAVEWAIT_QUEUE"))]:
        del os.environ[key]
    os.environ.update(server["env"])
    name = prompt.split()[2]  # "Do step NAME (MODE)."
    Path(f"{name}.txt").write_text(f"step {name} in {os.getcwd()}\n")
    return asyncio.run(task_agent.main(prompt))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
