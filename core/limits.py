"""The documented bounds on input from outside, in one place, and the checks that apply them.

Everything a caller hands to wavewait (tool arguments, CLI words, files found in the bus)
is checked against these bounds before any work is done, so one oversized or malformed
value costs a short `BadInput` naming the field, never a stalled server or a full disk.
Each check measures the length first (cheap), and only then looks inside (a pattern, a
regular expression, the file system); an error quotes at most the start of the value
(`shown`), so refusing a megabyte costs a line.

| What                                   | Bound                                   |
|----------------------------------------|-----------------------------------------|
| ids (agent, wait, session, worker)     | 1-100 chars of `A-Z a-z 0-9 _ . @ -`,   |
|                                        | starting with a letter or digit, no `..`|
| names and waves (labels for people)    | 1-100 chars, no control characters, no  |
|                                        | `/`, no leading or trailing whitespace  |
| messages, handoffs, completion reports | 1 MiB of UTF-8                          |
| extra `data` of an item (as JSON)      | 64 KiB                                  |
| paths and signal globs                 | 4 KiB of UTF-8, no NUL                  |
| one folder or file name in a glob      | 255 characters; 200 levels              |
| words: a model, a git ref, a preset    | 1-255 characters, no whitespace or      |
|                                        | control characters                      |
| a program's words (argv)               | 128 KiB each (Linux's limit for one),   |
|                                        | the program 4 KiB, no NUL; 1,000 words  |
| a check (one shell command line)       | 4,000 characters, no NUL                |
| lists (changes, types, words, keys)    | 1,000 entries                           |
| agent ids of one wait (a fan-in)       | 100,000 entries (a wave's flights)      |
| one inbox item file on the bus         | 8 MiB (larger is quarantined, unread)   |
| one MCP request (a stdio line, an HTTP | 16 MiB (larger is answered with an      |
| body)                                  | error and dropped unread)               |
| entries one signal glob may scan       | 100,000                                 |
"""

from __future__ import annotations

import json
import re
import reprlib
from collections.abc import Callable
from typing import Any, TypeVar

from .errors import BadInput

MAX_ID_LEN = 100
MAX_NAME_LEN = 100
MAX_MESSAGE_BYTES = 1 << 20  # 1 MiB
MAX_DATA_BYTES = 64 << 10
MAX_PATH_BYTES = 4 << 10  # 4 KiB
MAX_LIST_LEN = 1000
#: a fan-in names every flight of its wave: the list is as long as the largest wave served
MAX_AGENT_IDS = 100_000
MAX_ITEM_FILE_BYTES = 8 << 20  # an item's JSON: a 1 MiB body escaped, plus its fields
MAX_REQUEST_BYTES = 16 << 20  # one MCP request: a 1 MiB message escaped (up to 6 bytes a byte), plus its fields
MAX_SCAN_ENTRIES = 100_000
MAX_WORD_LEN = 255
MAX_ARG_BYTES = (128 << 10) - 1  # Linux's MAX_ARG_STRLEN (32 pages) less the word's NUL
MAX_CHECK_CHARS = 4000

T = TypeVar("T")


def _size(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n / 1024:.1f} KiB" if n >= 1024 else f"{n} bytes"


_SHOWN = reprlib.Repr()
_SHOWN.maxstring, _SHOWN.maxother, _SHOWN.maxlist, _SHOWN.maxdict = 40, 40, 3, 3


