"""The run of a merge: each flight in the planned order merged in the scratch worktree, checked,
and the target moved (or, dry, what would happen), its progress kept on the bus as it goes;
`merge_wave`, the entry every face calls, checks its arguments and holds the merge lock."""

from __future__ import annotations

import asyncio
import inspect
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from .. import git, messages, presets, worktrees
from ..bus import Bus, wave_docs
from ..checks import MERGE_TIMEOUT, run_check
from ..errors import BadInput, WavewaitError
from ..ids import check_word
from ..limits import check_shell, shown
from ..model import now
from .git_steps import (
    Scratch,
    commit_tree,
    is_ancestor,
    merge_lock,
    move_target,
    refuse_dirty,
    repo_of,
    sha,
    target_branch,
    touched_files,
    would_merge,
)
from .outcome import DOC_KIND, FlightStatus, MergeError, MergeResult, MergeStatus, Overlap
from .plan import Flight, overlap, pick_wave, plan
from .resolve import ask_fix, resolve_conflict

VIEW_OUTPUT_CHARS = 1000  # of a check's output, in the result kept on the bus for views

OnChange = Callable[[MergeResult], Awaitable[None] | None]


@dataclass
class Run:
    bus: Bus
    wave: str
    caller: str
    target: str
    repo: worktrees.Repo
    check: str | None
    flights: list[Flight]
    overlap: list[Overlap]
    on_change: OnChange | None = None
    resolve_with: str | None = None
    presets_file: str | None = None

    def result(self, *, dry_run: bool = False) -> MergeResult:
        outs = [f.out or f.result("pending", why="not merged yet") for f in self.flights]
        stopped = any(o.status in ("conflict", "check_failed", "pending") for o in outs)
        # no branch in the target and none stopped: every flight was skipped, never `merged`
        none = not any(o.status == "merged" for o in outs)
        status: MergeStatus = (
            "planned" if dry_run else "needs_input" if stopped else "nothing_merged" if none else "merged"
        )
        return MergeResult(
            status=status,
            wave=self.wave,
            target=self.target,
            check=self.check,
            dry_run=dry_run,
            overlap=self.overlap,
            flights=outs,
        )

    async def changed(self, *, done: bool = False, error: str | None = None) -> None:
        """The result so far to the caller's `on_change`, and on the bus for every view
        (`done` once the run ended; `error` when it could not go on)."""
        result = self.result()
        view = result.to_json() | {"done": done, "pid": os.getpid(), "at": now()}
        if error is not None:
            view["error"] = error
        for f in view["flights"]:
            if "output" in f:
                f["output"] = f["output"][-VIEW_OUTPUT_CHARS:]

        def change(doc: dict[str, Any] | None) -> dict[str, Any]:
            return (doc or {"v": 1, "targets": {}}) | {"result": view}

        await self.bus.update_wave_doc(self.wave, DOC_KIND, change)
        if self.on_change is not None:
            got = self.on_change(result)
            if inspect.isawaitable(got):
                await got

    async def save(self, f: Flight, **entry: Any) -> None:
        target, aid = self.target, f.agent.id

        def change(doc: dict[str, Any] | None) -> dict[str, Any]:
            doc = dict(doc or {"v": 1, "targets": {}})
            targets = dict(doc.get("targets") or {})
            flights = dict((targets.get(target) or {}).get("flights") or {})
            asked = (flights.get(aid) or {}).get("asked")  # the question asked last, until a new one
            flights[aid] = {"asked": asked, **entry, "name": f.agent.name, "branch": f.branch, "at": now()}
            targets[target] = {"flights": flights, "updated_at": now()}
            return doc | {"targets": targets, "last_target": target}

        await self.bus.update_wave_doc(self.wave, DOC_KIND, change)

    async def saved(self, f: Flight) -> dict[str, Any]:
        doc = await self.bus.get_wave_doc(self.wave, DOC_KIND) or {}
        entry = (((doc.get("targets") or {}).get(self.target) or {}).get("flights") or {}).get(f.agent.id)
        return entry if isinstance(entry, dict) else {}

    async def stop(self, f: Flight, status: FlightStatus, tip: str, onto: str, **fields: Any) -> None:
        """The flight stops here: recorded, and (once per stop) its question asked."""
        asked = (await self.saved(f)).get("asked") or {}
        out = f.result(status, **fields)
        current = await self.bus.get_agent(f.agent.id) or f.agent
        same = asked.get("status") == status and asked.get("tip") == tip  # the same stop: not asked again
        if not (same and asked.get("question_id") and current.question_id == asked["question_id"]):
            question = await ask_fix(
                self.bus, current, out, wave=self.wave, target=self.target, check=self.check, caller=self.caller
            )
            asked = {"status": status, "tip": tip, "question_id": question.id}
        await self.save(f, status=status, tip=tip, onto=onto, check=self.check, asked=asked, **fields)

    async def merged(self, f: Flight, tip: str, commit: str | None, why: str | None = None) -> None:
        f.result("merged", commit=commit, why=why)
        await self.save(f, status="merged", tip=tip, commit=commit)
        current = await self.bus.get_agent(f.agent.id)
        if current is not None:
            await messages.withdraw(self.bus, current, "merge")

    async def go(self) -> MergeResult:
        at = await asyncio.to_thread(refuse_dirty, self.repo, self.target)
        await self.changed()
        scratch = Scratch(self.repo)
        try:
            for f in self.flights:
                if f.out is not None and f.out.status == "skipped":
                    continue
                held = [d for d in f.depends if self._not_merged(d)]
                if held:
                    names = ", ".join(self._name(d) for d in held)
                    f.result("pending", why=f"it depends on {names}, not merged yet")
                    await self.changed()
                    continue
                await self.one(f, scratch, at)
                await self.changed()
        finally:
            await asyncio.to_thread(scratch.close)
        await self.changed(done=True)
        return self.result()

    async def dry(self, touched: dict[str, list[str]]) -> MergeResult:
        """What `go` would do, flight by flight, with nothing moved and nothing asked.

        Each flight gets the verdict the run would give it, decided the same way: skipped,
        merged (already in the target), conflict (`git merge-tree`, the same merge), the
        stop a run would repeat, or `pending` where it would be merged (its check not run).
        The target is followed as it would move: each clean merge is made as a commit no
        ref points to, onto which the next flight is planned."""
        onto = await asyncio.to_thread(sha, self.repo, f"refs/heads/{self.target}")
        if onto is None:
            raise MergeError(f"the target {self.target} is gone; create it again and run merge again")
        head = onto  # the target as it would be by then
        would: set[str] = set()  # the flights that would be in the target
        for f in self.flights:
            if f.out is not None and f.out.status == "skipped":
                continue
            held = [d for d in f.depends if d not in would and any(g.agent.id == d for g in self.flights)]
            if held:
                names = ", ".join(self._name(d) for d in held)
                f.result("pending", why=f"it depends on {names}, which would not be merged")
                continue
            tip = await asyncio.to_thread(sha, self.repo, f"refs/heads/{f.branch}")
            if tip is None:
                f.result("skipped", why=f"its branch {f.branch} is gone")
                continue
            if await asyncio.to_thread(is_ancestor, self.repo, tip, head):
                within = head == onto or await asyncio.to_thread(is_ancestor, self.repo, tip, onto)
                f.result(
                    "merged",
                    why="its branch is already in the target: nothing would be merged"
                    if within
                    else "its branch would be in the target by then (a branch merged before it holds it)",
                )
                would.add(f.agent.id)
                continue
            before = await self.saved(f) if head == onto else {}
            if (
                before.get("status") == "check_failed"
                and before.get("tip") == tip
                and before.get("onto") == onto
                and before.get("check") == self.check
            ):
                f.result(
                    "check_failed",
                    output=before.get("output"),
                    why=f"{before.get('why') or 'the check failed'} on this same branch and target: "
                    "it would stop the same way (no new commit since)",
                )
                continue
            tree, conflict = await asyncio.to_thread(would_merge, self.repo, head, tip)
            if conflict:
                more = f"; a {self.resolve_with} flight would be asked to resolve it" if self.resolve_with else ""
                f.result("conflict", files=conflict, why=f"it would conflict with the target in these files{more}")
                continue
            head = await asyncio.to_thread(commit_tree, self.repo, tree, head, tip)
            would.add(f.agent.id)
            f.result(
                "pending",
                files=touched.get(f.agent.id),
                why="it would be merged" + (", if the check passes" if self.check else ""),
            )
        return self.result(dry_run=True)

    def _not_merged(self, agent_id: str) -> bool:
        dep = next((g for g in self.flights if g.agent.id == agent_id), None)
        return dep is not None and (dep.out is None or dep.out.status != "merged")

    def _name(self, agent_id: str) -> str:
        return next((g.agent.name for g in self.flights if g.agent.id == agent_id), agent_id[:8])

    async def one(self, f: Flight, scratch: Scratch, checked_out: str | None, *, resolving: bool = False) -> None:
        assert f.branch is not None
        tip = await asyncio.to_thread(sha, self.repo, f"refs/heads/{f.branch}")
        if tip is None:
            f.result("skipped", why=f"its branch {f.branch} is gone")
            return
        onto = await asyncio.to_thread(sha, self.repo, f"refs/heads/{self.target}")
        if onto is None:
            raise MergeError(f"the target {self.target} is gone; create it again and run merge again")
        before = await self.saved(f)
        if await asyncio.to_thread(is_ancestor, self.repo, tip, onto):
            ours = before.get("status") in ("merged", "checking") and before.get("tip") == tip
            kept = str(before.get("commit"))
            commit = kept if ours and await asyncio.to_thread(is_ancestor, self.repo, kept, onto) else None
            await self.merged(f, tip, commit, "its branch is already in the target")
            return
        if (
            not resolving
            and before.get("status") in ("conflict", "check_failed")
            and before.get("tip") == tip
            and before.get("onto") == onto
            and (before.get("status") == "conflict" or before.get("check") == self.check)
            and not (self.resolve_with and before.get("status") == "conflict")
        ):  # nothing changed since it stopped: the same answer, without running it again
            fields = {k: before[k] for k in ("files", "output", "why") if before.get(k) is not None}
            await self.stop(f, before["status"], tip, onto, **fields)
            return
        if not scratch.path:
            await asyncio.to_thread(scratch.open)
        message = f"Merge {f.branch} ({f.agent.name}) into {self.target}\n\nwavewait merge of wave {self.wave}"
        conflict = await asyncio.to_thread(scratch.merge, onto, tip, message)
        if conflict is not None:
            if (
                self.resolve_with
                and not resolving
                and await resolve_conflict(
                    self.bus,
                    f,
                    conflict,
                    wave=self.wave,
                    target=self.target,
                    caller=self.caller,
                    preset=self.resolve_with,
                    presets_file=self.presets_file,
                    started=self.changed,
                )
            ):
                await self.one(f, scratch, checked_out, resolving=True)
                return
            await self.stop(f, "conflict", tip, onto, files=conflict)
            return
        new = await asyncio.to_thread(scratch.head)
        await self.save(f, status="checking", tip=tip, onto=onto, commit=new)
        f.result("pending", why="its check is running" if self.check else "moving the target")
        await self.changed()
        if self.check:
            verdict = await run_check(self.check, scratch.path, MERGE_TIMEOUT)
            if not verdict.passed:
                await self.stop(f, "check_failed", tip, onto, output=verdict.output, why=verdict.why)
                return
        await asyncio.to_thread(move_target, self.repo, self.target, new, onto, checked_out, f.agent.name)
        await self.merged(f, tip, new)


