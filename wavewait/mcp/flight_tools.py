"""Tools about one flight and its branch: read its recent output, answer its question, merge
a wave's branches. Kept apart from `tools.py` so they add to it, not change it; server.py
registers both.
"""

from __future__ import annotations

import time
from typing import Annotated

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult
from pydantic import Field

from ..core import agents, conversation, merge, messages, transcript
from ..core.bus import Bus
from ..core.errors import BadInput
from ..core.results import OutputResult, SendResult, TellResult, TranscriptResult
from .settings import Settings
from .toolkit import AgentRef, declare, reply, wants_progress

READ_OUTPUT_DOC = (
    "Read a flight's recent output: the last `lines` lines (default 50, at most 1000) of its "
    "stdout and stderr, from the output log its supervisor keeps. Returns {agent_id, name, "
    "state, lines}. Read-only; use it to see why a flight died or what it is doing."
)
REPLY_DOC = (
    "Answer a flight's open question. A flight that asks (a `question` event: {from, "
    "question_id, body}) shows as needs_input until answered; give agent (its id or prefix) "
    "or question_id. The answer reaches the flight as an `answer` event it waits for, and "
    "clears needs_input. Returns {message_id}."
)

MERGE_WAVE_DOC = (
    "Merge a wave's branches (its coding flights' results) one by one onto a branch, in order: "
    "the task queue's dependencies where the flights are tasks, else the order they reported; "
    "flights that did not report or are dead are left out (skipped, with why). Each branch is "
    "merged with a merge commit (--no-ff: the flight's commits kept, one unit to revert) in a "
    "scratch worktree, `check` (a shell command, e.g. 'pytest -q') runs there, and the target "
    "moves only when it passed. A conflict or a failing check stops that flight, not the wave: "
    "it becomes needs_input with the files or the check's last lines as its question; flights "
    "that do not depend on it go on. Call it again after a fix: it continues and never merges a "
    "flight twice. dry_run: the plan, each flight as the merge would decide it (and the overlap: "
    "files two flights touched), moving nothing. "
    "resolve_with 'claude'|'codex': a conflict goes to a new flight in that branch's worktree, "
    "and the queue waits for it and tries again. Returns {status: merged|needs_input|nothing_merged|planned, "
    "target, overlap, flights: [{agent_id, name, branch, status: merged|conflict|check_failed|"
    "skipped|pending, files?, output?, why?}]}."
)
TELL_DOC = (
    "Tell one of your flights something, as a user message to its agent (a Claude Code or Codex "
    "flight): to steer it, correct it, or give it round two after its report. It goes into the "
    "running turn where the host takes it, else it starts the next turn; a flight that reported and "
    "ended is resumed with its whole conversation, in the same worktree and branch. now: interrupt "
    "its running turn first. Each turn's final message is a report: call wait on the flight for it. "
    "Returns {agent_id, name, told: in_turn|next_turn|resumed, turn}. A flight without a "
    "conversation (a plain command) cannot be told: use send. A flight closed with close_agent, or "
    "past its budget, is refused."
)
TRANSCRIPT_DOC = (
    "Read a flight's conversation: each user message (its prompt, each tell and who told it), what "
    "its agent said, each tool call as one line, tool results cut short, and each turn's end with "
    "its usage. The last `tail` entries (default 100); page back with before = the first entry's "
    "seq. Returns {agent_id, name, state, turn, entries: [{seq, kind, turn, by?, text}], more}."
)
PROGRESS_EVERY = 10.0  # seconds between two progress notifications while a merge runs


