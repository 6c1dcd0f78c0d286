"""Shared fixtures: a real bus on tmp_path, and waiting on conditions with deadlines."""

from __future__ import annotations

import fcntl
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import anyio
import pytest

# The tests run against the installed wavewait, editable or not. The checkout's ./wavewait holds
# only the faces (core/ and tui/ join it when installed), so it must never be imported in its
# place: not here under `python -m pytest` (which puts the repo root first on sys.path), and not
# in the `python -m wavewait ...` children started from the repo root (`PYTHONSAFEPATH`, which
# they inherit, is `python -P`).
os.environ["PYTHONSAFEPATH"] = "1"
# pytest-xdist's workers carry COLUMNS=80 and LINES=24, which a TUI started by a test in a tmux
# pane of another size (200x50) would take over the pane's own size
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)
# tests start servers with many settings, each its own warm process (wavewait/warm.py): let
# them end a minute after their last command, not the quarter of an hour a person's would
os.environ.setdefault("WAVEWAIT_WARM_IDLE", "60")
sys.path[:] = [p for p in sys.path if Path(p or os.curdir).resolve() != Path(__file__).resolve().parents[1]]

from leftovers import RUN_MARK, end, warm_processes  # noqa: E402

# the run's mark on every process it starts (leftovers.py): set by the process that runs the
# session (pytest-xdist's controller, or the only one under -n 0), inherited by its workers
if "PYTEST_XDIST_WORKER" not in os.environ:
    os.environ[RUN_MARK] = f"{os.getpid()}-{time.time_ns()}"

from wavewait.core import wait  # noqa: E402
from wavewait.core.agents import register  # noqa: E402
from wavewait.core.bus import Bus  # noqa: E402
from wavewait.core.bus.file import FileBus  # noqa: E402

PYTHON = sys.executable


