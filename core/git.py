"""Running git: an argv list, a timeout, bounded output, and one lock of ours per repository.

Git takes its own lock files (`index.lock`, a ref's `.lock`, `packed-refs.lock`) and fails
instead of waiting when one is held, so twenty flights started at once would trip over each
other. Every change wavewait makes to a repository's worktrees and branches runs under
`repo_lock`, and a git failure that names a held lock (someone else's git, say) is retried
until a deadline.
"""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .errors import WavewaitError

GIT_TIMEOUT = 60.0  # one git command
LOCK_DEADLINE = 120.0  # waiting for our lock, or retrying past git's own
OUTPUT_LIMIT = 16 << 20  # bytes of stdout read from one command; more is cut
STDERR_LIMIT = 64 << 10
#: what git says when one of its lock files is held: worth another try
_LOCKED = re.compile(r"(?i)\.lock\b.*(exists|unable|could not)|unable to (create|lock)|cannot lock ref|is locked")


class GitError(WavewaitError):
    """A git command failed; the message says which and what git said."""


@dataclass(frozen=True)
class Output:
    code: int
    out: bytes
    err: str
    cut: bool = False  # stdout was longer than the limit


def run(
    args: Sequence[str],
    cwd: str | Path,
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = GIT_TIMEOUT,
    limit: int = OUTPUT_LIMIT,
) -> Output:
    """`git ARGS` in `cwd`: its exit code, at most `limit` bytes of stdout, the end of stderr."""
    full_env = {**os.environ, **(env or {}), "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
    try:
        p = subprocess.Popen(
            ["git", *args],
            cwd=cwd,
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    except OSError as e:
        raise GitError(f"cannot run git ({e.strerror or e}); install git or put it on PATH") from e
    assert p.stdout is not None and p.stderr is not None
    err = bytearray()
    stderr = p.stderr

    def drain_err() -> None:
        while chunk := stderr.read(8192):
            if len(err) < STDERR_LIMIT:
                err.extend(chunk[: STDERR_LIMIT - len(err)])

    reader = threading.Thread(target=drain_err, daemon=True)
    reader.start()
    timer = threading.Timer(timeout, p.kill)
    timer.start()
    out = bytearray()
    cut = False
    try:
        while chunk := p.stdout.read(65536):
            if len(out) + len(chunk) > limit:
                out.extend(chunk[: limit - len(out)])
                cut = True
                p.kill()
                break
            out.extend(chunk)
        code = p.wait()
    finally:
        timer.cancel()
        reader.join(timeout=5)
        p.stdout.close()
        p.stderr.close()
    if code < 0 and not cut:
        raise GitError(f"git {' '.join(args[:3])} took longer than {timeout:g} s and was stopped")
    return Output(code, bytes(out), err.decode("utf-8", "replace"), cut)


def check(
    args: Sequence[str],
    cwd: str | Path,
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = GIT_TIMEOUT,
    retry_locked: float = 0.0,
    limit: int = OUTPUT_LIMIT,
) -> bytes:
    """`run`, raising GitError on failure; with `retry_locked` seconds, a failure that names
    one of git's held lock files is tried again (with a growing pause) until then."""
    deadline = time.monotonic() + retry_locked
    pause = 0.02
    while True:
        r = run(args, cwd, env=env, timeout=timeout, limit=limit)
        if r.code == 0:
            return r.out
        if not (_LOCKED.search(r.err) and time.monotonic() + pause < deadline):
            raise GitError(f"git {' '.join(args)} failed (exit {r.code}): {r.err.strip()[-800:]}")
        time.sleep(pause)
        pause = min(pause * 2, 0.5)


def text(args: Sequence[str], cwd: str | Path, *, retry_locked: float = 0.0) -> str:
    """`check`'s stdout as text, stripped."""
    return check(args, cwd, retry_locked=retry_locked).decode("utf-8", "replace").strip()


@contextmanager
def repo_lock(lock_file: Path, deadline: float = LOCK_DEADLINE) -> Iterator[None]:
    """Hold our lock on one repository (an flock on `lock_file`), waiting up to `deadline`.

    Each holder opens the file itself, so threads of one process exclude each other too. The
    file may be removed by its holder (`prune` tidies a repository's folder once nothing of it
    is left): a lock taken on a file no longer at its path protects nothing, so it is taken
    again on the file that is there now.
    """
    end = time.monotonic() + deadline
    fd = _locked(lock_file, end, deadline)
    try:
        yield
    finally:
        os.close(fd)  # releases the flock


def _locked(lock_file: Path, end: float, deadline: float) -> int:
    """The descriptor of `lock_file`, flocked, and still the file at that path."""
    pause = 0.005
    while True:
        lock_file.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(lock_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except FileNotFoundError:  # its folder went between the two (a prune): make it again
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            if time.monotonic() > end:
                raise GitError(
                    f"the repository stayed locked by another wavewait for {deadline:g} s ({lock_file}); "
                    "try again, or remove the lock file if no wavewait is running"
                ) from None
            time.sleep(pause)
            pause = min(pause * 2, 0.1)
            continue
        held = os.fstat(fd)
        try:
            there = os.stat(lock_file)
        except FileNotFoundError:
            there = None
        if there is not None and (there.st_dev, there.st_ino) == (held.st_dev, held.st_ino):
            return fd
        os.close(fd)  # removed while we waited for it: take the one at the path now
