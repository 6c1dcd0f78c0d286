"""Codex's app-server driver (core/talk/codex.py): feed() on lines the real `codex app-server`
0.169.0 printed, and the driver talking to the real CLI (the host suite's pinned one) against
the scripted model, asserting on what the MODEL received.

The unit tests run everywhere. The host tests (marked `hosts`) run under CI=true, `-m hosts` or
WAVEWAIT_TEST_HOSTS=1: `python -m pytest -n 0 -m hosts tests/core/test_talk_codex.py`.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from wavewait.core.presets import mcp_args, server_for
from wavewait.core.talk import Step, TurnEnd, driver_for
from wavewait.core.talk.codex import QUIET, CodexDriver, command_of

from conftest import until, warm_settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hosts"))
from hostkit import CODEX, VENV_BIN, install
from modelserver import Call, ModelServer, Say, Turn

pytestmark = pytest.mark.anyio

RECORDED = r"""
{"id":1,"result":{"userAgent":"wavewait/0.169.0 (Debian 12.0.0; x86_64) unknown (wavewait; 0)","codexHome":"/tmp/cxexp/h1/.codex","platformFamily":"unix","platformOs":"linux"}}
{"id":2,"result":{"thread":{"id":"01a22691-868f-7383-bc07-9e3ef907bfc0","environments":[{"environmentId":"local","cwd":"/tmp/cxexp/h1/proj","runtimeWorkspaceRoots":["/tmp/cxexp/h1/proj"]}],"extra":null,"sessionId":"01a22691-868f-7383-bc07-9e3ef907bfc0","forkedFromId":null,"attachedToThreadId":null,"parentThreadId":null,"preview":"","ephemeral":false,"section":null,"sectionEnteredAt":null,"projectId":null,"historyMode":"paginated","modelProvider":"scripted","model":"gpt-5.5","reasoningEffort":null,"createdAt":1795943401,"updatedAt":1795943401,"recencyAt":1795943401,"status":{"type":"idle"},"path":"/tmp/cxexp/h1/.codex/sessions/2026/11/29/rollout-2026-11-29T09-10-01-01a22691-868f-7383-bc07-9e3ef907bfc0.jsonl","cwd":"/tmp/cxexp/h1/proj","cliVersion":"0.169.0","originator":"wavewait","source":"vscode","canAcceptDirectInput":true,"threadSource":null,"agentNickname":null,"agentRole":null,"gitInfo":null,"name":null,"daybreakEnabled":null,"turns":[]},"model":"gpt-5.5","modelProvider":"scripted","serviceTier":null,"disabledPluginIds":[],"cwd":"/tmp/cxexp/h1/proj","runtimeWorkspaceRoots":["/tmp/cxexp/h1/proj"],"instructionSources":[],"approvalPolicy":"never","approvalsReviewer":"user","sandbox":{"type":"workspaceWrite","writableRoots":[],"networkAccess":false,"excludeTmpdirEnvVar":false,"excludeSlashTmp":false},"activePermissionProfile":null,"reasoningEffort":null,"multiAgentMode":"explicitRequestOnly"}}
{"id":3,"result":{"turn":{"id":"01a22691-869d-7213-9928-7a44500d53d3","rootTurnId":"01a22691-869d-7213-9928-7a44500d53d3","items":[],"itemsView":"notLoaded","status":"inProgress","error":null,"startedAt":null,"completedAt":null,"durationMs":null}}}
{"method":"turn/started","params":{"threadId":"01a22691-868f-7383-bc07-9e3ef907bfc0","turn":{"id":"01a22691-869d-7213-9928-7a44500d53d3","rootTurnId":"01a22691-869d-7213-9928-7a44500d53d3","items":[],"itemsView":"notLoaded","status":"inProgress","error":null,"startedAt":1795943401,"completedAt":null,"durationMs":null}},"emittedAtMs":1795943401150}
{"method":"item/completed","params":{"item":{"type":"userMessage","id":"01a22691-86cf-7242-b830-5d45a7fc3428","clientId":null,"content":[{"type":"text","text":"say hello","text_elements":[]}],"startedAtMs":1795943401167,"completedAtMs":1795943401167},"threadId":"01a22691-868f-7383-bc07-9e3ef907bfc0","turnId":"01a22691-869d-7213-9928-7a44500d53d3","contentTokenCount":null,"completedAtMs":1795943401167},"emittedAtMs":1795943401169}
{"method":"item/started","params":{"item":{"type":"commandExecution","id":"call_1","pluginId":null,"scriptPath":null,"command":"/bin/bash -lc 'echo hello'","cwd":"/tmp/cxexp/h1/proj","processId":"38822","source":"unifiedExecStartup","status":"inProgress","commandActions":[{"type":"unknown","command":"echo hello"}],"aggregatedOutput":null,"exitCode":null,"durationMs":null,"startedAtMs":1795943401333,"completedAtMs":null},"threadId":"01a22691-868f-7383-bc07-9e3ef907bfc0","turnId":"01a22691-869d-7213-9928-7a44500d53d3","startedAtMs":1795943401333},"emittedAtMs":1795943401336}
{"method":"item/completed","params":{"item":{"type":"commandExecution","id":"call_1","pluginId":null,"scriptPath":null,"command":"/bin/bash -lc 'echo hello'","cwd":"/tmp/cxexp/h1/proj","processId":"38822","source":"unifiedExecStartup","status":"completed","commandActions":[{"type":"unknown","command":"echo hello"}],"aggregatedOutput":"hello\n","exitCode":0,"durationMs":0,"startedAtMs":1795943401333,"completedAtMs":1795943401333},"threadId":"01a22691-868f-7383-bc07-9e3ef907bfc0","turnId":"01a22691-869d-7213-9928-7a44500d53d3","contentTokenCount":null,"completedAtMs":1795943401333},"emittedAtMs":1795943401336}
{"method":"thread/tokenUsage/updated","params":{"threadId":"01a22691-868f-7383-bc07-9e3ef907bfc0","turnId":"01a22691-869d-7213-9928-7a44500d53d3","tokenUsage":{"total":{"totalTokens":15,"inputTokens":10,"cachedInputTokens":0,"cacheWriteInputTokens":0,"outputTokens":5,"reasoningOutputTokens":0},"last":{"totalTokens":15,"inputTokens":10,"cachedInputTokens":0,"cacheWriteInputTokens":0,"outputTokens":5,"reasoningOutputTokens":0},"modelContextWindow":258400}},"emittedAtMs":1795943401339}
{"method":"item/completed","params":{"item":{"type":"agentMessage","moderation":null,"id":"msg_2","text":"All done.\nFinal line.","phase":null,"memoryCitation":null,"delivery":null,"questions":null,"startedAtMs":1795943401350,"completedAtMs":1795943401350},"threadId":"01a22691-868f-7383-bc07-9e3ef907bfc0","turnId":"01a22691-869d-7213-9928-7a44500d53d3","contentTokenCount":null,"completedAtMs":1795943401350},"emittedAtMs":1795943401351}
{"method":"thread/tokenUsage/updated","params":{"threadId":"01a22691-868f-7383-bc07-9e3ef907bfc0","turnId":"01a22691-869d-7213-9928-7a44500d53d3","tokenUsage":{"total":{"totalTokens":30,"inputTokens":20,"cachedInputTokens":0,"cacheWriteInputTokens":0,"outputTokens":10,"reasoningOutputTokens":0},"last":{"totalTokens":15,"inputTokens":10,"cachedInputTokens":0,"cacheWriteInputTokens":0,"outputTokens":5,"reasoningOutputTokens":0},"modelContextWindow":258400}},"emittedAtMs":1795943401352}
{"method":"turn/completed","params":{"threadId":"01a22691-868f-7383-bc07-9e3ef907bfc0","turn":{"id":"01a22691-869d-7213-9928-7a44500d53d3","rootTurnId":"01a22691-869d-7213-9928-7a44500d53d3","items":[{"type":"agentMessage","moderation":null,"id":"msg_2","text":"All done.\nFinal line.","phase":null,"memoryCitation":null,"delivery":null,"questions":null,"startedAtMs":1795943401350,"completedAtMs":1795943401350}],"itemsView":"summary","status":"completed","error":null,"startedAt":1795943401,"completedAt":1795943401,"durationMs":234}},"emittedAtMs":1795943401356}
"""
# the rest of what the real server printed in other runs (ids as our requests had them there)
STEER_REFUSED = '{"error":{"code":-32600,"message":"no active turn to steer"},"id":%d}'
STEERED = '{"id":%d,"result":{"turnId":"%s"}}'
INTERRUPT_ANSWER = '{"id":%d,"result":{}}'
NO_ROLLOUT = '{"error":{"code":-32600,"message":"no rollout found for thread id %s"},"id":%d}'
SLEEP_STARTED = r"""{"method":"item/started","params":{"item":{"type":"commandExecution","id":"call_1","pluginId":null,"scriptPath":null,"command":"/bin/bash -lc 'sleep 30'","cwd":"/tmp/cxexp/h3/proj","processId":"54744","source":"unifiedExecStartup","status":"inProgress","commandActions":[{"type":"unknown","command":"sleep 30"}],"aggregatedOutput":null,"exitCode":null,"durationMs":null,"startedAtMs":1795943404249,"completedAtMs":null},"threadId":"01a22691-91a9-7fd2-b7b7-a582813e5f8d","turnId":"01a22691-91c4-73c3-b132-fe2172a40924","startedAtMs":1795943404249},"emittedAtMs":1795943404251}"""
INTERRUPTED = r"""{"method":"turn/completed","params":{"threadId":"01a22691-91a9-7fd2-b7b7-a582813e5f8d","turn":{"id":"01a22691-91c4-73c3-b132-fe2172a40924","rootTurnId":"01a22691-91c4-73c3-b132-fe2172a40924","items":[],"itemsView":"notLoaded","status":"interrupted","error":null,"startedAt":1795943403,"completedAt":1795943404,"durationMs":284}},"emittedAtMs":1795943404259}"""
RESUME_REPLAY = r"""{"method":"thread/tokenUsage/updated","params":{"threadId":"01a22691-91a9-7fd2-b7b7-a582813e5f8d","turnId":"01a22691-91c4-73c3-b132-fe2172a40924","tokenUsage":{"total":{"totalTokens":15,"inputTokens":10,"cachedInputTokens":0,"cacheWriteInputTokens":0,"outputTokens":5,"reasoningOutputTokens":0},"last":{"totalTokens":15,"inputTokens":10,"cachedInputTokens":0,"cacheWriteInputTokens":0,"outputTokens":5,"reasoningOutputTokens":0},"modelContextWindow":258400}},"emittedAtMs":1795943405968}"""
THREAD = "01a22691-868f-7383-bc07-9e3ef907bfc0"
TURN = "01a22691-869d-7213-9928-7a44500d53d3"
CWD = "/tmp/cxexp/h1/proj"


def recorded() -> list[bytes]:
    return [line.encode() for line in RECORDED.strip().splitlines()]


def sent(lines: list[bytes]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines]


def feed_all(d: CodexDriver, lines: list[bytes]) -> list[Step]:
    return [d.feed(line) for line in lines]


def turn_lines(prefix: str) -> list[bytes]:
    """The recorded turn's notifications from the first whose method starts with `prefix`."""
    lines = recorded()
    first = next(i for i, line in enumerate(lines) if json.loads(line).get("method", "").startswith(prefix))
    return lines[first:]


