"""Id, name and prefix rules shared by every face.

Ids end up in file names (inbox folders, claim folders), so they are validated before
they touch the disk: no `/`, no `..`, no control characters, bounded length. The whole
value must match (a trailing newline is not "close enough"); the bounds are in `limits`.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable

from .errors import AmbiguousId, BadInput, UnknownAgent
from .limits import MAX_ID_LEN, MAX_NAME_LEN, MAX_WORD_LEN, shown

MIN_PREFIX = 4
_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]*")  # used with fullmatch: no `$` before a newline
_TYPE_RE = re.compile(r"[a-z][a-z0-9_]{0,39}")


def new_id() -> str:
    """A fresh agent or item id: uuid4 hex, 32 characters."""
    return uuid.uuid4().hex


def _bad(field: str, what: str) -> BadInput:
    """A refusal that names the caller's field, for each face to say in its words (errors.py)."""
    return BadInput("{" + field + "}: " + what, fields=(field,))


def check_id(value: object, field: str = "id") -> str:
    """Return `value` if it is a safe id, else raise `BadInput` naming the field."""
    if not isinstance(value, str) or not value:
        raise _bad(field, "must be a non-empty string")
    if len(value) > MAX_ID_LEN:
        raise _bad(field, f"at most {MAX_ID_LEN} characters, got {len(value)}")
    if ".." in value or not _ID_RE.fullmatch(value):
        raise _bad(
            field,
            f"{value!r} is not a valid id; use letters, digits and _ . @ - (starting with a letter or digit, no '..')",
        )
    return value


def check_wave(value: object, field: str = "wave") -> str:
    """A wave's name: an id, as the bus keeps a wave's settings and merge under it. One rule
    for every verb: a name with spaces is refused by each, never taken by one and refused by
    the next (docs/admission.md)."""
    if not isinstance(value, str) or not is_id(value):
        raise _bad(
            field,
            f"{shown(value)} is not a wave name; use at most {MAX_ID_LEN} letters, digits and _ . @ - "
            "(starting with a letter or digit, no '..')",
        )
    return value


def is_id(value: object) -> bool:
    """Whether `value` would pass `check_id` (for names found on the bus, sorted, not raised on)."""
    try:
        check_id(value)
    except BadInput:
        return False
    return True


def check_name(value: object, field: str = "name") -> str:
    """Names are labels for people; they may hold spaces but no control characters."""
    if not isinstance(value, str) or not value.strip():
        raise BadInput(f"{field}: must be a non-empty string")
    if len(value) > MAX_NAME_LEN:
        raise BadInput(f"{field}: at most {MAX_NAME_LEN} characters, got {len(value)}")
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in value) or "/" in value:
        raise BadInput(f"{field}: {value!r} may not contain '/' or control characters")
    if value != value.strip():
        raise BadInput(f"{field}: {value!r} may not start or end with whitespace; remove it")
    return value


def check_type(value: object, field: str = "type") -> str:
    if not isinstance(value, str) or len(value) > 40 or not _TYPE_RE.fullmatch(value):
        raise BadInput(
            f"{field}: {shown(value)} is not a valid item type; use 1-40 lower-case letters, digits "
            "and '_' (e.g. message, worker_complete)"
        )
    return value


def check_word(value: object, field: str) -> str:
    """A model, a git ref, a preset's name: one word of at most 255 characters, without
    whitespace or control characters (each goes on a command line as one argument)."""
    if not isinstance(value, str) or not value:
        raise BadInput(f"{field}: must be a non-empty string")
    if len(value) > MAX_WORD_LEN:
        raise BadInput(f"{field}: at most {MAX_WORD_LEN} characters, got {len(value):,}")
    if any(c.isspace() or ord(c) < 32 or 127 <= ord(c) < 160 for c in value):
        raise BadInput(f"{field}: {value!r} is one word: no spaces or control characters")
    return value


def resolve(token: str, known: Iterable[str], field: str = "agent", what: str = "agent") -> str:
    """Resolve an exact id or a unique prefix of at least 4 characters.

    An exact id wins over a prefix; a prefix that fits several ids is an error naming them.
    `what` names the kind of thing in messages (agent, wait).
    """
    check_id(token, field)
    ids = set(known)
    if token in ids:
        return token
    named = "{" + field + "}"  # the caller's field, in each face's words (errors.py)
    if len(token) < MIN_PREFIX:
        raise UnknownAgent(
            f"{named}: no {what} {token!r}; a prefix needs at least {MIN_PREFIX} characters", fields=(field,)
        )
    hits = sorted(i for i in ids if i.startswith(token))
    if not hits:
        raise UnknownAgent(f"{named}: no {what} matches {token!r}; list {what}s to see the ids", fields=(field,))
    if len(hits) > 1:
        raise AmbiguousId(f"{named}: prefix {token!r} fits {len(hits)} {what}s: {', '.join(hits)}", fields=(field,))
    return hits[0]


def short(agent_id: str, length: int = 8) -> str:
    """The short form shown to people; long enough to be a usable prefix."""
    return agent_id[:length]
