"""How fast `wavewait mcp` answers `tools/list` after it is spawned, as a host starts it.

    python bench/bench_startup.py [-n 20] [--bus PATH]
    python bench/bench_startup.py --quick   # each code path once: that it runs (CI), not a figure

Hosts give a starting MCP server little time: Claude Code -p about 2 s for a project server,
Codex about 1 s for one that is not `required` (issue 15); past that the model starts without
the tools. Measured here over raw JSON-RPC on stdio (no client library in the way): spawn →
`initialize` answered → `tools/list` answered (as Codex opens), and `server/discover` probe
answered → listen acknowledged → `tools/list` answered (the 2026-era opening of Claude Code),
idle and with every core busy, with the front that answers the opening from pre-rendered
answers while the SDK imports (wavewait/mcp/front.py, on by default) and without it
(WAVEWAIT_MCP_PRERENDER=0). Then where the time goes: `python -X importtime` of the same
start, summed per top-level package.
Target (issue 15): `tools/list` answered within 300 ms of spawn (p50, idle).

Then what a start costs (issue 31): CPU (user + sys of every process holding the server's
stdout: the launcher, and a warm process's child) from exec to `tools/list` answered by the SDK
itself (front off: the server is up), and the first wait's latency (`wait_for_event`, sent once
`tools/list` is answered, front on as hosts run it), cold (WAVEWAIT_WARM=0) and warm
(wavewait/warm.py); and the wall time of the `wavewait spawn` CLI, a plain command and a preset
flight in its own worktree in a real git repository. Targets: <= 0.3 s of CPU; spawn <= 0.3 s
plain, <= 0.5 s preset with its worktree.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import contextmanager

TARGET_MS = 300.0
TARGET_CPU_S = 0.3
TARGET_SPAWN_S = {"plain": 0.3, "preset": 0.5}


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q / 100 * (len(xs) - 1)))]


def rpc(proc: subprocess.Popen[bytes], msg: dict) -> None:
    assert proc.stdin is not None
    proc.stdin.write((json.dumps(msg) + "\n").encode())
    proc.stdin.flush()


def answer(proc: subprocess.Popen[bytes], want_id: int | str, ack: bool = False) -> dict:
    """The answer to request `want_id` (with `ack`: the acknowledgement of listen stream `want_id`)."""
    assert proc.stdout is not None
    while line := proc.stdout.readline():
        msg = json.loads(line)
        if ack and msg.get("method") == "notifications/subscriptions/acknowledged":
            if msg["params"]["_meta"].get("io.modelcontextprotocol/subscriptionId") == want_id:
                return msg
        elif msg.get("id") == want_id and "method" not in msg:
            return msg
    raise RuntimeError(f"server ended before answering request {want_id}")


# Claude Code 2.1.330's opening (2026 era): the probe, then a listen stream for list changes;
# once that is acknowledged, the lists (docs/hosts.md).
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
LISTEN = {"toolsListChanged": True, "promptsListChanged": True, "resourcesListChanged": True}


def one_start(cmd: list[str], env: dict[str, str], era: str = "handshake") -> tuple[float, float]:
    """Milliseconds from spawn to the first answer (`initialize`, or the `server/discover` probe
    in the 2026 era) and to the `tools/list` answer."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    try:
        if era == "2026":
            meta = {"_meta": MODERN_META}
            rpc(proc, {"jsonrpc": "2.0", "id": "probe", "method": "server/discover", "params": meta})
            answer(proc, "probe")
            t_first = time.perf_counter()
            rpc(
                proc,
                {
                    "jsonrpc": "2.0",
                    "id": "listen",
                    "method": "subscriptions/listen",
                    "params": {**meta, "notifications": LISTEN},
                },
            )
            answer(proc, "listen", ack=True)
            for i, method in enumerate(("server/discover", "prompts/list", "resources/list", "tools/list")):
                rpc(proc, {"jsonrpc": "2.0", "id": i, "method": method, "params": meta})
            tools = answer(proc, 3)
            t_list = time.perf_counter()
            assert tools["result"]["tools"], tools
            return (t_first - t0) * 1000, (t_list - t0) * 1000
        rpc(
            proc,
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "bench", "version": "0"},
                },
            },
        )
        answer(proc, 1)
        t_first = time.perf_counter()
        rpc(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        rpc(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        tools = answer(proc, 2)
        t_list = time.perf_counter()
        assert tools["result"]["tools"], tools
    finally:
        if proc.stdin:
            proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:  # not what is measured here; do not leave it behind
            proc.kill()
            proc.wait()
    return (t_first - t0) * 1000, (t_list - t0) * 1000


def pipe_cpu(ino: int) -> float:
    """CPU seconds (user + sys) of every process holding pipe `ino` open (any descriptor: a
    server moves its stdout off fd 1)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    want = f"pipe:[{ino}]"
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if not any(os.readlink(f"/proc/{pid}/fd/{fd}") == want for fd in os.listdir(f"/proc/{pid}/fd")):
                continue
            fields = stat_fields(int(pid))
        except OSError:  # gone, or not ours to read
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


HANDSHAKE = [
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "bench", "version": "0"},
        },
    },
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
]
FIRST_WAIT = {
    "jsonrpc": "2.0",
    "id": 3,
    "method": "tools/call",
    "params": {"name": "wait_for_event", "arguments": {"timeout_secs": 0}},
}


def start_cost(cmd: list[str], env: dict[str, str]) -> tuple[float, float, float]:
    """One start: CPU seconds from exec to `tools/list` answered, milliseconds from sending the
    first wait (once `tools/list` is answered) to its answer, and CPU seconds by then."""
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    assert proc.stdout is not None
    ino = os.fstat(proc.stdout.fileno()).st_ino
    try:
        for msg in HANDSHAKE:
            rpc(proc, msg)
        assert answer(proc, 2)["result"]["tools"]
        cpu_list = pipe_cpu(ino)
        t0 = time.perf_counter()
        rpc(proc, FIRST_WAIT)
        waited = answer(proc, 3)
        wait_ms = (time.perf_counter() - t0) * 1000
        assert "result" in waited, waited
        return cpu_list, wait_ms, pipe_cpu(ino)
    finally:
        if proc.stdin:
            proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def git_repo(folder: str) -> str:
    """A git repository with one commit, its bus kept out of git."""
    repo = os.path.join(folder, "repo")
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost"]
    subprocess.run([*git, "init", "-q", "-b", "main", repo], check=True)
    with open(os.path.join(repo, "README"), "w") as f:
        f.write("bench\n")
    subprocess.run([*git, "-C", repo, "add", "README"], check=True)
    subprocess.run([*git, "-C", repo, "commit", "-q", "-m", "start"], check=True)
    with open(os.path.join(repo, ".git", "info", "exclude"), "a") as f:
        f.write(".wavebus/\n")
    return repo


def spawn_env(folder: str, env: dict[str, str]) -> dict[str, str]:
    """`env` with a `claude` preset whose program only sleeps (no agent CLI is needed)."""
    program = os.path.join(folder, "agent")
    with open(program, "w") as f:
        f.write("#!/bin/sh\nexec sleep 60\n")
    os.chmod(program, 0o755)
    presets = os.path.join(folder, "presets.toml")
    with open(presets, "w") as f:
        f.write(f'[presets.claude]\nprogram = "{program}"\n')
    return env | {"WAVEWAIT_PRESETS": presets}


def spawn_wall(kind: str, repo: str, env: dict[str, str], n: int) -> list[float]:
    """Seconds the `wavewait spawn` CLI takes, `n` times: a plain command, or a preset flight
    (in its own worktree) on a prompt; each flight is killed after."""
    out = []
    for i in range(n):
        what = ["--", "sleep", "60"] if kind == "plain" else ["--preset", "claude", "--", "hello"]
        t0 = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "wavewait", "spawn", f"{kind}-{i}", *what], cwd=repo, env=env, capture_output=True
        )
        out.append(time.perf_counter() - t0)
        assert done.returncode == 0, done.stderr.decode()
        flight = json.loads(done.stdout)["agent_id"]
        subprocess.run([sys.executable, "-m", "wavewait", "kill", flight], cwd=repo, env=env, capture_output=True)
    return out


def warmed(cmd: list[str], env: dict[str, str], deadline: float = 120, cwd: str | None = None) -> None:
    """Start commands until one runs warm (its warm process listens), or the deadline passes.
    Run them where the measured commands run: `python -m` puts the folder on `sys.path`, which
    is part of a warm process's key, so a warm process is one per folder."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env, cwd=cwd)
        time.sleep(0.5)  # a bench, not a test: a warm launcher has handed its stdin over by now
        handed = os.readlink(f"/proc/{proc.pid}/fd/0") == os.devnull
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait()
        if handed:
            return
        time.sleep(2)
    raise RuntimeError("no warm process came up")


def cost_rows(env: dict[str, str], n: int, warm_too: bool = True, quick: bool = False) -> None:
    """The start cost rows: CPU to tools/list, first wait, spawn wall times; cold and warm.
    `quick`: each code path once (cold with the front off, warm with it on; both spawns
    cold only: a warm one differs by its warm process, which the warm mcp row starts)."""
    cmd = [sys.executable, "-m", "wavewait", "mcp"]
    runs = [("cold", env | {"WAVEWAIT_WARM": "0"})] + ([("warm", env | {"WAVEWAIT_WARM": "1"})] if warm_too else [])
    print(f"{'start cost (median of ' + str(n) + ')':<34}{'CPU to list':>12}{'1st wait':>10}{'CPU then':>10}")
    for label, e in runs:
        if label == "warm":
            warmed(cmd, e)
        for front, fe in (("front off (SDK lists)", e | {"WAVEWAIT_MCP_PRERENDER": "0"}), ("front on", e)):
            if quick and (front == "front on") != (label == "warm"):
                continue
            rs = [start_cost(cmd, fe) for _ in range(n)]
            print(
                f"{'mcp ' + label + ', ' + front:<34}{statistics.median(r[0] for r in rs):>10.2f} s"
                f"{statistics.median(r[1] for r in rs):>7.0f} ms{statistics.median(r[2] for r in rs):>8.2f} s"
            )
    print(f"target: CPU to the SDK's tools/list <= {TARGET_CPU_S} s")
    print()
    print(f"{'wavewait spawn, wall (median of ' + str(n) + ')':<40}{'plain':>10}{'preset+worktree':>18}")
    with tempfile.TemporaryDirectory(prefix="bench-spawn-") as folder:
        repo = git_repo(folder)
        senv = spawn_env(folder, env)
        for label, e in [("cold", senv | {"WAVEWAIT_WARM": "0"})] + (
            [("warm", senv | {"WAVEWAIT_WARM": "1"})] if warm_too and not quick else []
        ):
            if label == "warm":
                warmed([sys.executable, "-m", "wavewait", "mcp"], e, cwd=repo)
            plain = statistics.median(spawn_wall("plain", repo, e, n))
            preset = statistics.median(spawn_wall("preset", repo, e, n))
            print(f"{label:<40}{plain:>8.2f} s{preset:>16.2f} s")
        print(f"targets: plain <= {TARGET_SPAWN_S['plain']} s, preset+worktree <= {TARGET_SPAWN_S['preset']} s")
        print()
        print(f"{'wavewait agents (median wall, mean CPU of ' + str(n) + ')':<48}{'wall':>8}{'CPU':>10}")
        for label, e in [("cold", senv | {"WAVEWAIT_WARM": "0"})] + (
            [("warm", senv | {"WAVEWAIT_WARM": "1"})] if warm_too else []
        ):
            if label == "warm":
                warmed([sys.executable, "-m", "wavewait", "mcp"], e, cwd=repo)
            wall, used = command_cost(repo, e, n)
            print(f"{label:<48}{wall:>6.2f} s{used:>8.2f} s")


def command_cost(repo: str, env: dict[str, str], n: int) -> tuple[float, float]:
    """`wavewait agents` (a command that reads the bus) `n` times: its median wall time, and
    its mean CPU: the launcher's, and run warm, its child's too (the warm processes' reaped
    children's time, read before and after)."""
    warm = [w["pid"] for w in json.loads(cli(repo, env, "warm", "status"))["warm"]]
    before = sum(reaped_cpu(p) for p in warm)
    walls, used = [], 0.0
    for _ in range(n):
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "wavewait", "agents"], cwd=repo, env=env, stdout=subprocess.DEVNULL
        )
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        walls.append(time.perf_counter() - t0)
        assert proc.returncode == 0, proc.returncode
        used += usage.ru_utime + usage.ru_stime
    used += sum(reaped_cpu(p) for p in warm) - before
    return statistics.median(walls), used / n


