"""`merge_wave` over the real MCP client and a real `wavewait mcp` on stdio: the same merge
queue as `wavewait merge`, on five real flights and a real repository."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gittools import git, make_repo
from mcptools import data, error_text, mcp_client
from mergetools import CHECK, WAVE, five_flights, preset_file, subjects

pytestmark = [pytest.mark.anyio, pytest.mark.one_bus]


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    r = make_repo(tmp_path / "project", monkeypatch)
    (r / ".git" / "info" / "exclude").write_text(".wavebus/\n")
    return r


async def test_merge_wave_merges_three_stops_two_and_a_second_call_moves_nothing(bus, repo, tmp_path) -> None:
    fl = await five_flights(bus, repo, preset_file(tmp_path))
    env = {"WAVEWAIT_WORKTREES": os.environ["WAVEWAIT_WORKTREES"]}
    async with mcp_client(bus, env=env, cwd=str(repo)) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        assert "merge_wave" in tools and "check" in tools["merge_wave"].input_schema["properties"]
        planned = data(await c.call_tool("merge_wave", {"wave": WAVE, "dry_run": True}))
        assert planned["status"] == "planned"
        assert planned["overlap"] == [{"path": "src/app.py", "flights": ["pair-one", "pair-two"]}]

        out = data(await c.call_tool("merge_wave", {"wave": WAVE, "check": CHECK}))
        assert out["status"] == "needs_input" and out["target"] == "main"
        assert [(f["name"], f["status"]) for f in out["flights"]] == [
            ("alpha", "merged"),
            ("pair-one", "merged"),
            ("broken", "check_failed"),
            ("pair-two", "conflict"),
            ("omega", "merged"),
        ]
        by = {f["name"]: f for f in out["flights"]}
        assert by["pair-two"]["files"] == ["src/app.py"] and by["pair-two"]["agent_id"] == fl["pair-two"].id
        assert by["pair-two"]["branch"] == "wavewait/w5/pair-two"
        assert "broken.flag: the build is broken" in by["broken"]["output"]
        assert "call merge_wave again" in out["hint"]
        listed = {a["name"]: a for a in data(await c.call_tool("list_agents", {"wave": WAVE}))["agents"]}
        assert listed["broken"]["state"] == "needs_input" and listed["pair-two"]["state"] == "needs_input"
        assert listed["alpha"]["state"] == "closed"

        tip = git(repo, "rev-parse", "main").strip()
        again = data(await c.call_tool("merge_wave", {"wave": WAVE, "check": CHECK}))
        assert [f["status"] for f in again["flights"]] == [f["status"] for f in out["flights"]]
        assert git(repo, "rev-parse", "main").strip() == tip
        assert len(subjects(repo)) == 4

        assert "there is no branch 'nope'" in error_text(
            await c.call_tool("merge_wave", {"wave": WAVE, "into": "nope"})
        )
        assert "resolve_with" in error_text(await c.call_tool("merge_wave", {"wave": WAVE, "resolve_with": "vim"}))


async def test_merge_wave_of_flights_that_never_reported_says_nothing_merged(bus, repo) -> None:
    import subprocess

    from conftest import env_for, until, wavewait_cmd

    env = env_for(bus, WAVEWAIT_WORKTREES=os.environ["WAVEWAIT_WORKTREES"])
    work = "echo s > s.txt && git add s.txt && git commit -qm s"  # and no report
    p = subprocess.run(
        wavewait_cmd("spawn", "silent", "--wave", "mute", "--worktree", "-q", "--", "sh", "-c", work),
        env=env,
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    silent = p.stdout.strip()

    async def ended() -> bool:
        a = await bus.get_agent(silent)
        return a is not None and a.finished

    await until(ended, 60, "the flight to end")
    start = git(repo, "rev-parse", "main").strip()
    async with mcp_client(bus, env={"WAVEWAIT_WORKTREES": os.environ["WAVEWAIT_WORKTREES"]}, cwd=str(repo)) as c:
        out = data(await c.call_tool("merge_wave", {"wave": "mute"}))
    assert out["status"] == "nothing_merged"
    assert [f["status"] for f in out["flights"]] == ["skipped"]
    assert "nothing merged" in out["hint"]
    assert git(repo, "rev-parse", "main").strip() == start
