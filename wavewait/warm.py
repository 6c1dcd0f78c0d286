"""Warm starts: `wavewait mcp` and `wavewait spawn` run in a fork of a process that has imported
everything already, instead of importing it all again (docs/architecture.md, "Warm starts").

Every flight starts its own `wavewait mcp`, and importing the MCP SDK and the core costs about
1 s of CPU; a wave of 20 flights would burn 20 CPU-seconds before any work. So the first such
command (which runs as before, "cold") also starts a warm process: one per user, interpreter,
code and settings (`key`), that imports everything once and listens on a Unix socket in a
private folder. A later command connects, hands over its stdin, stdout and stderr, arguments,
environment, folder and umask, and the warm process forks a child that runs the command with
them; the command's own process (the launcher, standard library only) stays as the process
its host started: it passes on signals, exits with the child's exit code, and the child ends
with it (it watches a pipe only the launcher holds). The child's place in the process tree, by
which a flight's processes are known (core/identity.py), is the launcher's: the warm process
reads who connected from the kernel (SO_PEERCRED), not from anything the launcher says.

Anything that makes the child not the process the command would have been starts cold
instead: another interpreter, flags, `sys.path`, code (any .py file's size or time), installed
packages, WAVEWAIT_* or PYTHON* setting read at import, namespace,
cgroup, resource limit, user or groups; a sandboxed launcher (no_new_privs). WAVEWAIT_WARM=0
turns warm starts off.
The warm process ends after `IDLE` seconds without a command, or once its code changed, when
no child of its own is left; `wavewait warm stop` (a SIGTERM) makes it stop taking commands
and end so too (`running` and `stop` below; docs/cli.md, "The warm process").
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import resource
import select
import selectors
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, NoReturn

from .command import command_of
from .warm_procs import SERVE, folder

OFF = "WAVEWAIT_WARM"  # "0": every command starts cold
#: seconds a warm process with no command and no child waits before it ends
IDLE = float(os.environ.get("WAVEWAIT_WARM_IDLE", "900"))
#: read only while a command runs, never at import (tests/cli/test_warm.py checks): they may
#: differ between the children of one warm process
PER_COMMAND = frozenset(
    {
        "WAVEWAIT_AGENT_COMMAND",
        "WAVEWAIT_AGENT_ID",
        "WAVEWAIT_AGENT_SECRET",
        "WAVEWAIT_BIN",
        "WAVEWAIT_BUS",
        "WAVEWAIT_LOG_DIR",
        "WAVEWAIT_MCP_PRERENDER",
        "WAVEWAIT_MCP_TOKEN",
        "WAVEWAIT_PARENT_ID",
        "WAVEWAIT_PRESETS",
        "WAVEWAIT_PROJECT_DIR",
        "WAVEWAIT_QUEUE",
        "WAVEWAIT_TASK_ID",
        "WAVEWAIT_TASK_TYPES",
        "WAVEWAIT_WARM",
        "WAVEWAIT_WARM_IDLE",
        "WAVEWAIT_WORKTREES",
    }
)
#: what the warm process imports before it listens: what `mcp` and `spawn` use
#: (the SDK's server imports rich as each server starts, for its log handler: 0.1 s of CPU)
PRELOAD = (
    "wavewait.cli",
    "wavewait.mcp.server",
    "wavewait.core.supervise",
    "wavewait.core.bus.postgres",
    "rich.console",
    "rich.logging",
)
YIELD = 5.0  # seconds a new warm process imports only on CPU nothing else wants
INSTALLED = (".dist-info", ".egg-info", ".pth", ".egg-link")  # in a site folder: what is installed
MAX_REQUEST = 4 << 20  # arguments and environment of one command
HEADER = struct.Struct("!I")
FDS = 4  # stdin, stdout, stderr, and the launcher's life line


# --------------------------------------------------------------------------- what a warm process is for
def key() -> str:
    """What a child inherits from the warm process instead of from its command, hashed: a
    command may use a warm process only if this is the same for both."""
    h = hashlib.sha256()
    env = sorted(
        (k, v) for k, v in os.environ.items() if k.startswith(("WAVEWAIT_", "PYTHON")) and k not in PER_COMMAND
    )
    h.update(repr((sys.executable, sys.version, sys.path, _inherited_flags(), sys._xoptions, env)).encode())
    h.update(repr((os.getuid(), os.getgid(), sorted(os.getgroups()), os.getpriority(os.PRIO_PROCESS, 0))).encode())
    limits = [getattr(resource, n) for n in dir(resource) if n.startswith("RLIMIT_")]
    h.update(repr(sorted((n, resource.getrlimit(n)) for n in limits)).encode())
    for ns in ("cgroup", "ipc", "mnt", "net", "pid", "user", "uts"):
        try:
            h.update(os.readlink(f"/proc/self/ns/{ns}").encode())
        except OSError:
            h.update(b"-")
    try:
        with open("/proc/self/cgroup", "rb") as f:
            h.update(f.read())
    except OSError:
        h.update(b"-")
    for p in sys.path:  # the distributions installed, by name and version
        if p.endswith(("site-packages", "dist-packages")):
            with contextlib.suppress(OSError):
                h.update(repr(sorted(n for n in os.listdir(p) if n.endswith(INSTALLED))).encode())
    package = os.path.dirname(os.path.abspath(__file__))
    for root, dirs, files in os.walk(package, followlinks=True):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                st = os.stat(os.path.join(root, name))
                h.update(f"{root}/{name}:{st.st_mtime_ns}:{st.st_size}\n".encode())
    return h.hexdigest()[:32]


def sandboxed() -> bool:
    """Whether this process was confined as no warm process is (no_new_privs: seccomp, landlock)."""
    try:
        with open("/proc/self/status", "rb") as f:
            return any(line.split() == [b"NoNewPrivs:", b"1"] for line in f)
    except OSError:
        return True


#: the commands that always start cold: the TUI (`wavewait` alone, or with options only) and
#: `demo` hold their terminal (its size, job control), which a child in a session of its own
#: has not; `serve` runs TUIs in terminals of its own; `warm` manages the warm processes
COLD = frozenset({"demo", "serve", "warm"})
#: the commands that start a warm process when none is up: a wave runs one of each per flight.
#: The others (`send`, `wait`, `agents`, ...) run in one that is up, and never start one, so a
#: person who only reads the bus leaves no process behind
STARTS = frozenset({"mcp", "spawn"})


def wanted(argv: list[str]) -> bool:
    """Whether the command may run in a warm process: every one but `COLD` (wavewait/launch.py
    has checked that `mcp` serves on stdio)."""
    command = command_of(argv)
    named = command is not None and command not in COLD
    return os.environ.get(OFF) != "0" and named and not sandboxed()


# --------------------------------------------------------------------------- the launcher's side
def run(argv: list[str]) -> None:
    """Run the command in a fork of the warm process and exit as it does; return (having run
    nothing) when there is none to use, after starting one for the next command (`STARTS`)."""
    where = folder()
    if where is None:
        return None
    k = key()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        _at(where, f"{k}.sock", sock.connect)
    except OSError:
        sock.close()
        if command_of(argv) in STARTS:
            _start(where, k)
        return None
    life_r, life_w = os.pipe()
    mask = os.umask(0)
    os.umask(mask)
    request = json.dumps(
        {"argv": sys.argv, "env": dict(os.environ), "cwd": os.getcwd(), "umask": mask}, ensure_ascii=False
    ).encode("utf-8", "surrogateescape")
    try:
        socket.send_fds(sock, [HEADER.pack(len(request))], [0, 1, 2, life_r])
        sock.sendall(request)
        reply = _line(sock)
    except OSError:
        reply = b""
    os.close(life_r)
    if not reply.startswith(b"pid "):  # refused, or the warm process is ending: nothing ran
        sock.close()
        os.close(life_w)
        return None
    child = int(reply.split()[1])
    try:
        _follow(sock, child)
    except BaseException as e:  # the command is the child's now: never run it a second time, cold
        print(f"wavewait: lost the warm child {child} of this command: {e!r}", file=sys.stderr)
    os._exit(_internal_error())


def _follow(sock: socket.socket, child: int) -> None:
    """Be the command's process while `child` runs it: pass signals on, end as it ends."""
    # the child holds the command's stdio now; hold nothing a reader or writer would wait on
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, _forward(child))
    status = _line(sock).split()
    if status[:1] == [b"signal"]:
        got = int(status[1])
        signal.signal(got, signal.SIG_DFL)
        os.kill(os.getpid(), got)
        from .core.exits import signalled  # (the signal did not end this process)

        os._exit(signalled(got))
    if status[:1] == [b"exit"]:
        os._exit(int(status[1]))
    # the warm process ended before the child: its exit code is lost; wait for its end all the same
    with contextlib.suppress(ProcessLookupError):
        select.select([os.pidfd_open(child)], [], [])
    print("wavewait: the warm process ended before this command; its exit code is lost", file=sys.stderr)
    os._exit(_internal_error())