def started(d: CodexDriver) -> None:
    """A driver whose thread is open and whose recorded turn runs."""
    d.open(None, CWD)
    d.tell("say hello")
    lines = recorded()
    feed_all(d, lines[:2])  # initialize's and thread/start's answers
    d.feed(next(line for line in lines if b'"method":"turn/started"' in line))
    assert d.running


# --------------------------------------------------------------------------- feed, line by line
def test_open_writes_initialize_and_thread_start_and_holds_the_prompt_for_the_thread_id() -> None:
    d = driver_for("codex")
    assert isinstance(d, CodexDriver)
    lines = sent(d.open(None, CWD))
    assert [m.get("method") for m in lines] == ["initialize", "initialized", "thread/start"]
    assert lines[0]["params"]["capabilities"]["optOutNotificationMethods"] == list(QUIET)
    assert lines[2]["params"] == {"cwd": CWD, "sandbox": "workspace-write", "approvalPolicy": "never"}
    assert d.tell("say hello") == ([], "next_turn")  # no thread id yet: held, not lost
    steps = feed_all(d, recorded()[:2])
    assert steps[1].session_id == THREAD
    (start,) = sent(steps[1].write)
    assert start["method"] == "turn/start" and start["params"]["threadId"] == THREAD
    assert start["params"]["input"] == [{"type": "text", "text": "say hello", "text_elements": []}]


