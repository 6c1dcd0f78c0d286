"""Warm starts (wavewait/warm.py): `wavewait mcp` and `wavewait spawn` run in a fork of a
process that imported everything once (and start one when none is up), the other commands
run in one that is up, and each behaves as a cold start would."""

from __future__ import annotations

import ast
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from wavewait import warm, warm_procs
from wavewait.core import admission, agents, messages, wait
from wavewait.core.proc import alive

from conftest import PYTHON, clean_env, env_for, until, wavewait_cmd
from mcptools import data


def warm_env(bus, **extra: str) -> dict[str, str]:
    """`env_for` with warm starts on (the default, said here so the environment cannot turn them off)."""
    return env_for(bus, **({"WAVEWAIT_WARM": "1"} | extra))


pytestmark = [pytest.mark.anyio, pytest.mark.one_bus]

ROOT = Path(warm.__file__).resolve().parent.parent


@pytest.fixture
def run_dir(tmp_path, monkeypatch):
    """A private folder for this test's warm processes (XDG_RUNTIME_DIR); they end with the test."""
    folder = tmp_path / "run"
    folder.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(folder))
    yield folder / "wavewait-warm"
    for lock in (folder / "wavewait-warm").glob("*.lock"):
        text = lock.read_text().strip()
        if text.isdigit() and alive(int(text)):
            os.kill(int(text), signal.SIGKILL)


def warm_pid(run_dir: Path) -> int | None:
    """The warm process listening in `run_dir`, if any."""
    for lock in run_dir.glob("*.lock"):
        text = lock.read_text().strip()
        if text.isdigit() and lock.with_suffix(".sock").exists():
            return int(text)
    return None


def children(pid: int, servers: bool = False) -> list[int]:
    """The child processes of `pid` (with `servers`: only those running `wavewait mcp`)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(c) for c in (task / "children").read_text().split()]
    if servers:
        out = [c for c in out if b"wavewait\0mcp" in Path(f"/proc/{c}/cmdline").read_bytes()]
    return out


def handed_over(pid: int) -> bool:
    """Whether process `pid` gave its stdin to a warm process's child (then it holds /dev/null)."""
    return os.readlink(f"/proc/{pid}/fd/0") == os.devnull


def server(bus, env: dict[str, str] | None = None) -> Client:
    params = StdioServerParameters(command=PYTHON, args=["-m", "wavewait", "mcp"], env=env or warm_env(bus))
    return Client(params)  # type: ignore[arg-type]


async def test_a_second_mcp_server_runs_warm_and_answers_as_the_first(bus, run_dir):
    answers = []
    for _ in range(2):
        async with server(bus) as client:
            launcher = children(os.getpid(), servers=True)
            tools = sorted(
                (t.name, json.dumps(t.input_schema, sort_keys=True)) for t in (await client.list_tools()).tools
            )
            result = data(await client.call_tool("wait_for_event", {"timeout_secs": 0}))
            answers.append((tools, sorted(result), [handed_over(p) for p in launcher]))
        await until(lambda: warm_pid(run_dir) is not None, 60, "the warm process to listen")
    (cold_tools, cold_status, cold_handed), (warm_tools, warm_status, warm_handed) = answers
    assert (cold_tools, cold_status) == (warm_tools, warm_status) and cold_tools
    assert cold_handed == [False] and warm_handed == [True]
    z = warm_pid(run_dir)
    assert z is not None
    await until(lambda: children(z) == [], 10, "the warm child to end with its session")


async def test_the_wavewait_script_in_a_users_environment_runs_warm(bus, run_dir):
    """The `wavewait` script, without the suite's PYTHONSAFEPATH (a user's shell has none):
    the warm process it starts (with -P, core/proc.py) serves the next command all the same,
    as -P is left out of the key."""
    env = {k: v for k, v in warm_env(bus).items() if k != "PYTHONSAFEPATH"}
    script = os.path.join(os.path.dirname(PYTHON), "wavewait")
    handed = []
    for _ in range(2):
        params = StdioServerParameters(command=script, args=["mcp"], env=env)
        async with Client(params) as client:  # type: ignore[arg-type]
            launcher = children(os.getpid(), servers=True)
            assert (await client.list_tools()).tools
            handed.append([handed_over(p) for p in launcher])
        await until(lambda: warm_pid(run_dir) is not None, 60, "the warm process to listen")
    assert handed == [[False], [True]], "the second command did not run warm"


