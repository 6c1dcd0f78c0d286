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
"""

from __future__ import annotations

import asyncio
import inspect
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field

from . import admission, git, messages, presets, spawning, wait, worktrees
from .bus import Bus, wave_docs
from .errors import BadInput, WavewaitError
from .exits import Exit
from .ids import check_name, check_word, new_id
from .limits import check_text, shown
from .model import Agent, Task, now
from .results import Result
from .spawning import SpawnRequest

FlightStatus = Literal["merged", "conflict", "check_failed", "skipped", "pending"]
MergeStatus = Literal["merged", "needs_input", "planned"]
METHOD = "merge --no-ff"
#: why a merge commit rather than a rebase, said in every result
METHOD_WHY = (
    "a merge commit per flight keeps the flight's own commits as reviewed (nothing is rewritten) "
    "and is one unit to revert (git revert -m 1)"
)
DOC_KIND = "merge"
CHECK_TIMEOUT = 3600.0  # seconds one check may run
CHECK_TAIL_LINES = 40  # lines of a failing check's output kept
CHECK_TAIL_BYTES = 64 << 10
CHECK_OUTPUT_CHARS = 4000  # characters of those lines kept (a wave's progress document is bounded)
FILES_KEPT = 200  # conflicting files kept per flight
OVERLAP_KEPT = 500  # overlapping files listed
VIEW_OUTPUT_CHARS = 1000  # of a check's output, in the result kept on the bus for views
QUESTION_FILES = 50  # conflicting files named in a question
MAX_CHECK_LEN = 4000
LOCK_WAIT = 5.0  # seconds a merge waits for another merge of the same repository
RESOLVE_TIMEOUT = 3600.0  # seconds a resolving flight may take


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
        return Exit.NEEDS_INPUT if self.status == "needs_input" else Exit.OK

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
        return (
            f"merge {self.wave} into {self.target}: {self.status.replace('_', ' ')} · {n['merged']} merged"
            f" · {n['conflict']} conflict · {n['check_failed']} check failed"
        )


# --------------------------------------------------------------------------- progress on the bus
async def stored(bus: Bus, wave: str) -> dict[str, Any] | None:
    """The wave's merge progress as the last run left it: per target, each flight's outcome,
    and `result`, the last run's whole result (what a view shows)."""
    return await bus.get_wave_doc(check_name(wave, "wave"), DOC_KIND)


# --------------------------------------------------------------------------- planning
@dataclass
class Flight:
    agent: Agent
    task: Task | None = None
    reported: float | None = None
    depends: list[str] = field(default_factory=list)  # agent ids of the flights it depends on
    out: FlightMerge | None = None

    @property
    def branch(self) -> str | None:
        return self.agent.worktree.branch if self.agent.worktree else None

    def result(self, status: FlightStatus, **fields: Any) -> FlightMerge:
        self.out = FlightMerge(
            agent_id=self.agent.id, name=self.agent.name, branch=self.branch, status=status, **fields
        )
        return self.out


async def _pick_wave(bus: Bus, wave: str | None) -> str:
    if wave is not None:
        return check_name(wave, "wave")
    waves = sorted({a.wave for a in await bus.list_agents() if a.wave and a.worktree is not None})
    if len(waves) == 1:
        return waves[0]
    if not waves:
        raise BadInput("wave: no wave has flights with branches to merge; spawn flights with --worktree first")
    raise BadInput(f"wave: name the wave to merge (one of: {', '.join(waves)})")


async def _tasks_of(bus: Bus, wave: str) -> dict[str, Task]:
    """The queue tasks of a queue's wave (`queue-NAME`, core/runner.py), by their agent's id."""
    if not wave.startswith("queue-"):
        return {}
    try:
        store = bus.tasks(wave.removeprefix("queue-"))
    except BadInput:
        return {}
    return {t.agent_id: t for t in await store.tasks() if t.agent_id}