def test_a_recorded_turn_reads_as_started_tool_result_agent_and_its_end_with_the_turns_usage() -> None:
    d = CodexDriver(turn=3)
    d.open(None, CWD)
    d.tell("say hello")
    steps = feed_all(d, recorded())
    assert [s.started for s in steps if s.started] == [4]
    entries = [(e.kind, e.text, e.turn) for s in steps for e in s.entries]
    assert entries == [
        ("tool", "shell echo hello", 4),
        ("result", "hello", 4),
        ("agent", "All done.\nFinal line.", 4),
    ]
    (end,) = [s.ended for s in steps if s.ended]
    assert (end.turn, end.status, end.text, end.error) == (4, "success", "All done.\nFinal line.", None)
    assert (end.usage.input_tokens, end.usage.output_tokens, end.usage.turns) == (20, 10, 1)
    assert not d.running and d.turn == 4 and not any(s.failed for s in steps)


def test_a_tell_while_a_turn_runs_steers_it_and_a_refused_steer_starts_the_next_turn_in_order() -> None:
    d = CodexDriver()
    started(d)
    lines, told = d.tell("first")
    (steer,) = sent(lines)
    assert told == "in_turn" and steer["method"] == "turn/steer"
    assert steer["params"]["expectedTurnId"] == TURN and steer["params"]["threadId"] == THREAD
    assert d.tell("second") == ([], "in_turn")  # held behind the unanswered steer
    for line in turn_lines("item/completed")[-1:]:  # the turn ends before the steer is read
        assert d.feed(line).ended is not None
    step = d.feed((STEER_REFUSED % steer["id"]).encode())
    assert [(m["method"], m["params"]["input"][0]["text"]) for m in sent(step.write)] == [
        ("turn/start", "first"),
        ("turn/start", "second"),
    ]
    (note,) = step.entries
    assert note.kind == "note" and note.data == {"told": "next_turn"} and "no active turn to steer" in note.text
    assert step.failed is None


