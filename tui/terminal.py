"""Escape sequences that reach the person when the terminal is not in front of them.

Toasts live inside the app; a person who switched windows while a wave runs sees none of
them. Terminals offer two ways out: a desktop notification (OSC 9: iTerm2, WezTerm, Ghostty,
kitty, Windows Terminal; others ignore it) and the window title (OSC 2). The title is pushed
on the terminal's title stack first and popped when the person is back, so their own
title returns. Pure functions: the app decides when, these say how.
"""

from __future__ import annotations

import re

PUSH_TITLE = "\x1b[22;0t"
POP_TITLE = "\x1b[23;0t"
LONGEST = 200
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]+")


def clean(text: str) -> str:
    """One printable line: agent text must never smuggle its own escape sequences."""
    return _CONTROL.sub(" ", text).strip()[:LONGEST]


def window_title(title: str) -> str:
    return f"\x1b]2;{clean(title)}\x07"


def desktop_notification(body: str, *, tmux: bool = False) -> str:
    """OSC 9 with a body that never starts with a digit (ConEmu reads `9;4;…` as a command)."""
    seq = f"\x1b]9;wavewait: {clean(body)}\x07"
    if tmux:  # tmux passes it to the outer terminal only inside a DCS (allow-passthrough on)
        seq = "\x1bPtmux;" + seq.replace("\x1b", "\x1b\x1b") + "\x1b\\"
    return seq
