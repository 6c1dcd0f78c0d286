"""Acknowledged delivery over MCP: a wait's items leave the inbox once the client has read its response.

A consuming tool runs its wait with `Control(hold=True)` and hands the resulting
`Delivery` to `Deliveries.hold` before it returns. Then:

- a `notifications/cancelled` for the request before the acknowledgement (the client gave
  up on it and drops the late response) releases the items to the head of the inbox. On
  stdio it is applied as its line is read, so it counts before anything that follows it,
  stdin's end included. The MCP SDK's client checks a result against the tool's output
  schema before its caller gets it, and lists the tools first if it has not: a caller that
  gives up then cancels that `tools/list`, so a cancel of a `tools/list` asked while a
  response was out counts against that response too;
- otherwise, `grace` seconds after the response was written (time for a cancel that crossed
  it to arrive), and on stdio once the client has read it, the items are acknowledged: they
  move to the inbox's history;
- the session ending first (stdin closed, or the server stopped by a signal) settles each
  response by what the client did with it: on stdio the kernel says whether the client read
  the line (wire.py): read, it is acknowledged (a one-shot script that printed its answer and
  exited gets nothing twice); unread, never written or cancelled, it goes back, and so does
  one read in a session that never listed the tools (nothing shows its caller got it). Over
  HTTP, cancels and listings count as their POSTs arrive, and the end of a session (its
  DELETE), or of the connection of a request that has none, acknowledges a reply sent whole
  whose client then listed the tools and had that listing answered, or had listed them
  before (without a session, the connection must then have been closed, not reset). The
  rest goes back. The end of a reply's own connection within a session gives it back only
  if it was not yet sent whole: the handshake-era client resets the stream it read. Without
  a session, the listing may come on another connection of the client's pool: a reply sent
  whole whose connection closed first waits out the grace for a listing from the same host
  (`awaiting`), acknowledged once one is answered, given back if none came or it was given up.

The duplicates left (the next wait delivers the items again with the same `message_id`):
a server killed (SIGKILL) while its response sat unread or inside the grace, a client that
never lists the tools, a 2026-era HTTP client that lists them more than the grace after
its answer's connection closed (docs/reliability.md).
"""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import math
import re
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import TaskGroup

from ..core.delivery import Delivery, delivering
from .front import HEAD, head_id
from .wire import Wire

log = logging.getLogger(__name__)

#: seconds between a response's write and its acknowledgement: a client's cancel that
#: crossed the response on the wire arrives well within it
GRACE = 2.0
#: seconds between looks at whether the client has read a response still unread after the grace
READ_POLL = 0.1
#: seconds the settler lets go by between its steps at least: the responses whose grace ended
#: meanwhile are settled together (under load, one step per response cost more than the ack)
SETTLE_STEP = 0.05
#: seconds an ended connection is remembered: the client side of a closed TCP connection
#: keeps its port in TIME_WAIT for 60 s, so its key is not reused sooner
ENDED_KEPT = 60.0
#: a stdin line longer than this is neither a cancel nor a `tools/list` (delivery's concern)
FOLLOWUP_LINE = 1 << 14
#: request ids remembered (read, and cancelled) on stdin
IDS_KEPT = 4096


@dataclass
class _Held:
    delivery: Delivery
    connection: str  # `connection_key` of the request's connection
    request_id: str
    peer: str  # the TCP connection it came on (HTTP), whose end also ends it
    written: float | None = None  # when its response reached the client's pipe (monotonic)
    cancelled: bool = False  # the client gave the request up (set through `Deliveries._give_up`)
    line: int | None = None  # on stdio, the SDK line its response went out on
    serial: int = -1  # its key among the held (`Deliveries.hold`)
    #: `tools/list` requests (`_request_key`) asked once it was out
    followups: set[str] = field(default_factory=set)
    unlisted: bool = False  # its connection had not listed the tools when this was held
    sent: bool = False  # HTTP: the response carrying it was sent whole (its POST's reply ended)
    answered: bool = False  # HTTP: a follow-up `tools/list` was answered whole
    #: HTTP without a session: its connection closed after the response was sent whole, with
    #: no listing yet; a listing from the same host within the grace (its client's pool may
    #: open a new connection for it) settles it
    awaiting: bool = False


