"""Talking to real Claude Code flights (docs/conversations.md): a tell into a running flight, a
tell that interrupts its turn, a tell that resumes a flight that reported and ended, a fan-in
over told flights. The CLI runs as a process, as a user runs it; what is asserted is what the
scripted MODEL received (tests/hosts/modelserver.py), and what wavewait answered.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hostkit import CLAUDE, CODEX, VENV_BIN, driver, install, make_project, until
from modelserver import Call, ModelServer, Say, Turn
from test_coding_wave import git, user_setup

pytestmark = [pytest.mark.hosts, pytest.mark.timeout(600)]
MARK = re.compile(r"FLIGHT<([a-z0-9-]+)>")
SLEEP = re.compile(r"SLEEP(\d+)")
HOLD = re.compile(r"HOLD<([^>]+)>")  # the tool runs until this file exists (90 s at most)
answering, released = threading.Event(), threading.Event()  # a slow last answer is under way; let it go


def _texts(message: dict[str, Any]) -> list[str]:
    content = (
        message["content"] if isinstance(message["content"], list) else [{"type": "text", "text": message["content"]}]
    )
    return [b["text"] for b in content if b.get("type") == "text" and MARK.search(b.get("text", ""))]


def user_texts(turn: Turn) -> list[str]:
    """The user's own words in the conversation the model got, oldest first (each prompt and tell
    of these tests names its flight: FLIGHT<name>), cut out of any note the host wraps them in."""
    return [own(t) for m in turn.body.get("messages", []) if m.get("role") != "assistant" for t in _texts(m)]


def own(text: str) -> str:
    return text[text.index("FLIGHT<") :].split("\n\n")[0].strip()


def talker(turn: Turn) -> Call | Say:
    """A flight does what its latest user message says: SLEEP<n> waits n seconds in its shell,
    anything else is answered `NAME heard: TEXT`; after its tool's result it says `NAME slept`.
    A message told while the tool ran comes after that result, in the same request (Claude
    Code wraps it in a note of its own, role `system`: its first paragraph is the message)."""
    messages = turn.body["messages"]
    since = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
    fresh = [t for m in messages[since + 1 :] for t in _texts(m)]
    said = user_texts(turn)[-1] if user_texts(turn) else ""
    name = MARK.search(said).group(1) if MARK.search(said) else "?"
    if not fresh:
        return Say(f"{name} slept")
    said = own(fresh[-1])
    if "SLOWANSWER" in said:  # the model takes its time over its last answer: a tell meanwhile misses the turn
        answering.set()
        released.wait(30)
        return Say(f"{name} answered slowly")
    if (n := SLEEP.search(said)) is not None:
        # not `sleep N` alone: Claude Code refuses a standalone long sleep
        wait = f"python3 -c 'import time; time.sleep({n.group(1)})'"
        return Call("Bash", {"command": wait, "description": "wait as told"})
    if (h := HOLD.search(said)) is not None:
        hold = f"import os, time; t = time.time() + 90\nwhile not os.path.exists({h.group(1)!r}) and time.time() < t: time.sleep(0.05)"
        return Call("Bash", {"command": f"python3 -c {shlex.quote(hold)}", "description": "wait as told"})
    return Say(f"{name} heard: {MARK.sub('', said).strip()}")


class Wave:
    """A repository, the pinned Claude Code as the `claude` preset, a bus, and the CLI."""

    def __init__(self, tmp_path: Path, model_url: str, bus: str | None = None) -> None:
        exe = install(CLAUDE)
        self.home = tmp_path / "home"
        self.repo = self.home / "project"
        self.repo.mkdir(parents=True)
        git(self.repo, "init", "--quiet", "-b", "main")
        (self.repo / "README.md").write_text("a project\n")
        git(self.repo, "add", "--all")
        git(self.repo, "-c", "user.name=T", "-c", "user.email=t@e.invalid", "commit", "--quiet", "-m", "first")
        presets = tmp_path / "presets.toml"
        # the scripted waits run python3 in the agent's shell: allowed, as a user allows a tool
        presets.write_text(
            f'[presets.claude]\nprogram = {json.dumps(str(exe))}\nextra_args = ["--allowedTools", "Bash(python3:*)"]\n'
        )
        self.env = user_setup(self.home, model_url) | {
            "WAVEWAIT_BUS": bus or str(tmp_path / "bus"),
            "WAVEWAIT_PRESETS": str(presets),
        }

    def run(self, *args: str, timeout: float = 200) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(VENV_BIN / "wavewait"), *args],
            env=self.env,
            cwd=self.repo,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start(self, *args: str) -> subprocess.Popen[str]:
        """A command left running beside the test (a tell that waits for its flight)."""
        return subprocess.Popen(
            [str(VENV_BIN / "wavewait"), *args],
            env=self.env,
            cwd=self.repo,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def json(self, *args: str, rc: int = 0, timeout: float = 200) -> dict[str, Any]:
        p = self.run(*args, timeout=timeout)
        assert p.returncode == rc, (args, p.returncode, p.stdout, p.stderr)
        return json.loads(p.stdout.splitlines()[-1])

    def spawn(self, name: str, prompt: str, *flags: str) -> str:
        p = self.run("spawn", "-q", name, "--wave", "talk", "--preset", "claude", *flags, "--", prompt)
        assert p.returncode == 0, (p.stdout, p.stderr)
        return p.stdout.strip()

    def agent(self, agent_id: str) -> dict[str, Any]:
        return next(a for a in self.json("agents")["agents"] if a["id"] == agent_id)

    def transcript(self, agent_id: str) -> list[dict[str, Any]]:
        return self.json("transcript", agent_id, "--json")["entries"]


def wait_report(w: Wave, agent_id: str, timeout: int = 120) -> dict[str, Any]:
    out = w.json("wait", str(timeout), agent_id, timeout=timeout + 30)
    entry = out["results"][0]
    assert entry["status"] == "received", out
    return entry


def test_a_tell_during_a_running_turn_goes_into_it_and_one_while_idle_is_the_next_turn(tmp_path: Path) -> None:
    with ModelServer(talker) as m:
        w = Wave(tmp_path, m.url)
        go = tmp_path / "go"  # its tool runs until this file exists: the tell comes while it runs
        a = w.spawn("steered", f"FLIGHT<steered> HOLD<{go}>", "--keep-open", "120")
        until(lambda: any(e["kind"] == "tool" for e in w.transcript(a)), 90, "the first turn runs its tool")
        said = w.json("tell", a, "FLIGHT<steered> also check the docs")
        assert (said["agent_id"], said["told"], said["turn"]) == (a, "in_turn", 1)
        go.touch()
        first = wait_report(w, a)
        assert first["message"] == "steered heard: also check the docs"
        # the model got the told words within the running turn, beside its tool's result
        told = next(t for t in m.turns if any("also check the docs" in x for x in user_texts(t)))
        assert told.results, "the told words came with the tool's result, in the running turn"
        assert w.agent(a)["status"] == "idle"  # open between turns (--keep-open)
        said = w.json("tell", a, "FLIGHT<steered> and the changelog")
        assert (said["told"], said["turn"]) == ("next_turn", 2)
        second = wait_report(w, a)
        assert second["message"] == "steered heard: and the changelog"
        assert (first["turn"], second["turn"]) == (1, 2)  # each report says the turn it ends
        assert user_texts(m.turns[-1])[-1] == "FLIGHT<steered> and the changelog"
        kinds = [(e["kind"], e["turn"]) for e in w.transcript(a)]
        assert ("user", 1) in kinds and ("tool", 1) in kinds and ("user", 2) in kinds and ("agent", 2) in kinds
        # close ends the conversation for good: a later tell is refused, naming close
        w.json("close", a)
        p = w.run("tell", a, "FLIGHT<steered> one more thing")
        assert p.returncode == 2 and "close" in p.stderr, (p.stdout, p.stderr)
    assert not m.failures, m.failures


def test_a_tell_now_interrupts_the_running_turn(tmp_path: Path) -> None:
    with ModelServer(talker) as m:
        w = Wave(tmp_path, m.url)
        a = w.spawn("stopped", "FLIGHT<stopped> SLEEP90", "--keep-open", "60")
        until(lambda: any(e["kind"] == "tool" for e in w.transcript(a)), 90, "the long turn runs its tool")
        t0 = time.monotonic()
        said = w.json("tell", a, "FLIGHT<stopped> stop that and say hi", "--now")
        assert (said["told"], said["turn"]) == ("next_turn", 2)
        report = wait_report(w, a)
        took = time.monotonic() - t0
        assert report["message"] == "stopped heard: stop that and say hi"
        assert took < 60, f"the next report came {took:.0f} s after the tell: the 90 s turn was not cut"
        assert [e["text"] for e in w.transcript(a) if e["kind"] == "turn" and "interrupted" in e["text"]]
        w.json("close", a)
    assert not m.failures, m.failures


@pytest.fixture(params=["file", "postgres"])
def bus_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The bus the wave runs on: a directory, or a fresh PostgreSQL schema (the conversation and
    the tells travel on it like everything else)."""
    if request.param == "file":
        yield str(tmp_path / "bus")
        return
    from pg.pgtools import fresh_schema_url

    with fresh_schema_url() as url:
        yield url


