"""The merge queue: a wave's branches, one by one, onto a target branch (docs/merging.md).

Each flight's branch is merged with `git merge --no-ff` onto the target's tip in a scratch
worktree (never the user's), `check` runs there, and only when it passed does the target
move, by compare-and-swap (`git update-ref NEW OLD`): the target is never left broken or
half-merged. A merge commit (not a rebase) keeps each flight's own commits as they were
reviewed and makes each flight one unit to revert (`git revert -m 1`).

The order is the task queue's dependency order where the flights are tasks, else the order
in which they first reported. A conflict or a failing check stops that flight, not the
wave: the flight needs input (its question names the files, or the check's last lines),
the flights that do not depend on it go on. Progress is kept on the bus (one document per
wave), and git itself says what is merged (`merge-base --is-ancestor`), so a run killed at
any point leaves the target at its last good merge, and the next run continues without
merging anything twice.

The parts: outcome.py (the results, the error, the progress document), plan.py (the order),
git_steps.py (each step in git), resolve.py (what a stopped flight is
asked, and the flight that resolves a conflict), run.py (the run, and `merge_wave`).
"""

from .outcome import FlightMerge, MergeError, MergeResult, Overlap, stored
from .plan import plan
from .run import merge_wave

__all__ = [
    "FlightMerge",
    "MergeError",
    "MergeResult",
    "Overlap",
    "merge_wave",
    "plan",
    "stored",
]