class _GaveUp(Exception):
    """The client cancelled a request whose response is out: what it carried goes back."""


class Deliveries:
    """The held deliveries of one server, until each is settled. Each is listed on its own
    (two HTTP clients may both use request id 1) and found by (connection, request id)."""

    def __init__(self, grace: float = GRACE, *, writes_reported: bool = False) -> None:
        self.grace = grace
        self.writes_reported = writes_reported  # True on stdio: `written` is called per response
        self.wire: Wire | None = None  # on stdio: what the client has read
        self._held: dict[int, _Held] = {}
        self._serial = itertools.count()
        # what the settler (`_settle`) has to do, so that no step costs O(held): the held
        # responses not yet written, by request id (stdio); the written ones, by when their
        # grace ends; the ones past it whose line the client has not read yet; the given up
        self._unwritten: dict[str, list[_Held]] = {}
        self._due: list[tuple[float, int]] = []
        self._reading: list[int] = []
        self._urgent: list[int] = []
        self._wake = anyio.Event()
        self._tg: TaskGroup | None = None
        self._stopped = False  # `running` has ended: the session is over
        #: connections that ended lately (key → when, oldest first): a call whose wait finished
        #: just after its client went away has no one to answer
        self._ended: OrderedDict[str, float] = OrderedDict()
        #: request ids read on stdin lately (stdio: ids are unique in a session)
        self._seen: OrderedDict[str, None] = OrderedDict()
        #: connections that listed the tools lately ("" on stdio)
        self._listed: OrderedDict[str, None] = OrderedDict()
        #: requests cancelled lately (`_request_key`): a tool may return after its cancel
        self._cancelled_ids: OrderedDict[str, None] = OrderedDict()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Deliveries]:
        """Settle deliveries while the server runs; at its end, settle every delivery not yet
        settled (`_end_session`), and return only once the bus has them."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self._settle)
            try:
                yield self
            finally:
                self._tg, self._stopped = None, True
                with anyio.CancelScope(shield=True):
                    await self._end_session()
                tg.cancel_scope.cancel()

    async def hold(self, request_context: Any, request_id: object, delivery: Delivery) -> None:
        """Fence (`ClaimLost` if the claims are gone), then keep the delivery until settled.
        The caller releases the delivery if this raises."""
        await delivery.confirm()
        held = _Held(delivery, connection_key(request_context), str(request_id), _peer(request_context))
        if self._stopped or held.connection in self._ended or held.peer in self._ended:
            await delivery.release()  # its session ended while the wait finished: no one to answer
            return
        if self._tg is None:  # not serving through `running` (an in-process test server)
            await delivery.ack()
            return
        serial = next(self._serial)
        held.serial = serial
        self._held[serial] = held
        if _request_key(held.connection, held.request_id) in self._cancelled_ids:
            self._give_up(held)  # its cancel came in while the tool was finishing
        held.unlisted = held.connection not in self._listed
        if self.writes_reported:
            self._unwritten.setdefault(held.request_id, []).append(held)
        else:
            self._written(held)

    def _written(self, held: _Held) -> None:
        """Its response is out: its grace runs from now."""
        held.written = now = time.monotonic()
        if not self._due:
            self._wake.set()
        heapq.heappush(self._due, (now + self.grace, held.serial))

    def _give_up(self, held: _Held) -> None:
        """The client gave the request up: what it carried goes back at the settler's next step."""
        if not held.cancelled:
            held.cancelled = True
            self._urgent.append(held.serial)
            self._wake.set()

    async def _settle(self) -> None:
        """Settle every held delivery, one step at a time (one task for all of them, not a
        task group per response): acknowledge a delivery once the grace after its write has
        passed with no cancel and, on stdio, the client has read its response (a slow reader's
        reply, or one held in the front while the pipe is full, is not taken yet); release it on
        a cancel. When the session ends first (stdin closed, a signal), this task is cancelled
        and what is still held is left to `_end_session`, which settles it by what the client read."""
        while True:
            now = time.monotonic()
            while self._due and self._due[0][0] <= now:
                self._reading.append(heapq.heappop(self._due)[1])
            ready: list[int] = []
            unread: list[int] = []
            for serial in self._reading:
                held = self._held.get(serial)
                if held is None or held.cancelled:
                    continue  # settled already (its connection ended, HTTP), or given up
                (ready if self._taken(held) else unread).append(serial)
            self._reading = unread
            ready += self._urgent
            self._urgent = []
            for serial in ready:
                if (held := self._drop(serial)) is not None and self._tg is not None:
                    if self.wire is not None and held.line is not None:
                        self.wire.forget(held.line)
                    self._tg.start_soon(self._finish, held)
            # nothing wakes on a client's read of a pipe (it is writable long before it is
            # drained): a response past its grace and still unread is looked at again
            wait = READ_POLL if self._reading else max(SETTLE_STEP, self._due[0][0] - now) if self._due else math.inf
            self._wake = anyio.Event()
            with anyio.move_on_after(wait):
                await self._wake.wait()

    def _drop(self, serial: int) -> _Held | None:
        """Take a delivery out of the held ones, to be settled by the caller."""
        held = self._held.pop(serial, None)
        if held is not None and (same := self._unwritten.get(held.request_id)) and held in same:
            same.remove(held)
            if not same:
                del self._unwritten[held.request_id]
        return held

    @staticmethod
    async def _finish(held: _Held) -> None:
        try:
            async with delivering(held.delivery):
                if held.cancelled or (held.awaiting and not held.answered):
                    raise _GaveUp  # cancelled, or its connection closed and no listing followed
        except _GaveUp:
            pass  # released: the client cancelled the request

    def _taken(self, held: _Held) -> bool:
        """Whether the client has read this stdio response; True where that cannot be watched.
        False while a writer holds the wire's lock (blocked on a full pipe): the next step looks again."""
        wire, line = self.wire, held.line
        if wire is None or line is None:
            return True
        return wire.read(line, wait=False)

    async def _end_session(self) -> None:
        """The session is over: what the client read is acknowledged, the rest goes back."""
        await self._ack_read(lambda held: True)
        await self._release_where(lambda held: True)

    async def _ack_read(self, ended: Callable[[_Held], bool], *, orderly: bool = True) -> None:
        """Acknowledge the held deliveries of ended connections that the client read (`_read`)."""
        read = [(s, h) for s, h in self._held.items() if ended(h) and self._read(h, orderly=orderly)]
        for serial, held in read:
            self._drop(serial)
            await self._ack(held)

    async def _ack(self, held: _Held) -> None:
        with anyio.CancelScope(shield=True):
            try:
                await held.delivery.ack()
            except Exception as e:  # unacknowledged, its claims go back through recovery: a duplicate, not a loss
                log.warning("wavewait mcp: could not acknowledge what wait %s delivered: %s", held.delivery.wait_id, e)

    def _read(self, held: _Held, *, orderly: bool = True) -> bool:
        """Whether the client read this response and did not cancel its request. In a session
        that had not listed the tools, the response must also have been followed by a
        `tools/list`: the MCP SDK's client lists them to check a result against the tool's
        schema before its caller gets it, and a caller that gave up before that sends nothing
        (or, over HTTP, cancels the listing, or closes its connection before it is answered).
        Over HTTP the response must have been sent whole; with the tools listed before, a
        connection without a session must have been closed, not reset (bytes left unread)."""
        if held.cancelled:
            return False
        if held.connection != "":
            return held.sent and (held.answered or (not held.unlisted and orderly))
        if (held.unlisted and not held.followups) or self.wire is None or held.line is None:
            return False
        return self.wire.read(held.line)

    async def _release_where(self, ended: Callable[[_Held], bool]) -> int:
        """Release the held deliveries of ended connections, in the order they were taken,
        so each item goes back to its place at the head of its inbox."""
        gone = [(serial, held) for serial, held in self._held.items() if ended(held)]
        for serial, _ in gone:
            self._drop(serial)
        for _, held in gone:
            with anyio.CancelScope(shield=True):
                try:
                    await held.delivery.release()
                except Exception as e:  # the others still go back; recovery returns these once we are gone
                    log.warning("wavewait mcp: could not give back what wait %s took: %s", held.delivery.wait_id, e)
        return len(gone)

    def ended(self, connection: str, *, orderly: bool = False) -> None:
        """A client connection ended: an HTTP session deleted or a connection closed by its
        client (`orderly`), or a connection reset. The end of a request's session (of its TCP
        connection, when it has none) settles its delivery by what the client did (`_read`).
        The end of its own connection in a session that goes on gives back a response not yet
        sent whole; one sent whole waits for the session's end or the grace (the handshake-era
        client resets the stream it read its answer on, and says with a cancel that its caller
        gave up). Callable from a transport's callback; it runs in the background."""
        now = time.monotonic()
        self._ended[connection] = now
        self._ended.move_to_end(connection)
        while now - next(iter(self._ended.values())) >= ENDED_KEPT:
            self._ended.popitem(last=False)
        if self._tg is not None and any(
            connection in (h.connection, h.peer) or _listing_on(h, connection) for h in self._held.values()
        ):
            self._tg.start_soon(self._end_connection, connection, orderly)

    async def _end_connection(self, connection: str, orderly: bool) -> None:
        for held in self._held.values():
            if _listing_on(held, connection):
                self._give_up(held)  # a listing that followed it was given up: so was the call
            elif held.connection == connection and orderly and _may_list_elsewhere(held):
                held.awaiting = True
        await self._ack_read(lambda held: held.connection == connection and not held.awaiting, orderly=orderly)
        await self._release_where(
            lambda held: (
                (held.connection == connection and not held.awaiting) or (held.peer == connection and not held.sent)
            )
        )

    def sent_whole(self, connection: str, request_ids: set[str]) -> None:
        """HTTP: the reply of the POST that carried these requests ended, sent whole: a held
        response, or a `tools/list` that followed one."""
        keys = {_request_key(connection, rid) for rid in request_ids}
        for held in self._held.values():
            if held.connection == connection:
                held.sent = held.sent or held.request_id in request_ids
            held.answered = held.answered or not held.followups.isdisjoint(keys)

    def response_line(self, request_id: object, line: int) -> None:
        """The response to `request_id` is SDK line `line`: watch where it ends on the wire
        (stdio: one session, ids are unique)."""
        for held in self._unwritten.get(str(request_id), ()):
            if held.line is None:
                held.line = line
                if self.wire is not None:
                    self.wire.watch(line)

    def flushed(self, request_ids: list[object]) -> None:
        """The flush carrying these responses returned: they reached the client's pipe."""
        for rid in request_ids:
            for held in self._unwritten.pop(str(rid), ()):
                self._written(held)

    def cancelled(self, request_context: Any, request_id: object) -> None:
        connection, rid = connection_key(request_context), str(request_id)
        for held in self._held.values():
            if (held.connection, held.request_id) == (connection, rid):
                self._give_up(held)

    def read_line(self, line: bytes, connection: str = "") -> None:
        """A request from a client before the SDK sees it: a line from stdin (connection ""),
        or an HTTP POST's body on a session or connection. Cancels apply in the order they
        came, so before the end that follows them. A cancel counts against a held response when
        it names its request, a `tools/list` asked once the response was out (the client's
        schema check), or on stdio a request never read here (the client gave it up before
        writing it)."""
        rid = head_id(line[:HEAD])
        if rid is not None:
            if connection == "":
                _remember(self._seen, str(rid))
            if b'"tools/list"' in line[:HEAD] and _method(line) == "tools/list":
                _remember(self._listed, connection)
                key, host = _request_key(connection, str(rid)), _host(connection)
                for held in self._held.values():
                    if held.connection == connection and (held.line is not None or held.sent):  # out
                        held.followups.add(key)
                    elif host is not None and _may_list_elsewhere(held) and _host(held.connection) == host:
                        held.followups.add(key)  # a 2026-era client lists on another connection of its pool
            return
        if len(line) > FOLLOWUP_LINE or b"notifications/cancelled" not in line:
            return
        try:
            msg = json.loads(line)
        except ValueError:
            return
        if not isinstance(msg, dict) or msg.get("method") != "notifications/cancelled":
            return
        params = msg.get("params")
        if not isinstance(params, dict):
            return
        if (cancelled := params.get("requestId")) is None:
            return
        key = str(cancelled)
        _remember(self._cancelled_ids, _request_key(connection, key))  # its tool may return later
        unseen = connection == "" and key not in self._seen
        for held in self._held.values():
            if held.connection == connection and (
                held.request_id == key
                or _request_key(connection, key) in held.followups
                or (unseen and held.line is not None)
            ):
                self._give_up(held)

    @property
    def waiting_for_writes(self) -> bool:
        return bool(self._unwritten)