def test_a_tell_resumes_a_flight_that_reported_and_ended(tmp_path: Path, bus_url: str) -> None:
    with ModelServer(talker) as m:
        w = Wave(tmp_path, m.url, bus_url)
        a = w.spawn("resumed", "FLIGHT<resumed> write the plan")
        first = wait_report(w, a)
        assert first["message"] == "resumed heard: write the plan"
        until(lambda: w.agent(a)["status"] == "closed", 60, "its agent ends after its turn (keep-open 0)")
        before = w.agent(a)
        assert before["session_id"]
        said = w.json("tell", a, "FLIGHT<resumed> now the tests")
        assert (said["told"], said["turn"]) == ("resumed", 2)
        second = wait_report(w, a)
        assert second["message"] == "resumed heard: now the tests"
        assert second["agent_id"] == a
        # the model saw the whole earlier conversation, then the told text, from the same worktree
        last = m.turns[-1]
        assert user_texts(last)[-1] == "FLIGHT<resumed> now the tests"
        assert "FLIGHT<resumed> write the plan" in user_texts(last)
        assert before["worktree"]["path"] in json.dumps(last.body)
        after = w.agent(a)
        assert after["session_id"] == before["session_id"] and after["turn"] == 2
    assert not m.failures, m.failures


def test_a_fan_in_over_three_told_flights_returns_their_next_reports(tmp_path: Path) -> None:
    with ModelServer(talker) as m:
        w = Wave(tmp_path, m.url)
        ids = [w.spawn(f"f{i}", f"FLIGHT<f{i}> first") for i in range(3)]
        out = w.json("wait", "120", *ids, timeout=150)
        assert [r["message"] for r in out["results"]] == [f"f{i} heard: first" for i in range(3)]
        for i, a in enumerate(ids):
            until(lambda a=a: w.agent(a)["status"] == "closed", 60, "each ends after its turn")
            assert w.json("tell", a, f"FLIGHT<f{i}> second")["told"] == "resumed"
        out = w.json("wait", "120", *ids, timeout=150)
        assert out["status"] == "complete"
        assert [r["message"] for r in out["results"]] == [f"f{i} heard: second" for i in range(3)]
    assert not m.failures, m.failures


