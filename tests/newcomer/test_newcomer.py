"""A newcomer's first hour, scripted: the installed wavewait with its venv NOT on PATH.

Running the README's set-up in a fresh clone is too slow for the suite; this runs the same
installation the way a newcomer does after it: the venv not activated, so `wavewait` is not
on PATH, and flights that call `wavewait notify` by bare name must still reach it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from wavewait.core.bus.file import FileBus

from conftest import clean_env, until

pytestmark = pytest.mark.anyio

VENV_BIN = os.path.dirname(sys.executable)
WAVEWAIT = os.path.join(VENV_BIN, "wavewait")


def newcomer_env(bus: Path, **extra: str) -> dict[str, str]:
    """No venv on PATH (not activated), no VIRTUAL_ENV: only the system's directories."""
    path = os.pathsep.join(p for p in ("/usr/local/bin", "/usr/bin", "/bin") if os.path.isdir(p))
    env = {k: v for k, v in clean_env().items() if k not in ("VIRTUAL_ENV", "PYTHONSAFEPATH")}
    return env | {"PATH": path, "WAVEWAIT_BUS": str(bus)} | extra


def run(env: dict[str, str], *args: str, cwd: Path) -> dict:
    done = subprocess.run([WAVEWAIT, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_wavewait_is_not_on_the_newcomers_path(tmp_path: Path):
    env = newcomer_env(tmp_path / "bus")
    assert shutil.which("wavewait", path=env["PATH"]) in (None, "") or VENV_BIN not in env["PATH"]


@pytest.mark.long
async def test_a_cli_wave_whose_flights_call_wavewait_by_bare_name_is_all_received(tmp_path: Path):
    env = newcomer_env(tmp_path / "bus")
    ids = []
    for name, cmd in (
        ("reader", 'wavewait send "$WAVEWAIT_PARENT_ID" "found 3 issues"'),
        ("tester", 'wavewait notify --status success --message "tests pass"'),
        ("writer", 'wavewait notify --message "wrote it"'),
    ):
        ids.append(run(env, "spawn", name, "--wave", "w1", "--", "sh", "-c", cmd, cwd=tmp_path)["agent_id"])
    result = run(env, "wait", "60", *ids, cwd=tmp_path)
    assert result["status"] == "complete"
    assert [r["status"] for r in result["results"]] == ["received"] * 3

    # each sent its report and exited 0: closed, not dead (a report comes just before the end:
    # `idle` until its supervisor recorded it)
    def states() -> dict[str, str]:
        return {a["name"]: a["state"] for a in run(env, "agents", "--wave", "w1", cwd=tmp_path)["agents"]}

    await until(lambda: "idle" not in states().values(), 30, "the flights' ends to be recorded")
    assert states() == {"reader": "closed", "tester": "closed", "writer": "closed"}


def test_a_death_says_its_exit_code_and_last_output(tmp_path: Path):
    env = newcomer_env(tmp_path / "bus")
    agent = run(env, "spawn", "broken", "--", "sh", "-c", "echo 'no such table: users' >&2; exit 7", cwd=tmp_path)
    result = run(env, "wait", "30", agent["agent_id"], cwd=tmp_path)
    (target,) = result["results"]
    assert target["status"] == "dead"
    assert target["reason"] == "exited with code 7; last output:\nno such table: users"
    out = run(env, "output", agent["agent_id"][:8], "--lines", "5", cwd=tmp_path)
    assert out["lines"] == ["no such table: users"] and out["state"] == "dead"


async def test_a_question_needs_input_until_answered(tmp_path: Path):
    bus_dir = tmp_path / "bus"
    env = newcomer_env(bus_dir)
    agent = run(env, "spawn", "asker", "--", "sh", "-c", 'wavewait ask "which database?" --timeout 60', cwd=tmp_path)
    bus = FileBus(bus_dir)
    try:

        async def needs_input() -> bool:
            a = await bus.get_agent(agent["agent_id"])
            return a is not None and a.state == "needs_input"

        await until(needs_input, timeout=20, what="the question")
        listed = {a["name"]: a for a in run(env, "agents", cwd=tmp_path)["agents"]}
        assert listed["asker"]["state"] == "needs_input" and listed["asker"]["question"] == "which database?"
        run(env, "reply", agent["agent_id"][:8], "postgres", cwd=tmp_path)

        async def closed() -> bool:
            a = await bus.get_agent(agent["agent_id"])
            return a is not None and a.status == "closed"

        await until(closed, timeout=20, what="the asker to take its answer and exit")
        out = run(env, "output", agent["agent_id"][:8], cwd=tmp_path)
        assert json.loads(out["lines"][0])["body"] == "postgres"
    finally:
        await bus.close()


def test_kill_on_a_finished_flight_says_it_already_ended(tmp_path: Path):
    env = newcomer_env(tmp_path / "bus")
    agent = run(env, "spawn", "quick", "--", "true", cwd=tmp_path)
    run(env, "wait", "30", agent["agent_id"], cwd=tmp_path)
    killed = run(env, "kill", agent["agent_id"][:8], cwd=tmp_path)
    assert killed["status"] == "closed" and "already ended" in killed["hint"]


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (.ci/run installs it)")
@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
async def test_the_command_line_stays_visible_during_a_wait_with_the_mirror(tmp_path: Path, size: tuple[int, int]):
    """In tmux at 80x24 and 200x50: a wait runs, another process's wait is mirrored, and
    what the person types is on screen."""
    bus_dir = tmp_path / "bus"
    env = newcomer_env(bus_dir, TERM="xterm-256color")
    sock = str(tmp_path / "tmux.sock")
    cols, rows = size
    tmux = ["tmux", "-S", sock]
    slow = run(env, "spawn", "slow", "--", "sh", "-c", "wavewait wait 120", cwd=tmp_path)
    subprocess.run(
        [*tmux, "new-session", "-d", "-x", str(cols), "-y", str(rows), "-e", f"PATH={env['PATH']}",
         "-e", f"WAVEWAIT_BUS={bus_dir}", f"{WAVEWAIT} --bus {bus_dir}"],
        env=env, cwd=tmp_path, check=True,
    )  # fmt: skip

    def screen() -> str:
        return subprocess.run([*tmux, "capture-pane", "-p"], capture_output=True, text=True, env=env).stdout

    try:
        await until(lambda: "you are orchestrator" in screen(), timeout=30, what="the TUI")
        subprocess.run([*tmux, "send-keys", f"/wait 60 {slow['agent_id'][:8]}", "Enter"], check=True, env=env)
        await until(lambda: "Waiting for sub-agents" in screen(), timeout=20, what="the wait's status")
        await until(lambda: "Waits by other processes" in screen(), timeout=20, what="the mirror")
        subprocess.run([*tmux, "send-keys", "/send typed-while-waiting"], check=True, env=env)
        await until(lambda: "typed-while-waiting" in screen(), timeout=10, what="the typed line on screen")
        shown = screen().splitlines()
        assert len(shown) <= rows
        assert any("typed-while-waiting" in line for line in shown[-6:]), "\n".join(shown)
    finally:
        subprocess.run([*tmux, "kill-server"], env=env, check=False)
        subprocess.run([WAVEWAIT, "kill", slow["agent_id"]], env=env, cwd=tmp_path, capture_output=True, check=False)

    def tui_alive() -> bool:
        return subprocess.run(["pgrep", "-f", f"wavewait --bus {bus_dir}$"], capture_output=True).returncode == 0

    # the terminal is gone: the TUI quits (it once hung in Textual's output thread)
    await until(lambda: not tui_alive(), timeout=5, what="the TUI to exit after its terminal closed")
