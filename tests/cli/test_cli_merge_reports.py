"""`wavewait merge` after flights reported, as a user runs it: plain commands spawned with
`--worktree` in a real repository, each committing a change and reporting with `wavewait send`
or `wavewait notify`, a `wavewait wait` that takes the reports, then the merge. One meaning of
"reported" (docs/words.md) for the wait and the merge; a merge that merged nothing says
`nothing_merged` and exits 9; a wave that does not exist is bad input; a rerun says why each
branch is `merged`; a merge waits for the one that holds the repository's lock, then exits 7."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from conftest import clean_env, env_for, until, wavewait_cmd
from gittools import git, make_repo
from mergetools import first_parents, subjects

pytestmark = [pytest.mark.anyio, pytest.mark.one_bus]

DOCS = Path(__file__).resolve().parents[2] / "docs"
SEND = "wavewait send orchestrator"
NOTIFY = "wavewait notify --status success --message"


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    r = make_repo(tmp_path / "project", monkeypatch)
    (r / ".git" / "info" / "exclude").write_text(".wavebus/\n")
    return r


def cli(bus, repo: Path, *args: str, timeout: float = 120) -> tuple[int, dict, str]:
    """One `wavewait` command, run in the repository as a user would; its exit code, JSON, stderr."""
    env = env_for(bus, WAVEWAIT_WORKTREES=os.environ["WAVEWAIT_WORKTREES"])
    p = subprocess.run(wavewait_cmd(*args), env=env, cwd=repo, capture_output=True, text=True, timeout=timeout)
    return p.returncode, json.loads(p.stdout) if p.stdout.strip().startswith("{") else {}, p.stderr


def spawn_wave(bus, repo: Path, wave: str, names: list[str], report: str | None) -> list[str]:
    """Plain commands in worktrees, each committing its own file, then (if `report`) reporting."""
    ids = []
    for name in names:
        work = f"echo {name} > {name}.txt && git add {name}.txt && git commit -qm {name}"
        if report is not None:
            work += f" && {report} {name}-done"
        code, _, err = cli(bus, repo, "spawn", name, "--wave", wave, "--worktree", "-q", "--", "sh", "-c", work)
        assert code == 0, err
    code, listed, err = cli(bus, repo, "agents", "--wave", wave)
    assert code == 0, err
    ids = [a["id"] for a in listed["agents"]]
    assert len(ids) == len(names)
    return ids


async def ended(bus, ids: list[str]) -> None:
    async def check() -> bool:
        agents = [await bus.get_agent(i) for i in ids]
        return all(a is not None and a.finished for a in agents)

    await until(check, 60, "the flights to end")


@pytest.mark.both_buses
async def test_flights_that_report_with_send_are_merged_once_a_wait_took_their_reports(bus, repo) -> None:
    """The issue's race: reports sent with `wavewait send`, taken by `wavewait wait`: the merge merges them."""
    spawn_wave(bus, repo, "race", ["fix-1", "fix-2", "fix-3"], SEND)
    code, joined, err = cli(bus, repo, "wait", "60", "--wave", "race")
    assert code == 0, err
    assert joined["status"] == "complete"
    assert [r["status"] for r in joined["results"]] == ["received"] * 3
    start = git(repo, "rev-parse", "main").strip()
    # the check sees each merged tree (one fix file at least, whichever reported first: the
    # merge order is the order of the first reports, docs/merging.md)
    code, out, err = cli(bus, repo, "merge", "race", "--check", "ls fix-*.txt")
    assert code == 0, (out, err)
    assert out["status"] == "merged"
    assert sorted(f["status"] for f in out["flights"]) == ["merged"] * 3
    assert len(first_parents(repo)) == 4 and first_parents(repo)[-1] == start  # the first commit and 3 merges
    assert sorted(subjects(repo)[:3]) == [f"Merge wavewait/race/fix-{n} (fix-{n}) into main" for n in (1, 2, 3)]
    assert sorted(p.name for p in repo.glob("fix-*.txt")) == ["fix-1.txt", "fix-2.txt", "fix-3.txt"]


