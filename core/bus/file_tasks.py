"""The task queue on the directory bus: a folder per queue.

    queues/<queue>/tasks/<id>.json      task records, replaced atomically (tmp, fsync, rename)
    queues/<queue>/handoffs/<id>.json   handoffs, written once, the same way; a task with a
                                        handoff is finished: its status is the handoff's,
                                        whatever its record says (completing writes one file)
    queues/<queue>/dedup/<key>          the id of the live task with that dedup key (a symbolic
                                        link whose target is the id: one call to write or
                                        read; a plain file holding it, as older buses wrote, is read too)
    queues/<queue>/lock                 flock: one writer at a time; holds the task count
    queues/<queue>/tmp/                 files being written

Every change to a task is decided under the queue's lock (a compare-and-set on its status),
so the budget and dedup guards hold however many processes enqueue at once, and two runners
never both mark one task running. The count is raised before the task's file is renamed into
place: a crash between the two spends one task of the budget, never exceeds it.

Durability: one state change is one file, written whole and flushed (fsync) before it is
renamed into place, so a crash never leaves half of one. The flush happens before the
queue's lock is taken, so the flushes of concurrent writers (threads of one process, or
several processes) share the file system's journal commits instead of queueing behind the
lock; under the lock only the check and the rename remain (a compare-and-set: a change
prepared from a record that moved on meanwhile is prepared again under the lock). Writes
that arrive together run in worker threads (`_off_loop`). An enqueue's `seq` is the count it read
before the lock: enqueues that overlap may share one, then `created_at` orders them.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from .. import watch
from ..ids import check_id, is_id, new_id
from ..model import FINISHED, Agent, Conflict, HandoffRecord, Task, now
from .fs import BusDir

log = logging.getLogger(__name__)
T = TypeVar("T")


class FileTaskStore:
    """One queue's folder inside a directory bus (handed out by `FileBus.tasks`)."""

    def __init__(self, bus: BusDir, queue: str, agent: Callable[[str], Agent | None]) -> None:
        """`agent` reads an agent's record (the bus's own reader): `complete`'s `not_flight`."""
        self.queue = check_id(queue, "queue")
        self.bus = bus
        self._agent = agent
        self.root = bus.root / "queues" / queue
        for sub in ("", "tasks", "handoffs", "dedup", "tmp"):
            (self.root / sub).mkdir(mode=0o700, parents=True, exist_ok=True)
        self._cache: dict[str, tuple[tuple[int, int, int], Task]] = {}
        self._handoffs: dict[str, tuple[tuple[int, int, int], HandoffRecord]] = {}
        self._writers = 0  # writes of this store under way (see _off_loop)
        # the lock file, opened once: a flock belongs to the open file, which this process's
        # threads share, so they take turns at `_threads` before taking it
        self._lock_fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        weakref.finalize(self, os.close, self._lock_fd)
        self._threads = threading.Lock()

    # ------------------------------------------------------------------ files
    def _prepare(self, dest: Path, record: BaseModel) -> Path:
        """A complete, flushed copy of `record` in tmp/, for `_publish` to rename to `dest`."""
        tmp = self.root / "tmp" / f"{dest.name}.{new_id()}"
        self.bus.create(tmp, record.model_dump_json(by_alias=True).encode(), f"the task record {dest.name}")
        return tmp

    def _publish(self, tmp: Path, dest: Path) -> None:
        """Rename `tmp` into place; on failure it is removed and the error is a `BusError`."""
        try:
            os.rename(tmp, dest)
        except OSError as e:
            self._discard(tmp)
            raise self.bus.write_failed(e, f"the task record {dest.name}") from e

    @staticmethod
    def _discard(tmp: Path) -> None:
        with contextlib.suppress(OSError):
            os.unlink(tmp)

    async def _off_loop(self, write: Callable[..., T], *args: Any) -> T:
        """Run a write (which flushes to disk): on the event loop when it is this store's only
        one, else in a worker thread, so the flushes of writes that arrive together (the
        runner starting several tasks, a server's concurrent calls) overlap and share the
        journal's commits; a lone writer saves the hop to a thread."""
        self._writers += 1
        try:
            await asyncio.sleep(0)  # writes started together count themselves first
            if self._writers == 1:
                return write(*args)
            return await asyncio.to_thread(write, *args)
        finally:
            self._writers -= 1

    @contextlib.contextmanager
    def _lock(self) -> Iterator[int]:
        with self._threads:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            try:
                yield self._lock_fd
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def _count(self, lock: int) -> int:
        raw = os.pread(lock, 32, 0).strip()
        if raw.isdigit():
            return int(raw)
        return sum(1 for name in os.listdir(self.root / "tasks") if name.endswith(".json"))

    def _quarantine(self, path: Path, why: str) -> None:
        dest = self.bus.root / "quarantine" / f"{int(time.time() * 1000)}-{self.queue}-{path.parent.name}-{path.name}"
        with contextlib.suppress(FileNotFoundError):
            os.rename(path, dest)
            log.warning("wavewait: moved %s to %s: %s", path, dest, why)

    def _task_path(self, task_id: str) -> Path:
        return self.root / "tasks" / f"{check_id(task_id, 'taskId')}.json"

    def _read(self, path: Path, handoffs: set[str] | None = None) -> Task | None:
        """The task in `path` as it stands: a task with a handoff has the handoff's status.
        `handoffs` (the names in handoffs/, when the caller listed them) saves a stat."""
        task = self._read_record(path)
        if task is None or task.status in FINISHED or (handoffs is not None and path.name not in handoffs):
            return task
        h = self._read_handoff(self.root / "handoffs" / path.name)
        if h is None:
            return task
        return task.model_copy(update={"status": h.status, "updated_at": h.completed_at})

    def _read_record(self, path: Path) -> Task | None:
        try:
            st = path.stat()
        except FileNotFoundError:
            return None
        key = (st.st_mtime_ns, st.st_ino, st.st_size)
        cached = self._cache.get(path.name)
        if cached and cached[0] == key:
            return cached[1]
        try:
            task = Task.model_validate_json(path.read_bytes())
        except FileNotFoundError:
            return None
        except (ValidationError, ValueError) as e:
            self._quarantine(path, f"not a task record ({e.__class__.__name__})")
            return None
        if task.queue != self.queue or f"{task.id}.json" != path.name:
            self._quarantine(path, "a task record that does not belong here")
            return None
        self._cache[path.name] = (key, task)
        return task

    def _marker(self, key: str) -> str | None:
        """The task id the dedup marker of `key` names (None: no marker, or not an id)."""
        path = self.root / "dedup" / key
        try:
            existing = os.readlink(path)
        except FileNotFoundError:
            return None
        except OSError:  # a plain file, as older buses wrote it
            try:
                existing = path.read_text().strip()
            except (OSError, UnicodeDecodeError):
                return None
        return existing if is_id(existing) else None

    def _live_with_key(self, key: str) -> Task | None:
        existing = self._marker(key)
        task = self._read(self._task_path(existing)) if existing else None
        return task if task is not None and task.status != "failed" else None

    def _mark(self, key: str, task_id: str) -> None:
        """Point the dedup marker of `key` at `task_id` (under the lock: no other writer)."""
        marker = self.root / "dedup" / key
        try:
            try:
                os.symlink(task_id, marker)
            except FileExistsError:  # a failed task's, or a crashed writer's: replaced whole
                tmp = self.root / "tmp" / f"dedup.{new_id()}"
                os.symlink(task_id, tmp)
                try:
                    os.rename(tmp, marker)
                except OSError:
                    self._discard(tmp)
                    raise
        except OSError as e:
            raise self.bus.write_failed(e, f"the dedup marker of task {task_id}") from e

    # ------------------------------------------------------------------ the store
    async def add(self, task: Task, max_tasks: int) -> Conflict | None:
        return await self._off_loop(self._add, task, max_tasks)

    def _add(self, task: Task, max_tasks: int) -> Conflict | None:
        key = task.dedup_key
        dest = self._task_path(task.id)
        task.seq = self._count(self._lock_fd) + 1  # read before the lock: see the module's docstring
        published = False
        tmp = self._prepare(dest, task)
        try:
            with self._lock() as lock:
                count = self._count(lock)
                if count >= max_tasks:
                    return Conflict("budget", count=count)
                if (other := self._live_with_key(key)) is not None:
                    return Conflict("dedup", existing=other.id)
                self._mark(key, task.id)  # first: a marker whose task never came is no conflict
                os.pwrite(lock, str(count + 1).encode().ljust(20), 0)
                self._publish(tmp, dest)
                published = True
        finally:
            if not published:
                self._discard(tmp)
        return None

    async def get(self, task_id: str) -> Task | None:
        return self._read(self._task_path(task_id))

    async def some(self, task_ids: Sequence[str]) -> dict[str, Task]:
        found = {}
        for task_id in task_ids:
            if (t := self._read(self._task_path(task_id))) is not None:
                found[t.id] = t
        return found

    async def live(self) -> list[Task]:
        """A task with a handoff is finished whatever its record says: only the others are
        read (their records cached by stat), from the two folders' names."""
        with os.scandir(self.root / "handoffs") as it:
            handoffs = {entry.name for entry in it}
        tasks = []
        with os.scandir(self.root / "tasks") as it:
            for entry in it:
                if entry.name.endswith(".json") and entry.name not in handoffs:
                    t = self._read(Path(entry.path), handoffs)
                    if t is not None and t.status in ("queued", "running"):
                        tasks.append(t)
        tasks.sort(key=lambda t: (t.seq, t.created_at, t.id))
        return tasks

    async def tasks(self) -> list[Task]:
        tasks = []
        with os.scandir(self.root / "handoffs") as it:
            handoffs = {entry.name for entry in it}
        with os.scandir(self.root / "tasks") as it:
            for entry in it:
                if entry.name.endswith(".json"):
                    if (t := self._read(Path(entry.path), handoffs)) is not None:
                        tasks.append(t)
                elif not entry.name.startswith("."):
                    self._quarantine(Path(entry.path), "foreign file in a queue's tasks/")
        tasks.sort(key=lambda t: (t.seq, t.created_at, t.id))
        return tasks

    async def update(self, task_id: str, only_from: Sequence[str], **changes: Any) -> Task | None:
        return await self._off_loop(self._update, task_id, only_from, changes)

    def _update(self, task_id: str, only_from: Sequence[str], changes: dict[str, Any]) -> Task | None:
        """Prepared (written and flushed) outside the lock from the task as read; under the lock,
        renamed only if the task is still as read, else prepared again there."""
        path = self._task_path(task_id)
        seen = self._read(path)
        if seen is None or seen.status not in only_from:
            return None
        changed = Task.model_validate(seen.model_dump() | changes | {"updated_at": now()})
        published = False
        tmp = self._prepare(path, changed)
        try:
            with self._lock():
                current = self._read(path)
                if current is None or current.status not in only_from:
                    return None
                if current != seen:  # it moved on meanwhile: prepare again from what it is now
                    self._discard(tmp)
                    changed = Task.model_validate(current.model_dump() | changes | {"updated_at": now()})
                    tmp = self._prepare(path, changed)
                self._publish(tmp, path)
                published = True
                if changed.status == "failed":  # a failed task may be enqueued again
                    self._drop_dedup(changed)
                return changed
        finally:
            if not published:
                self._discard(tmp)

    async def complete(
        self,
        task_id: str,
        handoff: HandoffRecord,
        only_from: Sequence[str],
        *,
        run_by: str | None = None,
        not_flight: str | None = None,
    ) -> Task | None:
        return await self._off_loop(self._complete, task_id, handoff, only_from, run_by, not_flight)

    def _complete(
        self,
        task_id: str,
        handoff: HandoffRecord,
        only_from: Sequence[str],
        run_by: str | None,
        not_flight: str | None,
    ) -> Task | None:
        """One file, the handoff, is the completion (the task's record is not rewritten): written
        and flushed outside the lock, renamed into place under it if the task may still end."""
        path = self._task_path(task_id)
        dest = self.root / "handoffs" / path.name
        seen = self._read(path)
        if seen is None or seen.status not in only_from or (run_by is not None and seen.agent_id != run_by):
            return None
        if not_flight is not None and (a := self._agent(not_flight)) is not None and a.supervisor_pid is not None:
            return None
        record = handoff.model_copy(update={"task_id": seen.id, "type": seen.type})
        published = False
        tmp = self._prepare(dest, record)
        try:
            with self._lock():
                task = self._read(path)
                if task is None or task.status not in only_from or os.path.lexists(dest):
                    return None
                if run_by is not None and task.agent_id != run_by:
                    return None
                self._publish(tmp, dest)
                published = True
                if record.status == "failed":  # a failed task may be enqueued again
                    self._drop_dedup(task)
        finally:
            if not published:
                self._discard(tmp)
        return task.model_copy(update={"status": record.status, "updated_at": record.completed_at})

    def _drop_dedup(self, task: Task) -> None:
        if self._marker(task.dedup_key) == task.id:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.root / "dedup" / task.dedup_key)

    @staticmethod
    def _key(path: Path) -> tuple[int, int, int]:
        st = path.stat()
        return (st.st_mtime_ns, st.st_ino, st.st_size)

    def _read_handoff(self, path: Path) -> HandoffRecord | None:
        try:
            key = self._key(path)
        except FileNotFoundError:
            return None
        cached = self._handoffs.get(path.name)
        if cached and cached[0] == key:
            return cached[1]
        try:
            h = HandoffRecord.model_validate_json(path.read_bytes())
        except FileNotFoundError:
            return None
        except (ValidationError, ValueError) as e:
            self._quarantine(path, f"not a handoff ({e.__class__.__name__})")
            return None
        if f"{h.task_id}.json" != path.name:
            self._quarantine(path, "a handoff filed under another task's name")
            return None
        self._handoffs[path.name] = (key, h)
        return h

    async def handoff(self, task_id: str) -> HandoffRecord | None:
        return self._read_handoff(self.root / "handoffs" / f"{check_id(task_id, 'taskId')}.json")

    async def handoffs_of(self, task_ids: Sequence[str]) -> dict[str, HandoffRecord]:
        found = {}
        for task_id in task_ids:
            if (h := await self.handoff(task_id)) is not None:
                found[task_id] = h
        return found

    async def handoffs(self) -> list[HandoffRecord]:
        found = []
        with os.scandir(self.root / "handoffs") as it:
            for entry in it:
                if entry.name.endswith(".json") and (h := self._read_handoff(Path(entry.path))) is not None:
                    found.append(h)
        found.sort(key=lambda h: (h.completed_at, h.task_id))
        return found

    async def subscribe(self) -> watch.Subscription:
        folders = [self.root / "tasks", self.root / "handoffs"]
        return watch.subscribe(folders, prefixes=folders)
