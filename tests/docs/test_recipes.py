"""Every shell recipe of README.md and docs/*.md, run as the page prints it (tests/docs/recipes.py
reads them from the pages: nothing is copied here, so a page and its code cannot drift apart).

Each recipe runs in a fresh folder with a fresh bus (each bus: the directory bus and a fresh
PostgreSQL schema, unless it names its own), `wavewait` on PATH (a folder holding only a
symlink to this venv's `wavewait`: not the venv's python3 or pytest), its own HOME and TMPDIR.
What it checks (the exit code, the JSON the page says it prints) is in the comment above the
block on the page. A recipe whose text presumes a state (a wave that reported, a repository)
names a setup from SETUPS; one that starts `--preset claude` flights runs the real Claude Code
CLI of the host suite against its scripted model (tests/hosts), and is marked `hosts`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import recipes

from conftest import clean_env
from gittools import GIT_ENV, git

ROOT = Path(__file__).resolve().parents[2]
RECIPES = recipes.read_all(ROOT)
WAVEWAIT = Path(sys.executable).parent / "wavewait"

#: Recipes that fail today because of a bug being fixed (issue 41): strict, so the fix turns
#: each into a failure (XPASS) until its line here is removed. Key: the recipe's id.
KNOWN_FAILURES: dict[str, str] = {}

#: Recipes the issue requires to run word for word: none of them may be skipped.
REQUIRED = (
    "README.md > A 60-second tour",
    "docs/joins.md > A flight that asks",
    "docs/joins.md > Recipes > A race",
    "docs/merging.md > Step by step > see what a merge would do",
    "docs/merging.md > Step by step > merge with the check",
)


@dataclass
class Stage:
    """Where a recipe runs: its folder, its environment, and what its setup leaves for the test."""

    tmp: Path
    cwd: Path
    env: dict[str, str]
    bin: Path
    script: Callable[[Any], Any] | None = None  # the scripted model's, for a `host:` recipe
    after: list[Callable[[], None]] = field(default_factory=list)

    def sh(self, script: str, timeout: float = 60) -> str:
        """Run a setup's shell lines as the recipe will run (same folder, bus and PATH)."""
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=self.cwd, env=self.env, capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
        assert done.returncode == 0, f"setup failed ({done.returncode}): {script}\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def repo(self, files: dict[str, str]) -> Path:
        """A git repository with these files in one commit; the recipe then runs in it."""
        repo = self.tmp / "project"
        repo.mkdir()
        git(repo, "init", "--quiet", "-b", "main")
        for path, text in files.items():
            (repo / path).parent.mkdir(parents=True, exist_ok=True)
            (repo / path).write_text(text)
        git(repo, "add", "--all")
        subprocess.run(["git", "commit", "--quiet", "-m", "first"], cwd=repo, env=self.env, check=True)
        self.cwd = repo
        return repo


# ------------------------------------------------------------------------------------ setups
# What a recipe's page presumes before its block runs, by the name its `setup:` line gives.


def checkout(stage: Stage) -> None:
    """README.md's tour, "from a shell in the checkout": a folder with the checkout's
    `.venv/bin/wavewait` (that alone: not the venv's python3)."""
    (stage.cwd / ".venv" / "bin").mkdir(parents=True)
    (stage.cwd / ".venv" / "bin" / "wavewait").symlink_to(WAVEWAIT)


def three_reviewers_one_asks(stage: Stage) -> None:
    """docs/joins.md, "A flight that asks": a wave `reviews` of three reviewers, review-3 asking a question before it reports."""
    stage.sh(
        """
        for n in 1 2; do
          wavewait spawn "review-$n" --wave reviews -q -- sh -c "wavewait send orchestrator 'review $n: LGTM'"
        done
        wavewait spawn review-3 --wave reviews -q -- \
          sh -c 'wavewait ask "strict or lenient?" --timeout 120 >/dev/null && wavewait send orchestrator "review 3: LGTM"'
        """
    )


MERGE_TESTS = {"tests/test_app.py": "def test_app():\n    assert True\n", "app.py": "a = 1\n"}