def test_tells_waiting_for_an_ended_flight_are_given_in_order_when_it_resumes(tmp_path: Path) -> None:
    with ModelServer(talker) as m:
        w = Wave(tmp_path, m.url)
        a = w.spawn("ordered", "FLIGHT<ordered> first")
        wait_report(w, a)
        until(lambda: w.agent(a)["status"] == "closed", 60, "its agent ends after its turn")
        # two tells at once: the first is kept on the bus before the second is given
        first = w.start("tell", a, "FLIGHT<ordered> one")
        until(
            lambda: "FLIGHT<ordered> one" in w.run("transcript", a).stdout or first.poll() is not None,
            60,
            "the first tell given",
        )
        second = w.json("tell", a, "FLIGHT<ordered> two")
        out, err = first.communicate(timeout=120)
        assert first.returncode == 0, err
        # the second went wherever the flight then was: into the resumed turn, its next turn, or a
        # resume of its own once that turn ended the conversation (keep-open 0)
        assert json.loads(out)["told"] == "resumed" and second["turn"] >= 2
        until(lambda: any("two" in t for t in user_texts(m.turns[-1])), 60, "the model got the second tell")
        texts = user_texts(m.turns[-1])
        assert texts.index("FLIGHT<ordered> one") < texts.index("FLIGHT<ordered> two"), texts
        users = [e["text"] for e in w.transcript(a) if e["kind"] == "user"]
        assert users == ["FLIGHT<ordered> first", "FLIGHT<ordered> one", "FLIGHT<ordered> two"]
    assert not m.failures, m.failures


def test_a_tell_to_a_flight_whose_supervisor_died_resumes_it(tmp_path: Path) -> None:
    with ModelServer(talker) as m:
        w = Wave(tmp_path, m.url)
        a = w.spawn("orphan", "FLIGHT<orphan> first", "--keep-open", "300")
        wait_report(w, a)
        record = w.agent(a)
        assert record["status"] == "idle"
        supervisor = int(
            subprocess.run(["ps", "-o", "ppid=", "-p", str(record["pid"])], capture_output=True, text=True).stdout
        )
        os.kill(supervisor, 9)  # its supervisor dies; its record still says idle
        said = w.json("tell", a, "FLIGHT<orphan> still there?")
        assert said["told"] == "resumed"
        assert wait_report(w, a)["message"] == "orphan heard: still there?"
        assert "FLIGHT<orphan> first" in user_texts(m.turns[-1])
        w.json("close", a)
    assert not m.failures, m.failures


