"""Coding flights on a real bus and a real git repository: a preset's agent in its own
worktree reports by itself from its final event, with its changes and its tokens.

The agent here replays event lines captured from the real CLIs (replay_agent.py), so the
supervisor's side runs everywhere; tests/hosts/test_coding_wave.py runs the real CLIs.
"""

from __future__ import annotations

import json
import os
import sys
import tomllib
from pathlib import Path

import anyio
import pytest

from wavewait.core import admission, agents, flights, presets, wait, worktrees
from wavewait.core.errors import BadInput
from wavewait.core.talk.codex import CodexDriver

from conftest import until
from gittools import branches, git, make_repo, status

pytestmark = [pytest.mark.anyio, pytest.mark.one_bus]
REPLAY = str(Path(__file__).with_name("replay_agent.py"))


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return make_repo(tmp_path / "project", monkeypatch)


@pytest.fixture
def preset_file(tmp_path: Path) -> str:
    """Two presets that replay a real CLI's events: one read as Claude Code's, one as Codex's."""
    f = tmp_path / "presets.toml"
    f.write_text(
        f"""
[presets.replay-claude]
program = {json.dumps(sys.executable)}
args = [{json.dumps(REPLAY)}, "{{prompt}}"]
events = "claude"

[presets.replay-codex]
program = {json.dumps(sys.executable)}
args = [{json.dumps(REPLAY)}, "{{prompt}}"]
events = "codex"
"""
    )
    return str(f)


async def start(bus, repo: Path, preset_file: str, plan: dict, *, preset: str = "replay-claude", **kw):
    await agents.register(bus, "orchestrator")
    return await flights.start(
        bus,
        kw.pop("name", "coder"),
        parent_id="orchestrator",
        preset=preset,
        presets_file=preset_file,
        prompt=json.dumps(plan),
        cwd=str(repo),
        wave="w1",
        **kw,
    )


async def ended(bus, agent_id: str):
    async def check() -> bool:
        a = await bus.get_agent(agent_id)
        return a.finished and a.exit_code is not None

    await until(check, 60, "the flight to end")
    return await bus.get_agent(agent_id)


async def test_a_preset_flight_reports_by_itself_with_its_answer_changes_and_tokens(bus, repo, preset_file) -> None:
    plan = {"events": "claude-success.jsonl", "write": {"hello.txt": "hi\n", "src/app.py": "a = 1\n"}}
    a = await start(bus, repo, preset_file, plan)
    assert a.worktree is not None and a.worktree.branch == "wavewait/w1/coder"
    assert (a.preset, a.events) == ("replay-claude", "claude")
    fan = await wait.wait_fan_in(bus, "orchestrator", 60, [a.id])
    entry = fan.results[0]
    assert (fan.status, entry.status) == ("complete", "received")
    assert entry.message == "Wrote hello.txt.\nAll done."
    assert entry.branch == "wavewait/w1/coder"
    assert {p.path: (p.added, p.deleted) for p in entry.changes.paths} == {"hello.txt": (1, 0), "src/app.py": (0, 1)}
    assert (entry.usage.input_tokens, entry.usage.output_tokens) == (20, 10)
    assert entry.usage.cost_usd == pytest.approx(0.00028)
    done = await ended(bus, a.id)
    assert (done.status, done.reason) == ("closed", "exited with code 0")
    assert done.changes.final and (done.changes.files, done.changes.added, done.changes.deleted) == (2, 1, 1)
    # the branch is the flight's result, committed with the answer's first line; nothing in the main tree
    assert git(repo, "log", "-1", "--format=%s", "wavewait/w1/coder").strip() == "Wrote hello.txt."
    assert status(repo) == "" and not (repo / "hello.txt").exists()
    shown = agents.agent_view(done)
    assert shown["usage"].output_tokens == 10 and shown["worktree"].branch == "wavewait/w1/coder"


async def test_the_report_is_a_worker_complete_event_with_the_changed_files(bus, repo, preset_file) -> None:
    a = await start(
        bus, repo, preset_file, {"events": "codex-success.jsonl", "write": {"hello.txt": "hi\n"}}, preset="replay-codex"
    )
    ev = await wait.wait_event(bus, "orchestrator", 60, ["worker_complete"])
    got = ev.to_json()
    assert (got["worker_id"], got["status"], got["changes"]) == (a.id, "success", ["hello.txt"])
    assert got["message"] == "Wrote hello.txt.\nAll done."
    done = await ended(bus, a.id)
    assert (done.usage.input_tokens, done.usage.output_tokens, done.usage.cost_usd) == (20, 10, None)