def _order(flights: list[Flight]) -> list[Flight]:
    """Dependencies first (a task's flight after those it depends on), then report time."""
    by_id = {f.agent.id: f for f in flights}
    key = {f.agent.id: (f.task.seq if f.task else 0, f.reported or 0.0, f.agent.created_at) for f in flights}
    done: list[Flight] = []
    seen: set[str] = set()
    ready = sorted(flights, key=lambda f: key[f.agent.id])

    def visit(f: Flight, path: tuple[str, ...] = ()) -> None:
        if f.agent.id in seen or f.agent.id in path:
            return
        for dep in sorted((by_id[d] for d in f.depends if d in by_id), key=lambda g: key[g.agent.id]):
            visit(dep, (*path, f.agent.id))
        seen.add(f.agent.id)
        done.append(f)

    for f in ready:
        visit(f)
    return done


async def plan(bus: Bus, wave: str) -> list[Flight]:
    """The wave's flights with branches, in merge order; those that cannot merge marked skipped.

    A flight's branch is its own by its id (core/worktrees.py): one whose branch was deleted
    and made again for a later flight of the same name is skipped, never merged as that one."""
    flights: list[Flight] = []
    tasks = await _tasks_of(bus, wave)
    task_agent = {t.id: aid for aid, t in tasks.items()}
    listed = await admission.list_swept(bus, wave)
    for a in listed:
        if a.worktree is None:
            continue
        task = tasks.get(a.id)
        reported = (task.updated_at if task.status == "done" else None) if task is not None else a.reported_at
        depends = [task_agent[d] for d in task.depends_on if d in task_agent] if task else []
        flights.append(Flight(agent=a, task=task, reported=reported, depends=depends))
    flights = _order(flights)
    taken = await asyncio.to_thread(worktrees.taken_branches, listed)
    names = {a.id: a.name for a in listed}
    for f in flights:
        if f.agent.status == "dead":
            f.result("skipped", why=f"dead: {f.agent.reason or 'its process ended without reporting'}")
        elif f.reported is None:
            f.result("skipped", why="it did not report (still running, or ended without a report)")
        elif (holder := taken.get(f.agent.id)) is not None:
            whose = f"{names[holder]} ({holder[:8]})" if holder in names else holder[:8]
            f.result("skipped", why=f"its branch {f.branch} is gone: that name is now the branch of {whose}")
    return flights


def _repo_of(flights: Sequence[Flight]) -> worktrees.Repo:
    repos = {f.agent.worktree.repo for f in flights if f.agent.worktree}
    if len(repos) > 1:
        raise BadInput(f"wave: its flights are in several repositories ({', '.join(sorted(repos))}); merge each alone")
    if not repos:
        raise BadInput("wave: none of its flights has a branch to merge")
    (path,) = repos
    repo = worktrees.find_repo(path) if os.path.isdir(path) else None
    if repo is None:
        raise BadInput(f"wave: its repository {path} is gone or not a git repository")
    return repo


def _target(repo: worktrees.Repo, into: str | None) -> str:
    """The branch to merge into: `into`, else the branch checked out in the main worktree."""
    if into is None:
        r = git.run(["symbolic-ref", "--quiet", "--short", "HEAD"], repo.main)
        if r.code != 0:
            raise BadInput(f"into: {repo.main} has no branch checked out (detached HEAD); name one with --into BRANCH")
        into = r.out.decode().strip()
    name = into.removeprefix("refs/heads/")
    if not name or name.startswith("-") or git.run(["check-ref-format", "--branch", name], repo.main).code != 0:
        raise BadInput(f"into: {into!r} is not a branch name")
    if git.run(["show-ref", "--verify", "--quiet", f"refs/heads/{name}"], repo.main).code != 0:
        raise BadInput(f"into: there is no branch {name!r} in {repo.main}; create it or name another with --into")
    return name


def _sha(repo: worktrees.Repo, ref: str) -> str | None:
    r = git.run(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], repo.main)
    return r.out.decode().strip() if r.code == 0 else None


def _is_ancestor(repo: worktrees.Repo, commit: str, of: str) -> bool:
    return git.run(["merge-base", "--is-ancestor", commit, of], repo.main).code == 0


def _touched(repo: worktrees.Repo, target: str, tip: str) -> list[str]:
    base = git.run(["merge-base", target, tip], repo.main).out.decode().strip() or target
    raw = git.check(["diff", "--name-only", "-z", "--no-renames", base, tip], repo.main)
    return [p for p in raw.decode("utf-8", "replace").split("\0") if p]