def test_an_orchestrating_claude_code_tells_its_flight_with_tell_agent_and_waits_for_its_next_report(
    tmp_path: Path,
) -> None:
    """The orchestrator is Claude Code itself, set up as --print-config says; its model calls
    tell_agent, then wait on the flight; the flight, resumed, answers the told text."""
    plan: list[tuple[str, dict[str, Any]]] = []
    orchestrate = driver(lambda done: plan[len(done)] if len(done) < len(plan) else None)

    def script(turn: Turn) -> Call | Say:
        return orchestrate(turn) if "ORCHESTRATE" in json.dumps(turn.body) else talker(turn)

    with ModelServer(script) as m:
        w = Wave(tmp_path, m.url)
        a = w.spawn("worker", "FLIGHT<worker> first")
        wait_report(w, a)
        until(lambda: w.agent(a)["status"] == "closed", 60, "its agent ends after its turn")
        plan += [
            ("tell_agent", {"agent": a, "message": "FLIGHT<worker> add the tests"}),
            ("wait", {"timeout": 120, "from_agents": [a]}),
        ]
        (tmp_path / "orch").mkdir()
        p = make_project(CLAUDE, tmp_path / "orch")
        p.bus = Path(w.env["WAVEWAIT_BUS"])
        p.env |= {"WAVEWAIT_PRESETS": w.env["WAVEWAIT_PRESETS"]}
        p.configure(m.url)
        done = p.run("ORCHESTRATE: tell the worker to add the tests, then wait for it.")
        assert done.returncode == 0, done.stderr
        results = [t.results for t in m.turns if "ORCHESTRATE" in json.dumps(t.body)][-1]
        told, waited = [json.loads(r) for r in results if r.lstrip().startswith("{")][-2:]
        assert (told["agent_id"], told["told"], told["turn"]) == (a, "resumed", 2)
        assert waited["results"][0]["message"] == "worker heard: add the tests"
    assert not m.failures, m.failures


# --------------------------------------------------------------------------- Codex
def codex_talker(turn: Turn) -> Call | Say:
    """`talker` for Codex (the Responses API's input items): the newest user text that came
    after the last tool output is acted on; after a tool output alone it says `NAME slept`."""
    items = [i for i in turn.body.get("input", []) if isinstance(i, dict)]
    said_at, said = -1, ""
    for n, i in enumerate(items):
        if i.get("type") == "message" and i.get("role") == "user":
            for part in i.get("content") or []:
                text = part.get("text", "") if isinstance(part, dict) else ""
                if MARK.search(text):
                    said_at, said = n, own(text)
    name = MARK.search(said).group(1) if MARK.search(said) else "?"
    out_at = max((n for n, i in enumerate(items) if i.get("type") == "function_call_output"), default=-1)
    if out_at > said_at:
        return Say(f"{name} slept")
    if (n := SLEEP.search(said)) is not None:
        return Call("exec_command", {"cmd": f"sleep {n.group(1)}", "yield_time_ms": 60000})
    if (h := HOLD.search(said)) is not None:
        hold = f"i=0; while [ ! -e {shlex.quote(h.group(1))} ] && [ $i -lt 1800 ]; do sleep 0.05; i=$((i+1)); done"
        return Call("exec_command", {"cmd": hold, "yield_time_ms": 120000})
    return Say(f"{name} heard: {MARK.sub('', said).strip()}")


def codex_wave(tmp_path: Path, model_url: str) -> Wave:
    w = Wave(tmp_path, model_url)
    presets = Path(w.env["WAVEWAIT_PRESETS"])
    presets.write_text(f"[presets.codex]\nprogram = {json.dumps(str(install(CODEX)))}\n")
    return w


