"""One key, one word, one exit code across the CLI's commands (docs/cli.md): `kill` and
`close` say an agent alike, an error names the flag the person typed (not an MCP tool's
field), and a miss is never exit 0."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import env_for, register_crew, wavewait_cmd

pytestmark = [pytest.mark.anyio, pytest.mark.one_bus]


def run(bus, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(wavewait_cmd(*args), env=env_for(bus, **env), capture_output=True, text=True, timeout=60)


def refused(done: subprocess.CompletedProcess[str], command: str, said: str) -> None:
    assert (done.returncode, done.stdout) == (2, ""), (done.returncode, done.stdout, done.stderr)
    assert done.stderr.startswith(f"wavewait {command}: error: {said}"), done.stderr


async def test_kill_and_close_print_one_key_and_say_one_word(bus):
    await register_crew(bus, "f00dcafe01", "f00dcafe02")
    killed = run(bus, "kill", "f00dcafe01")
    closed = run(bus, "close", "f00dcafe02")
    assert json.loads(killed.stdout) == {"agent_id": "f00dcafe01", "status": "dead"}, killed.stderr
    assert json.loads(closed.stdout) == {"agent_id": "f00dcafe02", "status": "closed"}, closed.stderr
    refused(run(bus, "kill", "ghost-agent"), "kill", "agent: no agent matches 'ghost-agent'")
    refused(run(bus, "close", "ghost-agent"), "close", "agent: no agent matches 'ghost-agent'")
    refused(run(bus, "close", "f00dcafe01"), "close", "agent: f00dcafe01 (f00dcafe) is dead, not open")


@pytest.mark.parametrize(
    "args, said",
    [
        (
            ["spawn", "x", "--budget-tokens", "5", "--", "true"],
            "--budget-tokens, --budget-usd: a budget is the wave's; give --wave too, "
            "or cap this one flight with --flight-budget-tokens / --flight-budget-usd",
        ),
        (["spawn", "x", "--max-parallel", "2", "--", "true"], "--max-parallel: caps a wave; give --wave too"),
        (
            ["complete", "--status", "done", "--goals", "g", "--did", "d", "--for-next-agent", "n"],
            "TASK_ID: this process is bound to no task (WAVEWAIT_TASK_ID is unset); pass TASK_ID",
        ),
    ],
    ids=["budget-without-wave", "max-parallel-without-wave", "complete-without-task"],
)
async def test_an_error_names_the_flag_the_person_typed(bus, args, said):
    await register_crew(bus)
    refused(run(bus, *args, WAVEWAIT_QUEUE="q"), args[0], said)


async def test_notify_outside_a_flight_is_not_delivered_but_a_stop_hook_there_did_its_job(bus):
    by_hand = run(bus, "notify", "--status", "error")
    assert by_hand.returncode == 5 and by_hand.stdout == "", by_hand.stderr
    assert "WAVEWAIT_AGENT_ID is not set" in by_hand.stderr and "nothing sent" in by_hand.stderr
    no_parent = run(bus, "notify", "--status", "error", WAVEWAIT_AGENT_ID="worker-1")
    assert no_parent.returncode == 5 and "WAVEWAIT_PARENT_ID is not set" in no_parent.stderr
    hook = run(bus, "notify", "--hook", "--status", "success", "--message", "session stopped")
    assert hook.returncode == 0 and "nothing sent" in hook.stderr, hook.stderr
    assert await bus.list_agents() == []


async def test_a_wave_that_is_not_there_is_bad_input_and_an_empty_answer_is_a_real_one(bus, tmp_path):
    await register_crew(bus)
    spawned = run(bus, "spawn", "one", "--wave", "w1", "--", "true")
    assert spawned.returncode == 0, spawned.stderr
    refused(run(bus, "agents", "--wave", "nosuch"), "agents", "--wave: no flight is in wave nosuch")
    refused(run(bus, "prune", "--wave", "nosuch"), "prune", "--wave: no flight is in wave nosuch")
    bad = "--wave: 'bad wave' is not a wave name"
    refused(run(bus, "agents", "--wave", "bad wave"), "agents", bad)
    refused(run(bus, "prune", "--wave", "bad wave"), "prune", bad)
    listed = run(bus, "agents", "--wave", "w1")
    assert listed.returncode == 0 and [a["name"] for a in json.loads(listed.stdout)["agents"]] == ["one"]
    pruned = run(bus, "prune", "--wave", "w1")  # a wave there is, with nothing to prune
    assert pruned.returncode == 0 and json.loads(pruned.stdout) == {
        "removed": [],
        "kept": [],
        "branches_deleted": [],
        "branches_kept": [],
    }


async def test_a_wave_name_with_spaces_is_refused_with_or_without_a_limit(bus):
    """docs/admission.md: one rule for a wave's name, whatever else the spawn asks."""
    await register_crew(bus)
    bad = "--wave: 'bad wave' is not a wave name"
    refused(run(bus, "spawn", "x", "--wave", "bad wave", "--", "true"), "spawn", bad)
    refused(run(bus, "spawn", "x", "--wave", "bad wave", "--max-parallel", "2", "--", "true"), "spawn", bad)
    refused(run(bus, "wait", "1", "--wave", "bad wave"), "wait", bad)
    assert [a.name for a in await bus.list_agents()] == ["orchestrator"]
