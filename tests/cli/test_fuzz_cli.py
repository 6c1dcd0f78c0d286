"""Every CLI command fuzzed through the real `wavewait.cli.main`, in this process.

Whatever the arguments, the command ends with one of the documented exit codes (0, 2, 3, 4,
5), says what was wrong on stderr when it refuses (2), and never leaks a traceback. Timeouts
are drawn short or invalid so no example can block; commands that start long-lived things
(`mcp`, `serve`, `demo`, `run-queue`, `spawn`) are left to their own tests.
"""

from __future__ import annotations

import contextlib
import io

import pytest
from fuzz import short_seconds, text
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wavewait.cli import main

EXIT_CODES = {0, 2, 3, 4, 5}
seconds = short_seconds.map(str) | st.sampled_from(["abc", "", "-1", "nan", "1e400", "0x10"])
token = text.filter(lambda t: t not in ("-h", "--help") and not t.startswith("-"))


def _cmd(name: str, *parts: st.SearchStrategy[list[str]]) -> st.SearchStrategy[list[str]]:
    return st.tuples(*parts).map(lambda ps: [name, *(a for p in ps for a in p)]) if parts else st.just([name])


def _opt(flag: str, value: st.SearchStrategy[str]) -> st.SearchStrategy[list[str]]:
    return st.one_of(st.just([]), value.map(lambda v: [flag, v]))


def _always(flag: str, value: st.SearchStrategy[str]) -> st.SearchStrategy[list[str]]:
    """A flag that must be given: its default would block (a wait's default timeout)."""
    return value.map(lambda v: [flag, v])


one = token.map(lambda t: [t])
many = st.lists(token, max_size=4)
COMMANDS = st.one_of(
    _cmd("send", one, one),
    _cmd("wait", seconds.map(lambda t: [t]), many),
    _cmd("wait-signal", one, _always("--timeout", seconds), _opt("--min-count", text)),
    _cmd("wait-event", _opt("--type", token), _always("--timeout", seconds)),
    _cmd("notify", _opt("--status", text), _opt("--message", text), _opt("--change", text), _opt("--session", text)),
    _cmd("agents", _opt("--wave", text)),
    _cmd("kill", one),
    _cmd("close", one),
    _cmd("interrupt", one),
    _cmd("waits"),
    _cmd("output", one, _opt("--lines", text)),
    _cmd("ask", one, _always("--timeout", seconds), _opt("--to", text)),
    _cmd("reply", one, one),
    _cmd("enqueue", one, _opt("--input", text), _opt("--inputs-json", text), _opt("--reason", text)),
    _cmd("complete", many.map(lambda m: m[:1]), _opt("--status", text), _opt("--goals", text), _opt("--did", text)),
    _cmd("handoffs", _opt("--type", text), _opt("--task-id", text)),
    _cmd("tasks", _opt("--status", text)),
)


@pytest.mark.long
def test_every_command_ends_with_a_documented_exit_code_and_no_traceback(tmp_path, monkeypatch):
    bus = tmp_path / "bus"
    assert _run(["--bus", str(bus), "send", "orchestrator", "hi", "--agent", "worker"])[0] in (0, 2)
    monkeypatch.chdir(tmp_path)
    for name in ("WAVEWAIT_AGENT_ID", "WAVEWAIT_PARENT_ID", "WAVEWAIT_TASK_ID", "WAVEWAIT_BUS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WAVEWAIT_QUEUE", "fuzz")

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)
    @given(argv=COMMANDS, agent=st.one_of(st.none(), token))
    def run_anything(argv: list[str], agent: str | None) -> None:
        full = ["--bus", str(bus), *(["--agent", agent] if agent is not None else []), *argv]
        code, out, err = _run(full)
        assert code in EXIT_CODES, (full, code, err)
        assert "Traceback" not in err and "Traceback" not in out, (full, err)
        if code == 2:
            assert "error" in err.lower(), (full, err)

    run_anything()


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code: int | str | None = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
        except SystemExit as e:
            code = e.code
    assert isinstance(code, int) or code is None, code
    return code or 0, out.getvalue(), err.getvalue()
