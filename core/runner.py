"""The queue runner (`wavewait run-queue`): a fresh agent for each task whose dependencies are done.

One loop, the same shape as a wait's: subscribe to the queue's changes and to agent
records *before* reading, act on what is there, then sleep until the bus says something
changed (a liveness sweep and a rare rescan are the only timers). Each round:

1. a `running` task whose agent is gone (exited, killed, vanished, or never recorded
   because a runner died mid-start) goes back to `queued`, or to `failed` once it has had
   `max_attempts` attempts. A task its agent completed is never touched again.
2. a `queued` task with a `failed` or `skipped` dependency becomes `skipped` (transitively).
3. `queued` tasks whose dependencies are all `done` start, up to `max_parallel` running:
   spawned with the rendered prompt and the dependencies' handoffs (as the last argument
   of the agent command, or as the prompt of the preset the task's type names: a coding
   flight, core/flights.py). The task is marked `running`, naming its agent, once the
   agent's record is on the bus and before its process starts: whoever reads a running
   task can read its agent, and the agent can complete its task from its first step.

A round reads the live tasks (`queued`, `running`) and what they depend on; a finished task
never changes, so it is read once (a long queue's round costs what is live, not all it held).

It ends when nothing is `queued` or `running`. All state is on the bus, so a runner that
was killed and started again resumes where it stopped: live agents are left to finish.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import anyio
from pydantic import BaseModel, Field

from . import admission, agents, presets, spawning
from .bus import Changes
from .errors import BadInput, BudgetSpent, WavewaitError
from .model import Agent, FlightBudget, now
from .spawning import SpawnRequest
from .tasks import FINISHED, Task, TaskQueue, task_prompt

DEFAULT_MAX_PARALLEL = 4
RESCAN_EVERY = 5.0  # a backstop for change events the kernel dropped
#: seconds a running task's agent may be recorded but not started (a runner is starting
#: it) before it counts as abandoned: far longer than a spawn takes
STARTING_GRACE = 60.0


class TaskOutcome(BaseModel):
    id: str
    type: str
    status: str
    attempts: int
    note: str | None = None


class RunSummary(BaseModel):
    """What `run-queue` prints: every task as it ended; `ok` only when all are done."""

    queue: str
    ok: bool
    done: int
    failed: int
    skipped: int
    agents_started: int = Field(alias="agentsStarted")
    tasks: list[TaskOutcome]

    model_config = {"populate_by_name": True, "serialize_by_alias": True}


Report = Callable[[str], None]


class TaskTaken(WavewaitError):
    """The task left `queued` while its agent was being made (another runner started it,
    or it was completed): that agent is left dead, never started."""


def queue_wave(queue: str) -> str:
    """The wave a queue's agents are spawned into: its budget and its limit, if set, are
    theirs (docs/budgets.md, docs/admission.md)."""
    return f"queue-{queue}"


class Runner:
    """Runs one queue to the end; see the module's docstring."""

    def __init__(
        self,
        q: TaskQueue,
        agent_command: Sequence[str] | None,
        *,
        max_parallel: int = DEFAULT_MAX_PARALLEL,
        runner_id: str | None = None,
        task_types_file: str | None = None,
        presets_file: str | None = None,
        env: dict[str, str] | None = None,
        report: Report | None = None,
        flight_budget: FlightBudget | None = None,
    ) -> None:
        """`agent_command` runs the tasks whose type names no preset (None when every type
        names one); a type's preset must exist (built in, or in `presets_file`);
        `flight_budget` caps each task's agent (core/budgets.py)."""
        if agent_command is not None and (
            not agent_command or not all(isinstance(c, str) and c for c in agent_command)
        ):
            raise BadInput("--agent-command: give the agent's program and arguments, e.g. 'claude -p'")
        bare = sorted(name for name, t in q.types.items() if t.preset is None)
        if agent_command is None and bare:
            raise BadInput(
                f"--agent-command: task type(s) {', '.join(bare)} name no preset; give the agent's command "
                '(or set WAVEWAIT_AGENT_COMMAND), or add preset = "claude" to each type'
            )
        self.presets_file = os.path.abspath(presets_file) if presets_file else None
        for t in q.types.values():
            if t.preset is not None:
                presets.get(t.preset, self.presets_file)  # an unknown one is refused before any task starts
        if max_parallel < 1:
            raise BadInput(f"--max-parallel: must be at least 1, got {max_parallel}")
        self.q = q
        self.command = list(agent_command or ())
        self.max_parallel = max_parallel
        self.runner_id = agents.caller_id(runner_id)
        self.types_file = os.path.abspath(task_types_file) if task_types_file else None
        self.base_env = dict(os.environ if env is None else env)
        self.report = report or (lambda _: None)
        self.flight_budget = flight_budget  # the wave's budget is kept by whoever set it
        self.started = 0
        self._finished: dict[str, Task] = {}  # finished tasks read once (`_view`)

    def _env(self, task: Task) -> dict[str, str]:
        env = self.base_env | self.q.limits.env() | {"WAVEWAIT_QUEUE": self.q.name, "WAVEWAIT_TASK_ID": task.id}
        if self.types_file:
            env["WAVEWAIT_TASK_TYPES"] = self.types_file
        if task.model:  # the model the enqueuer asked for, for an agent command that can choose
            env["WAVEWAIT_TASK_MODEL"] = task.model
        return env

    async def run(self) -> RunSummary:
        queue_changes = await self.q.store.subscribe()  # before the first read
        agent_changes = await self.q.bus.subscribe(agents=True)
        try:
            first = True
            while True:
                running = await self._round()
                if running is None:
                    return await self.summary()
                if first:  # says it is on the job (and, to a second runner's starter, that it is up)
                    first = False
                    await self._report_watching()
                rescan_at = time.monotonic() + RESCAN_EVERY
                while True:  # sleep until a change; meanwhile only sweep the agents' liveness
                    t = time.monotonic()
                    sweep_at = t + agents.SWEEP_INTERVAL if running else rescan_at
                    if await self._changed(queue_changes, agent_changes, timeout=min(sweep_at, rescan_at) - t):
                        break
                    if time.monotonic() >= rescan_at:
                        break
                    # a death it records is a change to an agent record, which wakes us
                    await admission.sweep(self.q.bus, list((await self.q.bus.get_agents(running)).values()))
        finally:
            queue_changes.close()
            agent_changes.close()

    async def _report_watching(self) -> None:
        tasks = await self.q.store.live()
        count = {s: sum(1 for t in tasks if t.status == s) for s in ("running", "queued")}
        self.report(f"queue {self.q.name}: {count['running']} running, {count['queued']} queued; watching for changes")

    @staticmethod
    async def _changed(*changes: Changes, timeout: float) -> bool:
        """Whether one of `changes` woke before `timeout` seconds ran out."""
        woke = False
        with anyio.move_on_after(max(0.0, timeout)):
            async with anyio.create_task_group() as tg:

                async def one(c: Changes) -> None:
                    nonlocal woke
                    await c.wait()
                    woke = True
                    tg.cancel_scope.cancel()

                for c in changes:
                    tg.start_soon(one, c)
        return woke

    async def _view(self) -> dict[str, Task]:
        """The queue as a round needs it: the live tasks (read each round), and what they
        depend on, transitively (a prompt carries its upstream's handoffs). A finished task
        never changes, so one read once is kept: a round of a long queue reads what is live,
        not every task it ever held."""
        live = {t.id: t for t in await self.q.store.live()}
        tasks = self._finished | live
        missing = {d for t in live.values() for d in t.depends_on if d not in tasks}
        while missing:  # one read per level of dependencies not seen yet
            found = await self.q.store.some(sorted(missing))
            tasks |= found
            self._finished |= {t.id: t for t in found.values() if t.status in FINISHED}
            missing = {d for t in found.values() for d in t.depends_on if d not in tasks}
        return tasks

    async def _round(self) -> list[str] | None:
        """One pass over the queue; None when it is finished, else the running tasks' agents."""
        tasks = await self._view()
        await self._reap([t for t in tasks.values() if t.status == "running"], tasks)
        await self._skip(tasks)
        running = sum(1 for t in tasks.values() if t.status == "running")
        runnable = [
            t
            for t in tasks.values()
            if t.status == "queued" and all(tasks[d].status == "done" for d in t.depends_on if d in tasks)
        ]
        starts = runnable[: max(0, self.max_parallel - running)]
        if starts:
            results = await asyncio.gather(*(self._start(t, tasks) for t in starts))
            for t in results:
                if t is not None:
                    tasks[t.id] = t
        if not any(t.status in ("queued", "running") for t in tasks.values()):
            return None
        return [t.agent_id for t in tasks.values() if t.status == "running" and t.agent_id]

    async def _reap(self, running: list[Task], tasks: dict[str, Task]) -> None:
        """Running tasks whose agent is gone: queued again, or failed after max_attempts.

        A running task's agent is recorded before the task names it (`_start`). One that is
        recorded but not started yet is being started by a runner (another `run-queue` on the
        same queue, say): left alone unless that has taken STARTING_GRACE, which only a runner
        that died between the two steps can make it take; then it is dead, never started."""
        ids = [t.agent_id for t in running if t.agent_id]
        known: dict[str, Agent] = await self.q.bus.get_agents(ids) if ids else {}  # one read
        for dead in await admission.sweep(self.q.bus, [a for a in known.values() if not a.finished]):
            known[dead.id] = dead
        for a in list(known.values()):
            starting = a.status == "running" and a.supervisor_pid is None
            if starting and now() - (a.started_at or a.created_at) >= STARTING_GRACE:
                why_dead = "never started: the runner starting it ended first"
                known[a.id] = await agents.mark_dead(self.q.bus, a.id, why_dead) or a
        for t in running:
            agent = known.get(t.agent_id) if t.agent_id else None
            if agent is not None and not agent.finished:
                continue
            why = f"its agent {agent.reason or agent.status}" if agent else "its agent is gone"
            if t.attempts >= self.q.limits.max_attempts:
                changed = await self.q.store.update(
                    t.id,
                    ("running",),
                    status="failed",
                    note=f"{why} without completing it, after {t.attempts} attempt(s) (--max-attempts)",
                )
            else:
                changed = await self.q.store.update(t.id, ("running",), status="queued", note=f"{why}; retrying")
            if changed is None:  # completed meanwhile: its completion stands
                changed = await self.q.store.get(t.id)
            if changed is not None:
                tasks[t.id] = changed
                self.report(f"{t.type} {t.id[:8]}: {why}; now {changed.status}")

    async def _skip(self, tasks: dict[str, Task]) -> None:
        """Queued tasks downstream of a failed or skipped one will never run: skipped."""
        changed = True
        while changed:
            changed = False
            for t in list(tasks.values()):
                if t.status != "queued":
                    continue
                bad = [d for d in t.depends_on if d not in tasks or tasks[d].status in ("failed", "skipped")]
                if not bad:
                    continue
                dep = tasks.get(bad[0])
                note = f"dependency {bad[0]} {dep.status if dep else 'is missing'}"
                skipped = await self.q.store.update(t.id, ("queued",), status="skipped", note=note)
                if skipped is not None:
                    tasks[t.id] = skipped
                    changed = True
                    self.report(f"{t.type} {t.id[:8]}: skipped ({note})")

    async def _start(self, task: Task, tasks: dict[str, Task]) -> Task | None:
        """Start `task`'s agent; the task as it is then, or None when another took it."""
        marked: Task | None = None

        async def claim(agent: Agent) -> None:
            # its record is on the bus and it has not started (agents.recorded): the task
            # names it now, so a flight completes only the task whose agent it is
            # (tasks.complete_task) from its first instruction on
            nonlocal marked
            marked = await self.q.store.update(
                task.id, ("queued",), status="running", attempts=task.attempts + 1, agent_id=agent.id, note=None
            )
            if marked is None:
                raise TaskTaken(
                    f"task {task.id} left queued meanwhile (another runner started it, or it was completed)"
                )

        try:
            prompt = await task_prompt(self.q, task, tasks)  # the queue as this round read it
            agent = await self._spawn(task, prompt, claim)
        except TaskTaken:
            return None
        except BadInput as e:
            # a wave that spent its budget starts nothing more: another attempt cannot help
            final = isinstance(e, BudgetSpent) or task.attempts + 1 >= self.q.limits.max_attempts
            self.report(f"{task.type} {task.id[:8]}: cannot start its agent: {e}")
            outcome = {"status": "failed" if final else "queued", "note": f"cannot start its agent: {e}"}
            if marked is None:  # refused before its agent was recorded: an attempt all the same
                return await self.q.store.update(task.id, ("queued",), attempts=task.attempts + 1, **outcome)
            return await self.q.store.update(task.id, ("running",), **outcome)
        assert marked is not None  # claim ran before the agent started
        self.started += 1
        self.report(f"{task.type} {task.id[:8]}: started agent {agent.id[:8]} (attempt {marked.attempts})")
        return marked

    async def _spawn(self, task: Task, prompt: str, on_record: agents.OnRecord) -> Agent:
        """The task's agent: its type's preset on the prompt (a coding flight, in its own
        worktree in a repository), else the agent command with the prompt as its last word."""
        env = self._env(task)
        preset = self.q.types[task.type].preset if task.type in self.q.types else None
        binding = {k: v for k, v in env.items() if k.startswith(("WAVEWAIT_TASK", "WAVEWAIT_QUEUE", "WAVEWAIT_MAX_"))}
        cap = self.flight_budget
        request = SpawnRequest(
            name=f"{task.type}-{task.id[:8]}",
            parent=self.runner_id,
            command=None if preset else [*self.command, prompt],
            prompt=prompt if preset else None,
            preset=preset,
            presets_file=self.presets_file,
            model=task.model if preset else None,
            base_env=env,
            server_env=binding if preset else None,
            wave=queue_wave(self.q.name),
            flight_budget_tokens=cap.tokens if cap else None,
            flight_budget_usd=cap.usd if cap else None,
        )
        return await spawning.spawn(self.q.bus, request, on_record=on_record)

    async def summary(self) -> RunSummary:
        tasks = await self.q.store.tasks()
        count: dict[str, int] = {s: sum(1 for t in tasks if t.status == s) for s in ("done", "failed", "skipped")}
        return RunSummary(
            queue=self.q.name,
            ok=all(t.status == "done" for t in tasks),
            agentsStarted=self.started,
            tasks=[TaskOutcome(id=t.id, type=t.type, status=t.status, attempts=t.attempts, note=t.note) for t in tasks],
            **count,
        )


async def run_queue(q: TaskQueue, agent_command: Sequence[str] | None, **options: Any) -> RunSummary:
    """Run `q` until nothing is queued or running (options as `Runner`)."""
    return await Runner(q, agent_command, **options).run()