def test_a_codex_flight_is_steered_in_turn_told_a_next_turn_and_resumed(tmp_path: Path) -> None:
    with ModelServer(codex_talker) as m:
        w = codex_wave(tmp_path, m.url)
        run = lambda name, prompt, *flags: w.run(  # noqa: E731
            "spawn", "-q", name, "--wave", "talk", "--preset", "codex", *flags, "--", prompt
        ).stdout.strip()
        go = tmp_path / "go"  # its command runs until this file exists: the tell comes while it runs
        a = run("cx", f"FLIGHT<cx> HOLD<{go}>", "--keep-open", "120")
        until(lambda: any(e["kind"] == "tool" for e in w.transcript(a)), 90, "its turn runs its command")
        said = w.json("tell", a, "FLIGHT<cx> also check the docs")
        assert (said["told"], said["turn"]) == ("in_turn", 1)  # turn/steer, answered
        go.touch()
        assert wait_report(w, a)["message"] == "cx heard: also check the docs"
        said = w.json("tell", a, "FLIGHT<cx> and the changelog")
        assert (said["told"], said["turn"]) == ("next_turn", 2)
        assert wait_report(w, a)["message"] == "cx heard: and the changelog"
        w.json("close", a)
        b = run("cy", "FLIGHT<cy> first")
        assert wait_report(w, b)["message"] == "cy heard: first"
        until(lambda: w.agent(b)["status"] == "closed", 60, "its agent ends after its turn")
        said = w.json("tell", b, "FLIGHT<cy> second")
        assert (said["told"], said["turn"]) == ("resumed", 2)  # thread/resume
        assert wait_report(w, b)["message"] == "cy heard: second"
        body = json.dumps(m.turns[-1].body)
        assert "FLIGHT<cy> first" in body and "FLIGHT<cy> second" in body
        # --now: turn/interrupt cuts a 90 s command; the told text starts the next turn
        c = run("cz", "FLIGHT<cz> SLEEP90", "--keep-open", "60")
        until(lambda: any(e["kind"] == "tool" for e in w.transcript(c)), 90, "its long command runs")
        t0 = time.monotonic()
        said = w.json("tell", c, "FLIGHT<cz> stop that", "--now")
        assert (said["told"], said["turn"]) == ("next_turn", 2)
        assert wait_report(w, c)["message"] == "cz heard: stop that"
        assert time.monotonic() - t0 < 60, "the 90 s command was not cut"
        w.json("close", c)
    assert not m.failures, m.failures


def test_a_host_that_refuses_the_resume_is_an_error_naming_it_and_the_message_is_not_told(tmp_path: Path) -> None:
    from wavewait.core.bus.file import FileBus

    with ModelServer(talker) as m:
        w = Wave(tmp_path, m.url)
        a = w.spawn("lost", "FLIGHT<lost> first")
        wait_report(w, a)
        until(lambda: w.agent(a)["status"] == "closed", 60, "its agent ends after its turn")
        bogus = "00000000-0000-4000-8000-000000000000"  # a session its host never had

        async def forget() -> None:
            bus = FileBus(w.env["WAVEWAIT_BUS"])
            await bus.update_agent(a, session_id=bogus)
            await bus.close()

        asyncio.run(forget())
        asked = len(m.turns)
        p = w.run("tell", a, "FLIGHT<lost> second")
        assert p.returncode == 2, (p.stdout, p.stderr)
        assert f"No conversation found with session ID: {bogus}" in p.stderr and "not told" in p.stderr
        assert len(m.turns) == asked  # the model never got it
        assert "FLIGHT<lost> second" not in [e["text"] for e in w.transcript(a) if e["kind"] == "agent"]
        assert w.agent(a)["status"] == "dead"  # its host ended it: said in its reason
    assert not m.failures, m.failures


def test_a_tell_while_the_model_gives_its_last_answer_is_told_the_next_turn(tmp_path: Path) -> None:
    """Claude Code takes a message into the running turn at its next model request; one written
    while the model gives its last answer starts the next turn: its echo says so, and the tell's
    answer is `next_turn`, not a guess."""
    answering.clear()
    released.clear()
    with ModelServer(talker) as m:
        w = Wave(tmp_path, m.url)
        a = w.spawn("late", "FLIGHT<late> SLOWANSWER", "--keep-open", "120")
        until(answering.is_set, 90, "the model giving its last answer")
        teller = w.start("tell", a, "FLIGHT<late> one more")
        # its supervisor took the tell (a short wait of its own): it writes it at once; whether the
        # model's answer then comes before or after, the turn that takes it is the next
        until(lambda: teller.poll() is not None or _taking(w, a), 60, "the supervisor taking the tell")
        released.set()
        out, err = teller.communicate(timeout=120)
        assert teller.returncode == 0, err
        said = json.loads(out)
        assert (said["told"], said["turn"]) == ("next_turn", 2), said
        assert wait_report(w, a)["message"] == "late answered slowly"
        assert wait_report(w, a)["message"] == "late heard: one more"
        w.json("close", a)
    assert not m.failures, m.failures


def _taking(w: Wave, agent_id: str) -> bool:
    return any(x["tool"] == "tell" and x["waiter"] == agent_id for x in w.json("waits")["waits"])