async def merge_wave(
    bus: Bus,
    wave: str | None = None,
    *,
    caller: str,
    into: str | None = None,
    check: str | None = None,
    dry_run: bool = False,
    resolve_with: str | None = None,
    presets_file: str | None = None,
    on_change: OnChange | None = None,
) -> MergeResult:
    """Merge the wave's branches onto `into` in order, `check` after each; see the package."""
    if check is not None:
        check = check_shell(check)
    if resolve_with is not None and resolve_with not in ("claude", "codex") and presets_file is None:
        raise BadInput(f"resolve_with: 'claude' or 'codex' (or a preset of --presets), got {shown(resolve_with)}")
    if resolve_with is not None:
        presets.get(resolve_with, presets_file, "resolve_with")  # an unknown one is refused before anything moves
    if into is not None:
        check_word(into, "into")  # a branch name, measured before git is asked about it
    name = await pick_wave(bus, wave)
    wave_docs.doc_key(name, DOC_KIND)  # a wave its progress cannot be kept for is refused before anything moves
    planned = await plan(bus, name)
    repo = await asyncio.to_thread(repo_of, planned)
    with merge_lock(repo):
        target = await asyncio.to_thread(target_branch, repo, into)
        touched: dict[str, list[str]] = {}
        for f in planned:
            if f.out is None and f.branch and (tip := await asyncio.to_thread(sha, repo, f"refs/heads/{f.branch}")):
                touched[f.agent.id] = await asyncio.to_thread(touched_files, repo, f"refs/heads/{target}", tip)
        run = Run(
            bus=bus,
            wave=name,
            caller=caller,
            target=target,
            repo=repo,
            check=check,
            flights=planned,
            overlap=overlap(touched, [f for f in planned if f.out is None]),
            on_change=on_change,
            resolve_with=resolve_with,
            presets_file=presets_file,
        )
        if dry_run:
            return await run.dry(touched)
        try:
            return await run.go()
        except git.GitError as e:  # what merged stays merged: a run again continues
            error: WavewaitError = MergeError(f"{e}; what merged so far stays merged, run merge again to continue")
            await run.changed(done=True, error=str(error))
            raise error from e
        except MergeError as e:
            await run.changed(done=True, error=str(e))
            raise