def refactor_wave(stage: Stage) -> None:
    """docs/merging.md, "Step by step": a repository whose passing tests are the check, and a
    wave `refactor` of two worktree flights that reported as docs/joins.md says a flight
    reports: one with a message (`send`), one with its completion (`notify`); the
    orchestrator's `wavewait wait` took both reports."""
    stage.repo(MERGE_TESTS)
    stage.sh(
        """
        wavewait spawn parser --wave refactor --worktree -q -- \
          sh -c 'echo "def parse(): pass" > parser.py; wavewait send orchestrator "parser refactored"'
        wavewait spawn lexer --wave refactor --worktree -q -- \
          sh -c 'echo "def lex(): pass" > lexer.py; wavewait notify --message "lexer refactored"'
        wavewait wait 60 --wave refactor > /dev/null
        """
    )


def claude_project(stage: Stage) -> None:
    """docs/hosts.md, "Headless": the project's `.mcp.json`, as `--print-config claude-json`
    prints it (the page's other way to write it) for the recipe's bus."""
    stage.sh("wavewait mcp --print-config claude-json > .mcp.json")


RACE_REPO = {
    "conftest.py": "",
    "parse.py": "def parse(text):\n    return text.split(',')\n",
    "tests/test_parse.py": "from parse import parse\n\n\ndef test_spaces():\n    assert parse('a, b') == ['a', 'b']\n",
}
#: what each attempt of the race writes to parse.py: the first a wrong fix, the second the
#: right one; the third never gets its first answer (the join stops it while it runs)
RACE_FIXES = {
    "fix-1": "def parse(text):\n    return [p.strip() for p in text.split(';')]\n",
    "fix-2": "def parse(text):\n    return [p.strip() for p in text.split(',')]\n",
}
ATTEMPT = re.compile(r"Primary working directory: ([^\s\\\"]+/race/(fix-\d)-[0-9a-f]+)")


def race(stage: Stage) -> None:
    """docs/joins.md, "A race": a repository whose tests/test_parse.py fails (the recipe's
    check is the system's `pytest`), and the scripted model's attempts: fix-1 writes a wrong
    fix at once; fix-2 the right one once fix-1's check has run (its pytest wrote its cache);
    fix-3 never gets its first answer, so the join stops it while it runs."""
    if not any(Path(d, "pytest").exists() for d in stage.env["PATH"].split(os.pathsep) if d):
        pytest.fail("the race's check runs `pytest`: install pytest outside this venv (apt, pipx)")
    stage.repo(RACE_REPO)
    released = threading.Event()
    stage.after.append(released.set)
    worktrees = Path(stage.env["WAVEWAIT_WORKTREES"])

    def first_checked() -> bool:
        return any(worktrees.glob("*/race/fix-1-*/.pytest_cache/v/cache/lastfailed"))

    def script(turn: Any) -> Any:
        from modelserver import Call, Say

        found = ATTEMPT.search(json.dumps(turn.body))
        assert found, "Claude Code's request names no worktree of the race"
        worktree, name = found.groups()
        if name == "fix-3":
            released.wait(600)
            return Say("fix-3: too late")
        if turn.results:
            return Say(f"{name}: parse.py now splits on commas and strips.")
        if name == "fix-2":
            deadline(first_checked, 300, "fix-1's check to run")
        return Call("Write", {"file_path": f"{worktree}/parse.py", "content": RACE_FIXES[name]})

    stage.script = script


ROUND_TWO_REPO = {
    "tests/test_app.py": "def test_app():\n    assert True\n",
    "api.py": "def check(name):\n    return name\n",
    "cli.py": "FLAGS = []\n",
    "README.md": "# app\n",
}
#: what each flight of docs/conversations.md's round two writes, by round (its prompt, then a tell)
ROUND_TWO_FILES = {
    "api": (
        "api.py",
        "def check(name):\n    return name.strip()\n",
        "def check(name):\n    if not name.strip():\n        raise ValueError('empty name')\n    return name.strip()\n",
    ),
    "cli": ("cli.py", "FLAGS = ['--verbose']\n", None),
    "docs": (
        "README.md",
        "# app\n\nInput checks; --verbose.\n",
        "# app\n\nInput checks; --verbose (off by default).\n",
    ),
}
ROUND_TWO_TELLS = ("Also reject empty names", "Mention the new flag's default")
FLIGHT_DIR = re.compile(r"Primary working directory: ([^\s\\\"]+/fix/(api|cli|docs)-[0-9a-f]+)")