def test_an_answered_steer_lets_the_held_tells_steer_in_turn_one_at_a_time() -> None:
    d = CodexDriver()
    started(d)
    (steer,) = sent(d.tell("first")[0])
    assert d.tell("second") == ([], "in_turn")
    step = d.feed((STEERED % (steer["id"], TURN)).encode())
    (again,) = sent(step.write)
    assert again["method"] == "turn/steer" and again["params"]["input"][0]["text"] == "second"
    assert not step.entries and step.failed is None


def test_interrupt_asks_for_the_running_turn_and_its_end_is_interrupted_not_a_report() -> None:
    d = CodexDriver()
    assert d.interrupt() == []
    started(d)
    d.feed(SLEEP_STARTED.encode())
    (ask,) = sent(d.interrupt())
    assert ask["method"] == "turn/interrupt" and ask["params"] == {"threadId": THREAD, "turnId": TURN}
    assert d.feed((INTERRUPT_ANSWER % ask["id"]).encode()) == Step()
    end = d.feed(INTERRUPTED.replace("01a22691-91a9-7fd2-b7b7-a582813e5f8d", THREAD).encode()).ended
    assert end is not None and end.status == "interrupted" and end.error is None and not d.running


def test_a_resumed_thread_counts_only_its_new_turns_tokens_not_the_replayed_total() -> None:
    d = CodexDriver(turn=1)
    (resume,) = [m for m in sent(d.open(THREAD, CWD)) if m.get("method") == "thread/resume"]
    assert resume["params"]["threadId"] == THREAD and resume["params"]["excludeTurns"] is True
    assert d.tell("again") == ([], "next_turn")
    step = d.feed(recorded()[1])  # a thread/resume answer is shaped as thread/start's
    assert step.session_id == THREAD and sent(step.write)[0]["method"] == "turn/start"
    d.feed(RESUME_REPLAY.replace("01a22691-91a9-7fd2-b7b7-a582813e5f8d", THREAD).encode())
    steps = feed_all(d, [on_top_of_the_replay(line) for line in turn_lines("turn/started")])
    (end,) = [s.ended for s in steps if s.ended]
    assert end.turn == 2 and (end.usage.input_tokens, end.usage.output_tokens) == (20, 10)