def _would_merge(repo: worktrees.Repo, onto: str, tip: str) -> tuple[str, list[str]]:
    """What merging `tip` onto `onto` would give, in git's objects alone (no worktree, no ref
    moves): the merged tree, and the files that would conflict (none: it merges cleanly).

    `git merge-tree --write-tree` runs the same merge (ort) as the `git merge` of a real run."""
    r = git.run(["merge-tree", "--write-tree", "--name-only", "--no-messages", "-z", onto, tip], repo.main)
    if r.code not in (0, 1):  # 1: conflicts
        raise MergeError(f"git merge-tree of {tip[:12]} onto {onto[:12]} failed: {r.err.strip()[-600:]}")
    tree, *rest = r.out.decode("utf-8", "replace").split("\0")
    files = list(dict.fromkeys(p for p in rest if p))[:FILES_KEPT]
    if r.code == 1 and not files:
        raise MergeError(f"git merge-tree of {tip[:12]} failed without a conflict: {r.err.strip()[-600:]}")
    return tree.strip(), files


def _commit_tree(repo: worktrees.Repo, tree: str, onto: str, tip: str) -> str:
    """A merge commit no ref points to: the target as a dry run plans it after one more merge
    (the next flight's merge base is found from it as the real run's would be)."""
    env = worktrees.identity_env(str(repo.main))
    r = git.run(
        ["-c", "commit.gpgsign=false", "commit-tree", tree, "-p", onto, "-p", tip, "-m", "wavewait merge plan"],
        repo.main,
        env=env,
    )
    if r.code != 0:
        raise MergeError(f"git commit-tree failed: {r.err.strip()[-600:]}")
    return r.out.decode().strip()


def overlap(touched: dict[str, list[str]], order: Sequence[Flight]) -> list[Overlap]:
    """The files two flights or more touched, with those flights' names in merge order."""
    who: dict[str, list[str]] = {}
    for f in order:
        for path in touched.get(f.agent.id, []):
            who.setdefault(path, []).append(f.agent.name)
    return [Overlap(path=p, flights=names) for p, names in sorted(who.items()) if len(names) > 1][:OVERLAP_KEPT]


def _checked_out_at(repo: worktrees.Repo, branch: str) -> str | None:
    """The worktree where `branch` is checked out, if any (git refuses two)."""
    raw = git.check(["worktree", "list", "--porcelain", "-z"], repo.main).decode("utf-8", "replace")
    path = None
    for entry in raw.split("\0"):
        if entry.startswith("worktree "):
            path = entry.removeprefix("worktree ")
        elif entry == f"branch refs/heads/{branch}" and path is not None:
            return path
    return None


def _dirty(path: str) -> list[str]:
    r = git.run(["status", "--porcelain=v1", "-z", "--untracked-files=no"], path)
    if r.code != 0:
        raise MergeError(f"git status in {path} failed: {r.err.strip()[-400:]}")
    return [e[3:] for e in r.out.decode("utf-8", "replace").split("\0") if len(e) > 3]


def _refuse_dirty(repo: worktrees.Repo, target: str) -> str | None:
    at = _checked_out_at(repo, target)
    if at is not None and (dirty := _dirty(at)):
        raise BadInput(
            f"into: {target} is checked out at {at} with uncommitted changes ({', '.join(dirty[:5])}); "
            "commit or discard them there, or merge into another branch with --into"
        )
    return at


