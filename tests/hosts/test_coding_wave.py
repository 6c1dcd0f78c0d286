"""A wave of real coding agents: Claude Code and Codex flights from the built-in presets, each
in its own git worktree, editing files with the host's own tools, reporting by themselves.

Run with `python -m pytest -m hosts tests/hosts/test_coding_wave.py`. The CLIs are the pinned
ones of the host suite (hostkit.py); the model is tests/hosts/modelserver.py on 127.0.0.1,
which reports 10 tokens in and 5 out per request, so each flight's tokens are known.
The user's own set-up is what the presets add to: a home with the model's address and key
(Claude Code's environment; Codex's ~/.codex/config.toml).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hostkit import CLAUDE, CODEX, TRANSCRIPTS, VENV_BIN, first_turn_sees, install
from modelserver import Call, ModelServer, Say, Turn

from wavewait.core import admission, agents, flights, messages, wait
from wavewait.core.bus import Bus
from wavewait.core.bus.file import FileBus

from conftest import until, warm_settings

pytestmark = [pytest.mark.hosts, pytest.mark.timeout(900)]
MARK = re.compile(r"FLIGHT<([a-z0-9-]+)>")
CWD = re.compile(r"Primary working directory: ([^\s\\\"]+)")


def git(cwd: Path | str, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@contextlib.asynccontextmanager
async def open_bus(kind: str, folder: Path) -> AsyncIterator[Bus]:
    """The bus a test's flights share: the directory bus in `folder`, or a fresh PostgreSQL
    schema (its URL, given to every flight as WAVEWAIT_BUS, names the schema)."""
    if kind == "file":
        bus = FileBus(folder)
        try:
            yield bus
        finally:
            await bus.close()
        return
    from pg.pgtools import pg_bus  # PostgreSQL helpers live with its tests

    async with pg_bus() as pg:
        yield pg


def preset_project(tmp_path: Path, kind: str = "claude") -> tuple[Path, Path, Path]:
    """A home with a one-commit repository and a presets file whose `kind` preset (claude or
    codex) is the pinned CLI."""
    exe = install(CLAUDE if kind == "claude" else CODEX)
    home = tmp_path / "home"
    repo = home / "project"
    repo.mkdir(parents=True)
    git(repo, "init", "--quiet", "-b", "main")
    (repo / "README.md").write_text("a project\n")
    git(repo, "add", "--all")
    git(repo, "-c", "user.name=T", "-c", "user.email=t@e.invalid", "commit", "--quiet", "-m", "first")
    presets_file = tmp_path / "presets.toml"
    presets_file.write_text(f"[presets.{kind}]\nprogram = {json.dumps(str(exe))}\n")
    return home, repo, presets_file


def flight_of(turn: Turn) -> str:
    found = MARK.search(json.dumps(turn.body))
    return found.group(1) if found else "?"


def editor(turn: Turn) -> Call | Say:
    """Each flight writes <name>.txt with its host's own file tool, then answers."""
    name = flight_of(turn)
    if not turn.results:
        if turn.api == "anthropic":  # Write takes an absolute path: the prompt names the working directory
            cwd = CWD.search(json.dumps(turn.body))
            assert cwd, "Claude Code's request names no working directory"
            return Call("Write", {"file_path": f"{cwd.group(1)}/{name}.txt", "content": f"made by {name}\n"})
        patch = f"*** Begin Patch\n*** Add File: {name}.txt\n+made by {name}\n*** End Patch\n"
        return Call("apply_patch", {"input": patch})
    return Say(f"Wrote {name}.txt for the wave.\nNothing else changed.")


