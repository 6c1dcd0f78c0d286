"""The one check runner (core/checks.py), with real processes: what its verdict quotes, the
environment it gives, its bound, and a cancel that ends every process of its session."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from contextlib import suppress
from pathlib import Path

import anyio
import pytest

from wavewait.core import checks
from wavewait.core.proc import alive, kill_session, session_groups

from conftest import until

pytestmark = pytest.mark.anyio


async def test_a_verdict_quotes_the_last_lines_and_the_exit_code(tmp_path):
    v = await checks.run_check("seq 1 100000; exit 3", str(tmp_path), 30)
    assert not v.passed and v.why == "the check exited with 3"
    assert v.output.splitlines() == [str(n) for n in range(100001 - checks.TAIL_LINES, 100001)]
    v = await checks.run_check("true", str(tmp_path), 30)
    assert v.passed and v.output == "(no output; exit code 0)"
    gone = tmp_path / "gone"
    v = await checks.run_check("true", str(gone), 30)
    assert not v.passed and v.output == f"its folder {gone} is gone: nothing to check"


async def test_a_check_runs_by_bin_sh_without_any_wavewait_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("WAVEWAIT_AGENT_SECRET", "s3cret")
    monkeypatch.setenv("WAVEWAIT_BUS", "postgresql://me:password@db/bus")
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("VIRTUAL_ENV", "/some/venv")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "sh").write_text("#!/bin/sh\necho not this sh\n")
    (fake / "sh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")  # /bin/sh by its path, not the PATH's sh
    v = await checks.run_check('echo "$PATH $LANG $VIRTUAL_ENV"; env | grep -c "^WAVEWAIT_"', str(tmp_path), 30)
    assert v.output == f"{os.environ['PATH']} C.UTF-8 /some/venv\n0", v


async def test_a_cancelled_check_ends_with_every_process_of_its_session(tmp_path):
    """`timeout` makes a process group of its own inside the check's session: it ends too."""
    check = "timeout 300 sleep 300 & echo $! > own-group.pid; sleep 300 & echo $! > same-group.pid; wait"
    files = [tmp_path / "own-group.pid", tmp_path / "same-group.pid"]
    pids: list[int] = []
    try:
        with anyio.move_on_after(60) as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(checks.run_check, check, str(tmp_path), 300)
                await until(lambda: all(f.exists() and f.read_text().strip() for f in files), 30, "the check started")
                pids = [int(f.read_text()) for f in files]
                tg.cancel_scope.cancel()
        assert not scope.cancelled_caught
        for pid in pids:
            await until(lambda pid=pid: not alive(pid), 10, f"the check's process {pid} to end")
    finally:
        for pid in pids:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


async def test_a_session_whose_processes_keep_making_groups_of_their_own_is_ended_whole(tmp_path):
    """`timeout` makes its group just after it starts: one started between kill_session's scan of
    the session and its kills is missed by those kills and found by the next scan. The loop keeps
    starting them, so some are often in that window (a single scan missed some in half the runs;
    three runs here)."""
    for run in range(3):
        await _end_a_loop_of_timeouts(tmp_path / f"started-{run}")


async def _end_a_loop_of_timeouts(started: Path) -> None:
    loop = f"while true; do timeout 300 sleep 300 & echo $! >> {started}; done"
    leader = subprocess.Popen(["/bin/sh", "-c", loop], start_new_session=True)
    try:
        await until(lambda: started.exists() and len(started.read_text().split()) >= 20, 30, "the loop started 20")
        kill_session(leader.pid)
        leader.wait(10)
        await until(lambda: not session_groups(leader.pid), 10, "every group of the session to end")
        assert not [pid for pid in map(int, started.read_text().split()) if alive(pid)]
    finally:
        kill_session(leader.pid)


async def test_checks_of_a_process_share_one_bound(tmp_path, monkeypatch):
    """WAVEWAIT_MAX_CHECKS=1: of two checks started together, the second starts only after the
    first ended (each records its start and end; the first waits a while for a second start)."""
    monkeypatch.setenv("WAVEWAIT_MAX_CHECKS", "1")
    assert checks.max_checks() == 1
    check = (
        'n=$(mktemp -u XXXXXX); date +%s.%N > "$n.start"; i=0; '
        'while [ "$(ls | grep -c "start$")" -lt 2 ] && [ $i -lt 40 ]; do sleep 0.05; i=$((i+1)); done; '
        'date +%s.%N > "$n.end"'
    )
    async with anyio.create_task_group() as tg:
        for _ in range(2):
            tg.start_soon(checks.run_check, check, str(tmp_path), 30)
    spans = sorted(
        (float(s.read_text()), float(s.with_suffix(".end").read_text())) for s in Path(tmp_path).glob("*.start")
    )
    assert len(spans) == 2 and spans[0][1] <= spans[1][0], spans