def register_flight_tools(server: MCPServer, bus: Bus, s: Settings) -> None:
    """`read_output`, `reply`, `tell_agent`, `read_transcript` and `merge_wave`, acting on `bus` as `s.caller`."""

    tool = declare(server)

    @tool("read_output", READ_OUTPUT_DOC, "Read a flight's output", read_only=True, idempotent=True)
    async def read_output(
        agent: AgentRef,
        lines: Annotated[int, Field(description="How many of the last lines (1-1000).")] = 50,
    ) -> Annotated[CallToolResult, OutputResult]:
        a = await agents.resolve_agent(bus, agent, "agent")
        got = await agents.read_output(bus, a, lines)
        return reply(OutputResult(agent_id=a.id, name=a.name, state=a.state, lines=got))

    @tool("reply", REPLY_DOC, "Answer a flight's question", read_only=False)
    async def reply_(
        message: Annotated[str, Field(description="The answer (non-empty).")],
        agent: Annotated[str | None, Field(description="The asking flight's id or unique prefix.")] = None,
        question_id: Annotated[str | None, Field(description="The question's id (from its event).")] = None,
    ) -> Annotated[CallToolResult, SendResult]:
        if agent is None and question_id is None:
            raise BadInput("agent, question_id: give the asking flight or the question's id")
        asker = agent or await messages.find_question_asker(bus, question_id or "")
        item = await messages.answer(bus, s.caller, asker, message, question_id)
        return reply(SendResult(message_id=item.id))

    @tool("tell_agent", TELL_DOC, "Tell a flight something", read_only=False)
    async def tell_agent(
        agent: AgentRef,
        message: Annotated[str, Field(description="What to tell its agent (non-empty).")],
        now: Annotated[bool, Field(description="Interrupt its running turn first.")] = False,
    ) -> Annotated[CallToolResult, TellResult]:
        said = await conversation.tell(bus, agent, message, by=s.caller, interrupt=now)
        hint = f"call wait with from_agents [{said['agent_id']!r}] for its next report"
        return reply(TellResult(**said), hint)

    @tool("read_transcript", TRANSCRIPT_DOC, "Read a flight's conversation", read_only=True, idempotent=True)
    async def read_transcript(
        agent: AgentRef,
        tail: Annotated[int, Field(description="How many of the last entries (1-1000).", ge=1, le=1000)] = 100,
        before: Annotated[int | None, Field(description="Page back: only entries before this seq.", ge=1)] = None,
    ) -> Annotated[CallToolResult, TranscriptResult]:
        a = await agents.resolve_agent(bus, agent, "agent")
        items = await transcript.read(bus, a.id, tail=tail, before=before)
        more = bool(items) and bool(await transcript.read(bus, a.id, tail=1, before=items[0].seq))
        entries = [transcript.entry_view(i) for i in items]
        return reply(
            TranscriptResult(agent_id=a.id, name=a.name, state=a.state, turn=a.turn, entries=entries, more=more)
        )

    @tool("merge_wave", MERGE_WAVE_DOC, "Merge a wave's branches", read_only=False)
    async def merge_wave(
        ctx: Context,
        wave: Annotated[str | None, Field(description="The wave (default: the only one with branches).")] = None,
        into: Annotated[
            str | None, Field(description="The branch to merge into (default: the one checked out).")
        ] = None,
        check: Annotated[
            str | None, Field(description="A shell command run after each merge; the target moves only if it passes.")
        ] = None,
        dry_run: Annotated[
            bool,
            Field(description="Only plan: each flight as the merge would decide it, and the overlap; move nothing."),
        ] = False,
        resolve_with: Annotated[
            str | None, Field(description="Hand each conflict to a new flight of this preset: 'claude' or 'codex'.")
        ] = None,
    ) -> Annotated[CallToolResult, merge.MergeResult]:
        progress = _MergeProgress(ctx)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(progress.beat)
                try:
                    result = await merge.merge_wave(
                        bus,
                        wave,
                        caller=s.caller,
                        into=into,
                        check=check,
                        dry_run=dry_run,
                        resolve_with=resolve_with,
                        presets_file=s.presets,
                        on_change=progress.changed,
                    )
                finally:
                    tg.cancel_scope.cancel()
        except BaseExceptionGroup as group:  # the merge's own error, as the server reports errors
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise
        hint = None
        if result.status == "needs_input":
            hint = "fix the branches that stopped (commit on them), then call merge_wave again: it continues"
        elif result.status == "nothing_merged":
            hint = "nothing merged: every flight was skipped (each entry's why says why); wait for them to report"
        return reply(result, hint)


class _MergeProgress:
    """`notifications/progress` while a merge runs: at each flight's change, and every
    PROGRESS_EVERY seconds (a check may run for minutes), when the caller gave a token."""

    def __init__(self, ctx: Context) -> None:
        self.ctx, self.started, self.last, self.said = ctx, time.monotonic(), -1.0, "merging"

    async def send(self) -> None:
        if not wants_progress(self.ctx):
            return
        value = max(time.monotonic() - self.started, self.last + 0.001)
        self.last = value
        await self.ctx.report_progress(round(value, 3), None, self.said)

    async def changed(self, result: merge.MergeResult) -> None:
        self.said = result.summary()
        await self.send()

    async def beat(self) -> None:
        while True:
            await anyio.sleep(PROGRESS_EVERY)
            await self.send()
