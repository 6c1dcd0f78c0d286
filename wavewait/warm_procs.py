"""The warm processes (wavewait/warm.py) as a person sees them: the folder they listen in,
which run (`wavewait warm status`), and ending them (`wavewait warm stop`). Standard library
only, and none of wavewait: the launcher and the CLI both use it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import Any

#: the warm process's program (`python -c SERVE KEY PATH`): how `running` knows one
SERVE = "from wavewait.warm import serve; serve()"


def folder() -> str | None:
    """The private folder of this user's warm processes (made if need be); None if it is not
    private (then nothing starts warm: a socket there could be anyone's)."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    path = os.path.join(base, "wavewait-warm") if base and os.path.isdir(base) else f"/tmp/wavewait-warm-{os.getuid()}"
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    st = os.lstat(path)
    if not os.path.isdir(path) or os.path.islink(path) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None
    return path


def running(where: str | None = None) -> list[dict[str, Any]]:
    """This user's warm processes (in `where`, else their folder): pid, key, and whether it
    takes commands (its socket is there) or is still importing or ending."""
    import fcntl

    where = where or folder()
    if where is None or not os.path.isdir(where):
        return []
    out = []
    for name in sorted(os.listdir(where)):
        if not name.endswith(".lock"):
            continue
        k = name[: -len(".lock")]
        try:
            fd = os.open(os.path.join(where, name), os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                continue  # nobody holds it: no warm process for this key
            except BlockingIOError:
                pass
            text = os.pread(fd, 32, 0).decode(errors="replace").strip()
        finally:
            os.close(fd)
        if text.isdigit() and is_warm(int(text)):
            out.append({"pid": int(text), "key": k, "serving": os.path.exists(os.path.join(where, f"{k}.sock"))})
    return out


def stop(where: str | None = None, grace: float = 10.0) -> dict[str, Any]:
    """Ask each warm process to end (SIGTERM): it takes no new command and ends once the
    commands it runs have ended. Waits up to `grace` seconds; those still running commands
    then are listed as `ending`."""
    where = where or folder()
    asked = running(where)
    for w in asked:
        with contextlib.suppress(ProcessLookupError):
            os.kill(w["pid"], signal.SIGTERM)
    deadline = time.monotonic() + grace
    left = asked
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [w for w in left if is_warm(w["pid"])]
    gone = [w for w in asked if w not in left]
    return {"folder": where, "stopped": gone, "ending": left}


def is_warm(pid: int) -> bool:
    """Whether `pid` is a warm process of this user (its command line says so)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
        owner = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return False
    return owner == os.getuid() and SERVE.encode() in argv
