"""The MCP server: tool registration, strict input checks, error mapping, transports.

Input is checked twice, and both layers answer with an `isError` result that names the
field and what is allowed, having changed nothing: the published JSON schema (types,
ranges, enums, no unknown fields) and then the core's own rules (ids, prefixes, bodies).
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import signal
import socket
import sys
import typing
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any, cast

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.stdio import stdio_server
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.message import SessionMessage
from mcp.types import (
    CallToolResult,
    CancelledNotificationParams,
    InputRequiredResult,
    jsonrpc_message_adapter,
)
from mcp.types import Tool as MCPTool
from mcp_types import SERVER_INFO_META_KEY
from pydantic import ValidationError

from ..core.bus import Bus, open_bus
from ..core.errors import WavewaitError
from ..core.limits import MAX_AGENT_IDS, MAX_LIST_LEN, MAX_REQUEST_BYTES, shown
from ..core.proc import settle_heap
from .delivery import Deliveries, cancel_handler, peer_key, response_ids, session_key
from .flight_tools import register_flight_tools
from .front import HEAD, Front, Oversized, head_id, too_large
from .question_tools import register_question_tools
from .queue_tools import open_queue, register_queue_tools
from .settings import Settings
from .stdio import LoopStdin, ReportingStdout, claimed_stdout
from .tasks_ext import TasksExtension
from .toolkit import error
from .tools import register, stop_orphans
from .wire import Wire

log = logging.getLogger(__name__)

INSTRUCTIONS = (
    "wavewait lets you fan work out to agents ('flights' of a 'wave') and then sit still until "
    "they report. After dispatching, call one of its wait tools instead of sleep, a polling "
    "loop, calling list_agents again, or ending your turn to 'check back later': wait (messages "
    "from agents; a fan-in with from_agents), wait_for_event (typed events), wait_agent (agents "
    "idle or closed), wave_wait_for_signal (files). A wait blocks without using tokens until its "
    "condition holds, then returns at once. A timeout is a normal result, not an error: it "
    "carries the partial state, the flights keep running, and its hint says what to call next "
    "(wait again only on what is pending). Messages and events a wait returns are consumed: "
    "keep them. Agents are named by id or a unique prefix of at least 4 characters. Results "
    "are JSON."
)
#: argument lists longer than the default bound: a fan-in names every flight of its wave
LIST_BOUNDS = {"from_agents": MAX_AGENT_IDS, "agentIds": MAX_AGENT_IDS}


def _allowed(prop: dict[str, Any]) -> str:
    """What a schema property allows, in words, for error messages."""
    options = prop.get("anyOf", [prop])
    words = []
    for o in options:
        t = o.get("type")
        if t == "null":
            continue
        if "enum" in o or "const" in o:
            words.append(" or ".join(repr(v) for v in o.get("enum", [o.get("const")])))
        elif t == "array":
            words.append(f"a list of {o.get('items', {}).get('type', 'value')}s")
        elif t in ("number", "integer"):
            w = "a whole number" if t == "integer" else "a number"
            if "minimum" in o:
                w += f" ≥ {o['minimum']:g}"
            if "exclusiveMinimum" in o:
                w += f" > {o['exclusiveMinimum']:g}"
            words.append(w)
        elif t:
            words.append(f"a {t}")
    out = " or ".join(words) or "a value"
    if prop.get("default") is not None:
        out += f" (default {prop['default']!r})"
    return out


def explain(tool: str, exc: ValidationError, schema: dict[str, Any]) -> str:
    """One line per bad field: which field, what was wrong, what is allowed."""
    props = schema.get("properties", {})
    lines = []
    for err in exc.errors():
        loc = [str(p) for p in err["loc"]]
        field = loc[0] if loc else "arguments"
        where = field + "".join(f"[{p}]" for p in loc[1:])
        got = "" if err["type"] == "missing" else f", got {shown(err.get('input'))}"
        lines.append(f"{where}: {err['msg'].lower()}{got}; allowed: {_allowed(props.get(field, {}))}")
    return f"{tool}: invalid arguments, nothing was done.\n" + "\n".join(lines)


def _trust_results(server: MCPServer) -> None:
    """The SDK validates a tool's `CallToolResult` against the tool's output model before it
    sends it. Ours are dumped from the core's own pydantic models (toolkit.reply), valid by
    construction, so that second pass over a fan-in of thousands of entries only delays its
    answer. The output schema stays published, and clients still check results against it."""
    for tool in server._tool_manager.list_tools():  # MCPServer has no public registry of its tools
        returns = typing.get_type_hints(tool.fn, include_extras=True).get("return")
        if typing.get_origin(returns) is typing.Annotated and typing.get_args(returns)[0] is CallToolResult:
            tool.fn_metadata.output_model = None


class WaveServer(MCPServer):
    """`MCPServer` with strict arguments (no unknown fields) and the core's errors as `isError` results."""

    _schemas: dict[str, dict[str, Any]] | None = None  # each tool's input schema, once all are registered

    spawned: list[str]  # the flights spawn_agent started in this session
    deliveries: Deliveries  # what consuming waits took, until their responses are out
    tasks: TasksExtension  # waits run as MCP tasks (tasks_ext.py)
    hidden: frozenset[str] = frozenset()  # callable but not listed (a leaf task's enqueue_task)

    async def list_tools(self, include_hidden: bool = False) -> list[MCPTool]:
        return [
            t.model_copy(update={"input_schema": {**t.input_schema, "additionalProperties": False}})
            for t in await super().list_tools()
            if include_hidden or t.name not in self.hidden
        ]

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context | None = None
    ) -> CallToolResult | InputRequiredResult:
        if self._schemas is None:
            self._schemas = {t.name: t.input_schema for t in await self.list_tools(True)}
            _trust_results(self)
        schema = self._schemas.get(name)
        if schema is not None:
            known = set(schema.get("properties", {}))
            unknown = sorted(set(arguments) - known)
            if unknown:
                return error(
                    f"{name}: unknown argument(s) {', '.join(unknown)}; nothing was done. "
                    f"Allowed: {', '.join(sorted(known))}"
                )
        # counted before the SDK validates them: its validation is one step of the event loop
        for field, value in arguments.items():
            most = LIST_BOUNDS.get(field, MAX_LIST_LEN)
            if isinstance(value, (list, dict)) and len(value) > most:
                return error(f"{name}: {field}: at most {most:,} entries, got {len(value):,}; nothing was done")
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as e:
            cause = e.__cause__
            if isinstance(cause, WavewaitError):
                return error(f"{name}: {cause}")
            if isinstance(cause, ValidationError) and schema is not None:
                return error(explain(name, cause, schema))
            raise