def connection_key(request_context: Any) -> str:
    """Which client connection a request came on: request ids are unique only within one.
    On HTTP the session (`mcp-session-id`), else the TCP connection (a 2026-era exchange
    has no session); "" on stdio, where a server has one connection."""
    headers = getattr(getattr(request_context, "request", None), "headers", None)
    if headers is not None and (session := headers.get("mcp-session-id")):
        return session_key(str(session))
    return _peer(request_context)


def _peer(request_context: Any) -> str:
    """The TCP connection an HTTP request came on ("" on stdio). The SDK's client abandons a
    call over HTTP by closing the connection its response streams on, in either era."""
    client = getattr(getattr(request_context, "request", None), "client", None)
    return peer_key(client.host, client.port) if client is not None else ""


def _host(connection: str) -> str | None:
    """The client host of an HTTP connection without a session (`peer_key`), else None."""
    return connection[len("peer ") :].rpartition(":")[0] if connection.startswith("peer ") else None


def _may_list_elsewhere(held: _Held) -> bool:
    """A response sent whole over HTTP without a session, whose client had not listed the
    tools on its connection, and no listing answered for it yet: the MCP SDK's client lists
    them next (its schema check), on another connection of its pool when that one is busy."""
    return (
        _host(held.connection) is not None and held.sent and held.unlisted and not held.answered and not held.cancelled
    )


