"""The directory bus: Maildir-style inboxes on a local file system.

Layout under the root (folders 0700, files 0600):

    agents/<id>.json                 agent records, replaced atomically (tmp/ + rename)
    inbox/<id>/tmp/                  items being written
    inbox/<id>/new/<seq>~<type>~<sender>~<item id>      delivered, FIFO by seq
    inbox/<id>/claims/<wait id>~<seq>   claimed by one wait (atomic rename: exactly once)
    inbox/<id>/cur/<at>~<seq>~<taker>   taken: who took it and when (bounded history)
    waits/<wait id>.json             waits in progress; <wait id>.interrupt is the flag
    resolutions/<key>.json           stored results of named waits (wait_agent ids)
    waves/<wave>/<kind>.json         per-wave documents (wave_docs.py): settings, merge progress
    mcptasks/<task id>.json          tasks of the MCP Tasks extension (status, result)
    logs/<agent id>.log              output of spawned agents
    quarantine/                      malformed or foreign files, moved aside with a warning
    locks/agent-<id>                 flock held while an agent record is read and replaced
    locks/inbox-<id>                 flock held while an item gets its seq; the file's
                                     content is the inbox's last seq (a decimal number)
    locks/mcptasks                   flock held while an MCP task's status is changed
    locks/wave-<wave>~<kind>         flock held while a wave document is read and replaced
    tmp/                             agent, wait and resolution records being written

agents/, inbox/, waits/ and the inboxes subscribed to are watched (`subscribe`), waves/ by `subscribe_waves`; the rest is not. A reader never sees
half an item: it is written under inbox/<id>/tmp/ and renamed into new/. The seq lives in
the file name, zero-padded, so FIFO order never depends on mtimes and a claim returned to
new/ lands back at its original place.

An item is one file from delivery to the end of its history: a claim, a take and a rotation
out of history are one rename or unlink each, never a folder made or removed (folders cost
the file system's journal most, and every message passes here). Earlier versions kept a
folder per claiming wait and per take; recovery still returns such claim folders, and
history still reads and rotates such take folders.

The bus is made of rooms, one concern each: `fs.py` (the folder, atomic writes, safe reads,
locks, quarantine), `file_inbox.py` (items; `file_items.py` their names, `file_history.py`
what was taken), `file_records.py` (agents, waits, wave documents, MCP tasks) and
`file_upkeep.py` (the recovery sweep, the tidy-up). `FileBus` composes them and routes the
watcher's events to them and to its subscriptions.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import inotify, watch
from ..errors import BusError
from ..ids import check_id
from ..model import Agent, Item, McpTask, WaitRecord
from . import wave_docs
from .facade import Facade
from .file_inbox import FileInbox
from .file_items import sender_of
from .file_records import FileAgents, FileMcpTasks, FileWaits, FileWaveDocs
from .file_tasks import FileTaskStore
from .file_upkeep import FileUpkeep
from .fs import BusDir
from .keys import agent_key, arrival_key, departure_key, inbox_key, interest, interrupt_key, wait_key

_WATCHED = ("agents", "inbox", "waits")
_DIRS = (*_WATCHED, "resolutions", "waves", "mcptasks", "logs", "quarantine", "locks", "tmp")


class FileBus(Facade[FileInbox, FileUpkeep]):
    """A bus in a directory. Cheap to open; safe for many processes at once.

    `create=False` is for read-only commands: a bus that does not exist is an error then,
    instead of a new empty `.wavebus` left wherever the command was run.
    """

    multi_host = False  # one machine: pids decide liveness
    recovers_all_at_once = False  # a sweep of every inbox lists every claims/ folder
    reliable_changes = False  # the kernel drops events past its queue's size, unreported

    def __init__(self, root: str | os.PathLike[str], *, create: bool = True) -> None:
        self.root = Path(root).expanduser().absolute()
        self.url = str(self.root)
        if not create and not (self.root / "inbox").is_dir():
            raise BusError(
                f"no bus at {self.root}: nothing was spawned or sent there yet; "
                "pass --bus PATH (or set WAVEWAIT_BUS) to the bus you mean"
            )
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            for d in _DIRS:
                (self.root / d).mkdir(mode=0o700, exist_ok=True)
        except OSError as e:
            raise BusError(
                f"cannot create the bus at {self.root}: {e.strerror}; "
                "pass --bus PATH (or set WAVEWAIT_BUS) to a writable folder"
            ) from e
        self.dir = BusDir(self.root)
        self.agents = FileAgents(self.dir)
        self.waits = FileWaits(self.dir)
        self.inbox = FileInbox(self.dir, self.waits)
        self.dir.tell = self.inbox.deliver
        self.wave_docs = FileWaveDocs(self.dir)
        self.mcp_tasks = FileMcpTasks(self.dir)
        self.upkeep = FileUpkeep(self.dir, self.inbox, self.waits)
        self._watcher: inotify.Watch | watch.Subscription | None = None  # one per bus, for every subscription
        self._fanout = watch.Fanout()
        self.upkeep.tidy()

    # ------------------------------------------------------------------ agents
    async def put_agent(self, agent: Agent) -> None:
        self.agents.put(agent)

    async def get_agent(self, agent_id: str) -> Agent | None:
        return self.agents.get(agent_id)

    async def get_agents(self, agent_ids: Sequence[str]) -> dict[str, Agent]:
        return self.agents.get_many(agent_ids)

    async def list_agents(self) -> list[Agent]:
        """Every record, read in a worker thread: 100,000 of them take seconds, which would
        hold the caller's event loop (a face's keys and frames) all that time."""
        return await asyncio.to_thread(self.agents.list)

    async def update_agent(self, agent_id: str, **changes: Any) -> Agent | None:
        """Change fields of an agent under its lock; None if there is no such agent."""
        return self.agents.modify(agent_id, None, None, changes)

    async def note_preview(self, agent_id: str, **changes: Any) -> None:
        self.agents.note_preview(agent_id, changes)

    async def transition(self, agent_id: str, status: str, only_from: Sequence[str], **changes: Any) -> Agent | None:
        """Move an agent to `status` if it is in `only_from`; None when nothing changed."""
        return self.agents.modify(agent_id, status, only_from, changes)

    # ------------------------------------------------------------------ items
    async def deliver(self, item: Item) -> Item:
        return self.inbox.deliver(item)

    async def take(self, inbox: str, wait_id: str, taker: str, *, end: bool = False) -> list[Item]:
        try:
            return await self.inbox.take(inbox, wait_id, taker)
        finally:
            if end:
                await self.end_wait(wait_id)

    async def history(self, inbox: str, limit: int = 100) -> list[Item]:
        return await self.inbox.read_history(inbox, limit)

    # ------------------------------------------------------------------ waits
    async def register_wait(
        self,
        record: WaitRecord,
        *,
        claim_from: str | None = None,
        types: Sequence[str] | None = None,
        limit: int = 1,
    ) -> list[Item]:
        self.waits.register(record)
        return [] if claim_from is None else await self.inbox.claim_next(claim_from, record.id, types, limit)

    async def update_wait(self, wait_id: str, progress: str) -> None:
        self.waits.update(wait_id, progress)

    async def end_wait(self, wait_id: str) -> None:
        self.waits.end(wait_id)

    async def list_waits(self) -> list[WaitRecord]:
        return self.waits.list()

    async def interrupt(self, wait_id: str) -> bool:
        return self.waits.interrupt(wait_id)

    async def interrupted(self, wait_id: str) -> bool:
        return self.waits.interrupted(wait_id)

    async def get_resolution(self, key: str) -> dict[str, Any] | None:
        return self.waits.get_resolution(key)

    async def put_resolution(self, key: str, value: dict[str, Any]) -> None:
        self.waits.put_resolution(key, value)

    # ------------------------------------------------------------------ wave documents
    async def get_wave_doc(self, wave: str, kind: str) -> dict[str, Any] | None:
        return self.wave_docs.get(wave, kind)

    async def update_wave_doc(self, wave: str, kind: str, change: wave_docs.DocChange) -> dict[str, Any] | None:
        return self.wave_docs.update(wave, kind, change)

    async def subscribe_waves(self, wave: str | None = None) -> watch.Subscription:
        return self.wave_docs.subscribe(wave)

    # ------------------------------------------------------------------ MCP tasks
    async def put_mcp_task(self, task: McpTask) -> None:
        self.mcp_tasks.put(task)

    async def get_mcp_task(self, task_id: str) -> McpTask | None:
        return self.mcp_tasks.get(task_id)

    async def transition_mcp_task(
        self, task_id: str, status: str, only_from: Sequence[str], **changes: Any
    ) -> McpTask | None:
        return self.mcp_tasks.transition(task_id, status, only_from, changes)

    async def delete_mcp_task(self, task_id: str) -> None:
        self.mcp_tasks.delete(task_id)

    # ------------------------------------------------------------------ changes, upkeep
    async def subscribe(
        self,
        *,
        inboxes: Sequence[str] = (),
        agents: bool | Sequence[str] = False,
        waits: bool = False,
        wait_id: str | None = None,
        senders: Sequence[str] | None = None,
        claim_group: str | None = None,
    ) -> watch.Keyed:
        """Changes by key, from the bus's one watcher (shared by every wait of this bus)."""
        spec = interest(
            inboxes=inboxes, agents=agents, waits=waits, wait_id=wait_id, senders=senders, claim_group=claim_group
        )
        boxes = [self.dir.box(i) for i in inboxes]  # its new/ must exist for the watcher to see into it
        sub = self._fanout.add(
            watch.Keyed(self._fanout, spec.keys, spec.prefixes, routes=spec.routes, trees=spec.trees, pool=spec.pool)
        )
        if self._watcher is None:  # before the caller reads: the inotify watches are in place
            if inotify.AVAILABLE:
                self._watcher = inotify.watch_bus(self.url, self._changed_paths)
                self.dir.sees_inbox = self._watcher.watching
            else:  # watchfiles: every folder under these, each inbox too
                self._watcher = watch.subscribe([self.root / d for d in _WATCHED], on_paths=self._changed_paths)
                self.dir.sees_inbox = lambda _box: True
            self.dir.watched = True
        if boxes and isinstance(self._watcher, inotify.Watch):
            self._watcher.want(boxes)  # only the inboxes subscribed to: two watches each
        return sub

    def _changed_paths(self, paths: set[str]) -> None:
        """Paths the watcher saw (in its thread) as keys for the fan-out; a path of no
        known shape (a root itself, say) means anything may have changed.

        An item's name says who sent it, so its arrival is dispatched as `arrival_key`, once
        per item (a pool wakes one waiter per item), after the inbox's kept listings learnt
        of it (the waits it wakes find it); an inbox folder itself (a new inbox) means
        anything in it may have changed; its new/ folder, that an item left."""
        keys: list[str] = []
        root = self.url + os.sep
        for path in paths:
            parts = path[len(root) :].split(os.sep) if path.startswith(root) else []
            if len(parts) == 2 and parts[0] == "agents" and parts[1].endswith(".json"):
                keys.append(agent_key(parts[1][:-5]))
            elif len(parts) >= 2 and parts[0] == "inbox":
                box = parts[1]
                if len(parts) == 2:
                    keys.append(inbox_key(box))
                    self.inbox.renew(box)
                elif parts[2] != "new":
                    continue
                elif len(parts) == 3:
                    keys.append(departure_key(box))
                else:
                    sender = sender_of(parts[3])
                    keys.append(inbox_key(box) if sender is None else arrival_key(box, sender))
                    self.inbox.arrival(box, parts[3])
            elif len(parts) == 2 and parts[0] == "waits":
                wait_id, _, suffix = parts[1].rpartition(".")
                keys.append(wait_key(wait_id))
                if suffix == "interrupt":
                    keys.append(interrupt_key(wait_id))
                    self.waits.flagged.add(wait_id)
            else:
                keys.append(watch.EVERYTHING)
                self.waits.flagged.update(list(self.waits.mine))  # any of them may have been flagged
                self.inbox.renew_all()  # every kept listing may miss something
        if keys:
            self._fanout.dispatch(keys)

    def log_path(self, agent_id: str) -> str:
        return str(self.root / "logs" / f"{check_id(agent_id, 'agent')}.log")

    def tasks(self, queue: str) -> FileTaskStore:
        return FileTaskStore(self.dir, queue, self.agents.get)

    async def close(self) -> None:
        self.waits.close()
        self.agents.close()
        await self.inbox.history.close()
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None
            self.dir.watched = False