def _idle_tracing(middleware: object) -> bool:
    """The SDK's OpenTelemetry middleware while no tracer provider is installed: it opens a
    span that goes nowhere around every request (a few percent of a delivered message's CPU).
    The SDK's documented opt-out is to drop it from `middleware`; with a provider installed
    (opentelemetry-instrument, say) it stays."""
    from mcp.server._otel import OpenTelemetryMiddleware
    from opentelemetry import trace

    return isinstance(middleware, OpenTelemetryMiddleware) and isinstance(
        trace.get_tracer_provider(), trace.ProxyTracerProvider
    )


def build(bus: Bus, settings: Settings) -> WaveServer:
    """A server whose tools all act on `bus` as `settings.caller`."""
    tasks = TasksExtension(bus, settings.caller)
    server = WaveServer("wavewait", instructions=INSTRUCTIONS, log_level="WARNING", extensions=[tasks])
    server.tasks = tasks
    server.deliveries = Deliveries() if settings.ack_grace is None else Deliveries(settings.ack_grace)
    server.spawned = register(server, bus, settings, server.deliveries)
    register_flight_tools(server, bus, settings)  # read_output, reply, merge_wave
    register_question_tools(server, bus, settings)  # ask, and approve (a claude flight's permission prompts)
    low = server._lowlevel_server  # the SDK's own notification registry; MCPServer has no public one
    tasks.meta = {SERVER_INFO_META_KEY: low.server_info_stamp}
    low.middleware = [m for m in low.middleware if not _idle_tracing(m)]
    low.add_notification_handler(
        "notifications/cancelled", CancelledNotificationParams, cancel_handler(server.deliveries)
    )
    return server


async def serve(settings: Settings, front: Front | None = None) -> None:
    """Open the bus and serve on the chosen transport until the client or a signal ends it.

    On stdio with a `front` (see `front`), the SDK reads and writes the front's pipes.
    """
    here = os.path.dirname(os.path.abspath(sys.argv[0])) if sys.argv and sys.argv[0] else ""
    if here and os.path.isfile(os.path.join(here, "wavewait")):  # flights inherit PATH: let them find us
        os.environ["PATH"] = os.pathsep.join([here, os.environ.get("PATH", "")])
    bus = await open_bus(settings.bus)
    try:
        server = build(bus, settings)
        if settings.queue:
            server.hidden |= register_queue_tools(server, bus, settings, await open_queue(bus, settings))
        settle_heap()
        if settings.transport == "http":
            async with server.deliveries.running(), server.tasks.running():
                await serve_http(server, settings.host, settings.port, settings.token)
            return
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP, signal.SIGINT) as signals:
            await _serve_stdio(server, front, signals)
            # stdin closed or a signal: the host's session is over, and with it the only one
            # waiting on the flights it spawned (on HTTP there is no such end: the flights
            # stay). The signals are still caught: a host TERMs its server 2 s after closing
            # its stdin, and a flight half stopped would run on under a dead record
            if stopped := await stop_orphans(bus, settings, server.spawned):
                log.warning("wavewait mcp: session ended; stopped its running flights %s", ", ".join(stopped))
    finally:
        await bus.close()


