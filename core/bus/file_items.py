"""An inbox item of the directory bus as files: its name, its claim, reading it back.

    <seq>~<type>~<sender>~<item id>   in new/ (delivered), FIFO by seq (zero-padded)
    <wait id>~<seq>                   in claims/ (claimed by one wait)

A name says who sent the item, so a watcher can route its arrival without reading it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from pydantic import ValidationError

from ..model import Item, ItemRef
from .fs import SEP, BusDir, Unfit, read_file, sorted_names

#: a name always means the same item: parse each once. Two generations of at most
#: REFS_KEPT names each, so what a process keeps is bounded (a long-lived server sees
#: millions of names) while the pending items a wait lists on every wake stay parsed
REFS_KEPT = 10_000
_refs: dict[str, ItemRef] = {}
_refs_old: dict[str, ItemRef] = {}


def item_name(ref: ItemRef) -> str:
    """The item's name in new/."""
    return f"{ref.seq:016d}{SEP}{ref.type}{SEP}{ref.sender}{SEP}{ref.id}"


def parse_name(name: str) -> ItemRef | None:
    """The item a name in new/ stands for; None when it is no item name."""
    global _refs, _refs_old
    ref = _refs.get(name)
    if ref is None:
        ref = _refs_old.get(name)
        if ref is None:
            parts = name.split(SEP)
            if len(parts) != 4 or len(parts[0]) != 16 or not parts[0].isdigit():
                return None
            ref = ItemRef(int(parts[0]), parts[1], parts[2], parts[3])
        if len(_refs) >= REFS_KEPT:
            _refs, _refs_old = {}, _refs
        _refs[name] = ref
    return ref


def sender_of(name: str) -> str | None:
    """Who sent the item of a name in new/, read from the name alone (the watcher's thread
    routes an arrival by it); None when it is no item name."""
    fields = name.split(SEP)
    return fields[2] if len(fields) == 4 else None


def claim_path(box: str, wait_id: str, seq: int) -> str:
    return f"{box}/claims/{wait_id}{SEP}{seq:016d}"


def in_order(bus: BusDir, folder: str | Path) -> Iterator[ItemRef]:
    """The items in `folder`, FIFO, each name parsed only when reached; a name that is no
    item's goes to quarantine."""
    for name in sorted_names(folder):
        ref = parse_name(name)
        if ref is None:
            bus.quarantine(Path(folder, name), "bad-name", "not an inbox item name")
        else:
            yield ref


def scan(bus: BusDir, folder: str | Path) -> list[ItemRef]:
    """The items in `folder`, FIFO. Names start with the zero-padded seq, so a name sort
    is a seq sort; this runs on every wake, so it stays a listdir, a sort and a split."""
    return list(in_order(bus, folder))


def load(bus: BusDir, path: str | Path, seq: int, name: str | None = None) -> Item | None:
    """The item at `path` (delivered as `name`, when it was claimed); None when gone or
    not an item (then quarantined)."""
    try:
        item = Item.model_validate_json(read_file(path))
    except FileNotFoundError:
        return None
    except Unfit as e:
        bus.quarantine(Path(path), e.code, e.detail, name)
        return None
    except (ValidationError, ValueError) as e:
        word = "truncated" if isinstance(e, ValidationError) and "EOF" in str(e) else "malformed"
        bus.quarantine(Path(path), word, f"not a complete inbox item ({e.__class__.__name__}: {word})", name)
        return None
    return item.model_copy(update={"seq": seq})