def test_the_bound_is_one_per_core_unless_said(monkeypatch):
    monkeypatch.setenv("WAVEWAIT_MAX_CHECKS", "nope")
    assert checks.max_checks() == len(os.sched_getaffinity(0))
    monkeypatch.setenv("WAVEWAIT_MAX_CHECKS", "3")
    assert checks.max_checks() == 3


async def test_a_check_runner_that_died_fails_its_checks_by_name_and_the_next_check_starts_another(tmp_path):
    """The checks of a runner that was KILLed (it could not end them) are ended by its caller."""
    started = tmp_path / "started"
    try:
        async with anyio.create_task_group() as tg:
            got: list[checks.Verdict] = []

            async def check() -> None:
                got.append(
                    await checks.run_check(
                        f"echo $$ > {started}.tmp; mv {started}.tmp {started}; exec sleep 300", str(tmp_path), 300
                    )
                )

            tg.start_soon(check)
            await until(started.exists, 30, "the check started")
            dead = checks.runner().process
            dead.kill()
        assert not got[0].passed and got[0].why == "the check runner ended before the check did", got
        await until(lambda: not alive(int(started.read_text())), 10, "the orphaned check to be ended")
    finally:  # only what the test failed to see ended
        if started.exists():
            with suppress(ProcessLookupError):
                os.kill(int(started.read_text()), signal.SIGKILL)
    v = await checks.run_check("echo again", str(tmp_path), 30)
    assert v.passed and v.output == "again" and checks.runner().process.pid != dead.pid


async def test_a_queued_check_cancelled_never_starts(tmp_path, monkeypatch):
    monkeypatch.setenv("WAVEWAIT_MAX_CHECKS", "1")
    first = tmp_path / "first"
    async with anyio.create_task_group() as tg:
        tg.start_soon(checks.run_check, f"touch {first}; sleep 300", str(tmp_path), 300)
        await until(first.exists, 30, "the first check started")
        with anyio.move_on_after(0.2):  # the second waits for the first one's slot: cancelled there
            await checks.run_check(f"touch {tmp_path / 'second'}", str(tmp_path), 300)
        tg.cancel_scope.cancel()
    v = await checks.run_check("true", str(tmp_path), 30)  # the slot is free again
    assert v.passed and not (tmp_path / "second").exists()


def test_the_waiting_process_ending_ends_its_check_runner_and_its_checks(tmp_path):
    """A process that started a check and ends without waiting for it (its runner's stdin
    closes) leaves neither the runner nor the check's processes behind."""
    started = tmp_path / "started"
    os.mkfifo(started)  # the check says it started through it; the process reads it, then ends
    script = (
        "import anyio, os\n"
        "from wavewait.core import checks\n"
        "async def main():\n"
        "    async with anyio.create_task_group() as tg:\n"
        f"        tg.start_soon(checks.run_check, 'echo $$ > check.pid; echo go > started; exec sleep 300', {str(tmp_path)!r}, 300)\n"
        f"        await anyio.to_thread.run_sync(lambda: open({str(started)!r}).read())\n"
        "        print(checks.runner().process.pid, flush=True)\n"
        "        os._exit(0)\n"
        "anyio.run(main)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    runner_pid, check_pid = int(out.stdout), int((tmp_path / "check.pid").read_text())
    anyio.run(until, lambda: not alive(runner_pid) and not alive(check_pid), 10.0, "the runner and its check to end")


async def test_checks_cancelled_while_they_write_leave_the_runner_serving(tmp_path, monkeypatch):
    """A cancel read in the same batch of events as the cancelled check's output (it writes
    all the time) must not make the runner act on the check it just ended."""
    monkeypatch.setenv("WAVEWAIT_MAX_CHECKS", "4")
    for _ in range(5):
        async with anyio.create_task_group() as tg:
            for _ in range(4):
                tg.start_soon(checks.run_check, "while :; do echo x; done", str(tmp_path), 300)
            runner = checks.runner()
            await until(lambda r=runner: len(set(r.started()) & set(r.asked)) == 4, 30, "the four checks started")
            tg.cancel_scope.cancel()
        assert checks.runner() is runner and runner.process.poll() is None, "the runner ended"
    v = await checks.run_check("echo still here", str(tmp_path), 30)
    assert v.passed and v.output == "still here"