def on_top_of_the_replay(line: bytes) -> bytes:
    """The recorded turn's token updates as a resumed thread prints them: its totals carry the
    earlier turn's 10 in and 5 out."""
    m = json.loads(line)
    if m.get("method") != "thread/tokenUsage/updated":
        return line
    total = m["params"]["tokenUsage"]["total"]
    total["inputTokens"] += 10
    total["outputTokens"] += 5
    return json.dumps(m).encode()


def test_a_refused_resume_fails_naming_the_thread_and_writes_no_held_tell() -> None:
    d = CodexDriver()
    gone = "01a2268e-0000-7000-8000-000000000000"
    (resume,) = [m for m in sent(d.open(gone, CWD)) if m.get("method") == "thread/resume"]
    d.tell("hello")
    step = d.feed((NO_ROLLOUT % (gone, resume["id"])).encode())
    assert step.failed is not None and gone in step.failed and "no rollout found" in step.failed
    assert step.write == [] and step.session_id is None


def test_a_server_request_is_answered_with_an_error_at_once_never_left_waiting() -> None:
    d = CodexDriver()
    started(d)
    ask = {"method": "item/commandExecution/requestApproval", "id": 0, "params": {"threadId": THREAD}}
    step = d.feed(json.dumps(ask).encode())
    (answer,) = sent(step.write)
    assert answer["id"] == 0 and answer["error"]["code"] == -32601 and "result" not in answer
    assert step.entries[0].kind == "note"


def test_lines_of_another_thread_or_not_json_say_nothing() -> None:
    d = CodexDriver()
    started(d)
    other = [line.replace(THREAD.encode(), b"01a22691-0000-7000-8000-00000000beef") for line in turn_lines("item/")]
    assert all(s == Step() for s in feed_all(d, other)) and d.running
    assert d.feed(b"not json\n") == Step() and d.feed(b"[1, 2]\n") == Step()


def test_a_command_reads_as_the_model_wrote_it() -> None:
    assert command_of({"command": "/bin/bash -lc 'echo it'\\''s'"}) == "echo it's"
    assert command_of({"command": "ls -la"}) == "ls -la"
    assert command_of({"command": "/bin/bash -lc 'unclosed"}) == "/bin/bash -lc 'unclosed"


# --------------------------------------------------------------------------- the real codex app-server
class AppServer:
    """A real `codex app-server` driven by a CodexDriver as the supervisor drives it: every line
    the driver returns goes to its stdin, every line it prints to `feed` (and a step's writes back)."""

    def __init__(self, proc: anyio.abc.Process, driver: CodexDriver) -> None:
        self.proc, self.driver = proc, driver
        self.steps: list[Step] = []
        self.printed: list[dict[str, Any]] = []

    async def write(self, lines: list[bytes]) -> None:
        assert self.proc.stdin is not None
        for line in lines:
            await self.proc.stdin.send(line)

    async def pump(self) -> None:
        assert self.proc.stdout is not None
        out = BufferedByteReceiveStream(self.proc.stdout)
        with suppress(anyio.EndOfStream, anyio.IncompleteRead, anyio.ClosedResourceError):
            while True:
                line = await out.receive_until(b"\n", 64 << 20)
                with suppress(ValueError):
                    self.printed.append(json.loads(line))
                step = self.driver.feed(line)
                self.steps.append(step)
                await self.write(step.write)

    async def tell(self, text: str) -> str:
        lines, told = self.driver.tell(text)
        await self.write(lines)
        return told

    def ends(self) -> list[TurnEnd]:
        return [s.ended for s in self.steps if s.ended]

    def entries(self, kind: str) -> list[str]:
        return [e.text for s in self.steps for e in s.entries if e.kind == kind]

    def failed(self) -> list[str]:
        return [s.failed for s in self.steps if s.failed]

    async def turn_ended(self, n: int = 1, timeout: float = 90) -> TurnEnd:
        await until(lambda: len(self.ends()) >= n, timeout, f"turn end {n} ({self.failed() or 'no failure'})")
        return self.ends()[n - 1]


def codex_env(home: Path, model_url: str) -> dict[str, str]:
    from test_coding_wave import user_setup  # the user's own ~/.codex/config.toml: the scripted model

    return user_setup(home, model_url)