async def _serve_stdio(server: WaveServer, front: Front | None, signals: AsyncIterator[signal.Signals]) -> None:
    """Serve until stdin closes or one of `signals` arrives (hosts end their servers with a
    signal right after the last response): either way, what was written is acknowledged and
    what was not goes back to its inbox before the process ends."""
    server.deliveries.writes_reported = True
    async with anyio.create_task_group() as tg:

        async def stop_on_signal() -> None:
            async for sig in signals:
                log.info("wavewait mcp: %s: settling deliveries, then stopping", sig.name)
                tg.cancel_scope.cancel()
                return

        tg.start_soon(stop_on_signal)
        async with AsyncExitStack() as stack:
            stdin: object  # None: the SDK reads stdin itself
            if front is not None:  # its pipe read on the loop too, so a signal stops the server at once
                server.deliveries.wire = front.wire  # the front writes the client's fd
                stdin = await LoopStdin.open(front.sdk_stdin.fileno()) or anyio.wrap_file(front.sdk_stdin)
                if isinstance(stdin, LoopStdin):  # once the SDK is up, it reads stdin itself
                    stdin.take_over, front.hand_over = front.take_stdin, True
                # and, once the front has read its last line, writes stdout itself
                stdout = ReportingStdout(front.sdk_stdout, server.deliveries, direct=True, front=front)
                stack.callback(front.sdk_stdout.close)
            else:  # the wire stays open until the deliveries are settled: they ask it what was read
                wire = await stack.enter_async_context(claimed_stdout())
                server.deliveries.wire = Wire.of(wire)
                stdout = ReportingStdout(wire, server.deliveries, server.deliveries.wire)
                stdin = await LoopStdin.open()
            async with server.deliveries.running(), server.tasks.running():
                await _run_stdio(server, stdout, stdin)
        tg.cancel_scope.cancel()


async def _run_stdio(server: WaveServer, stdout: ReportingStdout, stdin: object = None) -> None:
    """As `MCPServer.run_stdio_async`, with a stdout that reports each response it flushed
    (and stdin as any async iterable of lines: the SDK only iterates it)."""
    async with stdio_server(stdin=cast("anyio.AsyncFile[str] | None", stdin), stdout=stdout) as (read, write):
        if isinstance(stdin, LoopStdin):  # an oversized request is answered on the server's own wire
            stdin.on_line = server.deliveries.read_line  # cancels count in the order they came

            async def answer(error: dict[str, Any]) -> None:
                await write.send(SessionMessage(jsonrpc_message_adapter.validate_python(error)))

            stdin.answer = answer
        low = server._lowlevel_server
        await low.run(read, write, low.create_initialization_options())


# --------------------------------------------------------------------------- HTTP
LOOPBACK = ("127.0.0.1", "localhost", "[::1]")


class Guard:
    """ASGI wrapper: only our own Host/Origin, and only with the bearer token. A session
    deleted by its client (a DELETE with `mcp-session-id`) is reported to `deliveries`, and
    so is each POST whose reply was sent whole (the responses to the requests it carried)."""

    def __init__(self, app: Any, token: str, hosts: set[str], deliveries: Deliveries | None = None) -> None:
        self.app, self.token, self.hosts, self.deliveries = app, token.encode(), hosts, deliveries

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        host, origin = headers.get("host", ""), headers.get("origin")
        if host not in self.hosts:
            return await _plain(send, 421, f"Host {host!r} is not served here")
        if origin is not None and origin.removeprefix("http://").removeprefix("https://") not in self.hosts:
            return await _plain(send, 403, f"Origin {origin!r} is not allowed")
        auth = headers.get("authorization", "")
        scheme, _, given = auth.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.token):
            return await _plain(
                send,
                401,
                "a bearer token is required (Authorization: Bearer TOKEN)",
                [(b"www-authenticate", b'Bearer realm="wavewait"')],
            )
        over, body = await _bounded_body(receive, MAX_REQUEST_BYTES)
        if over is not None:  # a JSON-RPC error, which MCP clients show, with HTTP's own status
            error = json.dumps(too_large(over, MAX_REQUEST_BYTES)).encode()
            return await _reply(send, 413, error, b"application/json")
        session, client = headers.get("mcp-session-id"), scope.get("client")
        if scope["method"] == "POST" and self.deliveries is not None:
            connection = session_key(session) if session else peer_key(*client) if client else ""
            data = b"".join(m.get("body", b"") for m in body if m["type"] == "http.request")
            self.deliveries.read_line(data, connection)  # a cancel or a listing counts before what follows
            send = _reporting_send(send, self.deliveries, connection, _request_ids(data))
        await self.app(scope, _replay(body, receive), send)
        if scope["method"] == "DELETE" and session and self.deliveries is not None:
            self.deliveries.ended(session_key(session), orderly=True)


