"""The CLI's coding-flight commands with real git: spawn in a worktree, diff, prune."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import env_for, until, wavewait_cmd
from gittools import branches, make_repo, status

pytestmark = [pytest.mark.anyio, pytest.mark.one_bus]


def run(bus, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(wavewait_cmd(*args), env=env_for(bus), cwd=cwd, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["spawn", "x", "--preset", "nope", "--", "hi"], "preset: no preset 'nope'; known: claude, codex"),
        (["spawn", "x", "--preset", "claude"], "give the prompt after --: spawn NAME --preset P -- PROMPT"),
        (["spawn", "x", "--base", "HEAD", "--no-worktree", "--", "true"], "base: applies to a flight in its own"),
        (["spawn", "x", "--model", "m", "--", "true"], "model: applies to a preset"),
        (["spawn", "x", "--env", "1X=y", "--", "true"], "--env: '1X' is not a variable name"),
        (["spawn", "x", "--env", "novalue", "--", "true"], "--env: give NAME=value"),
        (["spawn", "x", "--cwd", "/no/such/dir", "--", "true"], "--cwd: '/no/such/dir' is not a directory"),
    ],
)
async def test_spawn_refuses_what_cannot_apply(bus, tmp_path, monkeypatch, args, words):
    repo = make_repo(tmp_path / "project", monkeypatch)
    r = run(bus, repo, *args)
    assert r.returncode == 2 and words in r.stderr, r.stderr
    assert branches(repo) == ["main"]


async def _ended_with_final_changes(bus, agent_id: str) -> bool:
    a = await bus.get_agent(agent_id)
    return a.finished and a.changes is not None and a.changes.final


async def test_spawn_in_a_worktree_then_diff_and_prune(bus, tmp_path, monkeypatch):
    repo = make_repo(tmp_path / "project", monkeypatch)
    sub = repo / "src"
    r = run(
        bus, repo, "spawn", "fixer", "--wave", "w", "--worktree", "--cwd", "src", "--env", "WORD=fixed", "--",
        "sh", "-c", 'echo "$WORD" >> app.py',
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    agent_id = json.loads(r.stdout)["agent_id"]
    await until(lambda: _ended_with_final_changes(bus, agent_id), 30, "the flight to end")
    stat = json.loads(run(bus, repo, "diff", agent_id[:8], "--stat").stdout)
    assert stat["worktree"]["branch"] == "wavewait/w/fixer"
    assert (stat["changes"]["files"], stat["changes"]["added"]) == (1, 1)
    assert "+fixed" in run(bus, repo, "diff", agent_id).stdout
    listed = json.loads(run(bus, repo, "agents", "--wave", "w").stdout)["agents"][0]
    assert listed["changes"]["paths"] == [{"path": "src/app.py", "added": 1, "deleted": 0}]
    assert status(repo) == "" and (sub / "app.py").read_text() == "a = 1\nb = 2\n"
    pruned = json.loads(run(bus, repo, "prune").stdout)
    assert [p["name"] for p in pruned["removed"]] == ["fixer"]
    assert [p["branch"] for p in pruned["branches_kept"]] == ["wavewait/w/fixer"]
    forced = json.loads(run(bus, repo, "prune", "--force").stdout)
    assert [p["branch"] for p in forced["branches_deleted"]] == ["wavewait/w/fixer"]
    assert branches(repo) == ["main"]
    r = run(bus, repo, "diff", "orchestrator")
    assert r.returncode == 2 and "has no worktree" in r.stderr  # the spawner's own record


async def test_diff_of_a_flight_that_changed_nothing_says_so(bus, tmp_path, monkeypatch):
    repo = make_repo(tmp_path / "project", monkeypatch)
    r = run(bus, repo, "spawn", "idler", "--wave", "w", "--worktree", "--", "true")
    assert r.returncode == 0, r.stderr
    agent_id = json.loads(r.stdout)["agent_id"]
    await until(lambda: _ended_with_final_changes(bus, agent_id), 30, "the flight to end")
    r = run(bus, repo, "diff", agent_id[:8])
    assert (r.returncode, r.stdout) == (0, "")  # stdout stays a patch (an empty one) for a pipe
    assert r.stderr == f"wavewait diff: idler ({agent_id[:8]}) has no changes against its base\n"


async def test_prune_force_after_a_merge_leaves_nothing_of_the_repository_behind(bus, tmp_path, monkeypatch):
    """The repository's folder under wavewait's worktrees (its locks, the merge's scratch
    folder) goes with its last worktree."""
    repo = make_repo(tmp_path / "project", monkeypatch)
    folder = tmp_path / "worktrees"

    def run(bus, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
        env = env_for(bus, WAVEWAIT_WORKTREES=str(folder))
        return subprocess.run(wavewait_cmd(*args), env=env, cwd=cwd, capture_output=True, text=True, timeout=60)

    fix = "echo c = 3 >> src/app.py && wavewait notify --message 'c is 3'"  # it reports: the merge takes it
    r = run(bus, repo, "spawn", "fixer", "--wave", "w", "--worktree", "--", "sh", "-c", fix)
    assert r.returncode == 0, r.stderr
    agent_id = json.loads(r.stdout)["agent_id"]
    await until(lambda: _ended_with_final_changes(bus, agent_id), 30, "the flight to end")
    merged = run(bus, repo, "merge", "w")
    assert merged.returncode == 0 and json.loads(merged.stdout)["status"] == "merged", merged.stdout + merged.stderr
    assert "c = 3" in (repo / "src" / "app.py").read_text()  # the target moved
    (kept,) = folder.iterdir()
    assert {".lock", ".merge.lock"} <= {p.name for p in kept.iterdir()}
    forced = run(bus, repo, "prune", "--force")
    assert forced.returncode == 0, forced.stderr
    assert [p["name"] for p in json.loads(forced.stdout)["removed"]] == ["fixer"]
    assert list(folder.iterdir()) == [], [str(p) for p in folder.rglob("*")]
