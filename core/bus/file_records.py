"""Records on the directory bus: agents, waits (with stored resolutions), wave documents
and MCP tasks. Each record is one JSON file, replaced atomically (`BusDir.write_json`);
a read-modify-write holds a flock under locks/.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .. import watch
from ..ids import check_id, new_id
from ..limits import MAX_ITEM_FILE_BYTES
from ..model import Agent, McpTask, WaitRecord, now
from ..proc import alive, collector_paused, hostname
from . import wave_docs
from .fs import SEP, BusDir, Unfit, read_file, rewrite

log = logging.getLogger(__name__)

PREVIEW_EVERY = 0.25  # seconds between writes of one sender's last-message preview
#: the ended wait records a bus object keeps under tmp/ to write its next ones into (`_spares`)
SPARE_RECORDS = 32


def read_object(bus: BusDir, path: Path, what: str, limit: int = MAX_ITEM_FILE_BYTES) -> dict[str, Any] | None:
    """The JSON object at `path`; None when there is none, or it is not `what` (then quarantined)."""
    try:
        value = json.loads(read_file(path, limit))
    except FileNotFoundError:
        return None
    except Unfit as e:
        bus.quarantine(path, e.code, e.detail)
        return None
    except ValueError:
        bus.quarantine(path, "malformed", f"not {what}")
        return None
    if not isinstance(value, dict):
        bus.quarantine(path, "malformed", f"not {what} (not an object)")
        return None
    return value


class FileAgents:
    """agents/<id>.json, each changed under locks/agent-<id>; read through a cache keyed by
    the file's identity, so an unchanged record is not parsed again."""

    def __init__(self, bus: BusDir) -> None:
        self.bus = bus
        self._cache: dict[str, tuple[tuple[int, int, int], Agent]] = {}
        self._paths: dict[str, Path] = {}
        self._previews: dict[str, dict[str, Any]] = {}  # last-message previews not yet written
        self._preview_at: dict[str, float] = {}

    def _path(self, agent_id: str) -> Path:
        path = self._paths.get(agent_id)
        if path is None:
            path = self._paths[agent_id] = self.bus.root / "agents" / f"{check_id(agent_id, 'agent')}.json"
        return path

    def _read(self, path: Path | str, name: str | None = None) -> Agent | None:
        """The record at `path` (its file's `name`, when the caller has it: a listing of
        100,000 records builds no Path for each), parsed only if its file changed."""
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        key = (st.st_mtime_ns, st.st_ino, st.st_size)
        name = name or os.path.basename(path)
        cached = self._cache.get(name)
        if cached and cached[0] == key:
            return cached[1]
        try:
            agent = Agent.model_validate_json(read_file(path, lstat=st))
        except FileNotFoundError:
            return None
        except Unfit as e:
            self.bus.quarantine(Path(path), e.code, e.detail)
            return None
        except (ValidationError, ValueError) as e:
            self.bus.quarantine(Path(path), "malformed", f"not an agent record ({e.__class__.__name__})")
            return None
        self._cache[name] = (key, agent)
        return agent

    def put(self, agent: Agent) -> None:
        with self.bus.lock(f"agent-{agent.id}"):
            self.bus.write_json(self._path(agent.id), agent.model_dump_json())
        self.bus.box(agent.id)

    def get(self, agent_id: str) -> Agent | None:
        return self._read(self._path(agent_id))

    def get_many(self, agent_ids: Sequence[str]) -> dict[str, Agent]:
        found = {}
        for agent_id in agent_ids:
            agent = self._read(self._path(agent_id))
            if agent is not None:
                found[agent_id] = agent
        return found

    def list(self) -> list[Agent]:
        agents = []
        with collector_paused(), os.scandir(self.bus.root / "agents") as it:
            for entry in it:
                if entry.name.endswith(".json"):
                    a = self._read(entry.path, entry.name)
                    if a is not None:
                        agents.append(a)
                elif not entry.name.startswith("."):
                    self.bus.quarantine(Path(entry.path), "foreign", "not an agent record (a foreign name)")
        agents.sort(key=lambda a: (a.created_at, a.id))
        return agents

    def note_preview(self, agent_id: str, changes: dict[str, Any]) -> None:
        """A sender's last-message preview (for people): written at once, then at most every
        PREVIEW_EVERY with the newest value (and on `close`). On ext4, replacing a file by
        rename flushes its data first (auto_da_alloc), which a burst of sends must not pay
        on each message."""
        t = time.monotonic()
        pending = self._previews.get(agent_id)
        if pending is not None:
            pending.update(changes)
        elif t - self._preview_at.get(agent_id, -PREVIEW_EVERY) >= PREVIEW_EVERY:
            self._preview_at[agent_id] = t
            self.modify(agent_id, None, None, changes)
        else:
            self._previews[agent_id] = dict(changes)
            asyncio.get_running_loop().call_later(PREVIEW_EVERY, self._flush_preview, agent_id)

    def _flush_preview(self, agent_id: str) -> None:
        if (changes := self._previews.pop(agent_id, None)) is None:
            return
        self._preview_at[agent_id] = time.monotonic()
        try:
            self.modify(agent_id, None, None, changes)
        except Exception:
            log.exception("wavewait: could not write the last-message preview of %s", agent_id)

    def modify(
        self,
        agent_id: str,
        status: str | None,
        only_from: Sequence[str] | None,
        changes: dict[str, Any],
    ) -> Agent | None:
        """Change fields (and the status, if it is in `only_from`) under the agent's lock;
        None when there is no such agent or nothing changed. The guard makes each
        transition happen once (one `agent_dead` event, no resurrection)."""
        path = self._path(agent_id)
        changes = self._previews.pop(agent_id, {}) | changes  # a pending preview rides along
        with self.bus.lock(f"agent-{agent_id}"):
            agent = self._read(path)
            if agent is None or (only_from is not None and agent.status not in only_from):
                return None
            data = agent.model_dump() | changes | {"updated_at": now()}
            if status is not None:
                data["status"] = status
            agent = Agent.model_validate(data)
            self.bus.write_json(path, agent.model_dump_json())
            return agent

    def close(self) -> None:
        for agent_id in list(self._previews):
            self._flush_preview(agent_id)