async def test_a_flight_that_reported_itself_is_not_reported_twice(bus, repo, preset_file) -> None:
    a = await start(bus, repo, preset_file, {"events": "claude-success.jsonl", "notify": "my own report"})
    await ended(bus, a.id)
    got = []
    while (r := await wait.wait_next(bus, "orchestrator", 0)).status == "received":
        got.append((r.type, r.message))
    assert got == [("worker_complete", "my own report")]


async def test_a_run_cut_at_max_turns_reports_so_and_is_closed_not_dead(bus, repo, preset_file) -> None:
    a = await start(bus, repo, preset_file, {"events": "claude-max-turns.jsonl", "code": 1})
    ev = (await wait.wait_event(bus, "orchestrator", 60, ["worker_complete"])).to_json()
    assert ev["status"] == "max_turns"
    assert ev["message"] == "finished: max_turns (Reached maximum number of turns (1))"
    done = await ended(bus, a.id)
    assert (done.status, done.reason) == ("closed", "finished: max_turns (exit 1)")


async def test_a_crash_before_the_end_is_dead_with_what_its_events_said(bus, repo, preset_file) -> None:
    plan = {"events": "codex-success.jsonl", "lines": 4, "code": 3, "write": {"half.txt": "x\n"}}
    a = await start(bus, repo, preset_file, plan, preset="replay-codex")
    done = await ended(bus, a.id)
    assert done.status == "dead"
    assert done.reason == "exited with code 3; last: edited hello.txt"
    assert (await wait.wait_next(bus, "orchestrator", 0)).status == "timeout"  # no report: it did not finish
    assert git(repo, "show", f"{done.worktree.branch}:half.txt") == "x\n"  # what it left, committed


async def test_a_killed_flight_is_dead_with_its_last_event_and_its_worktree_stays_until_pruned(
    bus, repo, preset_file
) -> None:
    plan = {"events": "claude-success.jsonl", "lines": 2, "then": "block", "write": {"wip.txt": "half\n"}}
    a = await start(bus, repo, preset_file, plan)
    await until(lambda: "toolu_00000001" in Path(a.log_path).read_text(), 30, "the flight's first events")
    await admission.kill(bus, await bus.get_agent(a.id), by="orchestrator")

    async def said_why() -> bool:
        return "last: tool Write" in ((await bus.get_agent(a.id)).reason or "")

    await until(said_why, 30, "the reason from its events")
    done = await bus.get_agent(a.id)
    assert done.status == "dead" and done.reason.startswith("killed by orchestrator")
    assert done.usage.input_tokens == 10  # what it had spent when it was killed
    assert Path(done.worktree.path).is_dir()
    pruned = await flights.prune(bus)
    assert [r["agent_id"] for r in pruned["removed"]] == [a.id]
    assert [r["agent_id"] for r in pruned["branches_kept"]] == [a.id]  # its commit is not merged
    assert not Path(done.worktree.path).exists()
    assert done.worktree.branch in branches(repo)
    forced = await flights.prune(bus, force=True)
    assert [r["agent_id"] for r in forced["branches_deleted"]] == [a.id]
    assert branches(repo) == ["main"]


async def test_close_removes_an_ended_flights_clean_worktree_and_keeps_its_branch(bus, repo, preset_file) -> None:
    a = await start(bus, repo, preset_file, {"events": "claude-success.jsonl", "write": {"x.txt": "x\n"}})
    done = await ended(bus, a.id)
    assert Path(done.worktree.path).is_dir()
    await admission.close(bus, done)
    assert not Path(done.worktree.path).exists()
    assert git(repo, "show", f"{done.worktree.branch}:x.txt") == "x\n"
    assert "+x" in await flights.diff(await bus.get_agent(a.id))  # from the branch, once the worktree is gone


async def test_a_plain_command_runs_where_it_is_unless_asked_for_a_worktree(bus, repo) -> None:
    await agents.register(bus, "orchestrator")
    cmd = [sys.executable, "-c", "import os; open('made.txt', 'w').write(os.getcwd())"]
    here = await flights.start(bus, "here", parent_id="orchestrator", command=cmd, cwd=str(repo))
    assert here.worktree is None
    await ended(bus, here.id)
    assert (repo / "made.txt").read_text() == str(repo.resolve())
    (repo / "made.txt").unlink()
    own = await flights.start(bus, "own", parent_id="orchestrator", command=cmd, cwd=str(repo / "src"), worktree=True)
    done = await ended(bus, own.id)
    assert (Path(own.worktree.path) / "src" / "made.txt").read_text() == str(Path(own.worktree.path) / "src")
    assert done.changes.final and [p.path for p in done.changes.paths] == ["src/made.txt"]
    assert status(repo) == ""