def user_setup(home: Path, model_url: str) -> dict[str, str]:
    """The user's own set-up of each CLI, as a person would have it: the presets add to it."""
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True)
    (codex_home / "config.toml").write_text(
        'model = "gpt-5.5"\nmodel_provider = "scripted"\n\n[model_providers.scripted]\nname = "scripted"\n'
        f'base_url = "{model_url}/v1"\nenv_key = "SCRIPTED_API_KEY"\nwire_api = "responses"\n'
    )
    (home / "tmp").mkdir()
    return {
        "HOME": str(home),
        "PATH": os.pathsep.join([str(VENV_BIN), "/usr/local/bin", "/usr/bin", "/bin"]),
        "LANG": "C.UTF-8",
        "TMPDIR": str(home / "tmp"),
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "ANTHROPIC_BASE_URL": model_url,
        "ANTHROPIC_API_KEY": "sk-scripted",
        "SCRIPTED_API_KEY": "sk-scripted",
        "CODEX_HOME": str(codex_home),
        "WAVEWAIT_WORKTREES": str(home / "worktrees"),
        "GIT_AUTHOR_NAME": "Test Person",
        "GIT_AUTHOR_EMAIL": "test@example.invalid",
        "GIT_COMMITTER_NAME": "Test Person",
        "GIT_COMMITTER_EMAIL": "test@example.invalid",
    } | warm_settings()


@pytest.mark.parametrize(
    ("n_claude", "n_codex", "bus_kind"),
    [(1, 1, "file"), (3, 2, "file"), (3, 2, "postgres")],
    ids=["one-each", "wave-of-five", "wave-of-five-postgres"],
)
def test_a_wave_of_claude_and_codex_flights_edits_in_worktrees_and_reports_by_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, n_claude: int, n_codex: int, bus_kind: str
) -> None:
    claude_exe, codex_exe = install(CLAUDE), install(CODEX)
    home = tmp_path / "home"
    repo = home / "project"
    repo.mkdir(parents=True)
    git(repo, "init", "--quiet", "-b", "main")
    (repo / "README.md").write_text("a project\n")
    git(repo, "add", "--all")
    git(repo, "-c", "user.name=T", "-c", "user.email=t@e.invalid", "commit", "--quiet", "-m", "first")
    presets_file = tmp_path / "presets.toml"  # the pinned CLIs, where the host suite installed them
    presets_file.write_text(
        f"[presets.claude]\nprogram = {json.dumps(str(claude_exe))}\n\n"
        f"[presets.codex]\nprogram = {json.dumps(str(codex_exe))}\n"
    )
    names = [f"claude-{i}" for i in range(n_claude)] + [f"codex-{i}" for i in range(n_codex)]
    with ModelServer(editor) as m:
        env = user_setup(home, m.url)
        for k in ("WAVEWAIT_WORKTREES", "HOME"):
            monkeypatch.setenv(k, env[k])
        reports, records = asyncio.run(run_wave(bus_kind, tmp_path / "bus", repo, presets_file, names, env))
    assert not m.failures, m.failures

    # one fan-in returned every report: the agent's own final text and the files its branch changed
    by_name = {r.name: r for r in reports}
    assert sorted(by_name) == sorted(names)
    for name in names:
        r = by_name[name]
        assert r.status == "received", (name, r)
        assert r.message == f"Wrote {name}.txt for the wave.\nNothing else changed."
        assert [p.path for p in r.changes.paths] == [f"{name}.txt"], (name, r.changes)
        assert r.branch == f"wavewait/coding/{name}"

    # each flight's file is in its own branch only: not in another's worktree, not in the main tree
    assert git(repo, "status", "--porcelain=v1", "--untracked-files=all") == ""
    for name in names:
        a = records[name]
        assert a.status == "closed", (name, a.reason)
        assert git(repo, "show", f"{a.worktree.branch}:{name}.txt") == f"made by {name}\n"
        assert git(repo, "log", "-1", "--format=%s", a.worktree.branch).strip() == f"Wrote {name}.txt for the wave."
        present = sorted(p.name for p in Path(a.worktree.path).glob("*.txt"))
        assert present == [f"{name}.txt"], (name, present)
        assert not (repo / f"{name}.txt").exists()

    # tokens per flight are what the scripted model reported: 10 in and 5 out per request it answered
    turns: dict[str, list[Turn]] = {}
    for t in m.turns:
        turns.setdefault(flight_of(t), []).append(t)
    for name in names:
        u = records[name].usage
        n = len(turns[name])
        assert (u.input_tokens, u.output_tokens) == (10 * n, 5 * n), (name, u, n)
        if name.startswith("claude"):
            assert u.cost_usd is not None and u.cost_usd > 0
        else:
            assert u.cost_usd is None  # Codex reports tokens, not money
        # wavewait's tools reached the flight's model on its first turn (the preset's own MCP config)
        assert first_turn_sees(turns[name][0]) in ("callable", "named"), name
    keep_transcript(f"wave-{n_claude}-claude-{n_codex}-codex-{bus_kind}", names, turns, reports)