@asynccontextmanager
async def app_server(
    env: dict[str, str], cwd: Path, driver: CodexDriver, session_id: str | None = None, args: list[str] | None = None
) -> AsyncIterator[AppServer]:
    """`codex app-server ARGS` in `cwd`, opened by `driver`; stdin closed at the end (it exits)."""
    exe = install(CODEX)
    cwd.mkdir(parents=True, exist_ok=True)
    with (cwd.parent / "app-server.stderr").open("ab") as err:
        proc = await anyio.open_process([str(exe), "app-server", *(args or [])], cwd=cwd, env=env, stderr=err)
        server = AppServer(proc, driver)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(server.pump)
                await server.write(driver.open(session_id, str(cwd)))
                yield server
                assert proc.stdin is not None
                await proc.stdin.aclose()
                with anyio.fail_after(20):
                    await proc.wait()
        finally:
            if proc.returncode is None:
                proc.kill()
                with anyio.CancelScope(shield=True):
                    await proc.wait()


def user_texts(turn: Turn) -> list[str]:
    """Every user message the model got in this request, in order."""
    return [
        part.get("text", "")
        for item in turn.body.get("input", [])
        if isinstance(item, dict) and item.get("type") == "message" and item.get("role") == "user"
        for part in item.get("content") or []
        if isinstance(part, dict)
    ]


def said(turn: Turn) -> list[str]:
    """Every assistant message in the conversation this request carried."""
    return [
        part.get("text", "")
        for item in turn.body.get("input", [])
        if isinstance(item, dict) and item.get("type") == "message" and item.get("role") == "assistant"
        for part in item.get("content") or []
        if isinstance(part, dict)
    ]


def latest(turn: Turn) -> str:
    return next((t for t in reversed(user_texts(turn)) if not t.startswith("<")), "")


def answer_latest(slow: dict[str, str] | None = None) -> Callable[[Turn], Call | Say]:
    """A model that runs `slow[text]` as a shell command for a user text that asks for it,
    then answers `answer to: <the latest user text>`."""
    slow = slow or {}

    def script(turn: Turn) -> Call | Say:
        text = latest(turn)
        if text in slow and not turn.results[-1:]:
            return Call("exec_command", {"cmd": slow[text], "yield_time_ms": 60000})
        return Say(f"answer to: {text}")

    return script


hosts = pytest.mark.hosts


@hosts
@pytest.mark.timeout(300)
async def test_a_prompt_runs_a_turn_with_wavewaits_mcp_server_and_ends_with_the_models_text(tmp_path: Path) -> None:
    calls = iter(
        [
            Call("exec_command", {"cmd": "echo hello"}),
            Call("apply_patch", {"input": "*** Begin Patch\n*** Add File: made.txt\n+made\n*** End Patch\n"}),
            Call("tool_search", {"query": "wavewait list_agents", "limit": 5}),
        ]
    )

    def script(turn: Turn) -> Call | Say:
        listed = next((t for t in turn.tools if t.endswith("__list_agents")), None)
        if (nxt := next(calls, None)) is not None:
            return nxt
        if listed and listed not in turn.called:
            return Call(listed, {})
        return Say("All done.\nmade.txt written.")

    with ModelServer(script) as m:
        env = codex_env(tmp_path / "home", m.url)
        bus, wavewait = str(tmp_path / "bus"), [str(VENV_BIN / "wavewait")]
        server = server_for(bus, "flight-a", "orchestrator", wavewait, extra_env=warm_settings())
        args = [*mcp_args("codex", server), "-c", 'model="gpt-5.5-flight"']  # the preset's argv: {mcp} then the model
        d = CodexDriver()
        async with app_server(env, tmp_path / "home" / "project", d, args=args) as s:
            assert await s.tell("write made.txt") == "next_turn"
            end = await s.turn_ended()
        assert (end.turn, end.status, end.text, end.error) == (1, "success", "All done.\nmade.txt written.", None)
        sessions = [x.session_id for x in s.steps if x.session_id]
        assert sessions and set(sessions) == {d.thread_id} and [x.started for x in s.steps if x.started] == [1]
        assert s.entries("tool") == ["shell echo hello", "apply_patch made.txt", "mcp__wavewait__list_agents"]
        assert s.entries("result") == ["hello", "completed", '{"agents":[]}']
        assert s.entries("agent") == ["All done.\nmade.txt written."]
        assert (tmp_path / "home" / "project" / "made.txt").read_text() == "made\n"
        assert (end.usage.input_tokens, end.usage.output_tokens) == (10 * len(m.turns), 5 * len(m.turns))
        assert {b.get("model") for _, b in m.rec.requests if b} == {"gpt-5.5-flight"}
        assert not any(p.get("method") in QUIET for p in s.printed)  # the streams opted out of at initialize
        assert not s.failed() and not m.failures


