"""The command line's names for the core's fields, in one place.

The core names a caller's field as the MCP tools do (`max_messages`, `budget_tokens`,
`taskId`: core/errors.py, `BadInput`); a person at the CLI, or at the TUI's command line,
which takes the same flags, typed `--max`, `--budget-tokens`, a positional TASK_ID. Both
faces say the core's refusals with these words (`BadInput.worded`).
"""

from __future__ import annotations

from collections.abc import Mapping

from .core.errors import WavewaitError

#: a core field → what the command line calls it (a field not listed keeps its name)
WORDS: Mapping[str, str] = {
    # wait: ids, then a join's flags (docs/joins.md)
    "from_agents": "ids",
    "max_messages": "--max",
    "wave": "--wave",
    "files": "--files",
    "events": "--event",
    "need": "--need",
    "check": "--check",
    "check_timeout": "--check-timeout",
    "stop_rest": "--stop-rest",
    # spawn: a wave's budget and limit, a flight's cap (docs/budgets.md, docs/admission.md)
    "budget_tokens": "--budget-tokens",
    "budget_usd": "--budget-usd",
    "flight_budget_tokens": "--flight-budget-tokens",
    "flight_budget_usd": "--flight-budget-usd",
    "max_parallel": "--max-parallel",
    # an agent named by id (kill, close, …), a task (complete)
    "agentId": "agent",
    "taskId": "TASK_ID",
}


def said(error: WavewaitError) -> str:
    """`error`'s message as the command line says it."""
    return error.worded(WORDS)
