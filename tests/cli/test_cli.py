"""The CLI as a shell-only agent uses it: JSON on stdout, exit codes 0/2/3/4, clear errors."""

from __future__ import annotations

import json
import signal
import subprocess

import anyio
import pytest

from conftest import clean_env, env_for, has_progress, has_waits, register_crew, until, wavewait_cmd

pytestmark = [pytest.mark.anyio, pytest.mark.one_bus]


def run(bus, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(wavewait_cmd(*args), env=env_for(bus, **env), capture_output=True, text=True, timeout=60)


@pytest.fixture
async def crew(bus):
    await register_crew(bus, "f00dcafe01", "f00dcafe02")
    return bus


BAD_INPUT = [
    (["send"], "the following arguments are required: to, message"),
    (["send", "nobody-here", "hi"], "to: no agent matches 'nobody-here'"),
    (["send", "f00dcafe01", " "], "message: must be a non-empty string"),
    (["send", "f00d", "hi"], "to: prefix 'f00d' fits 2 agents: f00dcafe01, f00dcafe02"),
    (["send", "../etc", "hi"], "to: '../etc' is not a valid id"),
    (["wait", "-1"], "timeout: must be a finite number of seconds ≥ 0, got -1.0"),
    (["wait", "nan"], "timeout: must be a finite number"),
    (["wait", "soon"], "timeout: must be a number of seconds ≥ 0, got 'soon'"),
    (["wait", "5", "f00"], "ids[0]: no agent 'f00'; a prefix needs at least 4 characters"),
    (["wait", "5", "f00dcafe01", "ghost"], "ids[1]: no agent matches 'ghost'"),
    (["wait", "5", "--max", "0"], "--max: must be a whole number from 1 to 100"),
    (["wait", "5", "f00dcafe01", "--max", "3"], "--max: applies without ids"),
    (["wait-signal", "/tmp/*.done", "--min-count", "0"], "--min-count: must be a whole number ≥ 1"),
    (["wait-signal", "/tmp/*.done", "--timeout", "-5"], "timeout: must be a finite number"),
    (["wait-event", "--type", "Not A Type"], "types[0]: 'Not A Type' is not a valid item type"),
    (["wait-event", "--timeout", "x"], "timeout: must be a number of seconds"),
    (["notify", "--status", "maybe"], "argument --status: invalid choice: 'maybe'"),
    (["spawn", "flight"], "give the command after --"),
    (["spawn", "a/b", "--", "true"], "name: 'a/b' may not contain '/'"),
    (["spawn", "flight", "--", "/no/such/program"], "command: cannot start '/no/such/program'"),
    (["agents", "--bogus"], "unrecognized arguments: --bogus"),
    (["kill", "nobody-here"], "agent: no agent matches 'nobody-here'"),
    (["kill", "f00dcafe"], "agent: prefix 'f00dcafe' fits 2 agents"),
    (["close", "ghost-agent"], "agent: no agent matches 'ghost-agent'"),
    (["interrupt", "0123456789"], "wait: no wait matches '0123456789'"),
    (["waits", "extra"], "unrecognized arguments: extra"),
    (["no-such-command"], "invalid choice: 'no-such-command'"),
    # "spawn" as a word of another command: no cut at `--`, and the top-level error says "wavewait:"
    (["send", "f00dcafe01", "spawn", "--", "--flag"], "wavewait: error: unrecognized arguments: --flag"),
    (["--agent", "bad/agent", "wait", "0"], "agent: 'bad/agent' is not a valid id"),
]


@pytest.mark.parametrize("args,message", BAD_INPUT, ids=lambda v: " ".join(v) if isinstance(v, list) else None)
async def test_bad_input_exits_2_with_a_message_naming_what_was_wrong(crew, args, message):
    before = sorted((a.id, a.status) for a in await crew.list_agents())
    done = run(crew, *args)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert message in done.stderr, done.stderr
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    if args[0] != "spawn":  # a failed spawn is recorded (dead, with the reason)
        assert sorted((a.id, a.status) for a in await crew.list_agents()) == before


WORD = 128 * 1024 - 1  # the longest word Linux passes to a program
LONG_WORDS = {
    "glob": (["wait-signal", ("a/" * WORD)[:WORD], "--timeout", "1"], "glob: at most 4096 bytes"),
    "cwd": (["spawn", "--cwd", ("~/" * WORD)[:WORD], "flight", "--", "true"], "--cwd: at most 4096 bytes"),
    "program": (["spawn", "flight", "--", ("../" * WORD)[:WORD]], "command[0]: at most 4096 bytes"),
    "model": (["spawn", "--preset", "claude", "--model", "*" * WORD, "flight", "--", "p"], "model: at most 255"),
    "into": (["merge", "--into", ("[{a," * WORD)[:WORD], "--dry-run"], "into: at most 255 characters"),
    "wave": (["agents", "--wave", "é" * (WORD // 2)], "characters) is not a wave name; use at most"),
}


@pytest.mark.parametrize("args,message", LONG_WORDS.values(), ids=LONG_WORDS)
async def test_the_longest_word_is_refused_before_any_work_saying_the_bound(crew, args, message):
    """A path is measured before it is normalised (a `realpath` of 65,000 folders did an `lstat`
    each), a word before git or a preset sees it; the error quotes at most the start of it."""
    before = sorted((a.id, a.status) for a in await crew.list_agents())
    done = run(crew, *args)
    assert done.returncode == 2 and message in done.stderr and len(done.stderr) < 1000, done.stderr[:300]
    assert sorted((a.id, a.status) for a in await crew.list_agents()) == before


def test_an_unusable_bus_path_exits_2_naming_the_bus(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    done = subprocess.run(
        wavewait_cmd("--bus", str(blocker / "bus"), "wait", "0"),
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "cannot create the bus" in done.stderr


@pytest.mark.parametrize("command", [["agents"], ["waits"], ["kill", "abcd"], ["close", "abcd"], ["interrupt", "abcd"]])
def test_a_read_only_command_never_creates_a_bus(tmp_path, command):
    done = subprocess.run(
        wavewait_cmd(*command), cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "no bus at" in done.stderr and "--bus" in done.stderr
    assert not (tmp_path / ".wavebus").exists()


@pytest.mark.both_buses
async def test_exit_0_with_the_message_and_exit_3_on_timeout(crew):
    assert run(crew, "send", "orchestrator", "found 3 issues", "--agent", "f00dcafe01").returncode == 0
    got = run(crew, "wait", "5")
    assert got.returncode == 0
    assert json.loads(got.stdout) | {"sent_at": None, "elapsed_sec": None, "message_id": None} == {
        "status": "received",
        "from": "f00dcafe01",
        "name": "f00dcafe01",
        "message": "found 3 issues",
        "message_id": None,
        "type": "message",
        "sent_at": None,
        "elapsed_sec": None,
    }
    late = run(crew, "wait", "0.2", "f00dcafe01", "f00dcafe02")
    assert late.returncode == 3
    assert [r["status"] for r in json.loads(late.stdout)["results"]] == ["running", "running"]
    assert run(crew, "wait-event", "--timeout", "0").returncode == 3


async def test_wait_max_takes_a_burst_at_once(crew):
    for n in range(3):
        assert run(crew, "send", "orchestrator", f"part {n}", "--agent", "f00dcafe01").returncode == 0
    got = run(crew, "wait", "5", "--max", "5")
    assert got.returncode == 0, got.stderr
    out = json.loads(got.stdout)
    assert [out["message"], *(m["message"] for m in out["more"])] == ["part 0", "part 1", "part 2"]
    assert await crew.peek("orchestrator") == []


@pytest.mark.both_buses
async def test_wavewait_interrupt_makes_a_wait_in_another_process_exit_4_with_partial_state(crew):
    run(crew, "send", "orchestrator", "part one", "--agent", "f00dcafe01")
    proc = await anyio.open_process(wavewait_cmd("wait", "3600", "f00dcafe01", "f00dcafe02"), env=env_for(crew))
    try:
        await until(lambda: has_progress(crew, "1/2"), 20, "the waiting process to take the first message")
        (record,) = await crew.list_waits()
        done = run(crew, "interrupt", record.id[:8])
        assert done.returncode == 0 and json.loads(done.stdout) == {"wait_id": record.id, "interrupted": True}
        with anyio.fail_after(20):
            code = await proc.wait()
        out = json.loads(await proc.stdout.receive())
    finally:
        await proc.aclose()
    assert code == 4
    assert out["status"] == "interrupted"
    assert [(r["status"], r.get("message")) for r in out["results"]] == [("received", "part one"), ("running", None)]


async def test_ctrl_c_interrupts_a_cli_wait_and_prints_the_partial_result(crew, tmp_path):
    (tmp_path / "a.done").touch()
    proc = await anyio.open_process(
        wavewait_cmd("wait-signal", str(tmp_path / "*.done"), "--min-count", "2", "--timeout", "3600"),
        env=env_for(crew),
    )
    try:
        await until(lambda: has_waits(crew, 1), 20, "the wait to register")
        proc.send_signal(signal.SIGINT)
        with anyio.fail_after(20):
            code = await proc.wait()
        out = json.loads(await proc.stdout.receive())
    finally:
        await proc.aclose()
    assert code == 4 and out["interrupted"] is True
    assert out["partial_matches"] == [str(tmp_path / "a.done")]


async def test_notify_as_a_hook_without_ids_says_so_on_stderr_and_exits_0(bus):
    done = run(bus, "notify", "--hook", "--message", "done")
    assert done.returncode == 0 and done.stdout == ""
    assert "WAVEWAIT_AGENT_ID is not set" in done.stderr
    only_agent = run(bus, "notify", "--hook", WAVEWAIT_AGENT_ID="worker-1")
    assert only_agent.returncode == 0 and "WAVEWAIT_PARENT_ID is not set" in only_agent.stderr
    assert await bus.list_agents() == []


async def test_notify_as_a_stop_hook_reports_completion_to_the_parent(crew):
    done = run(
        crew,
        "notify",
        "--message",
        "tests pass",
        "--change",
        "src/a.py",
        WAVEWAIT_AGENT_ID="f00dcafe01",
        WAVEWAIT_PARENT_ID="orchestrator",
    )
    assert done.returncode == 0 and json.loads(done.stdout)["success"] is True
    assert (await crew.get_agent("f00dcafe01")).status == "idle"
    ev = run(crew, "wait-event", "--type", "worker_complete", "--timeout", "0")
    assert ev.returncode == 0
    assert json.loads(ev.stdout) | {"event_id": None} == {
        "event_id": None,
        "type": "worker_complete",
        "worker_id": "f00dcafe01",
        "status": "success",
        "changes": ["src/a.py"],
        "message": "tests pass",
    }


async def test_spawn_agents_kill_and_close_print_their_json(crew):
    spawned = run(crew, "spawn", "sleeper", "--wave", "wave-1", "--", "sleep", "60")
    assert spawned.returncode == 0, spawned.stderr
    info = json.loads(spawned.stdout)
    assert set(info) == {"agent_id", "name", "pid", "status", "reason"} and info["name"] == "sleeper" and info["pid"]
    assert (info["status"], info["reason"]) == ("running", None)  # its wave has no limit: it runs at once
    listed = json.loads(run(crew, "agents", "--wave", "wave-1").stdout)["agents"]
    assert [(a["id"], a["status"], a["parent_id"]) for a in listed] == [(info["agent_id"], "running", "orchestrator")]
    killed = run(crew, "kill", info["agent_id"][:6])
    assert killed.returncode == 0 and json.loads(killed.stdout) == {"agent_id": info["agent_id"], "status": "dead"}
    closed = run(crew, "close", "f00dcafe02")
    assert closed.returncode == 0 and json.loads(closed.stdout) == {"agent_id": "f00dcafe02", "status": "closed"}


@pytest.mark.both_buses
async def test_spawn_quiet_prints_the_id_alone_so_a_shell_collects_a_wave_without_python(crew):
    """The README's tour: ids="$ids $(wavewait spawn -q ...)", then one wait on them all."""
    ww = " ".join(wavewait_cmd())
    script = f"""set -e
ids="$ids $({ww} spawn -q one --wave w -- sh -c '{ww} notify --message one')"
ids="$ids $({ww} spawn --quiet two --wave w -- sh -c '{ww} notify --message two')"
echo "ids:$ids"
{ww} wait 60 $ids
"""
    done = subprocess.run(["bash", "-c", script], env=env_for(crew), capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    said, answer = done.stdout.splitlines()
    ids = said.removeprefix("ids:").split()
    assert len(ids) == 2 and all(len(i) >= 8 and i.isalnum() for i in ids), said
    result = json.loads(answer)
    assert result["status"] == "complete"
    assert [(r["agent_id"], r["name"], r["status"], r["message"]) for r in result["results"]] == [
        (ids[0], "one", "received", "one"),
        (ids[1], "two", "received", "two"),
    ]
