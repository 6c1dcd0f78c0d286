"""The real hosts (Claude Code, Codex) installed from npm, configured as the docs say, run headless.

A named helper module, not a conftest: tests/ has no packages, so a second `conftest` would
shadow the root one for every test module collected after it.

    python tests/hosts/hostkit.py transcript   print the transcript of the last `-m hosts` run
    python tests/hosts/hostkit.py install      install the pinned CLIs into the cache (CI does)
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from modelserver import Call, ModelServer, Say, Turn, find_tool

CACHE = Path(os.environ.get("WAVEWAIT_HOSTS_CACHE", Path.home() / ".cache" / "wavewait-hosts"))
TRANSCRIPTS = CACHE / "transcript"
VENV_BIN = Path(sys.executable).parent  # where `wavewait` is, as on a user's PATH after install


def warm_settings() -> dict[str, str]:
    """conftest.warm_settings, for this module run alone too: the test run's mark and the warm
    processes' idle time (tests/leftovers.py), so what the host's `wavewait` starts ends with the run."""
    return {k: os.environ[k] for k in ("PYTEST_WAVEWAIT_RUN", "WAVEWAIT_WARM_IDLE") if k in os.environ}


IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


@dataclass(frozen=True)
class Host:
    name: str  # "claude" | "codex"
    package: str
    version: str  # pinned: `npm view PACKAGE version` on the day the suite was written
    bin: str

    @property
    def prefix(self) -> Path:
        return CACHE / f"{self.package.rsplit('/', 1)[-1]}@{self.version}"

    @property
    def exe(self) -> Path:
        return self.prefix / "node_modules" / ".bin" / self.bin


CLAUDE = Host("claude", "@anthropic-ai/claude-code", "2.1.330", "claude")
CODEX = Host("codex", "@openai/codex", "0.169.0", "codex")
HOSTS = [CLAUDE, CODEX]


def unavailable(why: str) -> None:
    """Fail under CI (a host suite that skips proves nothing), skip with the reason elsewhere."""
    if IN_CI:
        pytest.fail(f"host suite cannot run: {why}", pytrace=False)
    pytest.skip(f"host suite cannot run: {why}")


def install(host: Host) -> Path:
    """The pinned CLI in the cache, installed with npm on first use."""
    if host.exe.exists():
        return host.exe
    npm = shutil.which("npm")
    if npm is None:
        unavailable(f"npm is not on PATH, so {host.package}@{host.version} cannot be installed")
    host.prefix.mkdir(parents=True, exist_ok=True)
    p = subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--prefix", str(host.prefix), f"{host.package}@{host.version}"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if p.returncode != 0 or not host.exe.exists():
        unavailable(f"npm install {host.package}@{host.version} failed (network?): {p.stderr.strip()[-600:]}")
    return host.exe


def printed_config(kind: str, bus: Path, *flags: str, cwd: Path | None = None) -> str:
    """What `wavewait mcp --print-config KIND` says to paste (the user's copy-paste), run from `cwd`."""
    return subprocess.run(
        [str(VENV_BIN / "wavewait"), "mcp", "--print-config", kind, "--bus", str(bus), *flags],
        capture_output=True,
        text=True,
        check=True,
        cwd=cwd,
    ).stdout


def strip_comments(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


# --------------------------------------------------------------------------- a project and a home
@dataclass
class Project:
    host: Host
    home: Path
    root: Path
    bus: Path
    env: dict[str, str] = field(default_factory=dict)
    args: list[str] = field(default_factory=list)  # extra CLI flags for the host
    server_args: list[str] = field(default_factory=list)  # appended to wavewait's args in the config
    codex_server_extra: str = ""  # extra keys for [mcp_servers.wavewait]
    hooks: bool = False  # the Stop hooks from --print-config claude-hooks
    wire: Path | None = None  # log the MCP wire here (tests/wirerelay.py in front of the server)

    def configure(self, model_url: str) -> None:
        """Write the host's files exactly as --print-config prints them (plus the model endpoint)."""
        self.root.mkdir(parents=True, exist_ok=True)
        if self.host is CLAUDE:
            cfg = json.loads(printed_config("claude-json", self.bus, cwd=self.root))
            cfg["mcpServers"]["wavewait"]["args"] += self.server_args
            if self.wire is not None:
                import wirerelay

                server = cfg["mcpServers"]["wavewait"]
                relay = [str(Path(wirerelay.__file__)), str(self.wire), "--", server["command"]]
                server["command"], server["args"] = sys.executable, [*relay, *server["args"]]
            (self.root / ".mcp.json").write_text(json.dumps(cfg, indent=2))
            (self.root / ".claude").mkdir(exist_ok=True)
            if self.hooks:
                (self.root / ".claude" / "settings.json").write_text(printed_config("claude-hooks", self.bus))
            local = printed_config("claude-settings", self.bus)  # -p ignores the shared settings.json's allow
            (self.root / ".claude" / "settings.local.json").write_text(local)
            self.args = [*shlex.split(printed_config("claude-flags", self.bus, cwd=self.root)), *self.args]
            self.env |= {"ANTHROPIC_BASE_URL": model_url, "ANTHROPIC_API_KEY": "sk-scripted"}
        else:
            codex_home = self.home / ".codex"
            codex_home.mkdir(parents=True, exist_ok=True)
            block = strip_comments(printed_config("codex", self.bus))
            if self.server_args:
                block = re.sub(
                    r"^args = \[(.*)\]$",
                    lambda m: "args = [" + m.group(1) + "".join(f', "{a}"' for a in self.server_args) + "]",
                    block,
                    flags=re.M,
                )
            provider = (
                'model = "gpt-5.5"\nmodel_provider = "scripted"\n\n[model_providers.scripted]\n'
                f'name = "scripted"\nbase_url = "{model_url}/v1"\nenv_key = "SCRIPTED_API_KEY"\n'
                'wire_api = "responses"\n\n'
            )
            (codex_home / "config.toml").write_text(provider + block + "\n" + self.codex_server_extra)
            self.env |= {"SCRIPTED_API_KEY": "sk-scripted", "CODEX_HOME": str(codex_home)}

    def host_env(self) -> dict[str, str]:
        (self.home / "tmp").mkdir(exist_ok=True)
        return (
            {
                "HOME": str(self.home),
                "PATH": os.pathsep.join([str(VENV_BIN), "/usr/local/bin", "/usr/bin", "/bin"]),
                "LANG": "C.UTF-8",
                "TMPDIR": str(self.home / "tmp"),
                "DISABLE_AUTOUPDATER": "1",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            }
            | warm_settings()
            | self.env
        )

    def run(self, prompt: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        exe = install(self.host)
        env = self.host_env()
        if self.host is CLAUDE:
            cmd = [str(exe), "-p", prompt, *self.args]
        else:
            cmd = [str(exe), "exec", "--skip-git-repo-check", *self.args, prompt]
        return subprocess.run(
            cmd, cwd=self.root, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout
        )


def make_project(host: Host, tmp_path: Path) -> Project:
    install(host)
    home = tmp_path / "home"
    root = home / "project"
    home.mkdir()
    return Project(host, home, root, root / ".wavebus")


# --------------------------------------------------------------------------- interactive Claude Code
class Interactive:
    """Claude Code as a person runs it: the interactive UI in a tmux pane of its own, typed into
    with send-keys. The home is set up as after a first run (onboarding done, the project
    trusted, the API key and the project's `.mcp.json` server approved), so no dialog stops it.
    The MCP wire goes through tests/wirerelay.py (`p.wire`), the host's debug log to `debug`."""

    def __init__(self, p: Project, tmp: Path, model_url: str, width: int = 160) -> None:
        self.p, self.width = p, width
        p.wire = tmp / "wire.jsonl"
        self.debug = tmp / "claude-debug.log"
        self.tmux = ["tmux", "-S", str(tmp / "tmux.sock")]
        p.configure(model_url)
        approved = p.env["ANTHROPIC_API_KEY"][-20:]
        (p.home / ".claude.json").write_text(
            json.dumps(
                {
                    "hasCompletedOnboarding": True,
                    "theme": "dark",
                    "customApiKeyResponses": {"approved": [approved], "rejected": []},
                    "projects": {
                        str(p.root): {
                            "hasTrustDialogAccepted": True,
                            "hasCompletedProjectOnboarding": True,
                            "enabledMcpjsonServers": ["wavewait"],
                        }
                    },
                }
            )
        )

    def start(self, timeout: float = 90) -> None:
        """Start the UI and return once wavewait's tools were listed to it."""
        # where the CLI keeps a person's approval of a project's `.mcp.json` server now (it reads
        # the one in ~/.claude.json above as legacy, and asks again without this)
        user_settings = self.p.home / ".claude" / "settings.json"
        user_settings.parent.mkdir(parents=True, exist_ok=True)
        if not user_settings.exists():
            user_settings.write_text(json.dumps({"enabledMcpjsonServers": ["wavewait"]}))
        exe = install(self.p.host)
        cmd = shlex.join([str(exe), *self.p.args, "--debug-file", str(self.debug)])
        env = [x for k, v in (self.p.host_env() | {"TERM": "xterm-256color"}).items() for x in ("-e", f"{k}={v}")]
        subprocess.run(
            [*self.tmux, "new-session", "-d", "-x", str(self.width), "-y", "50", "-c", str(self.p.root), *env, cmd],
            check=True,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TERM": "xterm-256color"},
        )
        until(lambda: self.answered("tools/list") and "❯" in self.screen(), timeout, "Claude Code ready, tools listed")

    def type(self, text: str) -> None:
        subprocess.run([*self.tmux, "send-keys", "-l", text], check=True)
        until(lambda: text[:40] in self.screen().replace("\n", ""), 20, "the typed text on screen")
        subprocess.run([*self.tmux, "send-keys", "Enter"], check=True)

    def key(self, *keys: str) -> None:
        subprocess.run([*self.tmux, "send-keys", *keys], check=True)

    def screen(self) -> str:
        return subprocess.run([*self.tmux, "capture-pane", "-p"], capture_output=True, text=True).stdout

    def wire(self) -> list[dict[str, Any]]:
        import wirerelay

        return wirerelay.read(self.p.wire) if self.p.wire else []

    def answered(self, method: str) -> bool:
        wire = self.wire()
        ids = {r["msg"].get("id") for r in wire if r["dir"] == "in" and r["msg"].get("method") == method}
        return any(r["dir"] == "out" and "result" in r["msg"] and r["msg"].get("id") in ids for r in wire)

    def server_ended(self) -> bool:
        return any(r["dir"] == "exit" for r in self.wire())

    def close(self) -> None:
        subprocess.run([*self.tmux, "kill-server"], capture_output=True)


def until(check: Callable[[], object], timeout: float, what: str, every: float = 0.1) -> None:
    """Poll `check` (a host's screen or a log: nothing to be woken by) until true, or fail naming `what`."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)


# --------------------------------------------------------------------------- the scripted model
Step = Callable[[list[str]], tuple[str, dict[str, Any]] | None]


def driver(next_call: Step, max_searches: int = 2) -> Callable[[Turn], Call | Say]:
    """A script that makes the wavewait calls `next_call` asks for, loading deferred tools first.

    `next_call` gets the text of every wavewait result so far and returns (tool, args) or None
    to end. Both hosts defer MCP tools behind a search tool; the model searches for wavewait's
    tools the way each host's prompt tells it to, at most `max_searches` times.
    """

    def script(turn: Turn) -> Call | Say:
        ours = [r for c, r in zip(turn.called, turn.results, strict=True) if "wavewait" in c]
        nxt = next_call(ours)
        if nxt is None:
            return Say("done")
        name, args = nxt
        full = find_tool(turn, name)
        if full is not None:
            return Call(full, args)
        searches = sum(1 for c in turn.called if c in ("ToolSearch", "tool_search"))
        if searches >= max_searches:
            return Say(f"TOOL MISSING: {name}")
        if turn.api == "anthropic":
            return Call("ToolSearch", {"query": "+wavewait", "max_results": 30})
        return Call("tool_search", {"query": f"wavewait {name}", "limit": 30})

    return script


def calls(*plan: tuple[str, dict[str, Any]]) -> Step:
    """A fixed list of calls, one per turn."""
    return lambda done: plan[len(done)] if len(done) < len(plan) else None


def first_turn_sees(turn: Turn) -> str:
    """How the model meets wavewait on its first turn: callable, named (deferred), connecting, absent."""
    if any(t.startswith("mcp__wavewait") for t in turn.tools):
        return "callable"
    text = json.dumps(turn.body)
    if "mcp__wavewait" in text:
        return "named"
    if re.search(r"still connecting.{0,300}?wavewait", text):
        return "connecting"
    return "absent"


@contextmanager
def busy_cores() -> Iterator[None]:
    """Every core spinning, as when a wave's flights all start at once."""
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    try:
        yield
    finally:
        for p in spin:
            p.kill()
            p.wait()


# --------------------------------------------------------------------------- flights on the bus
def seed_reports(bus: Path, bodies: dict[str, str]) -> None:
    """Register the orchestrator and one flight per key, each having sent its body to it."""
    from wavewait.core import messages
    from wavewait.core.agents import register
    from wavewait.core.bus.file import FileBus

    async def go() -> None:
        b = FileBus(bus)
        try:
            await register(b, "orchestrator")
            for name, body in bodies.items():
                await register(b, name, parent_id="orchestrator")
                await messages.send(b, name, "orchestrator", body)
        finally:
            await b.close()

    asyncio.run(go())


def register_flights(bus: Path, *names: str) -> None:
    seed_reports(bus, {})
    from wavewait.core.agents import register
    from wavewait.core.bus.file import FileBus

    async def go() -> None:
        b = FileBus(bus)
        try:
            for n in names:
                await register(b, n, parent_id="orchestrator")
        finally:
            await b.close()

    asyncio.run(go())


def send_from(bus: Path, sender: str, body: str, to: str = "orchestrator") -> None:
    from wavewait.core import messages
    from wavewait.core.bus.file import FileBus

    async def go() -> None:
        b = FileBus(bus)
        try:
            await messages.send(b, sender, to, body)
        finally:
            await b.close()

    asyncio.run(go())


def drain(bus: Path, who: str = "orchestrator") -> list[dict[str, Any]]:
    """Every message left in `who`'s inbox, taken (what no one consumed)."""
    from wavewait.core import wait
    from wavewait.core.bus.file import FileBus

    async def go() -> list[dict[str, Any]]:
        b = FileBus(bus)
        out = []
        try:
            while (r := await wait.wait_next(b, who, 0)).status == "received":
                out.append(r.to_json())
        finally:
            await b.close()
        return out

    return asyncio.run(go())


# --------------------------------------------------------------------------- transcript
def record(
    test: str, host: Host, m: ModelServer, proc: subprocess.CompletedProcess[str] | None, note: str = ""
) -> None:
    """Keep what the model saw in this run, for TRANSCRIPT.md."""
    TRANSCRIPTS.mkdir(parents=True, exist_ok=True)
    turns = m.turns
    entry = {
        "test": test,
        "host": f"{host.package}@{host.version}",
        "note": note,
        "first_turn": first_turn_sees(turns[0]) if turns else "no request",
        "first_tools": [t for t in turns[0].tools] if turns else [],
        "results": (
            [
                {"tool": c, "error_flag": e, "chars": len(r), "text": r}
                for c, r, e in zip(turns[-1].called, turns[-1].results, turns[-1].errors, strict=True)
            ]
            if turns
            else []
        ),
        "rc": proc.returncode if proc else None,
        "stderr_tail": (proc.stderr[-400:] if proc else ""),
        "at": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{test}-{host.name}")
    (TRANSCRIPTS / f"{safe}.json").write_text(json.dumps(entry, indent=1))


def short(text: str, n: int = 400) -> str:
    """One line, filler runs collapsed, cut in the middle."""
    text = re.sub(r"x{12,}", lambda m: f"x…({len(m.group(0))})", text.replace("\n", " ⏎ ")).replace("`", "'")
    return text if len(text) <= n else f"{text[: n // 2]} … [{len(text) - n} chars] … {text[-n // 2 :]}"


def render_transcript() -> str:
    entries = [e for f in sorted(TRANSCRIPTS.glob("*.json")) if "results" in (e := json.loads(f.read_text()))]
    out = [
        "## What the model saw: Claude Code and Codex, driven headless",
        "",
        "From `python -m pytest -m hosts tests/hosts` (then `python tests/hosts/hostkit.py transcript`):",
        "each test runs the real host CLI, configured as `wavewait mcp --print-config` says, against a",
        "scripted model on loopback (`tests/hosts/modelserver.py`) that records every request. *First",
        "turn* is how wavewait reached the model's first request: *callable* (in the tools list),",
        "*named* (listed as deferred, loaded through the host's tool search), *connecting* (the host",
        "says the server is still starting) or *absent*. Results are the text the model got, filler",
        "collapsed (`x…(N)`) and cut in the middle. Every run uses the printed set-up as it is:",
        "for Claude Code `.mcp.json`, `.claude/settings.local.json` and the `claude-flags`",
        "(`--mcp-config FILE --allowedTools mcp__wavewait`); for Codex the `[mcp_servers.wavewait]` block.",
        "",
        "| scenario | host | first turn | wavewait results seen by the model | note |",
        "|---|---|---|---|---|",
    ]
    for e in entries:
        ours = [r for r in e["results"] if "wavewait" in r["tool"]]
        counts = ", ".join(format(r["chars"], ",") for r in ours)
        sizes = f" ({counts} chars)" if ours else ""
        out.append(f"| {e['test']} | {e['host']} | {e['first_turn']} | {len(ours)}{sizes} | {e['note']} |")
    out.append("")
    for e in entries:
        out += [f"### {e['test']}: {e['host']}", ""]
        for r in e["results"]:
            if "wavewait" not in r["tool"] and "mcp__wavewait" in r["text"]:
                out.append(f"- `{r['tool']}` loaded wavewait's tools ({r['chars']:,} chars)")
                continue
            flag = {True: "error flag set", False: "", None: "no error flag on the wire"}[r["error_flag"]]
            out.append(f"- `{r['tool']}` ({r['chars']:,} chars{', ' + flag if flag else ''}): `{short(r['text'])}`")
        out.append("")
    return "\n".join(out + render_interactive())


def render_interactive() -> list[str]:
    """The interactive runs (tests/hosts/test_claude_code_tasks.py): every request the model
    server got, with its time from the first and what the model read that was new."""
    entries = [json.loads(f.read_text()) for f in sorted(TRANSCRIPTS.glob("interactive-*.json"))]
    if not entries:
        return []
    out = ["## Interactive Claude Code: what the model saw, and when", ""]
    for e in entries:
        out += [f"### {e['test']}", "", e["note"], ""]
        for i, r in enumerate(e["requests"], 1):
            saw = [short(x, 300) for x in r["saw"] if not x.startswith("<system-reminder>\nAttribution")]
            out.append(f"- {r['t']:.3f} s, request {i} ({r['kind']}): " + " | ".join(f"`{x}`" for x in saw))
        out.append("")
    return out


def install_all() -> int:
    """The pinned CLIs, installed before the suite runs (`.ci/run` calls it); exit code 1 with npm's
    words when one cannot be installed."""
    for host in HOSTS:
        try:
            print(f"{host.package}@{host.version}: {install(host)}")
        except (pytest.fail.Exception, pytest.skip.Exception) as e:
            print(e, file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["transcript"]:
        print(render_transcript())
    elif sys.argv[1:] == ["install"]:
        sys.exit(install_all())
    else:
        print(__doc__)