def keep_transcript(label: str, names: list[str], turns: dict[str, list[Turn]], reports: list) -> None:
    """What each flight's model saw (its turns' tool results) and what the orchestrator's one
    fan-in returned, in ~/.cache/wavewait-hosts/coding-wave/LABEL.json."""
    out = {
        "flights": {
            name: [{"api": t.api, "results_seen": [r[:300] for r in t.results]} for t in turns[name]] for name in names
        },
        "fan_in": [r.model_dump(mode="json", exclude_none=True) for r in reports],
    }
    folder = TRANSCRIPTS.parent / "coding-wave"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{label}.json").write_text(json.dumps(out, indent=1))


async def run_wave(bus_kind: str, bus_dir: Path, repo: Path, presets_file: Path, names: list[str], env: dict[str, str]):
    async with open_bus(bus_kind, bus_dir) as bus:
        await agents.register(bus, "orchestrator")
        started = []
        for name in names:
            started.append(
                await flights.start(
                    bus,
                    name,
                    parent_id="orchestrator",
                    preset=name.split("-")[0],
                    presets_file=str(presets_file),
                    prompt=f"FLIGHT<{name}> Write {name}.txt, then say what you did.",
                    wave="coding",
                    cwd=str(repo),
                    env={**os.environ, **env, "WAVEWAIT_BUS": bus.url},
                )
            )
        fan = await wait.wait_fan_in(bus, "orchestrator", 600, [a.id for a in started])
        assert fan.status == "complete", fan.to_json()
        records = {}
        for a in started:

            async def ended(agent_id: str = a.id) -> bool:
                got = await bus.get_agent(agent_id)
                return got.finished and got.exit_code is not None

            await until(ended, timeout=120, what=f"{a.name} to end")
            records[a.name] = await bus.get_agent(a.id)
        return fan.results, records


@pytest.mark.parametrize(
    ("kind", "bus_kind"), [("claude", "file"), ("codex", "file"), ("codex", "postgres")], ids=lambda v: v
)
def test_a_real_flight_killed_mid_run_is_dead_with_its_last_event_and_keeps_its_worktree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, bus_kind: str
) -> None:
    """The model holds the flight's second request until the test has killed it."""
    home, repo, presets_file = preset_project(tmp_path, kind)
    held = threading.Event()
    release = threading.Event()

    def script(turn: Turn) -> Call | Say:
        if turn.results:  # it edited; now it waits on the model until it is killed
            held.set()
            release.wait(120)
            return Say("too late")
        return editor(turn)

    name = f"{kind}-doomed"
    with ModelServer(script) as m:
        env = user_setup(home, m.url)
        for k in ("WAVEWAIT_WORKTREES", "HOME"):
            monkeypatch.setenv(k, env[k])

        async def go():
            async with open_bus(bus_kind, tmp_path / "bus") as bus:
                try:
                    await agents.register(bus, "orchestrator")
                    a = await flights.start(
                        bus,
                        name,
                        parent_id="orchestrator",
                        preset=kind,
                        presets_file=str(presets_file),
                        prompt=f"FLIGHT<{name}> Write {name}.txt.",
                        wave="coding",
                        cwd=str(repo),
                        env={**os.environ, **env, "WAVEWAIT_BUS": bus.url},
                    )
                    assert await asyncio.to_thread(held.wait, 300), "the flight never reached its second request"
                    if kind == "codex":  # its turn has not completed: the tokens so far come from its rollout file

                        async def spent_so_far() -> bool:
                            u = (await bus.get_agent(a.id)).usage
                            return u is not None and (u.input_tokens, u.output_tokens) == (10, 5)

                        await until(spent_so_far, timeout=30, what="the running Codex flight's tokens so far")
                    await admission.kill(bus, await bus.get_agent(a.id), by="orchestrator")

                    async def dead_with_reason() -> bool:
                        got = await bus.get_agent(a.id)
                        return got.exit_code is not None and "last:" in (got.reason or "")

                    await until(dead_with_reason, timeout=60, what="the killed flight dead with its last event")
                    return await bus.get_agent(a.id)
                finally:
                    release.set()

        done = asyncio.run(go())
    assert done.status == "dead"
    # what it was last doing, as its transcript says it: a tool call, its name and main argument
    last = "last: tool Write" if kind == "claude" else f"last: tool apply_patch {name}.txt"
    assert done.reason.startswith("killed by orchestrator") and last in done.reason, done.reason
    assert Path(done.worktree.path).is_dir()  # kept until pruned
    assert git(repo, "show", f"{done.worktree.branch}:{name}.txt") == f"made by {name}\n"  # what it left, committed
    # what it had spent before the kill: every model response it received (all but the held one),
    # read from its CLI's session file (Codex's events count only completed turns; Claude Code's
    # give a message's output count as it starts, and money only at the end)
    answered = len([t for t in m.turns if flight_of(t) == name]) - 1
    assert answered >= 1
    u = done.usage
    assert u is not None and (u.input_tokens, u.output_tokens) == (10 * answered, 5 * answered), (u, answered)
    if kind == "claude":
        assert u.cost_usd is not None and u.cost_usd > 0  # its cost-state, written as it ended on TERM
    else:
        assert u.cost_usd is None