# --------------------------------------------------------------------------- one flight
@dataclass
class Scratch:
    """A detached worktree of ours where each branch is merged and checked before the target moves."""

    repo: worktrees.Repo
    path: str = ""

    def open(self) -> None:
        """A fresh scratch worktree; those a killed run left are removed first (the caller
        holds the merge lock, so no other run is using one)."""
        folder = worktrees.root() / self.repo.key / ".merge"
        folder.mkdir(parents=True, exist_ok=True)
        with git.repo_lock(worktrees.lock_file(self.repo)):
            for old in folder.glob("scratch-*"):
                if git.run(["worktree", "remove", "--force", str(old)], self.repo.main).code != 0:
                    shutil.rmtree(old, ignore_errors=True)
            git.run(["worktree", "prune"], self.repo.main)
        self.path = tempfile.mkdtemp(prefix=f"scratch-{os.getpid()}-", dir=folder)
        with git.repo_lock(worktrees.lock_file(self.repo)):
            git.check(["worktree", "add", "--quiet", "--detach", self.path, "HEAD"], self.repo.main, retry_locked=60)

    def close(self) -> None:
        if not self.path:
            return
        with git.repo_lock(worktrees.lock_file(self.repo)):
            r = git.run(["worktree", "remove", "--force", self.path], self.repo.main)
            if r.code != 0:
                shutil.rmtree(self.path, ignore_errors=True)
                git.run(["worktree", "prune"], self.repo.main)

    def merge(self, onto: str, tip: str, message: str) -> list[str] | None:
        """Merge `tip` onto `onto` here: None when it merged, else the conflicting files."""
        git.check(["checkout", "--quiet", "--force", "--detach", onto], self.path)
        git.check(["clean", "-fdq"], self.path)
        env = worktrees.identity_env(self.path)
        r = git.run(
            ["-c", "commit.gpgsign=false", "merge", "--no-ff", "--no-verify", "--quiet", "-m", message, tip],
            self.path,
            env=env,
        )
        if r.code == 0:
            return None
        raw = git.run(["diff", "--name-only", "-z", "--diff-filter=U"], self.path).out
        files = [p for p in raw.decode("utf-8", "replace").split("\0") if p][:FILES_KEPT]
        git.run(["merge", "--abort"], self.path)
        if not files:
            raise MergeError(f"git merge of {tip[:12]} failed without a conflict: {r.err.strip()[-600:]}")
        return files

    def head(self) -> str:
        return git.text(["rev-parse", "HEAD"], self.path)


def run_check(
    command: str, cwd: str, timeout: float = CHECK_TIMEOUT, started: Callable[[int], None] | None = None
) -> tuple[int, str]:
    """Run the check (a shell command line) in `cwd`: its exit code and its last lines.

    Its own process group, so a timeout (or our end: `started` is told its id) ends everything
    it started."""
    p = subprocess.Popen(
        ["/bin/sh", "-c", command],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    if started is not None:
        started(p.pid)
    assert p.stdout is not None
    tail = bytearray()
    timed_out = threading.Event()

    def stop() -> None:
        timed_out.set()
        with suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)

    timer = threading.Timer(timeout, stop)
    timer.start()
    try:
        while chunk := p.stdout.read(65536):
            tail.extend(chunk)
            del tail[:-CHECK_TAIL_BYTES]
        code = p.wait()
    finally:
        timer.cancel()
        p.stdout.close()
    lines = tail.decode("utf-8", "replace").splitlines()[-CHECK_TAIL_LINES:]
    if timed_out.is_set():
        lines.append(f"[wavewait: the check took longer than {timeout:g} s and was stopped]")
        code = code or 124
    return code, "\n".join(lines)[-CHECK_OUTPUT_CHARS:]


async def run_check_async(command: str, cwd: str) -> tuple[int, str]:
    """`run_check` in a worker thread. Cancelled (the request ended, the server is stopping),
    it kills the check's process group, so the thread ends at once: the process waits for its
    worker threads before it exits, and a check may run for an hour."""
    lock = threading.Lock()
    group: list[int] = []
    cancelled = False

    def kill(pgid: int) -> None:
        with suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)

    def started(pgid: int) -> None:
        with lock:
            group.append(pgid)
            if cancelled:  # cancelled while the thread was starting it
                kill(pgid)

    try:
        return await asyncio.to_thread(run_check, command, cwd, started=started)
    except asyncio.CancelledError:
        with lock:
            cancelled = True
            for pgid in group:
                kill(pgid)
        raise


def _move_target(repo: worktrees.Repo, target: str, new: str, old: str, checked_out: str | None, name: str) -> None:
    """Move the target from `old` to `new`, only if it is still at `old` (compare-and-swap).

    Where the target is checked out, its worktree is fast-forwarded there (it must be clean),
    so the user's files follow the branch."""
    if checked_out is not None:
        if dirty := _dirty(checked_out):
            raise BadInput(
                f"into: {target} is checked out at {checked_out} with uncommitted changes ({', '.join(dirty[:5])}); "
                "commit or discard them there and run merge again"
            )
        head = git.text(["rev-parse", "HEAD"], checked_out)
        if head != old:
            raise MergeError(f"{target} moved during the merge (now {head[:12]}); run merge again to continue")
        git.check(["merge", "--ff-only", "--quiet", new], checked_out)
        return
    r = git.run(
        ["update-ref", "-m", f"wavewait merge: {name}", f"refs/heads/{target}", new, old],
        repo.main,
    )
    if r.code != 0:
        raise MergeError(f"{target} moved during the merge ({r.err.strip()[-300:]}); run merge again to continue")


