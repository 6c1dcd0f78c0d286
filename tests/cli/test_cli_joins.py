"""`wavewait wait` as a join (docs/joins.md): its flags, its exit codes, relative file targets."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from wavewait.core import agents, messages
from wavewait.core.proc import alive

from conftest import PYTHON, env_for, register_crew, until, wavewait_cmd

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


# --------------------------------------------------------------------------- recipes of docs/joins.md, as a user runs them
DOCS = Path(__file__).resolve().parents[2] / "docs"


def page_block(page: str, heading: str) -> str:
    """The first `sh` block after `heading` on docs/`page`, as the page prints it."""
    section = (DOCS / page).read_text().split(heading, 1)[1]
    return section.split("```sh\n", 1)[1].split("```", 1)[0]


def cli(bus, cwd, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        wavewait_cmd(*args), env=env_for(bus, WAVEWAIT_AGENT_ID="orchestrator"), cwd=cwd,
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def shell(bus, cwd: Path, script: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`sh -c script` with `wavewait` on PATH (alone: a user's `python3` stays theirs), in its
    own process group, ended whole if it outlives `timeout`."""
    bin_dir = cwd / "bin"
    bin_dir.mkdir()
    (bin_dir / "wavewait").symlink_to(Path(PYTHON).parent / "wavewait")
    env = env_for(bus, WAVEWAIT_AGENT_ID="orchestrator")
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    p = subprocess.Popen(
        ["sh", "-c", script], env=env, cwd=cwd,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        raise AssertionError(f"still running after {timeout}s:\n{out}\n{err}") from None
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


@pytest.mark.both_buses
async def test_the_loop_of_a_flight_that_asks_runs_as_the_page_prints_it_and_ends_complete(bus, tmp_path):
    """Three reviewers of a wave, one asking with `wavewait ask`: the page's loop ends
    `complete`, met 3, whatever round each report came in."""
    await register_crew(bus)
    for n, body in (
        (1, "wavewait send orchestrator 'review 1: LGTM'"),
        (2, "a=$(wavewait ask 'strict or lenient?'); wavewait send orchestrator \"review 2: $a\""),
        (3, "wavewait send orchestrator 'review 3: LGTM'"),
    ):
        done = cli(bus, tmp_path, "spawn", f"reviewer-{n}", "--wave", "reviews", "-q", "--", "sh", "-c", body)
        assert done.returncode == 0, done.stderr

    async def asked_and_reported() -> bool:  # reviewers 1 and 3 reported, 2 asks: round 1 takes all three
        flights = {a.name: a for a in await bus.list_agents()}
        return flights["reviewer-2"].state == "needs_input" and len(await bus.peek("orchestrator")) == 3

    await until(asked_and_reported, 30, "two reports and a question queued")
    loop = page_block("joins.md", "## A flight that asks")
    assert 'e["message"]' in loop and "wavewait reply" in loop, loop  # the question printed, then answered
    done = shell(bus, tmp_path, loop)
    r = json.loads((tmp_path / "join.json").read_text())
    assert r["status"] == "complete" and (r["need"], r["met"]) == (3, 3), (r, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    assert "strict or lenient?" in done.stdout, done.stdout  # the page's python line printed the question
    messages_ = {e["name"]: e["message"] for e in r["results"]}
    assert messages_["reviewer-1"] == "review 1: LGTM" and "your answer" in messages_["reviewer-2"], r


@pytest.mark.both_buses
async def test_need_all_with_a_check_that_fails_everywhere_is_unmet_and_all_without_a_check_counts_what_settled(
    bus, tmp_path
):
    await register_crew(bus, "a", "b", "c")
    for name in ("a", "b"):
        await bus.update_agent(name, cwd=str(tmp_path))
        await messages.send(bus, name, "orchestrator", f"{name}: done")
    code, r = wait_cli(bus, tmp_path, "30", "a", "b", "--need", "all", "--check", "exit 1")
    assert code == 8 and r["status"] == "unmet" and r["met"] == 0, r

    await agents.mark_dead(bus, "c", "exited with code 7")
    await messages.send(bus, "b", "orchestrator", "b: again")
    code, r = wait_cli(bus, tmp_path, "30", "b", "c")
    assert code == 0 and r["status"] == "complete" and (r["need"], r["met"]) == (2, 2), r
    assert [e["status"] for e in r["results"]] == ["received", "dead"], r


@pytest.mark.both_buses
@pytest.mark.parametrize("budget", [(), ("--budget-tokens", "1000000")], ids=["max-parallel", "budget"])
async def test_stop_rest_stops_the_queued_flights_first_and_none_runs_on(bus, tmp_path, budget):
    """A wave that runs one flight at a time: stopping the running one admits none of the queued
    ones, which are stopped before they start; every process of the wave is gone."""
    await register_crew(bus)
    for n in (1, 2, 3):
        done = cli(
            bus, tmp_path, "spawn", f"att-{n}", "--wave", "race", "--max-parallel", "1", *budget, "-q",
            "--", "sleep", "300",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    (tmp_path / "done.txt").write_text("the artifact")
    code, r = wait_cli(bus, tmp_path, "30", "--wave", "race", "--files", "done.txt", "--need", "1", "--stop-rest")
    assert code == 0 and r["status"] == "complete", r
    assert len(r["stopped"]) == 3 and all(e["status"] == "dead" for e in r["results"]), r
    flights = await bus.list_agents()
    assert {a.name: a.status for a in flights if a.wave == "race"} == dict.fromkeys(("att-1", "att-2", "att-3"), "dead")

    async def none_runs() -> bool:
        race = [a for a in await bus.list_agents() if a.wave == "race"]
        return not any(alive(a.pid, a.pid_start) or alive(a.supervisor_pid, a.supervisor_start) for a in race)

    await until(none_runs, 30, "every process of the wave gone")
    assert sum("before it started" in (a.reason or "") for a in flights) == 2, [a.reason for a in flights]


@pytest.mark.both_buses
@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--files", "[unclosed"), "write a literal '[' as '[[]'"),
        (("--files", "dist/*.whl:abc"), "write GLOB:N"),
        (("--files", "dist/*.whl:0"), "write GLOB:N"),
        (("r1", "--event", "x", "--event", "x", "--need", "3"), "named twice"),
    ],
    ids=["unclosed", "count", "zero", "duplicates"],
)
async def test_a_join_refuses_what_it_cannot_mean_with_what_to_write(bus, tmp_path, args, says):
    await register_crew(bus, "r1")
    done = cli(bus, tmp_path, "wait", "5", *args)
    assert done.returncode == 2 and says in done.stderr, (done.returncode, done.stdout, done.stderr)