@pytest.mark.parametrize(
    ("answer", "bus_kind"),
    [("allow", "file"), ("deny use the Write tool instead", "file"), ("allow", "postgres")],
    ids=["allow", "deny", "allow-postgres"],  # the bus carries the question and its answer, not the verdict
)
def test_a_claude_flights_permission_prompt_is_its_question_and_the_answer_decides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answer: str, bus_kind: str
) -> None:
    """The model asks for a shell command that needs approval: the flight needs input until
    the orchestrator answers; allow runs it, deny tells the model why not."""
    home, repo, presets_file = preset_project(tmp_path)
    command = "sh -c 'echo ran > bash.txt'"

    def script(turn: Turn) -> Call | Say:
        if not turn.results:
            return Call("Bash", {"command": command, "description": "write bash.txt"})
        return Say(f"The shell said: {turn.results[-1]}")

    with ModelServer(script) as m:
        env = user_setup(home, m.url)
        for k in ("WAVEWAIT_WORKTREES", "HOME"):
            monkeypatch.setenv(k, env[k])

        async def go():
            async with open_bus(bus_kind, tmp_path / "bus") as bus:
                await agents.register(bus, "orchestrator")
                a = await flights.start(
                    bus,
                    "asker",
                    parent_id="orchestrator",
                    preset="claude",
                    presets_file=str(presets_file),
                    prompt="FLIGHT<asker> Write bash.txt with the shell.",
                    cwd=str(repo),
                    env={**os.environ, **env, "WAVEWAIT_BUS": bus.url},
                )
                asked = await wait.wait_event(bus, "orchestrator", 300, ["question"])
                asking = await bus.get_agent(a.id)  # marked before its question was delivered
                await messages.answer(bus, "orchestrator", a.id, answer)
                fan = await wait.wait_fan_in(bus, "orchestrator", 300, [a.id])
                return asked.to_json(), asking, fan.results[0], await bus.get_agent(a.id)

        asked, asking, report, after = asyncio.run(go())
    assert not m.failures, m.failures
    assert asked["from"] == asking.id and asked["body"].startswith("permission: Bash ")
    assert command.replace("'", "\\'") in asked["body"] or "echo ran > bash.txt" in asked["body"]
    assert asking.state == "needs_input"
    assert report.status == "received" and report.message.startswith("The shell said: ")
    made = Path(after.worktree.path) / "bash.txt"
    if answer == "allow":
        assert made.read_text() == "ran\n"
        assert [p.path for p in report.changes.paths] == ["bash.txt"]
    else:
        assert not made.exists()
        assert "denied by the person in charge: use the Write tool instead" in report.message
