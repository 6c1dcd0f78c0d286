"""The task queue on the directory bus: a folder per queue.

    queues/<queue>/tasks/<id>.json      task records, replaced atomically (tmp, fsync, rename)
    queues/<queue>/handoffs/<id>.json   handoffs, written once, the same way
    queues/<queue>/dedup/<key>          the id of the live task with that dedup key
    queues/<queue>/lock                 flock: one writer at a time; holds the task count
    queues/<queue>/tmp/                 files being written

Every change to a task happens under the queue's lock, so the budget and dedup guards hold
however many processes enqueue at once. The count is raised before the task's file is
written: a crash between the two spends one task of the budget, never exceeds it.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from .. import watch
from ..ids import check_id, new_id
from ..model import now
from ..tasks import Conflict, HandoffRecord, Task
from .file import FileBus, _write_new

log = logging.getLogger(__name__)


class FileTaskStore:
    """One queue's folder inside a directory bus."""

    def __init__(self, bus: FileBus, queue: str) -> None:
        self.queue = check_id(queue, "queue")
        self.bus = bus
        self.bus_root = bus.root
        self.root = bus.root / "queues" / queue
        for sub in ("", "tasks", "handoffs", "dedup", "tmp"):
            (self.root / sub).mkdir(mode=0o700, parents=True, exist_ok=True)
        self._cache: dict[str, tuple[tuple[int, int, int], Task]] = {}

    # ------------------------------------------------------------------ files
    def _write(self, dest: Path, record: BaseModel) -> None:
        """Atomically replace `dest`: a reader sees the old record or the new, and a crash of
        the machine right after leaves the new one (fsync before the rename, as every write
        of the directory bus: `WAVEWAIT_FSYNC=0` trades that for speed). A failed write
        leaves nothing and says why."""
        tmp = self.root / "tmp" / f"{dest.name}.{new_id()}"
        try:
            _write_new(tmp, record.model_dump_json(by_alias=True).encode())
            try:
                os.rename(tmp, dest)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError as e:
            raise self.bus._write_failed(e, f"the task record {dest.name}") from e

    @contextlib.contextmanager
    def _lock(self) -> Iterator[int]:
        fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield fd
        finally:
            os.close(fd)

    def _count(self, lock: int) -> int:
        raw = os.pread(lock, 32, 0).strip()
        if raw.isdigit():
            return int(raw)
        return sum(1 for name in os.listdir(self.root / "tasks") if name.endswith(".json"))

    def _quarantine(self, path: Path, why: str) -> None:
        dest = self.bus_root / "quarantine" / f"{int(time.time() * 1000)}-{self.queue}-{path.parent.name}-{path.name}"
        with contextlib.suppress(FileNotFoundError):
            os.rename(path, dest)
            log.warning("wavewait: moved %s to %s: %s", path, dest, why)

    def _task_path(self, task_id: str) -> Path:
        return self.root / "tasks" / f"{check_id(task_id, 'taskId')}.json"

    def _read(self, path: Path) -> Task | None:
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

    def _live_with_key(self, key: str) -> Task | None:
        try:
            existing = (self.root / "dedup" / key).read_text().strip()
        except FileNotFoundError:
            return None
        task = self._read(self._task_path(existing)) if existing else None
        return task if task is not None and task.status != "failed" else None

    # ------------------------------------------------------------------ the store
    async def add(self, task: Task, max_tasks: int) -> Conflict | None:
        key = task.dedup_key
        with self._lock() as lock:
            count = self._count(lock)
            if count >= max_tasks:
                return Conflict("budget", count=count)
            if (other := self._live_with_key(key)) is not None:
                return Conflict("dedup", existing=other.id)
            os.pwrite(lock, str(count + 1).encode().ljust(20), 0)
            task.seq = count + 1
            self._write(self._task_path(task.id), task)
            marker = self.root / "tmp" / f"dedup.{new_id()}"
            marker.write_text(task.id)
            os.rename(marker, self.root / "dedup" / key)
        return None

    async def get(self, task_id: str) -> Task | None:
        return self._read(self._task_path(task_id))

    async def tasks(self) -> list[Task]:
        tasks = []
        with os.scandir(self.root / "tasks") as it:
            for entry in it:
                if entry.name.endswith(".json"):
                    if (t := self._read(Path(entry.path))) is not None:
                        tasks.append(t)
                elif not entry.name.startswith("."):
                    self._quarantine(Path(entry.path), "foreign file in a queue's tasks/")
        tasks.sort(key=lambda t: (t.seq, t.created_at, t.id))
        return tasks

    def _change(self, task_id: str, only_from: Sequence[str], changes: dict[str, Any]) -> Task | None:
        """Under the lock: the changed task, written, or None if its status is not in `only_from`."""
        path = self._task_path(task_id)
        task = self._read(path)
        if task is None or task.status not in only_from:
            return None
        task = Task.model_validate(task.model_dump() | changes | {"updated_at": now()})
        self._write(path, task)
        if task.status == "failed":  # a failed task may be enqueued again
            marker = self.root / "dedup" / task.dedup_key
            with contextlib.suppress(FileNotFoundError):
                if marker.read_text().strip() == task.id:
                    marker.unlink()
        return task

    async def update(self, task_id: str, only_from: Sequence[str], **changes: Any) -> Task | None:
        with self._lock():
            return self._change(task_id, only_from, changes)

    async def complete(self, task_id: str, handoff: HandoffRecord, only_from: Sequence[str]) -> Task | None:
        with self._lock():
            task = self._read(self._task_path(task_id))
            if task is None or task.status not in only_from:
                return None
            self._write(self.root / "handoffs" / f"{task.id}.json", handoff)  # first: a done task has one
            return self._change(task_id, only_from, {"status": handoff.status})

    def _read_handoff(self, path: Path) -> HandoffRecord | None:
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
        return h

    async def handoff(self, task_id: str) -> HandoffRecord | None:
        return self._read_handoff(self.root / "handoffs" / f"{check_id(task_id, 'taskId')}.json")

    async def handoffs(self) -> list[HandoffRecord]:
        found = []
        with os.scandir(self.root / "handoffs") as it:
            for entry in it:
                if entry.name.endswith(".json") and (h := self._read_handoff(Path(entry.path))) is not None:
                    found.append(h)
        found.sort(key=lambda h: (h.completed_at, h.task_id))
        return found

    async def subscribe(self) -> watch.Subscription:
        folder = self.root / "tasks"
        return watch.subscribe([folder], prefixes=[folder])