async def test_servers_of_two_projects_share_a_warm_process_and_each_keeps_its_own_project(bus, run_dir, tmp_path):
    """WAVEWAIT_PROJECT_DIR is read per command (where relative signal paths start), so servers
    of different projects run in one warm process, and each resolves paths in its own."""
    projects = [tmp_path / "one", tmp_path / "two"]
    for project in projects:
        (project / "out").mkdir(parents=True)
        (project / "out" / f"{project.name}.done").touch()
    seen = []
    for project in projects:
        async with server(bus, warm_env(bus, WAVEWAIT_PROJECT_DIR=str(project))) as client:
            launcher = children(os.getpid(), servers=True)
            r = data(await client.call_tool("wave_wait_for_signal", {"signal_path": "out/*.done", "timeout_sec": 5}))
            seen.append((r["matched"], [handed_over(p) for p in launcher]))
        await until(lambda: warm_pid(run_dir) is not None, 60, "the warm process to listen")
    assert seen == [
        ([str(projects[0] / "out" / "one.done")], [False]),
        ([str(projects[1] / "out" / "two.done")], [True]),
    ]


IN_A_FLIGHT = textwrap.dedent(
    """
    import asyncio, json, os, sys
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    async def main():
        env = {k: v for k, v in os.environ.items() if k not in ("WAVEWAIT_AGENT_ID", "WAVEWAIT_PARENT_ID")}
        params = StdioServerParameters(command=sys.executable, args=["-m", "wavewait", "mcp"], env=env)
        async with Client(params) as client:
            kids = open(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read().split()
            handed = [os.readlink(f"/proc/{k}/fd/0") == os.devnull for k in kids]
            r = await client.call_tool("send", {"to": "orchestrator", "message": "from a warm server"})
        print("RESULT " + json.dumps({"handed": handed, "error": r.is_error}), flush=True)

    asyncio.run(main())
    """
)


