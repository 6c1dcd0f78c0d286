"""A wave of five real coding flights on a real repository, for the merge queue's tests.

Each flight is a real agent on the bus: a preset whose agent replays Claude Code's events
(tests/core/replay_agent.py) after writing its files, in its own worktree; its supervisor
commits what it left on its branch and reports for it. They run one after another, so they
report in the order given:

- `alpha` adds alpha.txt
- `pair-one` changes the first line of src/app.py
- `broken` adds broken.flag, which the check refuses
- `pair-two` changes the same line of src/app.py another way (it conflicts with pair-one)
- `omega` adds omega.txt
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from wavewait.core import agents, flights
from wavewait.core.bus import Bus
from wavewait.core.model import Agent

from conftest import until
from gittools import git

REPLAY = str(Path(__file__).parent / "core" / "replay_agent.py")
WAVE = "w5"
#: the check: a real command, failing while broken.flag is in the tree (its last line says so)
CHECK = "echo checking; if [ -e broken.flag ]; then echo 'broken.flag: the build is broken'; exit 3; fi"
PLANS = {
    "alpha": {"alpha.txt": "alpha\n"},
    "pair-one": {"src/app.py": "a = 10\nb = 2\n"},
    "broken": {"broken.flag": "x\n"},
    "pair-two": {"src/app.py": "a = 20\nb = 2\n"},
    "omega": {"omega.txt": "omega\n"},
}


def preset_file(folder: Path) -> str:
    f = folder / "presets.toml"
    f.write_text(
        f"""
[presets.replay]
program = {json.dumps(sys.executable)}
args = [{json.dumps(REPLAY)}, "{{prompt}}"]
events = "claude"
"""
    )
    return str(f)


async def ended(bus: Bus, agent_id: str) -> Agent:
    async def check() -> bool:
        a = await bus.get_agent(agent_id)
        return a is not None and a.finished and a.exit_code is not None and a.reported_at is not None

    await until(check, 60, "the flight to end and report")
    a = await bus.get_agent(agent_id)
    assert a is not None
    return a


async def flight(bus: Bus, repo: Path, presets: str, name: str, files: dict[str, str], wave: str = WAVE) -> Agent:
    plan = {"events": "claude-success.jsonl", "write": files}
    a = await flights.start(
        bus,
        name,
        parent_id="orchestrator",
        preset="replay",
        presets_file=presets,
        prompt=json.dumps(plan),
        cwd=str(repo),
        wave=wave,
    )
    return await ended(bus, a.id)


async def five_flights(bus: Bus, repo: Path, presets: str) -> dict[str, Agent]:
    """The five flights, each ended and reported before the next starts (so in this order)."""
    await agents.register(bus, "orchestrator")
    return {name: await flight(bus, repo, presets, name, files) for name, files in PLANS.items()}


def first_parents(repo: Path, branch: str = "main") -> list[str]:
    """The target's history, newest first, one commit per merge."""
    return git(repo, "rev-list", "--first-parent", branch).split()


def subjects(repo: Path, branch: str = "main") -> list[str]:
    return git(repo, "log", "--first-parent", "--format=%s", branch).splitlines()