@pytest.mark.both_buses
async def test_a_wave_whose_flights_never_reported_merges_nothing_and_exits_9(bus, repo) -> None:
    ids = spawn_wave(bus, repo, "quiet", ["q-1", "q-2"], None)
    await ended(bus, ids)  # they committed and exited 0 (closed) without a report
    start = git(repo, "rev-parse", "main").strip()
    code, out, err = cli(bus, repo, "merge", "quiet", "--check", "true")
    assert code == 9, (out, err)
    assert out["status"] == "nothing_merged"
    assert [(f["status"], f["why"]) for f in out["flights"]] == [
        ("skipped", "it did not report (still running, or ended without a report)")
    ] * 2
    assert git(repo, "rev-parse", "main").strip() == start
    # the plan of the same says what the merge would do, and exits 0 (a plan moved nothing)
    code, plan, err = cli(bus, repo, "merge", "quiet", "--dry-run")
    assert code == 0 and plan["status"] == "planned", err


async def test_merge_of_a_wave_that_has_no_flight_is_bad_input_naming_the_wave(bus, repo) -> None:
    spawn_wave(bus, repo, "real", ["r-1"], NOTIFY)
    code, out, err = cli(bus, repo, "merge", "nosuchwave")
    assert code == 2 and out == {}
    assert "there is no wave 'nosuchwave'" in err and "wavewait agents" in err, err
    assert "branch" not in err


async def test_a_rerun_says_why_each_branch_is_merged(bus, repo) -> None:
    ids = spawn_wave(bus, repo, "again", ["a-1", "a-2"], NOTIFY)
    await ended(bus, ids)
    code, first, err = cli(bus, repo, "merge", "again")
    assert code == 0 and [f["status"] for f in first["flights"]] == ["merged", "merged"], err
    tip = git(repo, "rev-parse", "main").strip()
    code, again, err = cli(bus, repo, "merge", "again")
    assert code == 0 and again["status"] == "merged", err
    # docs/merging.md, "The plan": the merge then says `merged` (`its branch is already in the target`)
    assert [(f["status"], f.get("why")) for f in again["flights"]] == [
        ("merged", "its branch is already in the target")
    ] * 2
    assert [f["commit"] for f in again["flights"]] == [f["commit"] for f in first["flights"]]  # the earlier merges
    assert git(repo, "rev-parse", "main").strip() == tip
    assert "`merged` (`its branch is already in the target`)" in (DOCS / "merging.md").read_text()


