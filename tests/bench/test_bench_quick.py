"""Every script in bench/ runs, in its quick mode, so that none rots between the runs by hand.

Each script is run as a real process with `--quick` (small sizes: that it runs, not a figure;
the figures come from the full runs the docs quote), on both buses where it takes one, and
must exit 0 having printed its table. A script that measures both buses in one run
(bench_pg, bench_queue, bench_scale) is run once. A new script must be added here or to
`NOT_HERE` with the reason: `test_every_script_is_run_or_excused` holds that.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from pg.pgtools import PG_URL, fresh_schema_url, require_pg

from conftest import clean_env

BENCH = Path(__file__).resolve().parents[2] / "bench"
TIMEOUT = 300.0  # seconds: each takes a few on a quiet machine, many more under a loaded suite

#: script -> extra arguments after --quick (sizes its quick mode leaves large)
QUICK: dict[str, tuple[str, ...]] = {
    "bench_checks.py": (),
    "bench_core.py": (),
    "bench_mcp.py": (),
    "bench_pg.py": (),
    "bench_queue.py": (),
    # its --quick (1,000 flights, 20 s under load) is a run by hand. Here every row's code
    # once, tiny, each row on one of the two buses (--each-row-once): the fan-in (and join)
    # rows, load, one-inbox, saturation (an MCP server and the core under 4 re-issued waits),
    # throughput and idle, one sender and one consumer a row. Left out: mcp and tui, which
    # run bench_mcp.py and bench_tui.py (here on their own)
    "bench_scale.py": (
        "--only=fanin,load,one-inbox,saturation,throughput,idle",
        "--each-row-once",
        "--flights=40",
        "--small=10",
        "--duration=0.5",
        "--idle-window=0.5",
        "--waits=4",
        "--baseline-waits=2",
        "--load-rate=40",
        "--senders=1",
        "--consumers=1",
        "--backlog=20",
        "--messages=40",
    ),
    "bench_startup.py": (),
    "bench_talk.py": (),
    "bench_tasks_poll.py": (),
    "bench_tui.py": (),
    "soak.py": (),
    "transcript_mcp.py": (),
}
#: the scripts that take `--bus` (a directory by default): run on PostgreSQL too. Not
#: transcript_mcp.py: it prints what a client sees of each tool, the same script code on
#: either bus (the tools on PostgreSQL are the MCP suite's `[postgres]` tests)
TAKES_BUS = {"bench_mcp.py", "soak.py"}
#: the scripts that measure both buses in one run (PostgreSQL as WAVEWAIT_TEST_PG names it)
BOTH_IN_ONE = {"bench_pg.py", "bench_queue.py", "bench_scale.py", "bench_talk.py"}
#: scripts not run here, and why
NOT_HERE = {
    "newcomer.py": "installs a fresh clone from the package registry (minutes); tests/newcomer runs the installed case",
    "guard.py": "run by .ci/run as a step of its own",
    "talk_standin.py": "not a bench: the stand-in agent bench_talk.py starts",
}

CASES = [(s, "both" if s in BOTH_IN_ONE else "directory") for s in QUICK] + [(s, "postgres") for s in sorted(TAKES_BUS)]


def test_every_script_is_run_or_excused() -> None:
    scripts = {p.name for p in BENCH.glob("*.py")}
    assert scripts - set(QUICK) - set(NOT_HERE) == set(), "add the new bench script to QUICK (or NOT_HERE, with why)"
    assert set(QUICK) <= scripts and TAKES_BUS | BOTH_IN_ONE <= set(QUICK)


def run(script: str, args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    # leftovers (soak's logs, bench_startup's bus) go to the test's folder, not the machine's /tmp
    env = clean_env(WAVEWAIT_TEST_PG=PG_URL, TMPDIR=str(tmp_path))
    env.pop("PYTHONSAFEPATH", None)  # a script is run as `python bench/x.py`, as the docs say
    return subprocess.run(
        [sys.executable, str(BENCH / script), "--quick", *QUICK[script], *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


@pytest.mark.timeout(TIMEOUT + 30)
@pytest.mark.parametrize(("script", "bus"), CASES, ids=[f"{s}-{b}" for s, b in CASES])
def test_a_bench_script_runs_in_its_quick_mode(script: str, bus: str, tmp_path: Path) -> None:
    if bus in ("both", "postgres"):
        require_pg()
    if bus == "postgres":
        with fresh_schema_url() as url:
            done = run(script, ["--bus", url], tmp_path)
    else:
        done = run(script, [], tmp_path)
    said = f"exit {done.returncode}\n--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
    assert done.returncode == 0, said
    assert done.stdout.strip(), said  # its table


@pytest.mark.timeout(TIMEOUT + 30)
def test_the_fan_in_row_runs_small_with_two_writers_on_postgresql(tmp_path: Path) -> None:
    """The fan-in row's PostgreSQL path (writer processes sharing the reports, the answer past
    its budget, the rest drained once): guard.py runs the row on the directory bus only. At
    700 reports/s the reports are shared by two writers; 100 flights are past a 3,000-byte budget."""
    require_pg()
    with fresh_schema_url() as url:
        args = ["--fanin", "100", "--rate", "700", "--output-budget", "3000", "--bus", url]
        done = run("bench_mcp.py", args, tmp_path)
    said = f"exit {done.returncode}\n--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
    assert done.returncode == 0, said
    assert re.search(r"the rest drained .*: [1-9]\d* calls in", done.stdout), said