async def test_a_flights_warm_mcp_server_is_known_as_that_flight(bus, run_dir, tmp_path, monkeypatch):
    """The child of the warm process takes its launcher's place in the process tree, so the
    flight's supervisor is its ancestor (core/identity.py) with no WAVEWAIT_AGENT_ID at all."""
    monkeypatch.setenv("WAVEWAIT_WARM", "1")  # the flight inherits it (the default, said here)
    await agents.ensure_agent(bus, "orchestrator")
    subprocess.run(wavewait_cmd("mcp"), env=warm_env(bus), input="", capture_output=True, timeout=60)
    await until(lambda: warm_pid(run_dir) is not None, 60, "the warm process to listen")
    script = tmp_path / "flight.py"
    script.write_text(IN_A_FLIGHT)
    f = await admission.spawn(bus, "warm-flight", [PYTHON, str(script)], parent_id="orchestrator")

    async def ended() -> bool:
        return (await bus.get_agent(f.id)).finished

    await until(ended, 60, "the flight to end")
    log = Path((await bus.get_agent(f.id)).log_path).read_text()
    line = next((x for x in log.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, log
    assert json.loads(line.removeprefix("RESULT ")) == {"handed": [True], "error": False}
    got = await wait.wait_next(bus, "orchestrator", 0)
    assert (got.sender, got.message) == (f.id, "from a warm server")


@pytest.mark.long
async def test_exit_codes_output_and_signals_are_the_commands(bus, run_dir, tmp_path):
    refused = wavewait_cmd("spawn", "x", "--cwd", "/no/such/dir", "--", "true")
    cold = subprocess.run(refused, env=warm_env(bus, WAVEWAIT_WARM="0"), capture_output=True, text=True, timeout=60)
    subprocess.run(wavewait_cmd("mcp"), env=warm_env(bus), input="", capture_output=True, timeout=60)
    await until(lambda: warm_pid(run_dir) is not None, 60, "the warm process to listen")
    z = warm_pid(run_dir)
    again = subprocess.run(refused, env=warm_env(bus), capture_output=True, text=True, timeout=60)
    assert (again.returncode, again.stdout, again.stderr) == (cold.returncode, cold.stdout, cold.stderr)
    assert again.returncode == 2 and "--cwd" in again.stderr

    ended = {}
    for how in (signal.SIGTERM, signal.SIGKILL):
        for env in (warm_env(bus, WAVEWAIT_WARM="0"), warm_env(bus)):
            proc = subprocess.Popen(
                wavewait_cmd("mcp"), env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}\n')
            proc.stdin.flush()
            assert json.loads(proc.stdout.readline())["id"] == 1  # serving
            warm_child = children(z) if env.get("WAVEWAIT_WARM") != "0" else []
            proc.send_signal(how)
            ended[(how, env.get("WAVEWAIT_WARM", "1"))] = proc.wait(timeout=30)
            proc.stdin.close()
            proc.stdout.close()
            assert proc.stderr is not None
            proc.stderr.close()
            for c in warm_child:
                await until(lambda c=c: not alive(c), 10, "the warm child to end with its launcher")
    assert ended[(signal.SIGTERM, "0")] == ended[(signal.SIGTERM, "1")]
    assert ended[(signal.SIGKILL, "0")] == ended[(signal.SIGKILL, "1")] == -signal.SIGKILL


async def test_a_reading_command_starts_no_warm_process_and_runs_in_one_that_is_up(bus, run_dir):
    """`wait` (and every command but the TUI's, `serve` and `warm`) starts cold while no warm
    process is up, and starts none (a person who only reads the bus leaves nothing running);
    once `mcp` started one, it runs there and answers as cold: output, exit code, a message
    taken once."""
    await agents.ensure_agent(bus, "orchestrator")
    sender = await agents.ensure_agent(bus, "sender")
    listed = subprocess.run(wavewait_cmd("agents"), env=warm_env(bus), capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0 and list(run_dir.glob("*.lock")) == [], "a reading command started a warm process"
    subprocess.run(wavewait_cmd("mcp"), env=warm_env(bus), input="", capture_output=True, timeout=60)
    await until(lambda: warm_pid(run_dir) is not None, 60, "the warm process to listen")
    listings = []
    for warmly in ("0", "1"):
        r = subprocess.run(
            wavewait_cmd("agents"), env=warm_env(bus, WAVEWAIT_WARM=warmly), capture_output=True, text=True
        )
        listings.append((r.returncode, [(a["id"], a["state"]) for a in json.loads(r.stdout)["agents"]]))
    assert listings[0] == listings[1] and listings[0][1]

    seen = []
    for warmly in ("0", "1"):
        argv = wavewait_cmd("wait", "--agent", "orchestrator", "60")
        proc = subprocess.Popen(
            argv, env=warm_env(bus, WAVEWAIT_WARM=warmly), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        await until(lambda: len(wait_list(bus)) == 1, 60, "the wait to be registered")
        handed = handed_over(proc.pid)
        subprocess.run(
            wavewait_cmd("send", "--agent", sender.id, "orchestrator", f"hello {warmly}"),
            env=warm_env(bus),
            check=True,
            capture_output=True,
            timeout=60,
        )
        out, _ = proc.communicate(timeout=60)
        seen.append((handed, proc.returncode, json.loads(out)["message"]))
    assert seen == [(False, 0, "hello 0"), (True, 0, "hello 1")]
    assert (await wait.wait_next(bus, "orchestrator", 0)).status == "timeout", "a message was taken twice or kept"


async def test_a_warm_wait_killed_by_its_host_gives_its_claims_back_at_once(bus, run_dir):
    """The host SIGKILLs the launcher: the wait's claims go back at once, as a cold command's
    do, though the warm child ends a moment later (its wait is known by its launcher,
    core/proc.py `command_process`)."""
    await agents.ensure_agent(bus, "orchestrator")
    for name in ("s1", "s2"):
        await agents.ensure_agent(bus, name)
    await messages.send(bus, "s1", "orchestrator", "m1")
    subprocess.run(wavewait_cmd("mcp"), env=warm_env(bus), input="", capture_output=True, timeout=60)
    await until(lambda: warm_pid(run_dir) is not None, 60, "the warm process to listen")
    argv = wavewait_cmd("wait", "--agent", "orchestrator", "3600", "s1", "s2")
    proc = subprocess.Popen(argv, env=warm_env(bus), stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    async def claimed() -> bool:
        return handed_over(proc.pid) and not await bus.pending("orchestrator")

    await until(claimed, 60, "the warm wait to claim m1")
    assert [w.pid for w in await bus.list_waits()] == [proc.pid], "the wait is not known by its launcher"
    proc.kill()
    assert proc.wait(timeout=30) == -signal.SIGKILL
    got = await wait.wait_next(bus, "orchestrator", 0)
    assert (got.status, got.message) == ("received", "m1")


def wait_list(bus) -> list[dict]:
    listed = subprocess.run(wavewait_cmd("waits"), env=warm_env(bus), capture_output=True, text=True, timeout=60)
    return json.loads(listed.stdout)["waits"]


SELF_KILL = "{python} -m wavewait kill \"$WAVEWAIT_AGENT_ID\" > {out} 2>&1; echo 'after the kill' >> {out}"


async def test_a_flight_that_kills_itself_warm_gets_the_answer_as_cold(bus, run_dir, tmp_path, monkeypatch):
    """A flight's own `wavewait kill` of itself: the command spares its own processes (core/
    agents.py), the warm child and its launcher both, so it answers and records the death as
    a cold one does, and nothing else of the flight goes on."""
    monkeypatch.setenv("WAVEWAIT_WARM", "1")
    await agents.ensure_agent(bus, "orchestrator")
    subprocess.run(wavewait_cmd("mcp"), env=warm_env(bus), input="", capture_output=True, timeout=60)
    await until(lambda: warm_pid(run_dir) is not None, 60, "the warm process to listen")
    results = {}
    for warmly in ("0", "1"):
        monkeypatch.setenv("WAVEWAIT_WARM", warmly)
        out = tmp_path / f"kill-{warmly}.json"
        f = await admission.spawn(
            bus, f"self-{warmly}", ["sh", "-c", SELF_KILL.format(python=PYTHON, out=out)], parent_id="orchestrator"
        )

        async def answered(out: Path = out) -> bool:
            return out.exists() and out.read_text().strip().endswith("}")

        await until(answered, 60, "the kill's answer")
        record = await bus.get_agent(f.id)
        results[warmly] = (json.loads(out.read_text())["status"], record.state)
    assert results["0"] == results["1"] == ("dead", "dead"), results


def test_what_a_child_would_inherit_from_the_warm_process_is_in_its_key(monkeypatch):
    base = warm.key()
    assert warm.key() == base
    monkeypatch.setenv("WAVEWAIT_BUS", "/elsewhere")  # read as the command runs: same warm process
    monkeypatch.setenv("WAVEWAIT_AGENT_ID", "f00dcafe01")
    assert warm.key() == base
    monkeypatch.setenv("WAVEWAIT_FSYNC", "0")  # read at import: another warm process
    assert warm.key() != base
    monkeypatch.delenv("WAVEWAIT_FSYNC")
    monkeypatch.setattr(sys, "path", [*sys.path, "/nowhere"])
    assert warm.key() != base


def test_nothing_a_command_may_change_is_read_at_import():
    """A setting read when a module is imported is the warm process's, not the command's:
    such a setting must be in the key, never in PER_COMMAND (and not read at import)."""
    read_at_import: dict[str, str] = {}
    files = [*ROOT.joinpath("wavewait").glob("*.py"), *ROOT.joinpath("wavewait", "mcp").glob("*.py")]
    files += [*ROOT.joinpath("core").rglob("*.py"), *ROOT.joinpath("tui").rglob("*.py")]
    for path in files:
        tree = ast.parse(path.read_text())
        classes = [c for c in tree.body if isinstance(c, ast.ClassDef)]
        for node in [*tree.body, *(n for c in classes for n in c.body)]:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                continue
            text = ast.unparse(node)
            if "environ" not in text and "getenv" not in text:
                continue  # a name, not a read
            for sub in ast.walk(node):
                if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and sub.value.startswith("WAVEWAIT_"):
                    read_at_import[sub.value] = str(path.relative_to(ROOT))
    assert "WAVEWAIT_FSYNC" in read_at_import  # the scan sees what it looks for
    used = {k: v for k, v in read_at_import.items() if k in warm.PER_COMMAND and not v.startswith("wavewait/warm")}
    assert not used, f"read at import, yet per command: {used}"


def imported(code: list[str], env: dict[str, str]) -> set[str]:
    """The modules a process imports (python -X importtime)."""
    done = subprocess.run([PYTHON, "-X", "importtime", *code], input=b"", capture_output=True, env=env, timeout=120)
    return {m[1] for m in re.finditer(r"^import time:\s+\d+ \|\s+\d+ \| *(\S+)$", done.stderr.decode(), re.M)}


def test_the_launcher_imports_only_the_standard_library():
    """What every warm start pays: the launcher's imports, before it hands its command over."""
    mods = imported(["-c", "import wavewait.launch, wavewait.warm, wavewait.command"], clean_env())
    third = {m.split(".")[0] for m in mods} & {"pydantic", "pydantic_core", "anyio", "mcp", "mcp_types", "psycopg"}
    ours = {m for m in mods if m.startswith(("wavewait.core", "wavewait.mcp", "wavewait.cli"))}
    assert not third and not ours, (third, ours)


def test_a_stdio_server_imports_no_face_or_bus_it_does_not_use(tmp_path):
    """A cold `wavewait mcp` on a directory bus: no TUI, no PostgreSQL driver, no HTTP server
    of ours (the SDK's own imports aside: its HTTP transport, and rich for its log handler)."""
    env = clean_env(WAVEWAIT_BUS=str(tmp_path / "bus"), WAVEWAIT_WARM="0")
    mods = imported(["-m", "wavewait", "mcp"], env)
    assert "wavewait.mcp.server" in mods
    heavy = {m for m in mods if m.split(".")[0] in ("textual", "psycopg", "psycopg_pool")}
    heavy |= {m for m in mods if m.startswith(("wavewait.tui", "wavewait.serve", "wavewait.core.bus.postgres"))}
    assert not heavy, sorted(heavy)


def warm_cli(action: str) -> dict:
    done = subprocess.run(wavewait_cmd("warm", action), capture_output=True, text=True, env=clean_env(), timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def test_warm_status_lists_the_warm_process_and_warm_stop_ends_it(bus, run_dir):
    """What docs/cli.md tells a user who sees the warm process in `ps`."""
    done = subprocess.run(wavewait_cmd("spawn", "-q", "quick", "--", "true"), env=warm_env(bus), capture_output=True)
    assert done.returncode == 0, done.stderr
    await until(lambda: warm_pid(run_dir) is not None, 60, "the warm process to listen")
    pid = warm_pid(run_dir)
    status = warm_cli("status")
    assert status["folder"] == str(run_dir)
    assert [(w["pid"], w["serving"]) for w in status["warm"]] == [(pid, True)]
    stopped = warm_cli("stop")
    assert [w["pid"] for w in stopped["stopped"]] == [pid] and stopped["ending"] == []
    assert not alive(pid) or not warm_procs.is_warm(pid)
    assert sorted(p.name for p in run_dir.iterdir()) == [], "its socket, lock and empty log removed"
    assert warm_cli("status")["warm"] == []


def test_a_test_run_leaves_no_warm_process_behind(tmp_path):
    """The session's end (tests/conftest.py) stops the warm processes the run started: a pytest
    of its own runs a test whose spawn starts one (tests/cli/warm_probe.py), in a folder of
    warm processes of its own."""
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    env = {k: v for k, v in clean_env(XDG_RUNTIME_DIR=str(run)).items() if not k.startswith("PYTEST_XDIST")}
    probe = Path(__file__).with_name("warm_probe.py")
    argv = [PYTHON, "-m", "pytest", "-n", "0", "-p", "no:cacheprovider", "-q", str(probe)]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    folder = str(run / "wavewait-warm")
    left = warm_procs.running(folder)
    for w in left:  # a failed run leaves nothing behind either
        os.kill(w["pid"], signal.SIGKILL)
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout + done.stderr
    assert left == [], f"still running after the test run ended: {left}"