async def test_a_merge_waits_for_the_one_holding_the_lock_then_exits_7(bus, repo, tmp_path) -> None:
    """docs/merging.md: a second merge waits up to 5 s for the one running, then exits 7; a
    merge of a wave already merged too (it is not answered without the lock)."""
    ids = spawn_wave(bus, repo, "done", ["d-1"], NOTIFY) + spawn_wave(bus, repo, "slow", ["s-1"], NOTIFY)
    await ended(bus, ids)
    code, _, err = cli(bus, repo, "merge", "done")
    assert code == 0, err
    hold, running = tmp_path / "hold", tmp_path / "running"
    hold.write_text("")
    check = f"touch {running}; while [ -e {hold} ]; do sleep 0.05; done"
    env = env_for(bus, WAVEWAIT_WORKTREES=os.environ["WAVEWAIT_WORKTREES"])
    slow = subprocess.Popen(
        wavewait_cmd("merge", "slow", "--check", check),
        env=env,
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        await until(running.exists, 60, "the slow merge's check to start")
        t = time.monotonic()
        code, out, err = cli(bus, repo, "merge", "done")
        assert code == 7 and out == {}, (out, err)
        assert time.monotonic() - t >= 5
        assert "another wavewait merge of" in err and "is running" in err
    finally:
        hold.unlink()
        slow.communicate(timeout=60)
    assert slow.returncode == 0
    page = (DOCS / "merging.md").read_text()
    assert "waits up to 5 s" in page and "exits 7" in page


async def test_a_flight_the_merge_stopped_is_closed_with_state_needs_input_as_the_page_says(bus, repo) -> None:
    """`wavewait agents`: status is the lifecycle (closed), state adds needs_input (docs/words.md);
    docs/merging.md says the same of a flight the merge queue stopped."""
    for name, text in (("one", "1"), ("two", "2")):  # both change README: the second conflicts
        work = f"echo {text} > README && git commit -qam {name} && {NOTIFY} {name}-done"
        code, _, err = cli(bus, repo, "spawn", name, "--wave", "clash", "--worktree", "-q", "--", "sh", "-c", work)
        assert code == 0, err
        _, listed, _ = cli(bus, repo, "agents", "--wave", "clash")
        await ended(bus, [a["id"] for a in listed["agents"]])
    code, out, err = cli(bus, repo, "merge", "clash")
    assert code == 6, err
    assert [f["status"] for f in out["flights"]] == ["merged", "conflict"]
    _, listed, _ = cli(bus, repo, "agents", "--wave", "clash")
    two = next(a for a in listed["agents"] if a["name"] == "two")
    assert (two["status"], two["state"]) == ("closed", "needs_input")
    page = (DOCS / "merging.md").read_text()
    assert '`"status": "closed"` (its lifecycle) and `"state": "needs_input"`' in page


async def test_spawn_worktree_puts_the_worktree_where_the_pages_say(bus, repo, tmp_path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = clean_env(WAVEWAIT_BUS=bus.url, HOME=str(home))
    env.pop("XDG_STATE_HOME", None)
    p = subprocess.run(
        wavewait_cmd("spawn", "w", "--wave", "where", "--worktree", "--", "true"),
        env=env,
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    agent = await bus.get_agent(json.loads(p.stdout)["agent_id"])
    assert agent is not None and agent.worktree is not None
    where = home / ".local" / "state" / "wavewait" / "worktrees"
    assert Path(agent.worktree.path).parent.parent.parent == where.resolve()
    said = "~/.local/state/wavewait/worktrees"
    for page, before in (
        ("coding-waves.md", "## A wave, step by step"),
        ("merging.md", "## Step by step"),
        ("cli.md", "## Flights"),
    ):
        text = (DOCS / page).read_text()
        assert said in text[: text.index(before)], f"{page} says where worktrees live before {before!r}"
    assert re.search(r"WAVEWAIT_WORKTREES", (DOCS / "cli.md").read_text())


async def test_a_flight_asking_a_question_has_reported_but_is_not_merged_until_answered(bus, repo) -> None:
    """A question is a report (docs/words.md), but a flight waiting for its answer is mid-work:
    the merge skips it and says why; answered, and done, it merges."""
    work = "echo q > q.txt && git add q.txt && git commit -qm q && wavewait ask 'keep q.txt?' --timeout 120"
    code, _, err = cli(bus, repo, "spawn", "asker", "--wave", "ask", "--worktree", "-q", "--", "sh", "-c", work)
    assert code == 0, err

    async def asking() -> bool:
        return any(a.state == "needs_input" for a in await bus.list_agents() if a.name == "asker")

    await until(asking, 60, "the flight to ask")
    start = git(repo, "rev-parse", "main").strip()
    code, out, err = cli(bus, repo, "merge", "ask")
    assert code == 9 and out["status"] == "nothing_merged", (out, err)
    assert [(f["status"], f["why"]) for f in out["flights"]] == [
        ("skipped", "it asked a question nobody answered yet: answer it (wavewait reply), then merge again")
    ]
    assert git(repo, "rev-parse", "main").strip() == start
    asker = out["flights"][0]["agent_id"]
    code, _, err = cli(bus, repo, "reply", asker, "yes")
    assert code == 0, err
    await ended(bus, [asker])
    code, out, err = cli(bus, repo, "merge", "ask")
    assert code == 0 and [f["status"] for f in out["flights"]] == ["merged"], (out, err)
    assert (repo / "q.txt").read_text() == "q\n"