def round_two(stage: Stage) -> None:
    """docs/conversations.md, "Round two": a repository with api.py, cli.py and README.md
    whose tests pass (the merge's check), and a scripted model for the three flights: each
    writes its file and reports `NAME: round N done`, round 2 once the recipe told it more."""
    stage.repo(ROUND_TWO_REPO)

    def script(turn: Any) -> Any:
        from modelserver import Call, Say

        found = FLIGHT_DIR.search(json.dumps(turn.body))
        assert found, "Claude Code's request names no worktree of the wave"
        worktree, name = found.groups()
        n = 2 if any(t in json.dumps(turn.body) for t in ROUND_TWO_TELLS) else 1
        if turn.results and n == sum(1 for _ in re.finditer(r'"tool_result"', json.dumps(turn.body))):
            return Say(f"{name}: round {n} done")
        path, *contents = ROUND_TWO_FILES[name]
        return Call("Write", {"file_path": f"{worktree}/{path}", "content": contents[n - 1] or contents[0]})

    stage.script = script


def deadline(cond: Callable[[], bool], seconds: float, what: str) -> None:
    """Wait for `cond` on a short beat, failing after `seconds` (never a fixed sleep)."""
    beat = threading.Event()
    for _ in range(int(seconds * 10)):
        if cond():
            return
        beat.wait(0.1)
    raise AssertionError(f"timed out after {seconds:g} s waiting for {what}")


def host(stage: Stage, kind: str) -> None:
    """The real Claude Code CLI of the host suite as `claude` on the recipe's PATH, with a
    user's set-up (tests/hosts/test_coding_wave.py) pointing at the scripted model; the model
    makes a wavewait call and says `done`, unless the setup gave it a script of its own."""
    assert kind == "claude", f"host: {kind}: only claude is set up here"
    sys.path.insert(0, str(ROOT / "tests" / "hosts"))
    from hostkit import CLAUDE, calls, driver, install
    from modelserver import ModelServer
    from test_coding_wave import user_setup

    (stage.bin / "claude").symlink_to(install(CLAUDE))
    server = ModelServer(stage.script or driver(calls(("list_agents", {}))))
    server.__enter__()
    setup = user_setup(stage.tmp / "host-home", server.url)
    stage.env |= {k: v for k, v in setup.items() if k not in ("PATH", "WAVEWAIT_WORKTREES")}

    def end() -> None:
        server.__exit__(None, None, None)
        assert not server.failures, server.failures

    stage.after.append(end)


SETUPS: dict[str, Callable[[Stage], None]] = {
    "checkout": checkout,
    "three-reviewers-one-asks": three_reviewers_one_asks,
    "refactor-wave": refactor_wave,
    "race": race,
    "claude-project": claude_project,
    "round-two": round_two,
}


# ------------------------------------------------------------------------------------ the run
def params() -> list:
    out = []
    for r in RECIPES:
        marks = [pytest.mark.timeout(r.timeout + 120)]
        if r.one("host"):
            marks.append(pytest.mark.hosts)
        if why := r.one("skip"):
            marks.append(pytest.mark.skip(reason=f"{r.page}:{r.line}: {why}"))
        if why := KNOWN_FAILURES.get(r.id):
            marks.append(pytest.mark.xfail(strict=True, reason=why))
        for bus in ("own",) if r.one("bus") == "own" or r.one("skip") else ("file", "postgres"):
            out.append(pytest.param(r, bus, id=f"{r.id} [{bus}]", marks=marks))
    return out


def system_path() -> str:
    """The PATH a user has, without this venv's bin (its python3 and pytest are the tests')."""
    venv = {str(WAVEWAIT.parent), os.environ.get("VIRTUAL_ENV", "") + "/bin"}
    return os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p not in venv)


@contextlib.contextmanager
def bus_url(kind: str, tmp: Path) -> Iterator[str]:
    if kind != "postgres":
        yield str(tmp / "bus")
        return
    from pg.pgtools import fresh_schema_url  # PostgreSQL helpers live with its tests

    with fresh_schema_url() as url:
        yield url


def stop_flights(stage: Stage) -> None:
    """Kill what the recipe left running (a reviewer past the first three, a held attempt)."""
    done = subprocess.run(
        ["wavewait", "agents"], cwd=stage.cwd, env=stage.env, capture_output=True, text=True, timeout=60
    )
    if done.returncode != 0:
        return
    for a in json.loads(done.stdout)["agents"]:
        if a["state"] not in ("closed", "dead"):
            subprocess.run(["wavewait", "kill", a["id"]], cwd=stage.cwd, env=stage.env, capture_output=True, timeout=60)