# --------------------------------------------------------------------------- the run
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
        status: MergeStatus = "planned" if dry_run else "needs_input" if stopped else "merged"
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
            asked = {"status": status, "tip": tip, "question_id": (await self._ask(current, out)).id}
        await self.save(f, status=status, tip=tip, onto=onto, check=self.check, asked=asked, **fields)

    async def _ask(self, flight: Agent, out: FlightMerge) -> Any:
        if out.status == "conflict":
            files = out.files or []
            more = f" and {len(files) - QUESTION_FILES} more" if len(files) > QUESTION_FILES else ""
            text = (
                f"merge: {out.branch} conflicts with {self.target} in {', '.join(files[:QUESTION_FILES])}{more}. "
                f"Merge {self.target} into {out.branch} and resolve them (or rebase it), commit, "
                f"then run `wavewait merge {self.wave}` again."
            )
        else:
            text = (
                f"merge: the check `{self.check}` failed with {out.branch} merged onto {self.target}; "
                f"fix it on {out.branch}, commit, then run `wavewait merge {self.wave}` again. "
                f"Its last lines:\n{out.output or ''}"
            )
        return await messages.ask_for(self.bus, flight, text, "merge", to=flight.parent_id or self.caller)

    async def merged(self, f: Flight, tip: str, commit: str | None, why: str | None = None) -> None:
        f.result("merged", commit=commit, why=why)
        await self.save(f, status="merged", tip=tip, commit=commit)
        current = await self.bus.get_agent(f.agent.id)
        if current is not None:
            await messages.withdraw(self.bus, current, "merge")

    async def go(self) -> MergeResult:
        at = await asyncio.to_thread(_refuse_dirty, self.repo, self.target)
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
        onto = await asyncio.to_thread(_sha, self.repo, f"refs/heads/{self.target}")
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
            tip = await asyncio.to_thread(_sha, self.repo, f"refs/heads/{f.branch}")
            if tip is None:
                f.result("skipped", why=f"its branch {f.branch} is gone")
                continue
            if await asyncio.to_thread(_is_ancestor, self.repo, tip, head):
                within = head == onto or await asyncio.to_thread(_is_ancestor, self.repo, tip, onto)
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
            tree, conflict = await asyncio.to_thread(_would_merge, self.repo, head, tip)
            if conflict:
                more = f"; a {self.resolve_with} flight would be asked to resolve it" if self.resolve_with else ""
                f.result("conflict", files=conflict, why=f"it would conflict with the target in these files{more}")
                continue
            head = await asyncio.to_thread(_commit_tree, self.repo, tree, head, tip)
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
        tip = await asyncio.to_thread(_sha, self.repo, f"refs/heads/{f.branch}")
        if tip is None:
            f.result("skipped", why=f"its branch {f.branch} is gone")
            return
        onto = await asyncio.to_thread(_sha, self.repo, f"refs/heads/{self.target}")
        if onto is None:
            raise MergeError(f"the target {self.target} is gone; create it again and run merge again")
        before = await self.saved(f)
        if await asyncio.to_thread(_is_ancestor, self.repo, tip, onto):
            ours = before.get("status") in ("merged", "checking") and before.get("tip") == tip
            kept = str(before.get("commit"))
            commit = kept if ours and await asyncio.to_thread(_is_ancestor, self.repo, kept, onto) else None
            await self.merged(f, tip, commit, None if commit else "its branch is already in the target")
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
            if self.resolve_with and not resolving and await self.resolve(f, conflict):
                await self.one(f, scratch, checked_out, resolving=True)
                return
            await self.stop(f, "conflict", tip, onto, files=conflict)
            return
        new = await asyncio.to_thread(scratch.head)
        await self.save(f, status="checking", tip=tip, onto=onto, commit=new)
        f.result("pending", why="its check is running" if self.check else "moving the target")
        await self.changed()
        if self.check:
            code, output = await run_check_async(self.check, scratch.path)
            if code != 0:
                await self.stop(f, "check_failed", tip, onto, output=output, why=f"the check exited with {code}")
                return
        await asyncio.to_thread(_move_target, self.repo, self.target, new, onto, checked_out, f.agent.name)
        await self.merged(f, tip, new)

    async def resolve(self, f: Flight, files: list[str]) -> bool:
        """Hand the conflict to a new flight (the `resolve_with` preset) in the branch's
        worktree and wait for it to end; True when it ended (the branch is tried again)."""
        wt = f.agent.worktree
        assert wt is not None and self.resolve_with is not None
        if not os.path.isdir(wt.path):
            return False
        prompt = (
            f"The git branch {wt.branch} (checked out here) conflicts with the branch {self.target} "
            f"in: {', '.join(files[:QUESTION_FILES])}. Run `git merge refs/heads/{self.target}`, resolve every "
            "conflict keeping the intent of both sides, and commit the merge. Do not push or switch branches."
        )
        fixer = await spawning.spawn(
            self.bus,
            SpawnRequest(
                name=check_name(f"{f.agent.name}-resolve"[:64], "name"),
                parent=self.caller,
                prompt=prompt,
                preset=self.resolve_with,
                presets_file=self.presets_file,
                wave=f"{self.wave}-merge"[:64],
                worktree=False,
                cwd=wt.path,
            ),
        )
        f.result("pending", why=f"{fixer.name} ({fixer.id[:8]}) is resolving its conflict")
        await self.changed()
        deadline = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now() + RESOLVE_TIMEOUT))
        got = await wait.wait_agent(
            self.bus,
            self.caller,
            id=new_id(),
            agent_id=fixer.id,
            kind="agent-closed",
            description=f"resolving the merge conflict of {f.agent.name}",
            timeout_at=deadline,
        )
        return got.resolution.status == "agent_closed" or fixer.id in (got.resolution.dead or [])


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
    """Merge the wave's branches onto `into` in order, `check` after each; see the module."""
    if check is not None:
        check = check_text(check, "check")
        if len(check) > MAX_CHECK_LEN:
            raise BadInput(f"check: at most {MAX_CHECK_LEN} characters; put a longer check in a script")
    if resolve_with is not None and resolve_with not in ("claude", "codex") and presets_file is None:
        raise BadInput(f"resolve_with: 'claude' or 'codex' (or a preset of --presets), got {shown(resolve_with)}")
    if resolve_with is not None:
        presets.get(resolve_with, presets_file, "resolve_with")  # an unknown one is refused before anything moves
    if into is not None:
        check_word(into, "into")  # a branch name, measured before git is asked about it
    name = await _pick_wave(bus, wave)
    wave_docs.doc_key(name, DOC_KIND)  # a wave its progress cannot be kept for is refused before anything moves
    planned = await plan(bus, name)
    repo = await asyncio.to_thread(_repo_of, planned)
    with _merge_lock(repo):
        target = await asyncio.to_thread(_target, repo, into)
        touched: dict[str, list[str]] = {}
        for f in planned:
            if f.out is None and f.branch and (tip := await asyncio.to_thread(_sha, repo, f"refs/heads/{f.branch}")):
                touched[f.agent.id] = await asyncio.to_thread(_touched, repo, f"refs/heads/{target}", tip)
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


@contextmanager
def _merge_lock(repo: worktrees.Repo) -> Iterator[None]:
    """One merge per repository at a time (across processes)."""
    lock = worktrees.root() / repo.key / ".merge.lock"
    try:
        held = git.repo_lock(lock, deadline=LOCK_WAIT)
        held.__enter__()
    except git.GitError:
        raise MergeError(
            f"another wavewait merge of {repo.main} is running (it holds {lock}); wait for it to end"
        ) from None
    try:
        yield
    finally:
        held.__exit__(None, None, None)


__all__ = [
    "FlightMerge",
    "MergeError",
    "MergeResult",
    "Overlap",
    "merge_wave",
    "plan",
    "run_check",
    "stored",
]
