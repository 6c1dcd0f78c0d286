"""`wavewait wait` as a join (docs/joins.md): its flags, its exit codes, relative file targets."""

from __future__ import annotations

import json
import subprocess

import pytest

from wavewait.core import agents, messages

from conftest import env_for, register_crew, wavewait_cmd

pytestmark = [pytest.mark.anyio, pytest.mark.one_bus]


def wait_cli(bus, cwd, *args: str) -> tuple[int, dict]:
    done = subprocess.run(
        wavewait_cmd("wait", *args), env=env_for(bus, WAVEWAIT_AGENT_ID="orchestrator"), cwd=cwd,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


async def test_the_exit_code_says_met_needs_input_or_unmet(bus, tmp_path):
    await register_crew(bus, "r1", "r2", "r3")
    (tmp_path / "dist").mkdir()
    for n in (1, 2):
        (tmp_path / "dist" / f"pkg-{n}.whl").write_text("wheel")
    await messages.send(bus, "r1", "orchestrator", "review r1")
    code, r = wait_cli(bus, tmp_path, "30", "r1", "r2", "r3", "--files", "dist/*.whl:2", "--need", "2")
    assert code == 0 and r["status"] == "complete" and (r["need"], r["met"]) == (2, 2), r
    assert r["files"][0]["files"] == [str(tmp_path / "dist" / f"pkg-{n}.whl") for n in (1, 2)]

    await messages.ask(bus, "r2", "Which branch?", to="orchestrator")
    code, r = wait_cli(bus, tmp_path, "30", "r2", "r3", "--need", "any")
    assert code == 6 and r["status"] == "needs_input", r

    await agents.mark_dead(bus, "r3", "exited with code 1")
    code, r = wait_cli(bus, tmp_path, "30", "r1", "r3", "--need", "2")
    assert code == 8 and r["status"] == "unmet" and (r["need"], r["met"]) == (2, 0), r


async def test_join_flags_without_targets_are_refused_with_what_to_do(bus, tmp_path):
    await register_crew(bus, "r1")
    done = subprocess.run(
        wavewait_cmd("wait", "1", "--need", "any"), env=env_for(bus, WAVEWAIT_AGENT_ID="orchestrator"),
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "name the targets (ids, --wave, --files, --event)" in done.stderr, done.stderr
