"""Every tool's arguments fuzzed through the real MCP client against `wavewait mcp` over stdio.

Whatever arrives, the answer is a tool result: a success with structured content, or an
`isError` whose text starts with `Error: ` and names what to do, never a traceback and
never a protocol error; and the server stays up. The server has a queue, so the queue's
tools are fuzzed too. `--max-block 0.3` keeps every wait short,
and spawn_agent only ever runs a harmless command (its other arguments are fuzzed).
"""

from __future__ import annotations

import json

import anyio
import anyio.from_thread
from fuzz import arguments, short_seconds
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wavewait.core.bus.file import FileBus
from wavewait.mcp.question_tools import NAME as APPROVE

from conftest import PYTHON, register_crew
from mcptools import mcp_client

EXAMPLES = 20  # per tool
HARMLESS = {
    "command": st.just([PYTHON, "-c", "pass"]) | st.none(),
    "timeout": short_seconds,
    "timeout_secs": short_seconds,
}


def test_every_tool_answers_any_arguments_with_a_result_and_stays_up(tmp_path):
    bus = FileBus(tmp_path / "bus")
    (tmp_path / "project").mkdir()
    with anyio.from_thread.start_blocking_portal() as portal:
        portal.call(register_crew, bus, "orchestrator", "worker")
        client = mcp_client(bus, "--max-block", "0.3", "--queue", "fuzz", cwd=str(tmp_path / "project"))
        with portal.wrap_async_context_manager(client) as c:
            tools = portal.call(c.list_tools).tools
            answers = {"ok": 0, "error": 0}
            for tool in tools:  # each tool its own examples: a drawn tool would favour the first ones

                @settings(
                    max_examples=EXAMPLES,
                    deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
                    database=None,
                )
                @given(name=st.just(tool.name), args=arguments(tool.input_schema, HARMLESS))
                def call_anything(name: str, args: dict) -> None:
                    r = portal.call(c.call_tool, name, args)
                    text = r.content[0].text if r.content else ""
                    assert "Traceback" not in text, text
                    if r.is_error:
                        assert text.startswith("Error: "), text
                        assert len(text) < 20_000, text[:200]
                    elif name == APPROVE:  # Claude Code takes its permission result as one JSON text block only
                        assert json.loads(text)["behavior"] in ("allow", "deny"), text
                    else:
                        assert r.structured_content is not None, (name, args, text)
                    answers["error" if r.is_error else "ok"] += 1

                call_anything()
            assert portal.call(c.list_tools).tools  # still up after everything
            assert "enqueue_task" in {t.name for t in tools}  # the queue's tools too
            assert answers["ok"] >= 1 and sum(answers.values()) >= EXAMPLES * len(tools), answers
        portal.call(bus.close)
