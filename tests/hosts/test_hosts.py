"""Host conformance: the real Claude Code and Codex CLIs, driven headless by a scripted model.

Run with `python -m pytest -m hosts tests/hosts` (the first run installs the pinned CLIs from
npm into ~/.cache/wavewait-hosts, about 800 MB). Each test asserts on what the MODEL saw: the
request bodies the host sent to tests/hosts/modelserver.py. A finding that today's wavewait
fails would be an xfail(strict=True) naming the fix, so it turns into a failure once fixed.

`python tests/hosts/hostkit.py transcript` prints what the model saw in the last run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hostkit import (
    CLAUDE,
    CODEX,
    HOSTS,
    VENV_BIN,
    Host,
    Project,
    busy_cores,
    calls,
    drain,
    driver,
    first_turn_sees,
    make_project,
    record,
    register_flights,
    seed_reports,
    send_from,
)
from modelserver import Call, Code, ModelServer, Say, Turn

pytestmark = [pytest.mark.hosts, pytest.mark.timeout(900)]


@pytest.fixture(params=HOSTS, ids=lambda h: h.name)
def host(request: pytest.FixtureRequest) -> Host:
    return request.param


def run(p: Project, script, prompt: str = "Wait for the flights and report.", timeout: float = 240):
    with ModelServer(script) as m:
        p.configure(m.url)
        proc = p.run(prompt, timeout=timeout)
    assert not m.failures, m.failures
    assert m.turns, f"the host sent the model nothing (rc {proc.returncode}): {proc.stderr[-1500:]}"
    return m, proc


INSTRUCTIONS = "sit still until they report"  # from the server's instructions (wavewait/mcp/server.py)


def wavewait_results(m: ModelServer) -> list[tuple[str, str, bool | None]]:
    last = m.turns[-1]
    return [(c, r, e) for c, r, e in zip(last.called, last.results, last.errors, strict=True) if "wavewait" in c]


# --------------------------------------------------------------------------- tools at start
def test_tools_on_first_turn(host: Host, tmp_path: Path) -> None:
    """No extra load, printed config: Claude Code -p waits for a server given by --mcp-config
    (a project .mcp.json alone gets about 2 s), Codex for a `required` one (else about 1 s)."""
    p = make_project(host, tmp_path)
    m, proc = run(p, driver(calls(("list_agents", {}))))
    seen = first_turn_sees(m.turns[0])
    record("tools on the first turn (idle, printed config)", host, m, proc, f"first turn: {seen}")
    assert seen in ("callable", "named"), f"first turn: wavewait {seen}"


def test_tools_on_first_turn_with_cores_busy(host: Host, tmp_path: Path) -> None:
    p = make_project(host, tmp_path)
    with busy_cores():
        m, proc = run(p, driver(calls(("list_agents", {}))))
    seen = first_turn_sees(m.turns[0])
    record("tools on the first turn (every core busy, printed config)", host, m, proc, f"first turn: {seen}")
    assert seen in ("callable", "named"), f"first turn: wavewait {seen}"


def test_printed_config_lets_the_model_call_every_tool(host: Host, tmp_path: Path) -> None:
    """claude -p refuses MCP tools that are not allowed (the printed settings.local.json and
    --allowedTools allow them); codex exec refuses spawn/close/kill_agent unless approved."""
    p = make_project(host, tmp_path)
    register_flights(p.bus, "f1")
    plan = calls(
        ("list_agents", {}),
        ("spawn_agent", {"name": "sleeper", "command": ["sleep", "30"]}),
        ("close_agent", {"agentId": "f1"}),
        ("kill_agent", {"agent": "sleeper"}),
    )
    m, proc = run(p, driver(plan))
    got = wavewait_results(m)
    record("every kind of tool allowed (printed config)", host, m, proc)
    assert [c.rsplit("__", 1)[-1] for c, _, _ in got] == ["list_agents", "spawn_agent", "close_agent", "kill_agent"]
    refused = [(c, r) for c, r, _ in got if re.search(r"(?i)permission|approv|denied|rejected|not allowed", r)]
    assert not refused, refused


# --------------------------------------------------------------------------- fan-in
def fan_in_plan(names: list[str], budget_calls: int = 6):
    """Wait on every flight; call again on what the result says is still waiting (never more):
    the `from_agents` its hint gives, as a model does, or every flight again."""

    def step(done: list[str]) -> tuple[str, dict[str, Any]] | None:
        if not done:
            return "wait", {"timeout": 30, "from_agents": names}
        last = done[-1]
        if len(done) >= budget_calls or not re.search(r"(?i)\bmore\b.*\bwaiting\b|\bwaiting\b.*\bmore\b", last):
            return None
        hinted = re.search(r"from_agents=\[([^\]]*)\]", last)
        again = [n for n in names if hinted and re.search(rf"\b{n}\b", hinted.group(1))]
        return "wait", {"timeout": 5, "from_agents": again or names}

    return step


def report(name: str, size: int) -> str:
    head = f"REPORT<{name}> "
    return head + ("x" * max(0, size - len(head) - 1)) + "."


def test_fan_in_of_three(host: Host, tmp_path: Path) -> None:
    p = make_project(host, tmp_path)
    names = ["f1", "f2", "f3"]
    seed_reports(p.bus, {n: report(n, 120) for n in names})
    m, proc = run(p, driver(fan_in_plan(names)))
    record("fan-in of 3 flights", host, m, proc)
    got = wavewait_results(m)
    seen = "\n".join(r for _, r, _ in got)
    assert [n for n in names if f"REPORT<{n}>" not in seen] == []
    # The result carries the JSON twice (structuredContent, and the same JSON as its text block);
    # both hosts show the model one copy: each report once, so nothing is paid twice.
    assert len(got) == 1 and [seen.count(f"REPORT<{n}>") for n in names] == [1, 1, 1], seen
    # The host ends its session with a signal at once after the scripted model's answer, within
    # the grace after the fan-in's result; it had read the result, so the reports stay taken:
    # nothing is queued again (docs/reliability.md)
    assert drain(p.bus) == []
    # what every wait shares is in the server's instructions, which reach the model
    assert INSTRUCTIONS in json.dumps(m.turns[-1].body), "the server's instructions never reached the model"


@pytest.mark.parametrize("size", [300, 2500])
def test_fan_in_of_forty_every_consumed_report_seen(host: Host, size: int, tmp_path: Path) -> None:
    """The output budget (30,000 characters by default) keeps each result under what both hosts
    show whole (Claude Code persists 50,000 characters or more to a file; Codex keeps ~48 KB)."""
    p = make_project(host, tmp_path)
    names = [f"f{i:02d}" for i in range(40)]
    seed_reports(p.bus, {n: report(n, size) for n in names})
    m, proc = run(p, driver(fan_in_plan(names)))
    seen = "\n".join(r for _, r, _ in wavewait_results(m))
    missing = [n for n in names if f"REPORT<{n}>" not in seen]
    left = drain(p.bus)
    note = (
        f"{40 - len(missing)} of 40 reports of {size} B visible to the model in "
        f"{len(wavewait_results(m))} call(s); {len(left)} left queued"
    )
    record(f"fan-in of 40 flights x {size} B", host, m, proc, note)
    consumed_unseen = [n for n in missing if not any(x.get("from") == n for x in left)]
    assert consumed_unseen == [], note
    twice = [n for n in names if seen.count(f"REPORT<{n}>") > 1]
    assert twice == [], f"shown to the model more than once: {twice}"


# --------------------------------------------------------------------------- results read from content
def test_a_codex_code_cell_reads_every_report_from_content(tmp_path: Path) -> None:
    """Codex's code mode (`--enable code_mode`): the model writes JavaScript for its `exec` tool
    and calls MCP tools as `tools.mcp__wavewait__wait(...)`, which resolves to the MCP result
    itself, `{content, structuredContent, isError}`. A cell that prints `r.content`, as a model's
    code does (and as any client that reads content does), must see every report the wait took."""
    p = make_project(CODEX, tmp_path)
    p.args = ["--enable", "code_mode"]
    names = [f"f{i:02d}" for i in range(40)]
    seed_reports(p.bus, {n: report(n, 300) for n in names})
    cell = (
        f"const r = await tools.mcp__wavewait__wait({{timeout: 30, from_agents: {json.dumps(names)}}});\n"
        "text(r.content.map((c) => c.text).join('\\n'));\n"
    )

    def script(turn: Turn) -> Code | Say:
        if "exec" not in turn.tools:
            return Say("CODE MODE MISSING: no exec tool offered")
        return Code(cell) if not turn.results else Say("done")

    m, proc = run(p, script)
    got = wavewait_results(m)
    seen = "\n".join(r for _, r, _ in got)
    missing = [n for n in names if f"REPORT<{n}>" not in seen]
    left = drain(p.bus)
    note = f"{40 - len(missing)} of 40 reports read from r.content; {len(left)} left queued"
    record("a code cell prints r.content of a fan-in of 40 flights x 300 B (Codex code mode)", CODEX, m, proc, note)
    assert len(got) == 1, [c for c, _, _ in m.turns[-1].called]
    assert missing == [], f"{note}: {seen[:600]}"
    # Codex ends its session at once after the model's answer, within the grace after the
    # result: the reports go back (docs/reliability.md), each one the cell printed, with its id.
    assert all(f"REPORT<{x['from']}>" in seen and x["message_id"] in seen for x in left), left
    assert "structuredContent" not in seen  # the cell printed content alone


# --------------------------------------------------------------------------- finding the tools
SEARCHES = [  # (query, limit, tools that must be among the results)
    ("wavewait wait", 10, ["wait", "wait_for_event"]),
    ("wavewait wait", 3, ["wait"]),
    ("wavewait wait_for_event", 3, ["wait_for_event"]),
    ("wavewait wait_agent", 3, ["wait_agent"]),
    ("wavewait wave_wait_for_signal", 3, ["wave_wait_for_signal"]),
    ("wait for messages from agents", 3, ["wait"]),
    ("wait for flights to report", 3, ["wait"]),
    ("wait for the next event", 3, ["wait_for_event"]),
    ("wait until agents are idle", 3, ["wait_agent"]),
    ("wait for signal files", 3, ["wave_wait_for_signal"]),
]


def test_codex_tool_search_finds_each_wait_tool_by_its_name_or_purpose(tmp_path: Path) -> None:
    """Codex defers MCP tools; its model loads them with `tool_search`, a BM25 search over each
    tool's name, title, description and argument names. A description that opens with a long
    paragraph shared by every wait buried `wait` (10 results for "wavewait wait", none of them
    `wait` or `wait_for_event`); each search here must find the tool it names or describes."""
    p = make_project(CODEX, tmp_path)

    def script(turn: Turn) -> Call | Say:
        done = sum(1 for c in turn.called if c == "tool_search")
        if done < len(SEARCHES):
            query, limit, _ = SEARCHES[done]
            return Call("tool_search", {"query": query, "limit": limit})
        return Say("done")

    m, proc = run(p, script)
    outputs = [i for i in m.turns[-1].body.get("input", []) if i.get("type") == "tool_search_output"]
    found = []
    for item in outputs:
        names = []
        for t in item.get("tools", []):
            if t.get("type") == "namespace" and t.get("name") == "mcp__wavewait":
                names += [sub.get("name") for sub in t.get("tools", [])]
        found.append(names)
    lines = [
        f"{q!r} (limit {n}) → {', '.join(f) or 'nothing of wavewait'}"
        for (q, n, _), f in zip(SEARCHES, found, strict=False)
    ]
    record("tool_search finds each wait tool by its name or purpose (Codex)", CODEX, m, proc, "; ".join(lines))
    assert len(found) == len(SEARCHES), lines
    misses = [line for (_, _, want), f, line in zip(SEARCHES, found, lines, strict=False) if not set(want) <= set(f)]
    assert misses == [], "\n".join(misses)
    assert INSTRUCTIONS in json.dumps(outputs), "the server's instructions are not the namespace's description"


# --------------------------------------------------------------------------- long waits
def test_wait_longer_than_the_host_timeout_returns_the_real_result(host: Host, tmp_path: Path) -> None:
    """Host timeout 8 s, server --max-block 3 s, a flight that reports after the first cut."""
    p = make_project(host, tmp_path)
    p.server_args = ["--max-block", "3"]
    if host is CLAUDE:
        p.env["MCP_TOOL_TIMEOUT"] = "8000"
    register_flights(p.bus, "slow")
    state = {"sent": False}

    def step(done: list[str]) -> tuple[str, dict[str, Any]] | None:
        if len(done) >= 4 or any("REPORT<slow>" in r for r in done):
            return None
        if done and not state["sent"]:  # the first wait came back cut: now the flight reports
            send_from(p.bus, "slow", report("slow", 100))
            state["sent"] = True
        return "wait", {"timeout": 60, "from_agents": ["slow"]}

    with ModelServer(driver(step)) as m:
        p.configure(m.url)
        if host is CODEX:
            cfg = Path(p.env["CODEX_HOME"]) / "config.toml"
            cfg.write_text(re.sub(r"tool_timeout_sec = \d+", "tool_timeout_sec = 8", cfg.read_text()))
        proc = p.run("Wait for the slow flight.")
    got = wavewait_results(m)
    record("wait longer than the host's tool timeout (--max-block 3, host limit 8 s)", host, m, proc)
    assert len(got) >= 2, got
    assert re.search(r"(?i)call wait", got[0][1]), got[0][1]
    assert "REPORT<slow>" in got[-1][1], got[-1][1]


# --------------------------------------------------------------------------- errors
def test_bad_argument_reads_as_an_error(host: Host, tmp_path: Path) -> None:
    """Codex drops the error flag (it has none on the wire): the text alone must say so."""
    p = make_project(host, tmp_path)
    m, proc = run(p, driver(calls(("wait", {"timeout": -5}))))
    got = wavewait_results(m)
    record("a bad argument (wait timeout=-5)", host, m, proc)
    assert len(got) == 1
    _, text, flag = got[0]
    assert "timeout" in text.lower(), text  # says what was wrong
    assert flag is True or re.search(r"(?i)\berror\b|\binvalid\b", text), f"flag {flag}: {text}"


# --------------------------------------------------------------------------- Stop hook
def test_stop_hook_and_notify_report_once(tmp_path: Path) -> None:
    """A worker session that calls notify_completion and then stops (Stop hook): one report."""
    p = make_project(CLAUDE, tmp_path)
    p.hooks = True
    register_flights(p.bus, "worker")
    p.env |= {"WAVEWAIT_AGENT_ID": "worker", "WAVEWAIT_PARENT_ID": "orchestrator"}
    plan = calls(("notify_completion", {"status": "success", "message": "REPORT<worker> done"}))
    m, proc = run(p, driver(plan), prompt="Do the task and report.")
    reports = [x for x in drain(p.bus) if x.get("from") == "worker"]
    record("Stop hook + notify_completion", CLAUDE, m, proc, f"{len(reports)} report(s) reached the orchestrator")
    assert len(wavewait_results(m)) == 1
    assert len(reports) == 1, json.dumps(reports)


def test_wait_cut_by_the_host_loses_nothing(host: Host, tmp_path: Path) -> None:
    """Host limit 5 s, a 15 s wait, the printed --max-block (240 s) left as it is.

    Codex cancels the call at its limit (notifications/cancelled) and the wait gives back what it
    held; Claude Code sends nothing, but passes MCP_TOOL_TIMEOUT to the server, which keeps every
    wait below it. The flight reports after the first call. Whatever the model is told, its report must not be
    consumed by the abandoned wait: it is either seen by the model or still queued.
    """
    p = make_project(host, tmp_path)
    p.server_args = ["--progress-every", "1"]  # progress does not extend a wall-clock limit
    if host is CLAUDE:
        p.env["MCP_TOOL_TIMEOUT"] = "5000"
    register_flights(p.bus, "slow")
    state = {"sent": False}

    def step(done: list[str]) -> tuple[str, dict[str, Any]] | None:
        if len(done) >= 2 or any("REPORT<slow>" in r for r in done):
            return None
        if done and not state["sent"]:  # the host gave up on the first call: now the flight reports
            send_from(p.bus, "slow", report("slow", 100))
            state["sent"] = True
        return "wait", {"timeout": 15 if not done else 2, "from_agents": ["slow"]}

    with ModelServer(driver(step)) as m:
        p.configure(m.url)
        if host is CODEX:
            cfg = Path(p.env["CODEX_HOME"]) / "config.toml"
            text = re.sub(r"args = \[.*\]", 'args = ["mcp", "--progress-every", "1"]', cfg.read_text())
            cfg.write_text(re.sub(r"tool_timeout_sec = \d+", "tool_timeout_sec = 5", text))
        proc = p.run("Wait for the slow flight.")
    got = wavewait_results(m)
    left = [x for x in drain(p.bus) if x.get("from") == "slow"]
    seen = any("REPORT<slow>" in r for _, r, _ in got)
    record(
        "a wait cut by the host (host limit 5 s, wait 15 s, printed --max-block 240)",
        host,
        m,
        proc,
        f"report seen by the model: {seen}; still queued after the run: {len(left)}",
    )
    assert got and not re.search(r"REPORT<slow>", got[0][1])
    assert seen or left, "the report was consumed by the abandoned wait and never shown to the model"


def test_codex_default_tool_timeout(tmp_path: Path) -> None:
    """What Codex does to a call when `tool_timeout_sec` is not set (docs said 60 s): 5 minutes."""
    if not os.environ.get("WAVEWAIT_HOSTS_SLOW"):
        pytest.skip("takes 5 minutes: set WAVEWAIT_HOSTS_SLOW=1 to measure Codex's default tool timeout")
    p = make_project(CODEX, tmp_path)
    register_flights(p.bus, "never")
    with ModelServer(driver(calls(("wait", {"timeout": 420, "from_agents": ["never"]})))) as m:
        p.configure(m.url)
        cfg = Path(p.env["CODEX_HOME"]) / "config.toml"
        text = re.sub(r'"mcp", "--max-block", "[0-9.]+"', '"mcp", "--max-block", "1000"', cfg.read_text())
        cfg.write_text(re.sub(r"tool_timeout_sec = \d+\n", "", text))
        proc = p.run("Wait for the flight.", timeout=600)
    got = wavewait_results(m)
    record("Codex with no tool_timeout_sec, a 420 s wait", CODEX, m, proc)
    assert len(got) == 1
    assert re.search(r"timed out awaiting tools/call after 300s", got[0][1]), got[0][1]


# --------------------------------------------------------------------------- a person interrupts
def _interrupt_from_the_tui(p: Project, tmux: list[str], env: dict[str, str], done: threading.Event) -> None:
    """As a person at the TUI does: once the host's wait shows in the mirror, type
    `/interrupt ID` on the TUI's command line."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not done.is_set():
        listed = subprocess.run(
            [str(VENV_BIN / "wavewait"), "waits", "--bus", str(p.bus)], capture_output=True, text=True, env=env
        )
        waits = json.loads(listed.stdout or "{}").get("waits", []) if listed.returncode in (0, 3) else []
        screen = subprocess.run([*tmux, "capture-pane", "-p"], capture_output=True, text=True, env=env).stdout
        if waits and "Waits by other processes" in screen:
            subprocess.run([*tmux, "send-keys", f"/interrupt {waits[0]['id'][:8]}", "Enter"], env=env, check=True)
            return
        done.wait(0.2)  # polls the pane (no event exists for it); returns at once when the run ends


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (.ci/run installs it)")
def test_a_person_interrupting_from_the_tui_reaches_the_model_as_interrupted(host: Host, tmp_path: Path) -> None:
    """The TUI mirrors the host's wait; the person interrupts it there; the model's result says
    interrupted, with what arrived so far and how to go on."""
    p = make_project(host, tmp_path)
    register_flights(p.bus, "slow")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMUX")} | {"TERM": "xterm-256color"}
    tmux = ["tmux", "-S", str(tmp_path / "tmux.sock")]
    tui = f"{VENV_BIN / 'wavewait'} --bus {p.bus} --agent person"
    subprocess.run([*tmux, "new-session", "-d", "-x", "120", "-y", "40", tui], env=env, check=True)
    done = threading.Event()
    person = threading.Thread(target=_interrupt_from_the_tui, args=(p, tmux, env, done), daemon=True)

    def step(results: list[str]) -> tuple[str, dict[str, Any]] | None:
        if results:
            return None
        if person.ident is None:  # the host may ask again before the call ends: one person
            person.start()
        return "wait", {"timeout": 120, "from_agents": ["slow"]}

    try:
        m, proc = run(p, driver(step))
    finally:
        done.set()
        subprocess.run([*tmux, "kill-server"], env=env, capture_output=True)
    got = wavewait_results(m)
    record("a person interrupts the wait from the TUI", host, m, proc)
    assert len(got) == 1, got
    assert re.search(r'"status":\s?"interrupted"', got[0][1]), got[0][1]
    assert "A person interrupted this wait" in got[0][1], got[0][1]
