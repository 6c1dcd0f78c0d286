"""A flight's questions to its parent, as tools: `ask` (its own question) and `approve`
(Claude Code's permission prompts, asked through wavewait instead of a terminal).

Both make the question the flight's (`needs input` everywhere until answered with
`reply`), and wait for the answer.

A `claude` preset flight runs with `--permission-prompt-tool mcp__wavewait__approve`: when
a tool needs approval, Claude Code calls this tool with `{tool_name, input, tool_use_id}`
and waits for `{"behavior": "allow", "updatedInput": …}` or `{"behavior": "deny",
"message": …}`. The request becomes the flight's question (the flight shows `needs input`
everywhere); the person or the orchestrator answers with `reply` (`allow`, or `deny WHY`).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel, ConfigDict, Field

from ..core import messages, wait
from ..core.errors import BadInput
from ..core.ids import check_word
from ..core.limits import check_text
from ..core.results import Outcome, Result
from .settings import Settings
from .toolkit import Reporter, clamp, declare, reply

ASK_DOC = (
    "Ask your parent (the agent or person that spawned you) a question and block until it is "
    "answered. You show as needs_input meanwhile. Returns {status: 'answered', answer, "
    "question_id}; on timeout {status: 'timeout', question_id}: the question stays open and its "
    "answer arrives later as an event of type 'answer'. Use it when you cannot go on without a "
    "decision; do not guess."
)
NAME = "approve"
DOC = (
    "Claude Code's permission prompt, called by the host (not by the model) with the tool that "
    "needs approval and its input. The request becomes this flight's question to its parent, who "
    "answers with reply: 'allow', or 'deny' and why. Returns "
    '{"behavior": "allow", "updatedInput": …} or {"behavior": "deny", "message": …}.'
)
SUMMARY_CHARS = 600  # of the tool's input, in the question
ANSWER_TIMEOUT = 1800.0  # a person may be away; past this the request is denied, saying so
ALLOW_WORDS = frozenset({"allow", "allowed", "yes", "y", "ok", "approve", "approved"})


class AskResult(Result):
    """`ask`: the answer, or why none came yet (the question stays open)."""

    status: str = Field(description="answered | timeout | interrupted")
    answer: str | None = None
    question_id: str

    def outcome(self) -> Outcome:
        return "satisfied" if self.status == "answered" else self.status  # type: ignore[return-value]

    def summary(self) -> str:
        return "answered" if self.status == "answered" else f"no answer yet ({self.status})"


class Decision(BaseModel):
    """Claude Code's permission result."""

    model_config = ConfigDict(extra="forbid")
    behavior: str = Field(description="allow | deny")
    updatedInput: dict[str, Any] | None = None  # the host's spelling
    message: str | None = None


def question_for(tool_name: str, tool_input: dict[str, Any]) -> str:
    """The flight's question: which tool, and a bounded summary of its input."""
    shown = json.dumps(tool_input, ensure_ascii=False)
    if len(shown) > SUMMARY_CHARS:
        shown = shown[: SUMMARY_CHARS - 1] + "…"
    return f"permission: {tool_name} {shown}. Answer allow, or deny and why."


def decision(answer: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    """An answer as Claude Code's permission result: its first word decides, the rest is why."""
    first, _, rest = answer.strip().partition(" ")
    if first.lower().rstrip(".,!") in ALLOW_WORDS:
        return {"behavior": "allow", "updatedInput": tool_input}
    why = rest.strip() if first.lower().rstrip(".,!:") == "deny" else answer.strip()
    return {"behavior": "deny", "message": f"denied by the person in charge: {why or 'no reason given'}"}


def register_question_tools(server: MCPServer, bus: Any, s: Settings) -> None:
    """`ask` and `approve`, acting on `bus` as `s.caller`."""
    tool = declare(server)

    @tool("ask", ASK_DOC, "Ask your parent", read_only=False)
    async def ask(
        ctx: Context,
        question: Annotated[str, Field(description="The question (non-empty).")],
        timeout: Annotated[float, Field(description="Seconds to wait for the answer.", ge=0)] = 1800,
    ) -> Annotated[CallToolResult, AskResult]:
        eff, _cut = clamp(s, wait.check_timeout(timeout), ctx)
        # one question at a time, so the answer taken is this question's
        me = await bus.get_agent(s.caller)
        if me is not None and me.question_id and not me.finished:
            raise BadInput(
                f"question: your question {me.question_id} is still open; wait for its answer with "
                "wait_for_event types=['answer']"
            )
        if any(r.type == messages.ANSWER for r in await bus.pending(s.caller)):
            raise BadInput("question: an answer is waiting in your inbox; take it with wait_for_event types=['answer']")
        item = await messages.ask(bus, s.caller, question)
        got = await wait.wait_event(bus, s.caller, eff, [messages.ANSWER], on_progress=Reporter(ctx, eff))
        if got.type == messages.ANSWER:
            body = str((got.model_extra or {}).get("body", ""))
            return reply(AskResult(status="answered", answer=body, question_id=item.id))
        return reply(
            AskResult(status=got.type, question_id=item.id),
            "the question is still open: call wait_for_event with types=['answer'] to keep waiting",
        )

    @tool(NAME, DOC, "Ask for permission", read_only=False)
    async def approve(
        ctx: Context,
        tool_name: Annotated[str, Field(description="The tool that needs approval.", max_length=200)],
        input: Annotated[dict[str, Any], Field(description="The tool's input.")],
        tool_use_id: Annotated[str | None, Field(description="The host's id of the tool call.")] = None,
    ) -> CallToolResult:
        check_text(tool_name, "tool_name", max_bytes=200)
        if tool_use_id is not None:
            check_word(tool_use_id, "tool_use_id")
        if not isinstance(input, dict):
            raise BadInput("input: the tool's input, an object")
        await messages.ask(bus, s.caller, question_for(tool_name, input))
        eff, _cut = clamp(s, ANSWER_TIMEOUT, ctx)  # a server started with --max-block answers within it too
        got = await wait.wait_event(bus, s.caller, eff, [messages.ANSWER], on_progress=Reporter(ctx, eff))
        if got.type == messages.ANSWER:
            result = decision(str((got.model_extra or {}).get("body", "")), input)
        else:  # timed out or interrupted: the question is closed, and the tool denied, saying so
            await bus.update_agent(s.caller, question=None, question_id=None)
            result = {"behavior": "deny", "message": f"no answer to the permission request in {eff:g} s ({got.type})"}
        # exactly one text block, the JSON: Claude Code refuses anything else (structured content too)
        return CallToolResult(
            content=[TextContent(type="text", text=json.dumps(Decision(**result).model_dump(exclude_none=True)))]
        )