async def test_spawn_options_that_cannot_apply_are_refused_before_anything_runs(
    bus, repo, preset_file, tmp_path
) -> None:
    await agents.register(bus, "orchestrator")
    outside = tmp_path / "plain"
    outside.mkdir()
    cases = [
        (dict(command=["true"], base="HEAD"), "base: applies to a flight in its own worktree"),
        (dict(command=["true"], model="m"), "model: applies to a preset"),
        (dict(command=["true"], worktree=True, cwd=str(outside)), "not in a git repository"),
        (dict(preset="nope", prompt="x"), "preset: no preset 'nope'; known: claude, codex"),
        (dict(preset="claude", prompt="  "), "prompt: must be a non-empty string"),
        (dict(preset="claude", prompt="x", command=["true"]), "give prompt, not command"),
        (dict(preset="claude", prompt="x" * 200_000), "prompt: at most 100 KiB for an agent preset"),
        (dict(preset="claude", prompt="x", base="no-such-ref"), "base: 'no-such-ref' is not a commit"),
    ]
    for kw, words in cases:
        kw.setdefault("cwd", str(repo))
        with pytest.raises(BadInput, match=words.replace("(", r"\(")):
            await flights.start(bus, "x", parent_id="orchestrator", **kw)
    assert [a.name for a in await bus.list_agents()] == ["orchestrator"]
    assert branches(repo) == ["main"]


async def test_a_preset_outside_a_repository_runs_in_the_folder_without_a_worktree(bus, tmp_path, preset_file) -> None:
    outside = tmp_path / "plain"
    outside.mkdir()
    a = await start(bus, outside, preset_file, {"events": "claude-success.jsonl", "write": {"f.txt": "f\n"}})
    assert a.worktree is None
    done = await ended(bus, a.id)
    assert (outside / "f.txt").exists() and done.changes is None
    assert done.usage.output_tokens == 10


# --------------------------------------------------------------------------- presets as data
SERVER = presets.McpServer(
    command=["/opt/ww/bin/wavewait", "mcp"], env={"WAVEWAIT_BUS": "/b", "WAVEWAIT_AGENT_ID": "f1"}
)


def test_the_claude_preset_runs_claude_headless_with_its_own_mcp_config_and_allow_rule() -> None:
    claude = presets.BUILTIN["claude"]
    argv = claude.argv(None, server=SERVER, model="opus")
    assert argv[:9] == [
        "claude",
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        "--permission-mode",
        "acceptEdits",
        "--input-format",
        "stream-json",
    ]
    # a conversation: the prompt is its first user message on stdin (core/turns.py), never a word
    assert (claude.conversation, claude.resume_args) == ("claude", ("--resume", "{session}"))
    assert "--" not in argv
    assert argv[argv.index("--model") + 1] == "opus"
    cfg = json.loads(argv[argv.index("--mcp-config") + 1])
    assert cfg["mcpServers"]["wavewait"] == {
        "type": "stdio",
        "command": "/opt/ww/bin/wavewait",
        "args": ["mcp"],
        "env": {"WAVEWAIT_BUS": "/b", "WAVEWAIT_AGENT_ID": "f1"},
    }
    assert argv[argv.index("--allowedTools") + 1] == "mcp__wavewait"
    assert argv[argv.index("--permission-prompt-tool") + 1] == "mcp__wavewait__approve"
    assert "--model" not in presets.BUILTIN["claude"].argv("x", server=SERVER)


def test_the_codex_preset_gives_a_required_server_by_config_overrides_and_a_policy_that_cannot_stall() -> None:
    argv = presets.BUILTIN["codex"].argv(None, server=SERVER, model="gpt-5.5")
    assert argv[:2] == ["codex", "app-server"]  # a conversation (core/talk/codex.py): the prompt is its first turn
    overrides = {}
    for i, word in enumerate(argv):
        if word == "-c":
            key, _, value = argv[i + 1].partition("=")
            overrides[key] = tomllib.loads(f"v = {value}")["v"]  # each value is TOML, as codex reads it
    assert overrides["model"] == "gpt-5.5"
    assert overrides["mcp_servers.wavewait.command"] == "/opt/ww/bin/wavewait"
    assert overrides["mcp_servers.wavewait.args"] == ["mcp"]
    assert overrides["mcp_servers.wavewait.env"] == {"WAVEWAIT_BUS": "/b", "WAVEWAIT_AGENT_ID": "f1"}
    assert overrides["mcp_servers.wavewait.required"] is True
    # the sandbox and the approval policy are its thread's (workspace-write, never: it cannot stall)
    opened = b"".join(CodexDriver().open(None, "/w")).decode()
    assert '"sandbox": "workspace-write"' in opened.replace('":"', '": "') and "never" in opened


