"""Every face hands the core's one spawn verb (core/spawning.py) the same request for the same
spawn: `wavewait spawn`'s flags, the TUI's `/spawn` (the same flag table) and `spawn_agent`'s
arguments; `spawn` then starts that request as it is."""

from __future__ import annotations

import shlex

import pytest

from wavewait.cli_parser import parse_args
from wavewait.core import spawning, waves
from wavewait.core.agents import register
from wavewait.core.spawning import SpawnRequest
from wavewait.mcp.settings import Settings
from wavewait.mcp.spawn_args import spawn_request as mcp_request
from wavewait.spawn_flags import spawn_request as flags_request
from wavewait.tui.commands import parse

from conftest import until

pytestmark = [pytest.mark.anyio, pytest.mark.one_bus]

COMMAND = ["sh", "-c", 'echo "$WORD" > said.txt']
FLAGS = [
    "--wave", "w", "--max-parallel", "3", "--budget-tokens", "5000", "--budget-usd", "2.5",
    "--flight-budget-tokens", "900", "--flight-budget-usd", "0.5", "--cwd", "work", "--env", "WORD=hello",
]  # fmt: skip


def cli_request(args: list[str]) -> SpawnRequest:
    return flags_request(parse_args(args), "orchestrator")


def tui_request(line: str) -> SpawnRequest:
    parsed = parse(line)
    assert parsed.spawn is not None
    return flags_request(parsed.spawn, "orchestrator")


@pytest.fixture
def here(tmp_path, monkeypatch):
    """A project folder with a `work` folder in it, where each face starts."""
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path.resolve()


async def test_the_cli_the_tui_and_the_mcp_tool_make_one_request(here):
    cli = cli_request(["spawn", "job", *FLAGS, "--", *COMMAND])
    tui = tui_request(f"/spawn job {shlex.join(FLAGS)} -- {shlex.join(COMMAND)}")
    mcp = await mcp_request(
        Settings(bus="unused", caller="orchestrator", project_dir=str(here)),
        "job",
        command=COMMAND,
        cwd="work",
        env={"WORD": "hello"},
        wave="w",
        max_parallel=3,
        budget_tokens=5000,
        budget_usd=2.5,
        flight_budget_tokens=900,
        flight_budget_usd=0.5,
    )
    assert cli == tui == mcp
    assert cli == SpawnRequest(
        name="job",
        parent="orchestrator",
        command=COMMAND,
        cwd=str(here / "work"),
        env={"WORD": "hello"},
        wave="w",
        max_parallel=3,
        budget_tokens=5000,
        budget_usd=2.5,
        flight_budget_tokens=900,
        flight_budget_usd=0.5,
    )


async def test_a_preset_spawn_is_one_request_too(here):
    flags = ["--preset", "codex", "--model", "o3", "--no-worktree", "--base", "v1"]
    cli = cli_request(["spawn", "fixer", *flags, "--", "fix", "the", "bug"])
    tui = tui_request(f"/spawn fixer {shlex.join(flags)} fix the bug")
    mcp = await mcp_request(
        Settings(bus="unused", caller="orchestrator", project_dir=str(here)),
        "fixer",
        prompt="fix the bug",
        preset="codex",
        model="o3",
        worktree=False,
        base="v1",
    )
    assert cli == tui == mcp
    assert (cli.preset, cli.prompt, cli.command, cli.model, cli.worktree, cli.base) == (
        "codex", "fix the bug", None, "o3", False, "v1",
    )  # fmt: skip


async def test_the_verb_starts_the_request_as_it_is(file_bus, here):
    await register(file_bus, "orchestrator")
    flight = await spawning.spawn(file_bus, cli_request(["spawn", "job", *FLAGS, "--", *COMMAND]))
    said = here / "work" / "said.txt"
    await until(lambda: said.is_file() and said.read_text() == "hello\n", 20, what="the flight's file")
    settings = await waves.get_settings(file_bus, "w")
    assert (settings.max_parallel, settings.budget_tokens, settings.budget_usd) == (3, 5000, 2.5)
    assert (flight.wave, flight.cwd, flight.command) == ("w", str(here / "work"), COMMAND)
    assert (flight.budget.tokens, flight.budget.usd) == (900, 0.5)
