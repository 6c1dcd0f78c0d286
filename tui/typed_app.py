"""The running app with its own type, for the parts that use what only `WaveApp` has.

Textual's typed `getters.app(WaveApp)` needs the app's class when the class using it is
defined, and the app's module imports the screens and the palette: a cycle this breaks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from textual.app import App

if TYPE_CHECKING:
    from .app import WaveApp


def wave_app(app: App[Any]) -> WaveApp:
    """`app` (a widget's, a screen's or a command provider's), typed as the WaveApp it is."""
    return cast("WaveApp", app)
