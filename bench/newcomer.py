"""A newcomer's first commands, exactly as the README writes them, in a fresh clone.

    python bench/newcomer.py            # the demo command in tmux at 80x24, then 200x50
    python bench/newcomer.py --tests    # also the README's test command (the whole suite)

Clones this checkout's HEAD into a temporary folder, reads the commands under "Run the
demo:", "Run the tests:" and the fan-out from a shell from the clone's README, and runs them there with a newcomer's
environment (no venv on PATH, no WAVEWAIT_* variables). The demo runs in tmux: the script
waits for the wave to show, captures the screen at 80x24 and at 200x50 (saved next to the
table), quits with Ctrl+Q and checks the TUI and its demo flights are gone. It also checks
that `.ci/run` runs the README's test command verbatim. Prints one table; exits 1 on a failure.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
rows: list[tuple[str, str, str]] = []


def step(name: str, ok: bool, detail: str, began: float) -> None:
    rows.append((name, "ok" if ok else "FAILED", f"{time.monotonic() - began:6.1f} s  {detail}"))


def readme_command(readme: str, heading: str) -> str:
    """The first fenced block after the line `heading`."""
    m = re.search(re.escape(heading) + r"\s*```\n(.+?)\n```", readme, re.S)
    if not m:
        raise SystemExit(f"README has no command block after {heading!r}")
    return m.group(1).strip()


def newcomer_env() -> dict[str, str]:
    """This shell's environment as a newcomer's: no venv activated, nothing of wavewait set."""
    venv = os.environ.get("VIRTUAL_ENV") or os.path.dirname(os.path.dirname(sys.executable))
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if not p.startswith(venv))
    keep = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV" and not k.startswith(("WAVEWAIT_", "TMUX"))}
    return keep | {"PATH": path, "TERM": "xterm-256color"}


def until(cond: Callable[[], bool], timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.5)
    return cond()


def demo(clone: Path, command: str, out: Path) -> None:
    env = newcomer_env()
    sock = str(clone / "tmux.sock")
    tmux = ["tmux", "-S", sock]

    def screen() -> str:
        return subprocess.run([*tmux, "capture-pane", "-p"], capture_output=True, text=True, env=env).stdout

    def demo_processes() -> str:
        return subprocess.run(["pgrep", "-af", f"{clone}/.venv/bin/"], capture_output=True, text=True).stdout

    began = time.monotonic()
    subprocess.run([*tmux, "new-session", "-d", "-x", "80", "-y", "24", "-c", str(clone), command], env=env, check=True)
    try:
        shown = until(lambda: "orchestrator" in screen() and "received" in screen(), 600)
        step("demo: install and show the wave (80x24)", shown, "first report on screen", began)
        (out / "newcomer-80x24.txt").write_text(screen())
        began = time.monotonic()
        subprocess.run([*tmux, "resize-window", "-x", "200", "-y", "50"], env=env, check=True)
        big = until(lambda: max(map(len, screen().splitlines()), default=0) > 100 and "orchestrator" in screen(), 30)
        step("demo: resized to 200x50", big, "the panel fills the window", began)
        (out / "newcomer-200x50.txt").write_text(screen())
        began = time.monotonic()
        subprocess.run([*tmux, "send-keys", "C-q"], env=env, check=True)
        gone = until(lambda: subprocess.run([*tmux, "has-session"], env=env, capture_output=True).returncode != 0, 10)
        step("demo: Ctrl+Q quits", gone, "the TUI ended, its tmux session closed", began)
        left = until(lambda: not demo_processes().strip(), 10)
        step(
            "demo: its flights are stopped",
            left,
            demo_processes().strip()[:60] or "no process of the clone left",
            began,
        )
    finally:
        subprocess.run([*tmux, "kill-server"], env=env, capture_output=True)


def shell_wave(clone: Path, command: str) -> None:
    """The README's fan-out from a shell, verbatim, from a shell with no venv on PATH (the
    block puts the clone's own on it, as the README says); each flight must end as the README
    says (reader and tester received, the crasher dead with its exit code). That flights reach
    `wavewait` with no venv on PATH at all is tests/newcomer's."""
    began = time.monotonic()
    done = subprocess.run(
        ["bash", "-c", command], cwd=clone, env=newcomer_env(), capture_output=True, text=True, timeout=120
    )
    try:
        results = {r["name"]: r for r in json.loads(done.stdout.strip().splitlines()[-1])["results"]}
    except (ValueError, KeyError, IndexError):
        step("the README's shell wave", False, (done.stdout + done.stderr).strip()[-60:], began)
        return
    ok = (
        done.returncode == 0
        and results.get("reader", {}).get("message") == "found 3 issues"
        and results.get("tester", {}).get("status") == "received"
        and results.get("crasher", {}).get("status") == "dead"
        and "code 7" in (results.get("crasher", {}).get("reason") or "")
    )
    words = ", ".join(f"{n} {r['status']}" for n, r in results.items())
    step("the README's shell wave", ok, words, began)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tests", action="store_true", help="also run the README's test command (the whole suite)")
    ap.add_argument("--out", default="bench/newcomer-out", help="where the screen captures go")
    args = ap.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    clone = Path(tempfile.mkdtemp(prefix="wavewait-newcomer-")) / "wavewait"
    began = time.monotonic()
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    step("git clone (HEAD of this checkout)", True, str(clone), began)
    readme = (clone / "README.md").read_text()
    demo_cmd, test_cmd = readme_command(readme, "Run the demo:"), readme_command(readme, "Run the tests:")
    ci = (clone / ".ci" / "run").read_text()
    step("`.ci/run` runs the README's test command verbatim", test_cmd in ci.splitlines(), test_cmd, time.monotonic())
    demo(clone, demo_cmd, out)
    shell_wave(
        clone, readme_command(readme, "Then a wave of your own, a fan-out and fan-in from a shell in the checkout:")
    )
    if args.tests:
        began = time.monotonic()
        shutil.rmtree(clone / ".venv", ignore_errors=True)
        done = subprocess.run(["bash", "-c", test_cmd], cwd=clone, env=newcomer_env(), capture_output=True, text=True)
        tail = (done.stdout.strip().splitlines() or [""])[-1]
        step("the README's test command", done.returncode == 0, tail, began)
    width = max(len(r[0]) for r in rows)
    for name, ok, detail in rows:
        print(f"{name:<{width}}  {ok:<6}  {detail}")
    shutil.rmtree(clone.parent, ignore_errors=True)
    sys.exit(0 if all(r[1] == "ok" for r in rows) else 1)


if __name__ == "__main__":
    main()