def _listing_on(held: _Held, connection: str) -> bool:
    """Whether a listing that followed this response, not answered yet, came on `connection`."""
    return not held.answered and any(k.startswith(connection + "\n") for k in held.followups)


def _request_key(connection: str, request_id: str) -> str:
    return f"{connection}\n{request_id}"


def session_key(session_id: str) -> str:
    return f"session {session_id}"


def peer_key(host: str, port: int) -> str:
    return f"peer {host}:{port}"


#: the head of a response as the SDK writes it (compact JSON, `jsonrpc` first, then `id`)
_RESPONSE_HEAD = re.compile(r'\{"jsonrpc":"2\.0","id":(-?\d+|"(?:[^"\\]|\\.)*"),"(?:result|error)":')


def response_ids(chunk: bytes) -> set[str]:
    """The ids of the JSON-RPC responses in a part of an HTTP reply: a JSON body, or the
    `data:` lines of a stream's events (read from their heads)."""
    heads = (
        [chunk] if chunk.startswith(b"{") else [ln[5:].lstrip() for ln in chunk.split(b"\n") if ln.startswith(b"data:")]
    )
    return {
        str(json.loads(m.group(1))) for h in heads if (m := _RESPONSE_HEAD.match(h[:HEAD].decode("utf-8", "replace")))
    }