def _internal_error() -> int:
    """The exit code of a command whose own end is unknown (imported only when it is needed:
    the launcher imports nothing of the core before it hands its command over)."""
    from .core.exits import Exit

    return Exit.INTERNAL_ERROR


def _at(where: str, name: str, act: Callable[[str], None]) -> None:
    """`act` (bind, connect) on the socket `name` in folder `where`, through the folder's
    descriptor: a socket's path is at most 107 bytes, and `where` may be long."""
    fd = os.open(where, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        act(f"/proc/self/fd/{fd}/{name}")
    finally:
        os.close(fd)


def _forward(child: int) -> Callable[[int, Any], None]:
    def handler(sig: int, _frame: Any) -> None:
        with contextlib.suppress(ProcessLookupError):  # it has ended; its status is on its way
            os.kill(child, sig)

    return handler


def _line(sock: socket.socket, limit: int = 256) -> bytes:
    """One short line from `sock` (b"" at its end)."""
    out = b""
    while not out.endswith(b"\n") and len(out) < limit:
        got = sock.recv(1)
        if not got:
            break
        out += got
    return out


def _start(where: str, k: str) -> None:
    """Start the warm process for `k`, detached (a grandchild: nobody here has to reap it),
    unless one is starting (it holds its lock)."""
    import fcntl

    lock = os.open(os.path.join(where, f"{k}.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return  # one is starting
    finally:
        os.close(lock)
    # -P: the folder it starts in is not put first on sys.path (core/proc.py, `python_module`)
    argv = [sys.executable, *_flags(), "-P", "-c", SERVE, k, json.dumps(sys.path)]
    pid = os.fork()
    if pid == 0:
        try:
            if os.fork() == 0:
                os.setsid()
                os.chdir("/")  # holds no user's folder (its sys.path is the launcher's, absolute)
                null = os.open(os.devnull, os.O_RDWR)
                log = os.open(os.path.join(where, f"{k}.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                os.dup2(null, 0)
                os.dup2(null, 1)
                os.dup2(log, 2)
                os.closerange(3, 65536)
                os.execv(sys.executable, argv)
        finally:
            os._exit(0)  # the middle process: nobody reads its code
    os.waitpid(pid, 0)


def _inherited_flags() -> tuple[object, ...]:
    """The interpreter flags a forked command keeps, for `key`: not `safe_path` (`-P`), which
    shapes only the sys.path a process starts with (the warm process is started with it, and
    takes its launcher's sys.path whole)."""
    return tuple(getattr(sys.flags, f) for f in sys.flags.__match_args__ if f != "safe_path")


def _flags() -> list[str]:
    """The interpreter flags of this process, for the warm process (part of `key`)."""
    out = [f"-X{k}" if v is True else f"-X{k}={v}" for k, v in sys._xoptions.items()]
    f = sys.flags
    for flag, opt in (("isolated", "-I"), ("no_site", "-S"), ("no_user_site", "-s"), ("ignore_environment", "-E")):
        if getattr(f, flag):
            out.append(opt)
    out += ["-O"] * f.optimize + ["-B"] * f.dont_write_bytecode
    return out


# --------------------------------------------------------------------------- the warm process
def serve() -> None:
    """The warm process (`-c` with its key and the launcher's `sys.path`): import, listen, fork."""
    import fcntl
    import importlib

    want, path = sys.argv[1], json.loads(sys.argv[2])
    sys.argv = sys.argv[:1]
    sys.path[:] = path
    where = folder()
    if where is None:
        return
    lock = os.open(os.path.join(where, f"{want}.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return  # another one started first
    os.ftruncate(lock, 0)
    os.write(lock, f"{os.getpid()}\n".encode())  # who holds it: for people and tests
    # imported on the CPU nothing else wants, for a while: the cold start that started this
    # one goes first; past YIELD seconds (a machine kept busy) it imports as any process
    main = threading.get_native_id()

    def normal() -> None:  # as the commands it forks run
        os.sched_setscheduler(main, os.SCHED_OTHER, os.sched_param(0))

    os.sched_setscheduler(main, os.SCHED_IDLE, os.sched_param(0))
    timer = threading.Timer(YIELD, normal)
    timer.start()
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError as e:  # an optional part (psycopg): a child imports it if it needs it
            print(f"wavewait warm: not preloaded: {name}: {e}", file=sys.stderr)
    timer.cancel()
    timer.join()
    normal()
    if key() != want:
        print("wavewait warm: the code or settings changed while importing; not serving", file=sys.stderr)
        return
    if threading.active_count() != 1:
        print(f"wavewait warm: {threading.enumerate()} run after importing: a fork would be unsafe", file=sys.stderr)
        return
    sock_path = os.path.join(where, f"{want}.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    tmp = f"{sock_path}.{os.getpid()}"
    _at(where, os.path.basename(tmp), listener.bind)
    listener.listen(64)
    os.rename(tmp, sock_path)
    ino = os.stat(sock_path).st_ino
    from .core.proc import freeze_heap_for_forks  # imported with the rest above

    freeze_heap_for_forks()
    try:
        Warm(listener, want).loop()
    finally:
        _tidy(where, want, ino)


def _tidy(where: str, want: str, ino: int) -> None:
    """Remove this warm process's socket (if it is still its own), lock, and log if empty."""
    sock_path = os.path.join(where, f"{want}.sock")
    log_path = os.path.join(where, f"{want}.log")
    try:
        if os.stat(sock_path).st_ino == ino:
            os.unlink(sock_path)
        if os.stat(log_path).st_size == 0:
            os.unlink(log_path)
        os.unlink(os.path.join(where, f"{want}.lock"))  # held: no other warm process for this key runs
    except OSError:
        pass


class Warm:
    """The warm process's loop: accept a command, fork its child, report the child's end."""

    def __init__(self, listener: socket.socket, want: str) -> None:
        self.listener, self.want = listener, want
        self.children: dict[int, socket.socket] = {}  # child pid: its launcher's connection
        self.wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the loop (set_wakeup_fd)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        self.stopping = False  # asked to end (SIGTERM): take no command, end once none runs
        signal.signal(signal.SIGTERM, self._stop)  # (the wakeup fd wakes the loop)
        self.sel = selectors.DefaultSelector()
        self.sel.register(listener, selectors.EVENT_READ)
        self.sel.register(self.wake_r, selectors.EVENT_READ)

    def loop(self) -> None:
        last = time.monotonic()
        checked = last
        listening = True
        while listening or self.children:
            for sel_key, _ in self.sel.select(timeout=30):
                if sel_key.fileobj is self.listener:
                    self._accept()
                    last = time.monotonic()
                else:
                    while True:
                        try:
                            os.read(self.wake_r, 512)
                        except BlockingIOError:
                            break
            self._reap()
            now = time.monotonic()
            if listening and not self.children and now - last > IDLE:
                return
            if listening and now - checked > 30:  # code changed: a new key, a new warm process
                checked = now
                if key() != self.want:
                    self.stopping = True
            if listening and self.stopping:  # its commands go on; it ends with the last of them
                listening = False
                self.sel.unregister(self.listener)
                self.listener.close()

    def _stop(self, _sig: int, _frame: Any) -> None:
        self.stopping = True

    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        fds: list[int] = []
        try:
            conn.settimeout(5)  # a launcher that stalls holds up the others only this long
            pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
            if uid != os.getuid():
                raise OSError("another user")
            head, fds, _flags, _addr = socket.recv_fds(conn, HEADER.size, FDS, socket.MSG_CMSG_CLOEXEC)
            if len(head) != HEADER.size or len(fds) != FDS:
                raise OSError("a short request")
            (size,) = HEADER.unpack(head)
            if size > MAX_REQUEST:
                raise OSError("a request too large")
            data = bytearray()
            while len(data) < size:
                got = conn.recv(min(1 << 16, size - len(data)))
                if not got:
                    raise OSError("a short request")
                data += got
            request = json.loads(data.decode("utf-8", "surrogateescape"))
            start = _start_time(pid)
        except (OSError, ValueError) as e:
            print(f"wavewait warm: refused a command: {e}", file=sys.stderr)
            conn.close()
            for fd in fds:
                os.close(fd)
            return
        child = os.fork()
        if child == 0:
            try:
                self._child(conn, fds, request, (pid, start))
            except BaseException:
                import traceback

                traceback.print_exc()
            finally:
                os._exit(_internal_error())
        for fd in fds:
            os.close(fd)
        self.children[child] = conn

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is None:
                continue
            said = (
                f"signal {os.WTERMSIG(status)}"
                if os.WIFSIGNALED(status)
                else f"exit {os.waitstatus_to_exitcode(status)}"
            )
            with contextlib.suppress(OSError):  # its launcher has gone
                conn.sendall(f"{said}\n".encode())
            conn.close()

    def _child(
        self, conn: socket.socket, fds: list[int], request: dict[str, Any], launcher: tuple[int, str | None]
    ) -> NoReturn:
        """In the forked child: become the command's process, then run it."""
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGHUP, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        self.sel.close()
        self.listener.close()
        os.close(self.wake_r)
        for other in self.children.values():
            other.close()
        os.setsid()  # its own process group: a group signal of its own never reaches the warm process
        os.chdir(request["cwd"])  # (what may fail goes first: said in the warm process's log)
        os.environ.clear()
        os.environ.update(request["env"])
        time.tzset()
        os.umask(request["umask"])
        sys.argv = request["argv"]
        for i, fd in enumerate(fds[:3]):
            os.dup2(fd, i)
            os.close(fd)
        life = fds[3]
        _reopen_stdio()
        from .core import identity

        identity.adopt_ancestry(*launcher)
        conn.sendall(f"pid {os.getpid()}\n".encode())  # from here on the command is this process's
        conn.close()
        threading.Thread(target=_die_with, args=(life,), name="wavewait-warm-life", daemon=True).start()
        from .command import crashed, run
        from .core.exits import Exit, signalled

        code: int = Exit.OK
        try:
            run(sys.argv[1:])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (Exit.OK if e.code is None else Exit.INTERNAL_ERROR)
            if not isinstance(e.code, int | None):
                print(e.code, file=sys.stderr)
        except KeyboardInterrupt:
            code = signalled(signal.SIGINT)
        except BaseException:
            code = crashed()
        _finish()
        os._exit(code)


def _start_time(pid: int) -> str | None:
    from .core.proc import pid_start

    return pid_start(pid)


def _reopen_stdio() -> None:
    """New `sys.stdin`, `stdout` and `stderr` on the command's descriptors, made as the
    interpreter makes them (a terminal's stdout is line-buffered, a pipe's is not)."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        old = getattr(sys, name)
        writes = mode == "w"
        stream = io.TextIOWrapper(
            open(fd, mode + "b", closefd=False),  # noqa: SIM115 -- the process's own stdio, open until it ends
            encoding=old.encoding,
            errors=old.errors,
            line_buffering=writes and os.isatty(fd),
            write_through=writes and old.write_through,
        )
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _die_with(life: int) -> None:
    """End this process at once when its launcher ends (the read sees the end of its pipe):
    its host took it down, as it would have taken this process down."""
    try:
        while os.read(life, 64):
            pass
    finally:
        os.kill(os.getpid(), signal.SIGKILL)


def _finish() -> None:
    """What the interpreter does on the way out: join its threads, run atexit, flush."""
    import atexit

    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