def test_a_presets_file_changes_a_builtin_and_adds_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "p.toml"
    f.write_text(
        '[presets.claude]\nprogram = "/opt/claude"\nextra_args = ["--max-turns", "40"]\nenv = { A = "1" }\n\n'
        '[presets.gemini]\nprogram = "gemini"\nargs = ["--yolo", "-p", "{prompt}"]\nworktree = false\n'
    )
    monkeypatch.setenv("WAVEWAIT_PRESETS", str(f))
    got = presets.load()
    claude = got["claude"].argv(None, server=SERVER)
    assert claude[0] == "/opt/claude" and claude[claude.index("--max-turns") + 1] == "40"
    assert got["claude"].conversation == "claude" and got["claude"].env == {"A": "1"}
    assert got["gemini"].argv("go", server=SERVER) == ["gemini", "--yolo", "-p", "go"]
    assert (got["gemini"].events, got["gemini"].mcp, got["gemini"].worktree) == (None, "none", False)
    assert got["codex"] == presets.BUILTIN["codex"]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[presets.x]\nprogram = 'x'\n", "a new preset needs program and args"),
        ("[presets.claude]\nargs = ['-p']\nconversation = 'none'\n", "must contain {prompt}"),
        ("[presets.claude]\nargs = ['-p', '{prompt}']\n", "gives the prompt as its first message"),
        ("[presets.claude]\nconversation = 'irc'\n", "conversation: one of claude, codex, none"),
        ("[presets.claude]\nfoo = 1\n", "unknown setting"),
        ("[presets.claude]\nevents = 'gemini'\n", "events: one of claude, codex or none"),
        ("[presets.'bad name']\nprogram = 'x'\nargs = ['{prompt}']\n", "1-40 letters"),
        ("[other]\n", "only [presets.NAME] tables"),
        ("not toml = = 1", "not valid TOML"),
    ],
)
def test_a_bad_presets_file_says_what_to_fix(tmp_path: Path, text: str, words: str) -> None:
    f = tmp_path / "p.toml"
    f.write_text(text)
    with pytest.raises(BadInput, match=words.replace("[", r"\[").replace("{", r"\{")):
        presets.load(str(f))


def test_a_missing_presets_file_is_named() -> None:
    with pytest.raises(BadInput, match=r"cannot read /no/such\.toml"):
        presets.load("/no/such.toml")


def test_a_flights_worktree_root_is_outside_every_repository(repo: Path) -> None:
    assert not str(worktrees.root()).startswith(str(repo))
    assert os.environ["WAVEWAIT_WORKTREES"] == str(worktrees.root())


async def test_an_edit_in_a_running_flights_worktree_shows_in_its_record_within_a_second(bus, repo, tmp_path) -> None:
    """The supervisor watches the worktree: an edit is counted at once (not at the next
    5-second count), a burst of edits in one count or two, each new edit again."""
    await agents.register(bus, "orchestrator")
    go = tmp_path / "go"
    os.mkfifo(go)  # the flight runs until the test writes to it: no timer on either side
    cmd = [sys.executable, "-c", f"open({str(go)!r}).read()"]
    a = await flights.start(bus, "editor", parent_id="orchestrator", command=cmd, cwd=str(repo), worktree=True)
    tree = Path(a.worktree.path)

    async def running() -> bool:
        return (await bus.get_agent(a.id)).pid is not None  # recorded after its worktree is watched

    await until(running, 30, "the flight to start")

    async def counted(files: int, added: int) -> bool:
        c = (await bus.get_agent(a.id)).changes
        return c is not None and (c.files, c.added) == (files, added)

    (tree / "new.txt").write_text("one\ntwo\n")
    await until(lambda: counted(1, 2), 2.5, "the first edit counted")
    for i in range(20):  # a burst
        (tree / "src" / "app.py").write_text("a = 1\nb = 2\n" + "".join(f"c{j} = {j}\n" for j in range(i + 1)))
    await until(lambda: counted(2, 22), 2.5, "the burst counted")
    assert (await bus.get_agent(a.id)).changes.final is False
    await anyio.to_thread.run_sync(go.write_text, "done")
    done = await ended(bus, a.id)
    assert done.changes.final and (done.changes.files, done.changes.added) == (2, 22)