def shown(value: object, chars: int = 60) -> str:
    """`value` as an error may quote it: a string of at most `chars` characters whole, a longer
    one's start and its length, anything else a short repr (at most 100 characters). A refusal
    names what was wrong; echoing a megabyte back would cost the caller (a model's context)
    more than the mistake did. Paths are quoted with `chars=300`: most are shown whole."""
    if isinstance(value, str) and len(value) > chars:
        return f"{value[: chars - 20]!r}… ({len(value):,} characters)"
    text = _SHOWN.repr(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= max(chars, 100) else text[: max(chars, 100) - 1] + "…"


def check_text(value: object, field: str, *, max_bytes: int = MAX_MESSAGE_BYTES, allow_empty: bool = False) -> str:
    """A message body or handoff: a string of at most `max_bytes` of UTF-8."""
    if not isinstance(value, str):
        raise BadInput(f"{field}: must be a string")
    if not allow_empty and not value.strip():
        raise BadInput(f"{field}: must be a non-empty string")
    # a character is at most 4 bytes: only measure when the length alone cannot decide
    if len(value) > max_bytes or (len(value) * 4 > max_bytes and len(value.encode(errors="replace")) > max_bytes):
        raise BadInput(
            f"{field}: at most {_size(max_bytes)} of UTF-8 text; this one is larger "
            f"({len(value):,} characters). Put large content in a file and send its path"
        )
    return value


def check_path(value: object, field: str = "path") -> str:
    """A file path or glob: a non-empty string of at most 4 KiB, without NUL."""
    if not isinstance(value, str) or not value:
        raise BadInput(f"{field}: must be a non-empty path")
    if len(value) > MAX_PATH_BYTES or len(value.encode(errors="replace")) > MAX_PATH_BYTES:
        raise BadInput(f"{field}: at most {MAX_PATH_BYTES} bytes (got {len(value):,} characters); give a shorter path")
    if "\x00" in value:
        raise BadInput(f"{field}: may not contain a NUL character")
    return value


def check_argv(value: object, field: str = "command") -> list[str]:
    """A program and its arguments, as exec takes them: at most 1,000 words, the program a path
    of at most 4 KiB, every word at most 128 KiB (Linux refuses a longer one) and without NUL."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) or not value:
        raise BadInput(f"{field}: give the program and its arguments as a non-empty list of strings")
    if len(value) > MAX_LIST_LEN:
        raise BadInput(f"{field}: at most {MAX_LIST_LEN:,} words, got {len(value):,}; put the rest in a script")
    check_path(value[0], f"{field}[0]")
    for i, word in enumerate(value):
        if not isinstance(word, str) or not word:
            raise BadInput(f"{field}[{i}]: must be a non-empty string")
        if len(word) > MAX_ARG_BYTES or (
            len(word) * 4 > MAX_ARG_BYTES and len(word.encode(errors="replace")) > MAX_ARG_BYTES
        ):
            raise BadInput(
                f"{field}[{i}]: at most {_size(MAX_ARG_BYTES + 1)} (the longest word a program may be given), got "
                f"{len(word):,} characters; put long content in a file and pass its path"
            )
        if "\x00" in word:
            raise BadInput(f"{field}[{i}]: may not contain a NUL character")
    return list(value)


def check_shell(value: object, field: str = "check") -> str:
    """A check: one shell command line (run by `/bin/sh -c`, core/checks.py), at most
    `MAX_CHECK_CHARS` characters (it is kept with a merge's progress on the bus), without NUL."""
    if not isinstance(value, str):
        raise BadInput(f"{field}: must be a shell command line, e.g. 'pytest -q'")
    if len(value) > MAX_CHECK_CHARS:
        raise BadInput(
            f"{field}: at most {MAX_CHECK_CHARS:,} characters, got {len(value):,}; put a longer check in a script"
        )
    if not value.strip():
        raise BadInput(f"{field}: must be a non-empty shell command line, e.g. 'pytest -q'")
    if "\x00" in value:
        raise BadInput(f"{field}: may not contain a NUL character")
    return value


def check_list(
    value: object,
    field: str,
    check: Callable[[object, str], T],
    *,
    max_len: int = MAX_LIST_LEN,
) -> list[T]:
    """A list of at most `max_len` entries, each passed through `check(entry, 'field[i]')`."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise BadInput(f"{field}: must be a list")
    if len(value) > max_len:
        raise BadInput(f"{field}: at most {max_len:,} entries, got {len(value):,}; split the work")
    return [check(v, f"{field}[{i}]") for i, v in enumerate(value)]


def check_data(value: object, field: str = "data") -> dict[str, Any]:
    """Extra fields of an item: a JSON object of at most 64 KiB."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadInput(f"{field}: must be an object")
    try:
        size = len(json.dumps(value).encode())
    except (TypeError, ValueError) as e:
        raise BadInput(f"{field}: must hold only JSON values ({e})") from None
    if size > MAX_DATA_BYTES:
        raise BadInput(f"{field}: at most {_size(MAX_DATA_BYTES)} as JSON, got {_size(size)}")
    return value


MAX_ENV = 100  # variables one spawn may add
MAX_ENV_VALUE = 32 * 1024
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def check_env(env: object, field: str = "env") -> dict[str, str]:
    """Variables to add to a flight's environment: at most 100 plain names, bounded values."""
    if not isinstance(env, dict) or len(env) > MAX_ENV:
        raise BadInput(f"{field}: give at most {MAX_ENV} NAME=value pairs")
    for name, value in env.items():
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            raise BadInput(f"{field}: {name!r} is not a variable name (letters, digits and '_', not first a digit)")
        if not isinstance(value, str) or len(value) > MAX_ENV_VALUE or "\0" in value:
            raise BadInput(f"{field}.{name}: must be a string of at most {MAX_ENV_VALUE} characters, without NUL")
    return env
