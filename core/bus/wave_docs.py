"""Per-wave documents on the bus: a wave's settings, its merge queue's progress.

A wave has state that belongs to no one agent (its budget, its limit of running flights,
how far its merge got), written by whichever process acts on the wave and read by every
face. Each such state is one JSON object per (wave, kind), changed only by
`update_wave_doc`, a read-modify-write that concurrent processes take turns at (a flock on
the directory bus, an advisory lock on PostgreSQL). Its `change` is a plain function of the
document it is given: it runs under the lock, so it must not wait on anything, and it may
run twice for one update when a PostgreSQL connection is lost at commit (it computes the
new document from the one it is given, so running it again is harmless).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..errors import BusError
from ..ids import check_id

#: a wave document's JSON: settings are a few fields, a merge queue's progress a few
#: hundred bytes per flight
MAX_WAVE_DOC_BYTES = 1 << 20

#: the new document from the current one (None: there is none yet); returning None leaves it
DocChange = Callable[[dict[str, Any] | None], dict[str, Any] | None]


def doc_key(wave: str, kind: str) -> tuple[str, str]:
    """The checked (wave, kind): both are ids, so they name a file and a row safely."""
    return check_id(wave, "wave"), check_id(kind, "kind")


def encode(doc: object, wave: str, kind: str) -> str:
    """The document as JSON, refused when it is not an object or too big to keep."""
    if not isinstance(doc, dict):
        raise BusError(f"the {kind} document of wave {wave!r} must be a JSON object, got {type(doc).__name__}")
    text = json.dumps(doc, separators=(",", ":"))
    if len(text.encode()) > MAX_WAVE_DOC_BYTES:
        raise BusError(
            f"the {kind} document of wave {wave!r} would be {len(text.encode()):,} bytes, "
            f"over the {MAX_WAVE_DOC_BYTES:,} a wave document may hold"
        )
    return text