def response_id(line: str) -> object | None:
    """The id of a JSON-RPC response (result or error) on this line, else None: read from its
    head (a fan-in's answer can be megabytes), else, for another shape, from the whole line."""
    if m := _RESPONSE_HEAD.match(line):
        head_id: object = json.loads(m.group(1))
        return head_id
    if not line.startswith('{"jsonrpc":"2.0","id":'):
        try:
            msg = json.loads(line)
        except ValueError:
            return None
        if isinstance(msg, dict) and "id" in msg and ("result" in msg or "error" in msg):
            rid: object = msg["id"]
            return rid
    return None


def _remember(ids: OrderedDict[str, None], key: str) -> None:
    ids[key] = None
    if len(ids) > IDS_KEPT:
        ids.popitem(last=False)


def _method(line: bytes) -> object:
    """The method of the JSON-RPC message on this line (a short one: a `tools/list`)."""
    if len(line) > FOLLOWUP_LINE:
        return None
    try:
        msg = json.loads(line)
    except ValueError:
        return None
    return msg.get("method") if isinstance(msg, dict) else None


def cancel_handler(deliveries: Deliveries) -> Callable[[Any, Any], Any]:
    """A `notifications/cancelled` handler: a request cancelled after its tool returned
    gives back what its wait took."""

    async def on_cancelled(ctx: Any, params: Any) -> None:
        request_id = getattr(params, "request_id", None)
        if request_id is not None:
            deliveries.cancelled(ctx, request_id)

    return on_cancelled
