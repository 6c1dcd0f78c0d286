"""`wavewait merge` as a real process: its JSON and exit codes, a dry run that moves nothing,
and a SIGKILL in the middle of a slow check that leaves the target at its last good merge,
after which the next run continues and merges nothing twice."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from wavewait.core.proc import alive

from conftest import env_for, until, wavewait_cmd
from gittools import git, make_repo
from mergetools import CHECK, WAVE, first_parents, five_flights, preset_file, subjects

pytestmark = [pytest.mark.anyio, pytest.mark.one_bus]


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    r = make_repo(tmp_path / "project", monkeypatch)
    (r / ".git" / "info" / "exclude").write_text(".wavebus/\n")
    return r


def merge_cmd(bus, repo: Path, *args: str) -> subprocess.Popen[str]:
    env = env_for(bus, WAVEWAIT_WORKTREES=os.environ["WAVEWAIT_WORKTREES"])
    return subprocess.Popen(
        wavewait_cmd("merge", *args), env=env, cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def merge(bus, repo: Path, *args: str) -> tuple[int, dict, str]:
    p = merge_cmd(bus, repo, *args)
    out, err = p.communicate(timeout=120)
    return p.returncode, json.loads(out) if out.strip() else {}, err


async def test_dry_run_shows_the_order_and_the_overlap_and_moves_nothing(bus, repo, tmp_path) -> None:
    await five_flights(bus, repo, preset_file(tmp_path))
    start = git(repo, "rev-parse", "main").strip()
    code, out, err = merge(bus, repo, WAVE, "--dry-run", "--check", CHECK)
    assert code == 0, err
    assert out["status"] == "planned" and out["dry_run"] is True and out["target"] == "main"
    assert [f["name"] for f in out["flights"]] == ["alpha", "pair-one", "broken", "pair-two", "omega"]
    assert out["overlap"] == [{"path": "src/app.py", "flights": ["pair-one", "pair-two"]}]
    # each flight as the merge would find it: pair-two conflicts; the others would merge if the check passes
    assert [(f["status"], f["why"]) for f in out["flights"]] == [
        ("pending", "it would be merged, if the check passes"),
        ("pending", "it would be merged, if the check passes"),
        ("pending", "it would be merged, if the check passes"),
        ("conflict", "it would conflict with the target in these files"),
        ("pending", "it would be merged, if the check passes"),
    ]
    assert out["flights"][3]["files"] == ["src/app.py"]
    assert out["method"] == "merge --no-ff" and "revert" in out["method_why"]
    assert git(repo, "rev-parse", "main").strip() == start
    code, _, err = merge(bus, repo, WAVE, "--into", "nope")
    assert code == 2 and "there is no branch 'nope'" in err


async def test_a_sigkill_during_a_slow_check_leaves_the_last_good_merge_and_the_next_run_continues(
    bus, repo, tmp_path
) -> None:
    await five_flights(bus, repo, preset_file(tmp_path))
    start = git(repo, "rev-parse", "main").strip()
    slow, running = tmp_path / "slow", tmp_path / "check-running"
    slow.write_text("")
    # omega's check is slow while the file `slow` exists: it says so (its pid), then sleeps
    check = f"{CHECK}; if [ -e omega.txt ] && [ -e {slow} ]; then echo $$ > {running}; sleep 60; fi"
    p = merge_cmd(bus, repo, WAVE, "--check", check)
    try:
        await until(lambda: running.exists() and running.read_text().strip() != "", 120, "omega's check to start")
    finally:
        p.kill()
        p.communicate(timeout=30)
    assert p.returncode == -signal.SIGKILL
    # the check runner's stdin closed with the merge: it ends the check's session itself
    check_pid = int(running.read_text())
    try:
        await until(lambda: not alive(check_pid), 30, "the orphaned check to be ended by its runner")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(check_pid, signal.SIGKILL)
    # the target is at the last good merge: alpha and pair-one, nothing of omega
    assert subjects(repo)[:2] == [
        "Merge wavewait/w5/pair-one (pair-one) into main",
        "Merge wavewait/w5/alpha (alpha) into main",
    ]
    assert first_parents(repo)[2] == start
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""

    slow.unlink()
    code, out, err = merge(bus, repo, WAVE, "--check", check)
    assert code == 6, err  # two flights need input
    assert out["status"] == "needs_input"
    assert {f["name"]: f["status"] for f in out["flights"]} == {
        "alpha": "merged",
        "pair-one": "merged",
        "broken": "check_failed",
        "pair-two": "conflict",
        "omega": "merged",
    }
    merged = subjects(repo)
    assert merged[:3] == [
        "Merge wavewait/w5/omega (omega) into main",
        "Merge wavewait/w5/pair-one (pair-one) into main",
        "Merge wavewait/w5/alpha (alpha) into main",
    ]
    assert len(first_parents(repo)) == 4  # the first commit and three merges: none twice
    # and once more: nothing moves
    tip = git(repo, "rev-parse", "main").strip()
    code, again, _ = merge(bus, repo, WAVE, "--check", check)
    assert code == 6 and [f["status"] for f in again["flights"]] == [f["status"] for f in out["flights"]]
    assert git(repo, "rev-parse", "main").strip() == tip
    # no scratch worktree is left behind
    assert git(repo, "worktree", "list", "--porcelain").count("detached") == 0


async def test_a_merge_right_after_the_reports_waits_for_the_flight_to_end_and_merges_its_work(bus, repo) -> None:
    """A flight reports (`wavewait notify`), then its process ends a moment later: what it left
    in its worktree is committed on its branch only then (core/flights.py, wrap_up). A merge
    run as soon as the wait took the report waits for that end (core/merge/plan.py, SETTLE)
    and merges the work; it once found the branch without it and said `merged`, exit 0, with
    nothing merged."""
    env = env_for(bus, WAVEWAIT_WORKTREES=os.environ["WAVEWAIT_WORKTREES"])

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(wavewait_cmd(*args), env=env, cwd=repo, capture_output=True, text=True, timeout=120)

    # the report, then two seconds of work before the process ends (a host writing its last files)
    script = f"{' '.join(wavewait_cmd('notify'))} --message 'late done'; sleep 2; echo late > late.txt"
    spawned = cli("spawn", "late", "--wave", "settle", "--worktree", "-q", "--", "sh", "-c", script)
    assert spawned.returncode == 0, spawned.stderr
    waited = cli("wait", "60", "--wave", "settle")
    assert waited.returncode == 0 and json.loads(waited.stdout)["status"] == "complete", waited.stdout + waited.stderr
    merged = cli("merge", "settle")
    out = json.loads(merged.stdout)
    assert (merged.returncode, out["status"], [f["status"] for f in out["flights"]]) == (0, "merged", ["merged"]), out
    assert git(repo, "show", "main:late.txt") == "late\n", "the merge said merged, but the flight's work is not in main"