def cli(repo: str, env: dict[str, str], *args: str) -> str:
    return subprocess.run(
        [sys.executable, "-m", "wavewait", *args], cwd=repo, env=env, capture_output=True, text=True, check=True
    ).stdout


def reaped_cpu(pid: int) -> float:
    """CPU seconds of the children process `pid` has reaped (cutime + cstime)."""
    fields = stat_fields(pid)
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat's fields after the command's name (the state first)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


@contextmanager
def busy_cores():
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    try:
        yield
    finally:
        for p in spin:
            p.kill()
            p.wait()


def importtime(cmd: list[str], env: dict[str, str]) -> dict[str, float]:
    """Self import time (ms) of one server start, summed per top-level package (-X importtime)."""
    proc = subprocess.run([cmd[0], "-X", "importtime", *cmd[1:]], input=b"", capture_output=True, env=env, timeout=60)
    per_pkg: dict[str, float] = defaultdict(float)
    for line in proc.stderr.decode(errors="replace").splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \| *(\S+)", line)
        if m:
            per_pkg[m[3].split(".")[0]] += int(m[1]) / 1000
    return dict(per_pkg)


# Each stage in a fresh interpreter, on top of the one before: what each layer adds to a start.
STAGES = [
    ("interpreter only", ""),
    ("+ pydantic, anyio", "import pydantic, anyio"),
    ("+ wavewait.cli (core, file bus)", "import wavewait.cli"),
    ("+ mcp.types", "import wavewait.cli, mcp.types"),
    ("+ mcp.server.mcpserver (the SDK server)", "import wavewait.cli, mcp.types, mcp.server.mcpserver"),
    ("+ wavewait.mcp.server (tools, schemas)", "import wavewait.cli, wavewait.mcp.server"),
]