class FileWaits:
    """waits/<wait id>.json (and <wait id>.interrupt, the flag), and resolutions/<key>.json."""

    def __init__(self, bus: BusDir) -> None:
        self.bus = bus
        self._dir = str(bus.root / "waits")
        #: waits of this process, registered and not ended: their records, kept so a progress
        #: update neither reads nor parses the file (a fan-in's record names every target)
        self.mine: dict[str, WaitRecord] = {}
        self.flagged: set[str] = set()  # ids whose interrupt flag the watcher saw (end removes it)
        #: files under tmp/ that held ended wait records of this object: the next registration
        #: rewrites one and renames it in. A file made and removed per wait costs the kernel's
        #: inode allocator (ext4 skips the inodes freed in the last seconds) a share of the
        #: waiting process's CPU when many fan-ins share an inbox
        self._spares: list[str] = []

    def path(self, wait_id: str, suffix: str = ".json") -> str:
        return f"{self._dir}/{check_id(wait_id, 'wait')}{suffix}"

    def register(self, record: WaitRecord) -> None:
        self._write(self.path(record.id), record.model_dump_json())
        self.mine[record.id] = record

    def update(self, wait_id: str, progress: str) -> None:
        path = self.path(wait_id)
        record = self.mine.get(wait_id)
        if record is not None and not os.path.exists(path):
            return  # ended meanwhile: never bring a record back
        if record is None:
            try:
                record = WaitRecord.model_validate_json(read_file(path))
            except (FileNotFoundError, Unfit, ValidationError, ValueError):
                return  # gone, or not ours: list_waits quarantines what is not a wait record
        if record.progress != progress:
            record = record.model_copy(update={"progress": progress})
            if wait_id in self.mine:
                self.mine[wait_id] = record
            self.bus.write_json(path, record.model_dump_json(), durable=False)

    def end(self, wait_id: str) -> None:
        """Remove the wait's record, and its interrupt flag if one may exist: a wait of this
        process flagged while the watcher ran was seen being flagged (`flagged`); any other
        may have one. A flag the watcher had not yet reported is left to the tidy-up."""
        ours = self.mine.pop(wait_id, None) is not None
        self._remove(self.path(wait_id), spare=ours)
        if not ours or not self.bus.watched or wait_id in self.flagged:
            self.flagged.discard(wait_id)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path(wait_id, ".interrupt"))

    def _write(self, dest: str, data: str) -> None:
        """Publish a wait record (atomic, not flushed: it describes a running process) in a
        spare file when one is left, else in a new one (`write_json`)."""
        while self._spares:
            spare = self._spares.pop()
            if rewrite(spare, data.encode()):
                try:
                    os.rename(spare, dest)
                    return
                except OSError:  # tidied away meanwhile: the next spare, or a new file
                    pass
            with contextlib.suppress(OSError):  # gone (tidied) or not ours to reuse: never mind it
                os.unlink(spare)
        self.bus.write_json(dest, data, durable=False)

    def _remove(self, path: str, *, spare: bool) -> None:
        """Take a wait record out of waits/: into tmp/ as a spare (a record this object wrote,
        while it keeps fewer than SPARE_RECORDS), else gone."""
        if spare and len(self._spares) < SPARE_RECORDS:
            kept = f"{self.bus.url}/tmp/spare-wait.{new_id()}"
            try:
                os.rename(path, kept)
                self._spares.append(kept)
            except FileNotFoundError:
                pass
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    def list(self) -> list[WaitRecord]:
        """The records of live waits; a record of a dead process here is ended on the way."""
        records = []
        with os.scandir(self._dir) as it:
            for entry in it:
                if not entry.name.endswith(".json"):
                    continue
                try:
                    rec = WaitRecord.model_validate_json(read_file(entry.path))
                except FileNotFoundError:
                    continue
                except Unfit as e:
                    self.bus.quarantine(Path(entry.path), e.code, e.detail)
                    continue
                except (ValidationError, ValueError):
                    self.bus.quarantine(Path(entry.path), "malformed", "not a wait record")
                    continue
                if rec.host == hostname() and not alive(rec.pid, rec.pid_start):
                    self.end(rec.id)  # its process died; the sweep returns its claims
                    continue
                records.append(rec)
        records.sort(key=lambda r: r.started_at)
        return records

    def alive(self, wait_id: str) -> bool:
        """The wait's record is there and its process may still run (elsewhere: we cannot see)."""
        if wait_id in self.mine:  # registered by this process and not ended: no read, no /proc
            return True
        try:
            rec = WaitRecord.model_validate_json(read_file(self.path(wait_id)))
        except (FileNotFoundError, Unfit, ValidationError, ValueError):
            return False
        return rec.host != hostname() or alive(rec.pid, rec.pid_start)

    def interrupt(self, wait_id: str) -> bool:
        if not os.path.exists(self.path(wait_id)):
            return False
        fd = os.open(self.path(wait_id, ".interrupt"), os.O_WRONLY | os.O_CREAT, 0o600)
        os.close(fd)
        return True

    def interrupted(self, wait_id: str) -> bool:
        return os.path.exists(self.path(wait_id, ".interrupt"))

    def get_resolution(self, key: str) -> dict[str, Any] | None:
        return read_object(self.bus, self._resolution_path(key), "a stored resolution")

    def put_resolution(self, key: str, value: dict[str, Any]) -> None:
        self.bus.write_json(self._resolution_path(key), json.dumps(value))

    def _resolution_path(self, key: str) -> Path:
        return self.bus.root / "resolutions" / f"{check_id(key, 'id')}.json"

    def close(self) -> None:
        for spare in self._spares:
            with contextlib.suppress(OSError):
                os.unlink(spare)
        self._spares.clear()