@hosts
@pytest.mark.timeout(300)
async def test_a_tell_while_a_turn_runs_steers_it_and_reaches_the_models_next_request(tmp_path: Path) -> None:
    with ModelServer(answer_latest({"run the slow one": "sleep 5"})) as m:
        env = codex_env(tmp_path / "home", m.url)
        async with app_server(env, tmp_path / "home" / "project", CodexDriver()) as s:
            await s.tell("run the slow one")
            await until(lambda: "shell sleep 5" in s.entries("tool"), 60, "the slow command started")
            told_at = time.time()
            assert await s.tell("STEER: also mention pears") == "in_turn"
            end = await s.turn_ended()
        assert end.status == "success" and end.turn == 1 and len(s.ends()) == 1
        nxt = next(t for t in m.turns if t.at > told_at)
        assert "STEER: also mention pears" in user_texts(nxt) and nxt.results  # same turn: after the command
        assert end.text == "answer to: STEER: also mention pears"
        assert not any("pears" in t for t in user_texts(m.turns[0]))
        assert not s.failed()


@hosts
@pytest.mark.timeout(300)
async def test_interrupt_ends_a_long_command_turn_early_and_a_tell_then_starts_the_next(tmp_path: Path) -> None:
    with ModelServer(answer_latest({"run the long one": "sleep 30"})) as m:
        env = codex_env(tmp_path / "home", m.url)
        async with app_server(env, tmp_path / "home" / "project", CodexDriver()) as s:
            await s.tell("run the long one")
            await until(lambda: "shell sleep 30" in s.entries("tool"), 60, "the long command started")
            t0 = time.monotonic()
            await s.write(s.driver.interrupt())
            end = await s.turn_ended()
            took = time.monotonic() - t0
            assert await s.tell("now something else") == "next_turn"
            second = await s.turn_ended(2)
        assert end.status == "interrupted" and end.turn == 1 and took < 10, took
        assert not s.entries("result")  # the cut command never completed
        assert (second.turn, second.status, second.text) == (2, "success", "answer to: now something else")
        assert len(m.turns) == 2 and not s.failed()


@hosts
@pytest.mark.timeout(300)
async def test_a_second_process_resumes_the_thread_and_the_model_sees_the_first_turn(tmp_path: Path) -> None:
    with ModelServer(answer_latest()) as m:
        env = codex_env(tmp_path / "home", m.url)
        cwd = tmp_path / "home" / "project"
        first = CodexDriver()
        async with app_server(env, cwd, first) as s:
            await s.tell("the first prompt")
            end = await s.turn_ended()
        assert end.text == "answer to: the first prompt" and first.thread_id
        again = CodexDriver(turn=1)
        async with app_server(env, cwd, again, session_id=first.thread_id) as s2:
            assert await s2.tell("the told text") == "next_turn"  # held until the resume answers
            end2 = await s2.turn_ended()
        assert (end2.turn, end2.status, end2.text) == (2, "success", "answer to: the told text")
        assert {x.session_id for x in s2.steps if x.session_id} == {first.thread_id}
        last = m.turns[-1]
        assert [t for t in user_texts(last) if not t.startswith("<")] == ["the first prompt", "the told text"]
        assert "answer to: the first prompt" in said(last)
        assert (end2.usage.input_tokens, end2.usage.output_tokens) == (10, 5)  # not the thread's total
        assert not s2.failed()


@hosts
@pytest.mark.timeout(300)
async def test_resuming_an_unknown_thread_fails_naming_it_and_tells_the_model_nothing(tmp_path: Path) -> None:
    gone = "01a2268e-0000-7000-8000-000000000000"
    with ModelServer(answer_latest()) as m:
        env = codex_env(tmp_path / "home", m.url)
        async with app_server(env, tmp_path / "home" / "project", CodexDriver(), session_id=gone) as s:
            await s.tell("hello")
            await until(lambda: bool(s.failed()), 60, "the resume refused")
        (failed,) = s.failed()
        assert gone in failed and "thread/resume" in failed, failed
        assert not m.turns and not s.ends()