def run(recipe: recipes.Recipe, stage: Stage) -> subprocess.CompletedProcess[str]:
    """The block as a script file, run by the shell the page implies, in its own process group."""
    script = stage.tmp / "recipe.sh"
    script.write_text(recipe.script())
    p = subprocess.Popen(
        [*recipe.shell, str(script)],
        cwd=stage.cwd, env=stage.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        out, err = p.communicate(timeout=recipe.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        pytest.fail(f"{where(recipe)}: still running after {recipe.timeout:g} s\n{shown(out, err)}", pytrace=False)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def where(recipe: recipes.Recipe) -> str:
    return f"{recipe.id} ({recipe.page}:{recipe.line})"


def shown(out: str, err: str) -> str:
    return f"--- stdout ---\n{out[-4000:]}\n--- stderr ---\n{err[-4000:]}"


def check(recipe: recipes.Recipe, stage: Stage, done: subprocess.CompletedProcess[str]) -> None:
    """The exit code and every `json:` line of the page, each failure naming the page's line."""
    said = shown(done.stdout, done.stderr)
    assert done.returncode == recipe.exit_code, (
        f"{where(recipe)}: exit {done.returncode}, the page says {recipe.exit_code}\n{said}"
    )
    for text in recipe.all("prints"):
        assert text in done.stdout, f"{where(recipe)}: printed no `{text}`\n{said}"
    printed = recipes.json_documents(done.stdout)
    for c in recipe.checks:
        if c.source.startswith("stdout["):
            index = int(c.source[len("stdout[") : -1])
            assert -len(printed) <= index < len(printed), f"{where(recipe)}: `{c}`: no such document\n{said}"
            doc = printed[index]
        else:
            path = stage.cwd / c.source
            assert path.exists(), f"{where(recipe)}: `{c}`: the recipe wrote no {c.source}\n{said}"
            doc = json.loads(path.read_text())
        try:
            values = recipes.values_at(doc, c.path)
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise AssertionError(f"{where(recipe)}: `{c}`: {e}\n{said}") from None
        want = c.expected()
        ok = bool(values) and all(want in json.dumps(v) if c.op == "~" else v == want for v in values)
        assert ok, f"{where(recipe)}: `{c}`, but it is {json.dumps(values)[:600]}\n{said}"


@pytest.mark.parametrize(("recipe", "bus"), params())
def test_recipe(recipe: recipes.Recipe, bus: str, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "wavewait").symlink_to(WAVEWAIT)
    (tmp_path / "home").mkdir()
    (tmp_path / "tmp").mkdir()
    work = tmp_path / "work"
    work.mkdir()
    with bus_url(bus, tmp_path) as url:
        env = {k: v for k, v in clean_env().items() if k not in ("VIRTUAL_ENV", "PYTHONSAFEPATH")}
        env |= GIT_ENV | {
            "PATH": os.pathsep.join([str(bin_dir), system_path()]),
            "HOME": str(tmp_path / "home"),
            "TMPDIR": str(tmp_path / "tmp"),
            "WAVEWAIT_BUS": url,
            "WAVEWAIT_WORKTREES": str(tmp_path / "worktrees"),
        }
        stage = Stage(tmp_path, work, env, bin_dir)
        try:
            if name := recipe.one("setup"):
                assert name in SETUPS, f"{where(recipe)}: no setup `{name}` in SETUPS ({__file__})"
                SETUPS[name](stage)
            if kind := recipe.one("host"):
                host(stage, kind)
            done = run(recipe, stage)
            if keep := os.environ.get("WAVEWAIT_RECIPE_OUTPUT"):  # what the page's block printed, to quote
                Path(keep).mkdir(parents=True, exist_ok=True)
                (Path(keep) / f"{recipe.id} [{bus}].txt".replace("/", "_")).write_text(done.stdout + done.stderr)
            check(recipe, stage, done)
        finally:
            stop_flights(stage)
            for end in stage.after:
                end()


def test_every_known_failure_and_required_recipe_is_on_its_page() -> None:
    """A renamed heading must not leave a stale entry that hides a recipe, nor drop one the
    issue requires to run (none of those may be skipped)."""
    ids = {r.id: r for r in RECIPES}
    assert not set(KNOWN_FAILURES) - set(ids), set(KNOWN_FAILURES) - set(ids)
    for rid in REQUIRED:
        assert rid in ids, f"{rid}: no such recipe (is its block still fenced ```sh?)"
        assert not ids[rid].one("skip"), f"{rid} is skipped; it must run"
    assert all(not (r.one("setup") and r.one("setup") not in SETUPS) for r in RECIPES)