def stage_ms(code: str, env: dict[str, str], n: int) -> float:
    """Median wall time of `python -c CODE` (spawn, imports, exit)."""
    xs = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code or "pass"], env=env, check=True)
        xs.append((time.perf_counter() - t0) * 1000)
    return statistics.median(xs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=20)
    ap.add_argument("--bus", default=None)
    ap.add_argument(
        "--quick",
        action="store_true",
        help="-n 1, idle only, one row of each era and of each front, the import stages in one interpreter, "
        "each start cost and spawn path once",
    )
    ap.add_argument("--cost", action="store_true", help="only the start cost rows (CPU, first wait, spawn)")
    ap.add_argument("--cold-only", action="store_true", help="no warm rows (code without warm starts)")
    a = ap.parse_args()
    if a.quick:
        a.n = 1
    bus = a.bus or tempfile.mkdtemp(prefix="bench-startup-")
    if not a.bus:
        atexit.register(shutil.rmtree, bus)  # the bus it made goes with it
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAVEWAIT_")} | {"WAVEWAIT_BUS": bus}
    if a.cost:
        cost_rows(env, a.n, warm_too=not a.cold_only, quick=a.quick)
        print(f"(load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
        return
    env |= {"WAVEWAIT_WARM": "0"}  # the rows below are of a cold start, as before warm starts
    cmd = [sys.executable, "-m", "wavewait", "mcp"]
    if not a.quick:
        one_start(cmd, env)  # warm the page cache and .pyc files

    print(f"`wavewait mcp` start, {a.n} runs each, target tools/list p50 <= {TARGET_MS:.0f} ms idle")
    print("handshake era (initialize; as Codex), 2026 era (server/discover, listen; as Claude Code)")
    print(f"{'condition':<30}{'1st answer p50':>16}{'tools/list p50':>16}{'p99':>9}{'max':>9}")
    off = env | {"WAVEWAIT_MCP_PRERENDER": "0"}  # no front: the SDK answers from the start
    for label, ctx, e, era in (
        ("handshake, idle, front off", None, off, "handshake"),
        ("handshake, busy, front off", busy_cores, off, "handshake"),
        ("handshake, idle, front on", None, env, "handshake"),
        ("handshake, busy, front on", busy_cores, env, "handshake"),
        ("2026, idle, front off", None, off, "2026"),
        ("2026, busy, front off", busy_cores, off, "2026"),
        ("2026, idle, front on", None, env, "2026"),
        ("2026, busy, front on", busy_cores, env, "2026"),
    ):
        if a.quick and (ctx is not None or (e is off) != (era == "handshake")):
            continue  # busy spins every core; idle, one row of each era and of each front is each path once
        if ctx is None:
            runs = [one_start(cmd, e, era) for _ in range(a.n)]
        else:
            with ctx():
                runs = [one_start(cmd, e, era) for _ in range(a.n)]
        init = [r[0] for r in runs]
        lst = [r[1] for r in runs]
        print(
            f"{label:<30}{statistics.median(init):>13.0f} ms{statistics.median(lst):>13.0f} ms"
            f"{pct(lst, 99):>6.0f} ms{max(lst):>6.0f} ms"
        )

    print()
    print(f"{'imports, each stage in a fresh interpreter (median)':<52}{'ms':>8}{'adds':>8}")
    prev = 0.0
    # quick: the first stage, then every stage's imports in one interpreter (each line still runs)
    every = ("every stage's imports, in one interpreter", "; ".join(code for _, code in STAGES if code))
    for label, code in [STAGES[0], every] if a.quick else STAGES:
        ms = stage_ms(code, env, 1 if a.quick else max(3, a.n // 2))
        print(f"{label:<52}{ms:>8.0f}{ms - prev:>+8.0f}")
        prev = ms

    print()
    cost_rows({k: v for k, v in env.items() if k != "WAVEWAIT_WARM"}, a.n, quick=a.quick)

    per_pkg = importtime(cmd, env)
    print()
    print(f"{'self import time at start, per package (-X importtime)':<56}{'ms':>8}")
    for name, ms in sorted(per_pkg.items(), key=lambda kv: -kv[1])[:10]:
        print(f"{name:<56}{ms:>8.1f}")
    print(f"(load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