class FileWaveDocs:
    """waves/<wave>/<kind>.json, each changed under locks/wave-<wave>~<kind> (wave_docs.py)."""

    def __init__(self, bus: BusDir) -> None:
        self.bus = bus

    def _path(self, wave: str, kind: str) -> Path:
        wave, kind = wave_docs.doc_key(wave, kind)
        return self.bus.root / "waves" / wave / f"{kind}.json"

    def _read(self, path: Path) -> dict[str, Any] | None:
        return read_object(self.bus, path, "a wave document", wave_docs.MAX_WAVE_DOC_BYTES)

    def get(self, wave: str, kind: str) -> dict[str, Any] | None:
        return self._read(self._path(wave, kind))

    def update(self, wave: str, kind: str, change: wave_docs.DocChange) -> dict[str, Any] | None:
        path = self._path(wave, kind)
        (self.bus.root / "waves").mkdir(mode=0o700, exist_ok=True)  # a bus made before wave documents
        path.parent.mkdir(mode=0o700, exist_ok=True)
        with self.bus.lock(f"wave-{wave}{SEP}{kind}"):
            current = self._read(path)
            new = change(current)
            if new is None or new == current:
                return current
            self.bus.write_json(path, wave_docs.encode(new, wave, kind))
            return new

    def subscribe(self, wave: str | None = None) -> watch.Subscription:
        folder = self.bus.root / "waves"
        folder.mkdir(mode=0o700, exist_ok=True)
        prefix = folder / check_id(wave, "wave") if wave is not None else folder
        return watch.subscribe([folder], prefixes=[prefix])


class FileMcpTasks:
    """mcptasks/<task id>.json; a status change holds locks/mcptasks."""

    def __init__(self, bus: BusDir) -> None:
        self.bus = bus

    def _path(self, task_id: str) -> Path:
        return self.bus.root / "mcptasks" / f"{check_id(task_id, 'taskId')}.json"

    def get(self, task_id: str) -> McpTask | None:
        path = self._path(task_id)
        try:
            return McpTask.model_validate_json(read_file(path, 4 * MAX_ITEM_FILE_BYTES))
        except FileNotFoundError:
            return None
        except Unfit as e:
            self.bus.quarantine(path, e.code, e.detail)
        except ValidationError:
            self.bus.quarantine(path, "malformed", "not an MCP task record")
        return None

    def put(self, task: McpTask) -> None:
        self.bus.write_json(self._path(task.id), task.model_dump_json())

    def transition(
        self, task_id: str, status: str, only_from: Sequence[str], changes: dict[str, Any]
    ) -> McpTask | None:
        with self.bus.lock("mcptasks"):  # read, check, replace as one step
            task = self.get(task_id)
            if task is None or task.status not in only_from:
                return None
            task = McpTask.model_validate(
                task.model_dump() | changes | {"status": status, "updated_at": max(now(), task.updated_at)}
            )
            self.bus.write_json(self._path(task_id), task.model_dump_json())
            return task

    def delete(self, task_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path(task_id))