@pytest.fixture(autouse=True)
def server_restart_gate(request: pytest.FixtureRequest) -> Iterator[None]:
    """With the suite spread over workers (pytest-xdist), a `restarts_server` test runs alone.

    It restarts the PostgreSQL server every other worker's tests talk to, so it takes a
    run-wide lock exclusively while every other test holds it shared. A second lock, the gate,
    is held by the restart while it waits, so that new tests queue behind it instead of
    starving it. Without workers there is nothing to share and nothing is locked.
    """
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None:
        yield
        return
    base = Path(tempfile.gettempdir()) / f"wavewait-tests-{run}"
    exclusive = request.node.get_closest_marker("restarts_server") is not None
    with open(f"{base}.gate", "a") as gate, open(f"{base}.lock", "a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            if not exclusive:
                fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            fcntl.flock(gate, fcntl.LOCK_UN)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def bus_dir(tmp_path: Path) -> Path:
    return tmp_path / "bus"


@pytest.fixture(params=["file", "postgres"])
async def bus(request: pytest.FixtureRequest, bus_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Bus:
    """A real bus for backend-agnostic tests, once per backend (ids `file`, `postgres`).

    The PostgreSQL bus gets a fresh schema per test, named in its URL (`?schema=`), so
    child processes given `bus.url` (WAVEWAIT_BUS) see the same bus; it is dropped after.
    """
    monkeypatch.delenv("WAVEWAIT_AGENT_ID", raising=False)
    monkeypatch.delenv("WAVEWAIT_PARENT_ID", raising=False)
    if request.param == "file":
        b: Bus = FileBus(bus_dir)
        monkeypatch.setenv("WAVEWAIT_BUS", b.url)
        yield b
        await b.close()
        return
    from pg.pgtools import pg_bus  # PostgreSQL helpers live with its tests

    monkeypatch.setenv("WAVEWAIT_LOG_DIR", str(bus_dir / "logs"))
    async with pg_bus() as b:
        monkeypatch.setenv("WAVEWAIT_BUS", b.url)
        yield b


@pytest.fixture
async def file_bus(bus_dir: Path, monkeypatch: pytest.MonkeyPatch) -> FileBus:
    """The directory bus, for tests of what only it has (Maildir layout, modes, quarantine)."""
    b = FileBus(bus_dir)
    monkeypatch.setenv("WAVEWAIT_BUS", b.url)
    monkeypatch.delenv("WAVEWAIT_AGENT_ID", raising=False)
    monkeypatch.delenv("WAVEWAIT_PARENT_ID", raising=False)
    yield b
    await b.close()


async def until(cond: Callable[[], Awaitable[bool] | bool], timeout: float = 10.0, what: str = "condition") -> None:
    """Wait for `cond` with a deadline; re-check on a short beat (never a fixed sleep)."""
    deadline = time.monotonic() + timeout
    while True:
        r = cond()
        if hasattr(r, "__await__"):
            r = await r
        if r:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        with anyio.move_on_after(0.01):  # a beat of the deadline loop, not a synchronising sleep
            await anyio.Event().wait()


async def register_crew(bus: Bus, *flights: str) -> None:
    """An orchestrator and these flights, registered under it (ids are their names)."""
    await register(bus, "orchestrator")
    for name in flights:
        await register(bus, name, parent_id="orchestrator")


async def has_waits(bus: Bus, n: int, kind: str | None = None) -> bool:
    """Whether exactly `n` waits (of this kind) are registered on the bus."""
    return len([w for w in await bus.list_waits() if kind in (None, w.kind)]) == n


async def has_progress(bus: Bus, start: str) -> bool:
    """Whether a registered wait reports progress that starts with `start` ("1/2 received")."""
    return any(w.progress.startswith(start) for w in await bus.list_waits())


class Background:
    """Run a wait in a task group and keep its result."""

    def __init__(self, tg) -> None:
        self.tg = tg
        self.results: dict[str, object] = {}

    def start(self, key: str, fn, *args, **kwargs) -> None:
        async def run() -> None:
            self.results[key] = await fn(*args, **kwargs)

        self.tg.start_soon(run)

    async def result(self, key: str, timeout: float = 15) -> object:
        await until(lambda: key in self.results, timeout, f"the {key} wait to return")
        return self.results[key]


def push_timers_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every timer of the engine an hour away: only a change on the bus can wake a wait."""
    monkeypatch.setattr(wait.engine, "RESCAN_EVERY", 3600.0)
    monkeypatch.setattr(wait.engine, "PROGRESS_EVERY", 3600.0)
    monkeypatch.setattr(wait.engine, "SWEEP_INTERVAL", 3600.0)


def wavewait_cmd(*args: str) -> list[str]:
    return [PYTHON, "-m", "wavewait", *args]


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any WAVEWAIT_ variable but the warm processes' idle
    time (above: a test's warm processes end a minute after their last command), plus `extra`
    (the run's mark, RUN_MARK, stays: the session's end stops the warm processes it bears)."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith("WAVEWAIT_") or k == "WAVEWAIT_WARM_IDLE"}
    return kept | extra


def env_for(bus: Bus, **extra: str) -> dict[str, str]:
    """A clean environment (`clean_env`) that names `bus`, plus `extra`."""
    return clean_env(**({"WAVEWAIT_BUS": bus.url} | extra))


def hosts_selected(config: pytest.Config) -> bool:
    """The host suite (the real Claude Code and Codex CLIs, minutes of them) runs under CI,
    under `-m hosts`, or with WAVEWAIT_TEST_HOSTS=1."""
    return (
        os.environ.get("CI") == "true"
        or os.environ.get("WAVEWAIT_TEST_HOSTS") == "1"
        or "hosts" in (config.getoption("markexpr") or "")
    )


def runs_on_one_bus_only(item: pytest.Item) -> bool:
    """The PostgreSQL variant of a test marked `one_bus` (and not `both_buses`).

    Where the bus is not a test's subject (a face's argument checks, git, the screen), its
    PostgreSQL variant adds minutes, not coverage: the bus contract runs on both buses in
    tests/core and tests/pg, and each face keeps a few tests on both (`both_buses`).
    """
    callspec = getattr(item, "callspec", None)
    return (
        callspec is not None
        and callspec.params.get("bus") == "postgres"
        and item.get_closest_marker("one_bus") is not None
        and item.get_closest_marker("both_buses") is None
    )


def longest_first(item: pytest.Item) -> tuple[bool, float, bool]:
    """The host suite's tests first, the longest (by its declared timeout) first among them,
    then the rest by their declared timeout, then those marked `long` (tens of seconds, with
    no timeout of their own), then everything else: spread over workers, each taking its next
    test as it starts one (`--maxschedchunk=1`), a test of a minute started last would end the
    run alone."""
    timeout = item.get_closest_marker("timeout")
    return (
        item.get_closest_marker("hosts") is None,
        -float(timeout.args[0] if timeout else 0),
        item.get_closest_marker("long") is None,
    )


def deselect(config: pytest.Config, items: list[pytest.Item], which: Callable[[pytest.Item], bool]) -> None:
    """Take the items `which` names out of the run, as deselected."""
    keep, drop = [], []
    for item in items:
        (drop if which(item) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def restarts_selected() -> bool:
    return os.environ.get("CI") == "true" or os.environ.get("WAVEWAIT_TEST_RESTARTS") == "1"


def warm_settings() -> dict[str, str]:
    """For an environment a test builds from nothing (an agent CLI's): the run's mark and the
    warm processes' idle time, so what it starts ends with the run too."""
    return {k: os.environ[k] for k in (RUN_MARK, "WAVEWAIT_WARM_IDLE") if k in os.environ}


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A test run leaves no process behind: the warm processes its commands started (detached,
    each would stay WAVEWAIT_WARM_IDLE seconds) are stopped, once every worker has finished."""
    if hasattr(session.config, "workerinput"):  # a worker: the controller does it, after all of them
        return
    # the run's temporary folder, if it made one (never made here: pytest tidies old ones then)
    temp = getattr(getattr(session.config, "_tmp_path_factory", None), "_basetemp", None)
    end(warm_processes(os.environ[RUN_MARK], temp))


def pytest_report_header(config: pytest.Config) -> str | None:
    """Said once, by the process that reports: with the suite on workers (pytest-xdist) the
    collection runs in them, and what they write is not shown."""
    if restarts_selected():
        return None
    return (
        "tests marked restarts_server are deselected: they restart the local PostgreSQL server; "
        "set WAVEWAIT_TEST_RESTARTS=1 (or CI=true) to run them"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Two opt-ins outside CI, each said once.

    `restarts_server` tests restart the local PostgreSQL server: they run under CI=true or
    WAVEWAIT_TEST_RESTARTS=1, and are otherwise deselected, so a plain `pytest` never drops
    other sessions' connections. `hosts` tests drive the real agent CLIs (installed from npm
    on first use): they run as `hosts_selected` says, and are otherwise skipped with the way
    to run them. Everywhere: the PostgreSQL variants of `one_bus` tests are deselected, and
    the rest ordered `longest_first`.
    """
    if not hosts_selected(config):
        skip = pytest.mark.skip(
            reason="host suite (real Claude Code and Codex): run it with `python -m pytest -m hosts tests/hosts`, "
            "WAVEWAIT_TEST_HOSTS=1, or CI=true"
        )
        for item in items:
            if item.get_closest_marker("hosts"):
                item.add_marker(skip)
    deselect(config, items, runs_on_one_bus_only)
    items.sort(key=longest_first)
    if not restarts_selected():
        deselect(config, items, lambda item: item.get_closest_marker("restarts_server") is not None)
