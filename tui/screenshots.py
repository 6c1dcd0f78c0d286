"""Render the screenshots of the README and docs/tui.md: `python -m wavewait.tui.screenshots [OUT_DIR]`.

The same fixed scenes as the snapshot tests (`scenes.py`), at 120×36, one SVG each.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from textual import constants
from textual.widgets import Input

from ..core.bus.file import FileBus
from . import scenes

SIZE = (120, 36)


async def render(name: str, out: Path) -> Path:
    setup, steps = scenes.SCENES[name]
    with tempfile.TemporaryDirectory(prefix="wavewait-shot-") as tmp:
        bus = FileBus(Path(tmp) / "bus")
        if setup is not None:
            await setup(bus)
        app = scenes.frozen_app(bus, **scenes.OPTIONS.get(name, {}))
        # with the toasts a person sees (run_test leaves them out unless asked)
        async with app.run_test(size=scenes.SIZES.get(name, SIZE), notifications=True) as pilot:
            await steps(pilot)
            path = app.save_screenshot(filename=f"{name}.svg", path=str(out))
        await bus.close()
    return Path(path)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0] if args else "screenshots").absolute()
    out.mkdir(parents=True, exist_ok=True)
    # Textual offers no public switch for either; both must hold before any app starts
    constants.TEXTUAL_ANIMATIONS = "none"  # type: ignore[misc]  # Final in Textual, read when an app runs
    Input._toggle_cursor = lambda self: None  # type: ignore[method-assign]  # a steady cursor: no blink
    for name in scenes.SCENES:
        print(asyncio.run(render(name, out)))


if __name__ == "__main__":
    main()
