"""What an agent CLI wrote of its own run in its session file: the usage of a run cut short.

A flight's events say what it cost only at moments the CLI chooses: Codex's `--json` gives
tokens once a turn completes (`turn.completed`), so a Codex flight killed mid-turn has no
usage in its events; Claude Code's `stream-json` gives each model message's usage as the
message starts (its output count is then 1) and money only in its final `result`. Both
CLIs also keep a session file of their own, written as the run goes, and it knows more:

- Codex (0.16x): `$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<thread_id>.jsonl`
  (`CODEX_HOME` defaults to `~/.codex`), one `event_msg` `token_count` after every model
  response, whose `info.total_token_usage` is the thread's total so far. The thread id is
  in the first `--json` event (`thread.started`).
- Claude Code (2.1.x): `$CLAUDE_CONFIG_DIR/projects/<folder>/<session_id>.jsonl` (default
  `~/.claude`), one `assistant` entry per model message with its whole usage, and, when
  the process ends on a signal it can catch (TERM), a `cost-state` entry with the
  session's `totalCostUSD` and tokens per model. The session id is in every event.

Both were checked with the real CLIs killed while waiting on their model. What a request
still in flight at the kill had cost is in neither file: the usage found is that of the
model responses the CLI had received.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from .model import Usage

SESSION_ID = re.compile(r"[0-9A-Za-z][0-9A-Za-z_-]{7,127}")  # a uuid in practice; never a path
TAIL_BYTES = 16 << 20  # read at most this much of a session file, from its end
CHUNK = 256 << 10  # read from the end this much at a time: a token count is near it


def usage_of(fmt: str, session_id: str | None, env: Mapping[str, str] | None = None) -> Usage | None:
    """The run's usage so far, as its CLI's session file says (None: no file, or nothing in it).

    `fmt` is the flight's event format (`claude` or `codex`), `env` its environment (where
    the CLI keeps its files: CODEX_HOME, CLAUDE_CONFIG_DIR, HOME).
    """
    path = find(fmt, session_id, env)
    return None if path is None else read(fmt, path)


def find(fmt: str, session_id: str | None, env: Mapping[str, str] | None = None) -> Path | None:
    """The session file of `session_id` (a Codex thread id, a Claude Code session id), if any."""
    if not session_id or not SESSION_ID.fullmatch(session_id):
        return None
    env = os.environ if env is None else env
    home = Path(env.get("HOME") or Path.home())
    try:
        if fmt == "codex":
            root = Path(env.get("CODEX_HOME") or home / ".codex") / "sessions"
            found = sorted(root.glob(f"*/*/*/rollout-*-{session_id}.jsonl"))
        elif fmt == "claude":
            root = Path(env.get("CLAUDE_CONFIG_DIR") or home / ".claude") / "projects"
            found = sorted(root.glob(f"*/{session_id}.jsonl"))
        else:
            return None
    except OSError:
        return None
    return found[-1] if found else None


def read(fmt: str, path: Path) -> Usage | None:
    """The usage in a session file (None when it has none, or cannot be read)."""
    try:
        return _codex(path) if fmt == "codex" else _claude(path) if fmt == "claude" else None
    except OSError:
        return None  # unreadable: the usage stays what the events said


def _codex(path: Path) -> Usage | None:
    """The last `token_count`'s thread total."""
    for e in _entries_backwards(path, b'"token_count"'):
        payload = _dict(e.get("payload"))
        total = _dict(_dict(payload.get("info")).get("total_token_usage"))
        if payload.get("type") == "token_count" and total:
            return Usage(
                input_tokens=_int(total.get("input_tokens")),
                output_tokens=_int(total.get("output_tokens")),
                cache_read_tokens=_int(total.get("cached_input_tokens")),
                cache_creation_tokens=_int(total.get("cache_write_input_tokens")),
            )
    return None


def _claude(path: Path) -> Usage | None:
    """The last `cost-state` (tokens and money), else the sum of the model messages' usage."""
    messages: dict[str, tuple[int, int, int, int]] = {}
    for e in _entries_backwards(path, b'"type":"'):
        kind = e.get("type")
        if kind == "cost-state" and not messages:  # written after every message it covers
            models = [_dict(m) for m in _dict(e.get("modelUsage")).values()]
            cost = e.get("totalCostUSD")
            return Usage(
                input_tokens=sum(_int(m.get("inputTokens")) for m in models),
                output_tokens=sum(_int(m.get("outputTokens")) for m in models),
                cache_read_tokens=sum(_int(m.get("cacheReadInputTokens")) for m in models),
                cache_creation_tokens=sum(_int(m.get("cacheCreationInputTokens")) for m in models),
                cost_usd=float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) else None,
            )
        msg = _dict(e.get("message"))
        u = _dict(msg.get("usage"))
        if kind == "assistant" and u:
            key = str(msg.get("id") or len(messages))
            messages.setdefault(
                key,
                (  # read from the end: the last entry of a message wins
                    _int(u.get("input_tokens")),
                    _int(u.get("output_tokens")),
                    _int(u.get("cache_read_input_tokens")),
                    _int(u.get("cache_creation_input_tokens")),
                ),
            )
    if not messages:
        return None
    counts = list(messages.values())
    return Usage(
        input_tokens=sum(c[0] for c in counts),
        output_tokens=sum(c[1] for c in counts),
        cache_read_tokens=sum(c[2] for c in counts),
        cache_creation_tokens=sum(c[3] for c in counts),
    )


def _entries_backwards(path: Path, needle: bytes) -> Iterator[dict[str, Any]]:
    """The file's JSON objects from its last line back (at most TAIL_BYTES), only lines with `needle`."""
    with path.open("rb") as f:
        end = f.seek(0, os.SEEK_END)
        start = max(0, end - TAIL_BYTES)
        carry = b""
        pos = end
        while pos > start:
            step = min(CHUNK, pos - start)
            pos -= step
            f.seek(pos)
            block = f.read(step) + carry
            lines = block.split(b"\n")
            carry = lines[0] if pos > start else b""  # a line cut by the chunk's start: joined next round
            for line in reversed(lines if pos == start else lines[1:]):
                if needle in line:
                    try:
                        e = json.loads(line)
                    except ValueError:
                        continue  # a line being written, or cut by the tail's start
                    if isinstance(e, dict):
                        yield e


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0
