"""What a merge says and keeps: each flight's outcome, the run's result (its exit code and
summary), the error that stops a run, and the wave's progress document on the bus."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from ..bus import Bus
from ..errors import WavewaitError
from ..exits import Exit
from ..ids import check_name
from ..results import Result

FlightStatus = Literal["merged", "conflict", "check_failed", "skipped", "pending"]
MergeStatus = Literal["merged", "needs_input", "nothing_merged", "planned"]
METHOD = "merge --no-ff"
#: why a merge commit rather than a rebase, said in every result
METHOD_WHY = (
    "a merge commit per flight keeps the flight's own commits as reviewed (nothing is rewritten) "
    "and is one unit to revert (git revert -m 1)"
)
DOC_KIND = "merge"


class MergeError(WavewaitError):
    """The merge cannot go on (the target moved under it, git failed); progress is kept."""


class FlightMerge(BaseModel):
    agent_id: str
    name: str
    branch: str | None = None
    status: FlightStatus
    files: list[str] | None = Field(default=None, description="conflicting files, or the files it touched")
    output: str | None = Field(default=None, description="the check's last lines when it failed")
    why: str | None = None
    commit: str | None = Field(default=None, description="the merge commit on the target")


class Overlap(BaseModel):
    path: str
    flights: list[str]  # names, in merge order


class MergeResult(Result):
    """`wavewait merge` / `merge_wave`: each flight's outcome, in merge order."""

    drop_none = True
    status: MergeStatus
    wave: str
    target: str
    method: str = METHOD
    method_why: str = METHOD_WHY
    check: str | None = None
    dry_run: bool = False
    overlap: list[Overlap] = Field(default_factory=list)
    flights: list[FlightMerge] = Field(default_factory=list)

    @property
    def exit_code(self) -> Exit:
        if self.status == "needs_input":
            return Exit.NEEDS_INPUT
        return Exit.NOTHING_MERGED if self.status == "nothing_merged" else Exit.OK

    def summary(self) -> str:
        n = {
            s: sum(1 for f in self.flights if f.status == s) for s in ("merged", "conflict", "check_failed", "pending")
        }
        if self.dry_run:  # a plan: what the run would say of each flight
            return (
                f"merge {self.wave} into {self.target}: planned · {n['pending']} would be merged or wait"
                f" · {n['merged']} already merged · {n['conflict']} would conflict"
                + (f" · {n['check_failed']} would fail the check again" if n["check_failed"] else "")
            )
        if self.status == "nothing_merged":
            return (
                f"merge {self.wave} into {self.target}: nothing merged · "
                f"{len(self.flights)} skipped (each entry's why says why)"
            )
        return (
            f"merge {self.wave} into {self.target}: {self.status.replace('_', ' ')} · {n['merged']} merged"
            f" · {n['conflict']} conflict · {n['check_failed']} check failed"
        )


async def stored(bus: Bus, wave: str) -> dict[str, Any] | None:
    """The wave's merge progress as the last run left it: per target, each flight's outcome,
    and `result`, the last run's whole result (what a view shows)."""
    return await bus.get_wave_doc(check_name(wave, "wave"), DOC_KIND)