def _request_ids(data: bytes) -> set[str]:
    """The id of the JSON-RPC request a POST carries, read from its head (a body may be
    megabytes, which the SDK parses anyway); a batch, which a client may still send, whole."""
    if not data.lstrip().startswith(b"["):
        rid = head_id(data[:HEAD])  # a request's, not a response's (a client's answer to us)
        return set() if rid is None or b'"method"' not in data[:HEAD] else {str(rid)}
    try:
        parsed = json.loads(data)
    except ValueError:
        return set()
    return {str(m["id"]) for m in parsed if isinstance(m, dict) and "id" in m and "method" in m}


def _reporting_send(send: Any, deliveries: Deliveries, connection: str, ids: set[str]) -> Any:
    """`send` for a POST's reply: once its last body part is written, its requests' responses
    were sent whole (on the session, else on the connection the request came on)."""

    async def reporting(message: dict[str, Any]) -> None:
        await send(message)
        if not ids or message["type"] != "http.response.body":
            return
        if not message.get("more_body", False):  # the reply ended: what it carried is out
            deliveries.sent_whole(connection, ids)
        elif done := response_ids(message.get("body", b"")) & ids:  # an event of a stream, sent as one part
            deliveries.sent_whole(connection, done)

    return reporting


async def _bounded_body(receive: Any, limit: int) -> tuple[Oversized | None, list[dict[str, Any]]]:
    """Read the request's body, holding at most `limit` bytes of it: (None, its messages),
    or (its start and size, []) when it is longer, having been read to its end and dropped
    as it came."""
    held: list[dict[str, Any]] = []
    head, size = b"", 0
    while True:
        message = await receive()
        if message["type"] != "http.request":  # the client went away: let the app see it
            held.append(message)
            return None, held
        body = message.get("body", b"")
        if len(head) < HEAD:
            head += body[: HEAD - len(head)]
        size += len(body)
        if size <= limit:
            held.append(message)
        else:
            held.clear()
        if not message.get("more_body", False):
            return (Oversized(head, size) if size > limit else None), held


def _replay(held: list[dict[str, Any]], receive: Any) -> Any:
    """`receive` for the app: the body read by `_bounded_body`, then the client's own."""

    async def replayed() -> dict[str, Any]:
        return held.pop(0) if held else await receive()

    return replayed


async def _plain(send: Any, status: int, text: str, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    await _reply(send, status, (text + "\n").encode(), b"text/plain; charset=utf-8", extra)


async def _reply(
    send: Any, status: int, body: bytes, content_type: bytes, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode()),
                *(extra or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _reporting_protocol(deliveries: Deliveries) -> type[Any]:
    """uvicorn's HTTP/1.1 protocol, telling `deliveries` when a client's connection ends: a
    2026-era exchange has no session, and the SDK's client abandons one by closing it. A
    close (its end of stream) is orderly; an error (a reset: the client closed with our
    bytes unread) is not."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class ReportingProtocol(H11Protocol):
        def connection_lost(self, exc: Exception | None) -> None:
            super().connection_lost(exc)
            if self.client is not None:
                deliveries.ended(peer_key(*self.client), orderly=exc is None)

    return ReportingProtocol


async def serve_http(server: WaveServer, host: str, port: int, token: str) -> None:
    """Streamable HTTP on `host:port` (port 0 picks one; the address goes to stderr)."""
    import uvicorn

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    port = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    names = {shown, *LOOPBACK} if host in ("127.0.0.1", "::1", "localhost") else {shown}
    hosts = {f"{n}:{port}" for n in names}
    app = server.streamable_http_app(
        host=host,
        max_request_body_size=MAX_REQUEST_BYTES,  # one limit on both transports (Guard answers first)
        transport_security=TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=sorted(hosts),
            allowed_origins=sorted(f"http://{h}" for h in hosts) + sorted(f"https://{h}" for h in hosts),
        ),
    )
    deliveries = server.deliveries
    config = uvicorn.Config(
        Guard(app, token, hosts, deliveries), log_level="warning", lifespan="on", http=_reporting_protocol(deliveries)
    )
    sock.listen(2048)  # a client that read the address below may connect at once: the kernel queues it
    print(f"wavewait mcp: streamable HTTP on http://{shown}:{port}/mcp", file=sys.stderr, flush=True)
    await uvicorn.Server(config).serve(sockets=[sock])
