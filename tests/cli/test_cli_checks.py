"""Checks as a user runs them (`wavewait wait … --check`, `wavewait merge … --check`), through
the one runner (core/checks.py): without the caller's wavewait variables, at most the
process's bound at once, and a timeout that ends every process of the check's session."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from contextlib import suppress
from pathlib import Path

import pytest

from wavewait.core import agents, messages
from wavewait.core.proc import alive

from conftest import env_for, register_crew, until, wavewait_cmd
from gittools import make_repo
from mergetools import WAVE, flight, preset_file

pytestmark = [pytest.mark.anyio, pytest.mark.both_buses]

SECRET = "s3cret-of-the-orchestrator"
#: what the caller's environment holds and a check must not see
CALLER = {
    "WAVEWAIT_AGENT_ID": "orchestrator",
    "WAVEWAIT_PARENT_ID": "someone",
    "WAVEWAIT_AGENT_SECRET": SECRET,
    "WAVEWAIT_MCP_TOKEN": "token-of-the-orchestrator",
}
#: a check that keeps its environment in ENV_FILE and fails if it was given the secret
ENV_CHECK = 'env > "{env}"; if [ -n "${{WAVEWAIT_AGENT_SECRET+set}}" ]; then echo "the secret is here"; exit 9; fi'


def run(bus, cwd: Path, *args: str, **env: str) -> tuple[int, dict, str]:
    done = subprocess.run(
        wavewait_cmd(*args), env=env_for(bus, **CALLER, **env), cwd=cwd, capture_output=True, text=True, timeout=120
    )
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout), done.stderr


def env_seen(path: Path) -> dict[str, str]:
    assert path.exists(), "the check did not run"
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


async def reported_in_own_folder(bus, tmp_path: Path, *names: str) -> dict[str, Path]:
    """Flights (registered, not run) that each reported and have a folder of their own."""
    await register_crew(bus, *names)
    folders = {}
    for name in names:
        folders[name] = tmp_path / name
        folders[name].mkdir()
        await bus.update_agent(name, cwd=str(folders[name]))
        await messages.send(bus, name, "orchestrator", f"{name}: done")
    return folders


def without_wavewait_variables(seen: dict[str, str]) -> None:
    assert [k for k in seen if k.startswith("WAVEWAIT_")] == [], seen
    assert SECRET not in "\n".join(seen.values())
    assert seen["PATH"] == os.environ["PATH"] and seen["HOME"] == os.environ["HOME"]


async def test_a_join_check_runs_without_the_callers_wavewait_variables(bus, tmp_path):
    """The caller holds an agent secret, its ids and an MCP token: the check sees none of them,
    nor the bus's address; it sees PATH and HOME, in the flight's folder."""
    folders = await reported_in_own_folder(bus, tmp_path, "r1")
    env = tmp_path / "join-env.txt"
    code, r, err = run(bus, tmp_path, "wait", "30", "r1", "--check", ENV_CHECK.format(env=env))
    assert [(e["name"], e["status"], e.get("output")) for e in r["results"]] == [("r1", "received", None)], (r, err)
    without_wavewait_variables(env_seen(env))
    assert env_seen(env).get("PWD") == str(folders["r1"])


async def test_a_merge_check_runs_without_the_callers_wavewait_variables(bus, tmp_path, monkeypatch):
    """The same caller, `wavewait merge --check`: the merge lands, its check saw none of them."""
    repo = make_repo(tmp_path / "project", monkeypatch)
    (repo / ".git" / "info" / "exclude").write_text(".wavebus/\n")
    await agents.register(bus, "orchestrator")
    await flight(bus, repo, preset_file(tmp_path), "alpha", {"alpha.txt": "alpha\n"})
    env = tmp_path / "merge-env.txt"
    code, m, err = run(
        bus, repo, "merge", WAVE, "--check", ENV_CHECK.format(env=env),
        WAVEWAIT_WORKTREES=os.environ["WAVEWAIT_WORKTREES"],
    )  # fmt: skip
    assert [(f["name"], f["status"], f.get("output")) for f in m["flights"]] == [("alpha", "merged", None)], m
    assert code == 0 and m["status"] == "merged", (m, err)
    without_wavewait_variables(env_seen(env))


async def test_a_join_runs_at_most_the_bound_of_checks_at_once(bus, tmp_path):
    """Three reports, a bound of two: each check records its start and end, and waits (up to
    a deadline) until it sees all three started. Two run together, the third after them."""
    folders = await reported_in_own_folder(bus, tmp_path, "c1", "c2", "c3")
    runs = tmp_path / "runs"
    runs.mkdir()
    check = (
        f'd={runs}; n=$(basename "$PWD"); date +%s.%N > "$d/$n.start"; i=0; '
        f'while [ "$(ls "$d" | grep -c "start$")" -lt 3 ] && [ $i -lt 60 ]; do sleep 0.05; i=$((i+1)); done; '
        f'date +%s.%N > "$d/$n.end"'
    )
    code, r, err = run(bus, tmp_path, "wait", "60", "c1", "c2", "c3", "--check", check, WAVEWAIT_MAX_CHECKS="2")
    assert [e["status"] for e in r["results"]] == ["received"] * 3, (r, err)
    spans = [(float((runs / f"{n}.start").read_text()), float((runs / f"{n}.end").read_text())) for n in folders]
    at_once = max(sum(s <= t < e for s, e in spans) for t, _ in spans)
    assert at_once == 2, f"{at_once} checks ran at once (the bound is 2): {sorted(spans)}"


async def test_a_join_check_that_runs_out_of_time_ends_with_every_process_of_its_session(bus, tmp_path):
    """The check starts `timeout` (which makes a process group of its own) and a plain
    background sleep, then waits: `--check-timeout 1` ends all of them."""
    folders = await reported_in_own_folder(bus, tmp_path, "slow")
    folder = folders["slow"]
    check = "timeout 300 sleep 300 & echo $! > own-group.pid; sleep 300 & echo $! > same-group.pid; echo started; wait"
    pids: list[int] = []
    try:
        code, r, err = run(bus, tmp_path, "wait", "60", "slow", "--check", check, "--check-timeout", "1")
        pids = [int((folder / f).read_text()) for f in ("own-group.pid", "same-group.pid")]
        (entry,) = r["results"]
        assert entry["status"] == "check_failed" and "ran out of its 1 s" in entry["output"], (r, err)
        for pid in pids:
            await until(lambda pid=pid: not alive(pid), 10, f"the check's process {pid} to end")
        assert entry["output"] == "started\n(the check ran out of its 1 s and was stopped)", entry
    finally:
        for pid in pids:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
