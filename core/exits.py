"""The exit codes of every `wavewait` command, in one place (docs/words.md, "Results").

A face exits with one of these; a result says which (`Result.exit_code`), so the CLI, the
queue's commands and the merge agree on what each number means.
"""

from __future__ import annotations

from enum import IntEnum


class Exit(IntEnum):
    OK = 0  # satisfied: the wait got what it waited for, the command did what it was asked
    NOT_ALL_DONE = 1  # `run-queue`: the queue ended with a task failed or skipped
    BAD_INPUT = 2  # the command or tool call was wrong (a spawn refused by a spent budget too)
    TIMEOUT = 3  # time ran out; the partial state is in the result
    INTERRUPTED = 4  # Escape, Ctrl+C or an interrupt ended it; nothing taken is lost
    NOT_DELIVERED = 5  # the answer could not be written or the wait lost its claims: run it again
    NEEDS_INPUT = 6  # a flight of the wait asked (answer, wait again); `merge`: a flight's branch stopped
    MERGE_ERROR = 7  # `merge` could not go on (the target moved, git failed); what merged stays merged
    UNMET = 8  # a join's need (any, K) can no longer be met
    NOTHING_MERGED = 9  # `merge`: no flight's branch is in the target, none stopped: each was skipped
    INTERNAL_ERROR = (
        70  # wavewait itself failed (a bug, or the warm process running the command vanished): stderr says what
    )


#: a process ended by signal N exits with 128 + N, as a shell reports it (not an `Exit`: one per signal)
SIGNALLED = 128


def signalled(sig: int) -> int:
    """The exit code of a command ended by signal `sig`: 128 + its number, as a shell says."""
    return SIGNALLED + sig
